"""Every share (idle, overlap, communication, the detectors' shares of the step) is in [0, 1] or not measured,
whatever the events: a property test over generated device timelines — overlapping, nested, zero-length,
negative or non-finite durations, events outside every step, unknown launches — run through the real
``step_breakdown`` and the one share function every reader uses. (An MTIA single-rank trace once gave an overlap of
−20,601%.)"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from debugtune.engine.capture.importers.device_timeline import COMM, COMPUTE, MEMORY, step_breakdown
from debugtune.engine.telemetry.shares import percent, share, shares

_dur = st.one_of(st.floats(0, 5e4), st.floats(-5e3, 0), st.just(math.nan), st.just(math.inf), st.just(0.0))
_event = st.tuples(st.floats(-1e3, 2e5, allow_nan=False), _dur, st.sampled_from([COMPUTE, COMM, MEMORY]),
                   st.integers(-1, 4), st.one_of(st.just(math.nan), st.floats(-1e3, 2e5, allow_nan=False)))

PARTS = ("compute_ms", "comm_ms", "comm_overlapped_ms", "comm_not_overlapped_ms", "memcpy_ms", "free_ms",
         "idle_host_wait_ms", "idle_kernel_wait_ms", "idle_other_ms")


@settings(max_examples=300, deadline=None)
@given(st.lists(_event, min_size=1, max_size=60))
def test_device_timeline_shares_stay_in_range(events):
    ts, dur, kind, step, launch = (np.array(c) for c in zip(*events, strict=True))
    out = step_breakdown(list(range(5)), ts.astype(float), dur.astype(float), kind.astype(np.int8),
                         step.astype(np.int64), launch.astype(float))
    for row in out.values():
        window = row["step_time_ms"]
        assert math.isfinite(window) and window >= 0
        for part in PARTS:
            assert math.isfinite(row[part]) and row[part] >= -1e-9, (part, row)
            s = share(row[part], window)
            assert math.isnan(s) or 0.0 <= s <= 1.0
        assert row["comm_overlapped_ms"] <= row["comm_ms"] + 1e-6
        assert row["free_ms"] <= window + 1e-6 and row["compute_ms"] <= window + 1e-6
        overlap = share(row["comm_overlapped_ms"], row["comm_ms"])
        assert math.isnan(overlap) == (row["comm_ms"] <= 0) and (math.isnan(overlap) or 0 <= overlap <= 1)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none()),
                          st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none())), min_size=1))
def test_share_is_a_fraction_or_not_measured(pairs):
    for part, whole in pairs:
        s = share(part, whole)
        assert math.isnan(s) or 0.0 <= s <= 1.0
        if whole is None or part is None or not (math.isfinite(whole) and whole > 0 and math.isfinite(part)):
            assert math.isnan(s) and percent(s) == "not measured"
    parts = np.array([math.nan if p is None else p for p, _ in pairs], dtype=float)
    wholes = np.array([math.nan if w is None else w for _, w in pairs], dtype=float)
    v = shares(parts, wholes)
    assert np.all(np.isnan(v) | ((v >= 0) & (v <= 1)))
    assert np.array_equal(np.isnan(v), np.isnan([share(p, w) for p, w in zip(parts, wholes, strict=True)]))


def test_a_negative_overlap_cannot_be_reported():
    """A part larger than its whole or below zero (clock skew between the host and the device) is clipped."""
    assert share(-206.01, 1.0) == 0.0 and share(3.0, 1.0) == 1.0 and math.isnan(share(1.0, 0.0))
    assert percent(share(0.25, 1.0)) == "25.0%"
