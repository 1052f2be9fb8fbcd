"""The device timeline of real profiler traces: HTA's idle definition by hand, the step partition, the device and
link known, and the findings the dominant loss of step time gives (DeviceIdle, HostBound, bandwidth)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from debugtune.engine.capture.importers import ImportFormatError, import_path
from debugtune.engine.diagnose import diagnose_run
from debugtune.engine.telemetry import read_run_json, read_telemetry

NCCL = "pytorch-profiler/nccl_allreduce_rank0.json.gz"



@pytest.fixture(scope="module")
def nccl_run(tmp_path_factory, fixtures_dir):
    run = tmp_path_factory.mktemp("tl") / "nccl"
    import_path(fixtures_dir / NCCL, run)
    return run


def _per_step(run, metric):
    steps, _, grid = read_telemetry(run).pivot(metric, by="rank")
    return dict(zip(steps.tolist(), grid[:, 0].tolist(), strict=True))


def _union(intervals):
    total, end = 0.0, -np.inf
    for s, e in sorted(intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def test_idle_share_is_htas_definition_by_hand(nccl_run, fixtures_dir):
    """HTA: kernels launched before the last ProfilerStep, span first start → last end, idle = span − union."""
    with gzip.open(fixtures_dir / NCCL, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    launch = {e["args"]["correlation"]: e["ts"] for e in events
              if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    last_start = max(e["ts"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
    device = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
              and launch.get(e["args"].get("correlation"), np.inf) < last_start]
    span = max(e for _, e in device) - min(s for s, _ in device)
    hta_idle = (span - _union(device)) / span
    free, step = _per_step(nccl_run, "free_ms"), _per_step(nccl_run, "step_time_ms")
    kept = sorted(step)[:-1]
    ours = sum(free[s] for s in kept) / sum(step[s] for s in kept)
    assert ours == pytest.approx(hta_idle, abs=0.01)
    assert hta_idle > 0.5


def test_each_device_window_is_partitioned(nccl_run):
    """compute + exposed comm + memcpy + idle = the device window; compute never exceeds the step (the CPU step
    did on HTA's ns_resolution trace); the idle split adds up to the idle time."""
    get = {m: _per_step(nccl_run, m) for m in ("step_time_ms", "compute_ms", "comm_not_overlapped_ms", "memcpy_ms",
                                               "free_ms", "idle_host_wait_ms", "idle_kernel_wait_ms",
                                               "idle_other_ms", "comm_ms", "comm_overlapped_ms", "cpu_step_ms")}
    for s, window in get["step_time_ms"].items():
        parts = get["compute_ms"][s] + get["comm_not_overlapped_ms"][s] + get["memcpy_ms"][s] + get["free_ms"][s]
        assert parts == pytest.approx(window, rel=1e-6)
        assert get["compute_ms"][s] <= window
        split = get["idle_host_wait_ms"][s] + get["idle_kernel_wait_ms"][s] + get["idle_other_ms"][s]
        assert split == pytest.approx(get["free_ms"][s], rel=1e-6, abs=1e-6)
        assert get["comm_overlapped_ms"][s] + get["comm_not_overlapped_ms"][s] == pytest.approx(get["comm_ms"][s])
    assert set(get["cpu_step_ms"]) == set(get["step_time_ms"])


def test_device_and_link_come_from_the_trace_and_can_be_given(nccl_run, fixtures_dir, tmp_path):
    meta = read_run_json(nccl_run)
    assert meta["accelerator"] == "NVIDIA A100-PG509-200" and meta["accelerator_model"] == "NVIDIA A100 SXM4"
    assert meta["interconnect"] == "nvlink_a100"  # 2 ranks fit on the 8-GPU node the trace lists
    assert meta["groups"] == [{"name": "0", "desc": "default_pg", "ranks": [0, 1]}]
    given = import_path(fixtures_dir / NCCL, tmp_path / "ib", interconnect="InfiniBand").run_dir
    assert read_run_json(given)["interconnect"] == "ib_ndr"
    assert read_run_json(given)["interconnect_from"] == "given"
    with pytest.raises(ImportFormatError, match="unknown interconnect"):
        import_path(fixtures_dir / NCCL, tmp_path / "bad", interconnect="carrier pigeon")
    assert not (tmp_path / "bad").exists()


def test_a100_trace_names_its_idle_host_bound_step_and_low_bus_bandwidth(nccl_run, th):
    d = diagnose_run(nccl_run, th)
    by = {f.symptom: f for f in d.findings}
    assert by["DeviceIdle"].evidence["idle_share"] > 0.7
    assert by["DeviceIdle"].evidence["dominant_loss"] == "idle"
    assert by["HostBound"].evidence["host_wait_of_idle"] > 0.9
    low = by["LowBandwidthUtilization"]
    assert low.entity == "allreduce" and low.evidence["utilisation"] < 0.1 and low.evidence["peak_gbps"] == 300
    for f in d.findings:  # three steps of one rank: likely at best, never confirmed
        assert f.evidence["steps_judged"] == 3 and f.evidence["confidence"] in ("suspected", "likely")


def test_ascend_free_time_is_a_finding_and_two_ranks_of_one_step_no_slow_rank(fixtures_dir, tmp_path, th):
    cluster = import_path(fixtures_dir / "ascend-cluster", tmp_path / "cluster").run_dir
    idle = next(f for f in diagnose_run(cluster, th).findings if f.symptom == "DeviceIdle")
    assert idle.evidence["idle_share"] > 0.5 and idle.evidence["confidence"] == "suspected"
    pair = import_path(fixtures_dir / "ascend-profiler" / "level1", tmp_path / "pair").run_dir
    assert read_run_json(pair)["interconnect"] == "hccs_sdma"  # HCCS transit in communication.json
    d = diagnose_run(pair, th)
    assert "SlowRank" in d.judged and not [f for f in d.findings if f.symptom == "SlowRank"]
    assert all(f.evidence["confidence"] == "suspected" for f in d.findings)  # one step of two ranks
