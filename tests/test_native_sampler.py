"""The background hardware sampler: plausible host values, ring buffer, and why device backends are absent."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from debugtune.native import HardwareSampler
from debugtune.native.sampler import METRICS

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="the cpu backend reads Linux procfs")


def _meminfo_kb(key: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def test_cpu_backend_gives_plausible_values():
    ballast = np.ones(64 << 20, dtype=np.uint8)  # 64 MiB resident, so RSS is clearly above it
    with HardwareSampler(interval=0.05, backends=("cpu",)) as s:
        assert s.running and s.backend == "cpu"
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            sum(range(10_000))  # keep a core busy between samples
    assert not s.running
    rows = list(s.drain().rows())
    by_metric: dict[str, list[float]] = {}
    for t, entity, metric, value in rows:
        assert entity == "" and abs(t - time.time()) < 60
        by_metric.setdefault(metric, []).append(value)
    assert len(by_metric["rss_bytes"]) >= 3
    assert all(0.0 <= v <= 100.0 for v in by_metric["cpu_util_pct"])
    assert max(by_metric["rss_bytes"]) > ballast.nbytes
    assert by_metric["host_mem_total_bytes"][0] == _meminfo_kb("MemTotal") * 1024
    assert 0 < by_metric["host_mem_used_bytes"][0] < by_metric["host_mem_total_bytes"][0]
    assert len(s.drain()) == 0  # drained


def test_absent_device_libraries_are_reported_with_the_reason():
    s = HardwareSampler(interval=1.0, nvml_libs=("libdebugtune-no-such-nvml.so.1",),
                        dcmi_libs=("libdebugtune-no-such-dcmi.so",))
    assert s.backend == "cpu"
    assert s.reasons["nvml"].startswith("libdebugtune-no-such-nvml.so.1 not found")
    assert s.reasons["dcmi"].startswith("libdebugtune-no-such-dcmi.so not found")


def test_a_library_without_the_vendor_symbols_is_refused():
    s = HardwareSampler(interval=1.0, backends=("cpu", "nvml", "dcmi"), nvml_libs=("libm.so.6",),
                        dcmi_libs=("libm.so.6",))
    assert "lacks nvmlInit_v2" in s.reasons["nvml"]
    assert "lacks dcmi_init" in s.reasons["dcmi"]


def test_default_libraries_either_sample_devices_or_say_why():
    s = HardwareSampler(interval=1.0)
    status = {b.backend: b for b in s.status()}
    for name in ("nvml", "dcmi"):
        b = status[name]
        if b.active:
            s.sample_now()
            samples = list(s.drain().rows())
            assert any(e in b.entities and m == "mem_total_bytes" and v > 0 for _, e, m, v in samples)
        else:
            assert "not found" in b.reason or "failed" in b.reason or "no " in b.reason.lower()


def test_ring_buffer_keeps_the_newest_and_counts_drops():
    s = HardwareSampler(interval=1.0, capacity=5, backends=("cpu",))
    for _ in range(4):
        s.sample_now()
    got = s.drain()
    assert len(got) == 5 and s.dropped > 0
    assert np.all(np.diff(got.t) >= 0)
    assert set(got.metric.tolist()) <= set(range(len(METRICS)))


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError, match="unknown sampler backend"):
        HardwareSampler(backends=("cpu", "tpu"))
    with pytest.raises(ValueError, match="interval"):
        HardwareSampler(interval=0)
