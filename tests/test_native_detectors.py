"""Streaming detectors against a pure-Python reference of the same definitions."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from debugtune.native import DetectorParams, StreamDetectors
from debugtune.native import detectors as flags
from debugtune.native.detectors import THRESHOLD_KEYS

PARAMS = DetectorParams(alpha=0.2, z_threshold=3.0, robust_threshold=3.5, window=9, cusum_k=0.5, cusum_h=4.0,
                        warmup=4)


class Reference:
    """EWMA z, robust (median/MAD) z over the previous window, two-sided CUSUM on the EWMA z, spike flags."""

    def __init__(self, p: DetectorParams) -> None:
        self.p = p
        self.n, self.mean, self.var, self.cpos, self.cneg = 0, 0.0, 0.0, 0.0, 0.0
        self.window: list[float] = []

    @staticmethod
    def z(x: float, centre: float, scale: float) -> float:
        if scale > 0:
            return (x - centre) / scale
        return 0.0 if x == centre else math.copysign(math.inf, x - centre)

    def update(self, x: float) -> tuple[float, float, float, float, int]:
        p = self.p
        if not math.isfinite(x):
            return math.nan, math.nan, self.cpos, self.cneg, flags.NONFINITE
        ez = rz = math.nan
        f = 0
        if self.n >= max(1, p.warmup):
            ez = self.z(x, self.mean, math.sqrt(self.var))
            med = statistics.median(self.window)
            mad = statistics.median([abs(v - med) for v in self.window])
            rz = self.z(x, med, flags.MAD_TO_SIGMA * mad)
            f |= flags.SPIKE if abs(ez) > p.z_threshold else 0
            f |= flags.ROBUST_SPIKE if abs(rz) > p.robust_threshold else 0
            self.cpos = max(0.0, self.cpos + ez - p.cusum_k)
            self.cneg = max(0.0, self.cneg - ez - p.cusum_k)
            f |= flags.DRIFT_UP if self.cpos > p.cusum_h else 0
            f |= flags.DRIFT_DOWN if self.cneg > p.cusum_h else 0
        out = (ez, rz, self.cpos, self.cneg, f)
        if f & flags.DRIFT_UP:
            self.cpos = 0.0
        if f & flags.DRIFT_DOWN:
            self.cneg = 0.0
        if self.n == 0:
            self.mean, self.var = x, 0.0
        else:
            diff = x - self.mean
            incr = p.alpha * diff
            self.mean += incr
            self.var = (1 - p.alpha) * (self.var + diff * incr)
        self.n += 1
        self.window = (self.window + [x])[-p.window:]
        return out


def series(seed: int, n: int = 400) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 0.1 + 2.0
    x[n // 2:] += 1.5  # level shift → drift
    x[[50, 120, 300]] += [4.0, -5.0, 8.0]  # spikes
    x[[200, 201]] = [np.nan, np.inf]
    x[10:16] = 2.0  # a flat stretch: zero MAD
    return x


def assert_same(got, ref) -> None:
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("window", [9, 8, 1])
def test_single_series_matches_reference(window):
    p = DetectorParams(**{**PARAMS.__dict__, "window": window})
    det, ref = StreamDetectors(p), Reference(p)
    x = series(window)
    sid = det.id("loss")
    got = det.update_arrays(np.full(len(x), sid), x)
    expect = np.array([ref.update(float(v)) for v in x])
    for k, name in enumerate(("ewma_z", "robust_z", "cusum_pos", "cusum_neg")):
        assert_same(getattr(got, name), expect[:, k])
    np.testing.assert_array_equal(got.flags, expect[:, 4].astype(np.int32))
    raised = got.flags
    assert raised[50] & flags.SPIKE and raised[300] & flags.ROBUST_SPIKE
    assert (raised[200] & flags.NONFINITE) and (raised[201] & flags.NONFINITE)
    assert (raised[200:260] & flags.DRIFT_UP).any()


def test_interleaved_batch_equals_separate_series():
    names = ["loss", "grad_norm", "lr"]
    data = {n: series(i) for i, n in enumerate(names)}
    batched = StreamDetectors(PARAMS)
    ids = [batched.id(n) for n in names]
    order_ids = np.tile(ids, 400)
    order_vals = np.stack([data[n] for n in names], axis=1).ravel()
    got = batched.update_arrays(order_ids, order_vals)
    for j, n in enumerate(names):
        alone = StreamDetectors(PARAMS)
        one = alone.update_arrays(np.full(400, alone.id(n)), data[n])
        assert_same(got.ewma_z[j::3], one.ewma_z)
        assert_same(got.robust_z[j::3], one.robust_z)
        np.testing.assert_array_equal(got.flags[j::3], one.flags)
    assert batched.series == names
    assert batched.state("lr")["n"] == 398  # two non-finite points were not folded in


def test_alarm_fires_at_the_step_of_the_spike():
    det = StreamDetectors(PARAMS)
    seen = []
    for step, v in enumerate([1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 9.0, 1.0]):
        d = det.update({"loss": v})[0]
        if "spike" in d.alarms:
            seen.append(step)
    assert seen == [6]


def test_params_come_from_thresholds_and_are_validated():
    th = {THRESHOLD_KEYS[k]: float(v) for k, v in PARAMS.__dict__.items()}
    assert DetectorParams.from_thresholds(th) == PARAMS
    with pytest.raises(KeyError, match="stream.cusum_h"):
        DetectorParams.from_thresholds({k: v for k, v in th.items() if k != "stream.cusum_h"})


def test_default_keys_exist_in_the_shipped_knowledge_base():
    from debugtune.kg.knowledge import load_knowledge, thresholds
    from debugtune.kg.open import open_store

    store = open_store(None)
    load_knowledge(store)
    params = DetectorParams.from_thresholds(thresholds(store))
    assert params.window >= 1 and 0 < params.alpha <= 1
    StreamDetectors(params)
    with pytest.raises(ValueError, match="alpha"):
        StreamDetectors(DetectorParams(**{**PARAMS.__dict__, "alpha": 0.0}))
    with pytest.raises(IndexError):
        StreamDetectors(PARAMS).update_arrays([5], [1.0])
