"""Importers on the real files in ../shared/fixtures, checked against numbers computed here straight from the files."""

from __future__ import annotations

import csv
import gzip
import json
import math

import numpy as np
import pytest

from debugtune.engine.capture.importers import detect_format, import_path
from debugtune.engine.capture.importers.chrome_trace import read_collectives
from debugtune.engine.telemetry import read_run_json, read_telemetry


def _value(tel, metric, rank, step, entity=""):
    rows = tel.filter(metrics=metric, ranks=[rank], steps=[step], entities=[entity]).table.column("value").to_pylist()
    assert len(rows) == 1, (metric, rank, step, entity, rows)
    return rows[0]


def _sum(tel, metric, rank, step):
    return sum(tel.filter(metrics=metric, ranks=[rank], steps=[step]).table.column("value").to_pylist())


# -- Ascend -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ascend_run(tmp_path_factory, fixtures_dir):
    run = tmp_path_factory.mktemp("imp") / "ascend"
    result = import_path(fixtures_dir / "ascend-profiler" / "level1", run)
    return result, read_telemetry(run), fixtures_dir / "ascend-profiler" / "level1"


def test_ascend_multi_rank_run(ascend_run):
    result, tel, root = ascend_run
    assert detect_format(root) == "ascend"
    assert result.ranks == [0, 1] and result.steps == [50]
    meta = read_run_json(result.run_dir)
    assert meta["world_size"] == 2 and meta["source"]["format"] == "ascend"
    assert "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json" in meta["source"]["files"]
    assert not any(f.startswith("/") for f in meta["source"]["files"])


def test_ascend_step_times_match_step_trace_csv(ascend_run):
    _, tel, root = ascend_run
    for rank in (0, 1):
        with open(root / f"rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv", newline="") as fh:
            (row,) = list(csv.DictReader(fh))
        step = int(row["Step"])
        assert _value(tel, "compute_ms", rank, step) == pytest.approx(float(row["Computing"]) / 1000)
        assert _value(tel, "comm_not_overlapped_ms", rank, step) == pytest.approx(
            float(row["Communication(Not Overlapped)"]) / 1000)
        assert _value(tel, "step_time_ms", rank, step) == pytest.approx(
            (float(row["Stage"]) + float(row["Bubble"])) / 1000)
        assert _value(tel, "free_ms", rank, step) == pytest.approx(float(row["Free"]) / 1000)


def test_ascend_per_step_communication_time_of_each_rank(ascend_run):
    _, tel, root = ascend_run
    for rank in (0, 1):
        data = json.loads((root / f"rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json").read_text())
        for step_key, sections in data.items():
            step = int(step_key.removeprefix("step") or 0)
            ops = [info for section in ("collective", "p2p") for name, info in sections[section].items()
                   if name != "Total Op Info"]
            elapse = sum(op["Communication Time Info"]["Elapse Time(ms)"] for op in ops)
            wait = sum(op["Communication Time Info"]["Wait Time(ms)"] for op in ops)
            assert _sum(tel, "collective_ms", rank, step) == pytest.approx(elapse)
            assert _sum(tel, "collective_wait_ms", rank, step) == pytest.approx(wait)
            assert _sum(tel, "collective_count", rank, step) == len(ops)
            hccs = sections["collective"]["Total Op Info"]["Communication Bandwidth Info"]["HCCS"]
            assert _value(tel, "transport_bw_gbps", rank, step, "transport:HCCS") == pytest.approx(
                hccs["Transit Size(MB)"] / hccs["Transit Time(ms)"])


def test_ascend_link_bandwidth_from_matrix(ascend_run):
    _, tel, root = ascend_run
    matrix = json.loads((root / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/communication_matrix.json").read_text())
    (step_key,) = matrix
    totals = [links for op, links in matrix[step_key]["collective"].items() if "-total@" in op]
    size = sum(links["1-0"]["Transit Size(MB)"] for links in totals)
    time = sum(links["1-0"]["Transit Time(ms)"] for links in totals)
    step = int(step_key.removeprefix("step"))
    assert _value(tel, "link_bytes", 1, step, "link:1-0") == pytest.approx(size * 1e6)
    assert _value(tel, "link_bw_gbps", 1, step, "link:1-0") == pytest.approx(size / time)
    assert "link:1-1" not in tel.entities("link_bw_gbps")  # local copies are not links


def test_ascend_kernels_and_module_memory(ascend_run):
    _, tel, root = ascend_run
    out = root / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
    with open(out / "kernel_details.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["Accelerator Core"] != "HCCL" and not r["Type"].startswith("hcom")]
    assert _value(tel, "kernel_ms", 0, 50) == pytest.approx(sum(float(r["Duration(us)"]) for r in rows) / 1000)
    assert _value(tel, "kernel_count", 0, 50) == len(rows)
    matmul = [r for r in rows if r["Type"] == "MatMulV2"]
    if matmul:
        assert _value(tel, "kernel_ms", 0, 50, "op:MatMulV2") == pytest.approx(
            sum(float(r["Duration(us)"]) for r in matmul) / 1000)
    with open(out / "npu_module_mem.csv", newline="") as fh:
        mem = list(csv.DictReader(fh))
    per_time: dict[str, float] = {}
    for r in mem:
        per_time[r["Timestamp(us)"]] = per_time.get(r["Timestamp(us)"], 0.0) + float(r["Total Reserved(MB)"])
    assert _value(tel, "mem_used_bytes", 0, 50, "device:NPU:0") == pytest.approx(max(per_time.values()) * 1e6)


def test_ascend_cluster_files(tmp_path, fixtures_dir):
    root = fixtures_dir / "ascend-cluster"
    result = import_path(root, tmp_path / "cluster")
    tel = read_telemetry(tmp_path / "cluster")
    with open(root / "cluster_step_trace_time.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["Type"] == "rank"]
    assert result.ranks == sorted(int(r["Index"]) for r in rows)
    steps, ranks, grid = tel.pivot("comm_not_overlapped_ms", by="rank")
    for r in rows:
        assert grid[0, ranks.index(int(r["Index"]))] == pytest.approx(float(r["Communication(Not Overlapped)"]) / 1e3)
    comm = json.loads((root / "cluster_communication.json").read_text())
    expected: dict[int, float] = {}
    for steps_of_group in comm.values():
        for ops in steps_of_group.values():
            for per_rank in ops.values():
                for rank, info in per_rank.items():
                    expected[int(rank)] = expected.get(int(rank), 0.0) + info["Communication Time Info"][
                        "Elapse Time(ms)"]
    for rank, elapse in expected.items():
        assert _sum(tel, "collective_ms", rank, 0) == pytest.approx(elapse)


# -- PyTorch profiler traces ---------------------------------------------------------------------------------------
def _load_trace(path):
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def test_trace_collective_bus_bandwidth_by_hand(fixtures_dir):
    path = fixtures_dir / "pytorch-profiler" / "nccl_allreduce_rank0.json.gz"
    events = _load_trace(path)["traceEvents"]
    kernel = next(e for e in events if e.get("cat") == "kernel" and e["args"].get("Collective name") == "allreduce")
    args = kernel["args"]
    n = args["Group size"]
    nbytes = args["In msg nelems"] * 4  # dtype Float
    assert args["dtype"] == "Float"
    algbw = nbytes / (kernel["dur"] * 1e-6) / 1e9
    busbw = algbw * 2 * (n - 1) / n
    mine = next(c for c in read_collectives(path) if c.ts == kernel["ts"])
    assert mine.kind == "allreduce" and mine.bytes == nbytes
    assert mine.algbw_gbps == pytest.approx(algbw) and mine.busbw_gbps == pytest.approx(busbw)


def test_trace_per_step_collectives_and_comm_time_by_hand(tmp_path, fixtures_dir):
    path = fixtures_dir / "pytorch-profiler" / "nccl_allreduce_rank0.json.gz"
    trace = _load_trace(path)
    events = trace["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in events
                   if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    launch = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime"
              and "correlation" in e.get("args", {})}

    def step_of(t):
        for i, (start, end, number) in enumerate(steps):
            nxt = steps[i + 1][0] if i + 1 < len(steps) else end
            if start <= t < max(end, nxt):
                return number
        return None

    per_step: dict[int, dict[str, list]] = {}
    comm_intervals: dict[int, list] = {}
    for e in events:
        if e.get("cat") != "kernel" or "Collective name" not in e["args"]:
            continue
        step = step_of(launch.get(e["args"]["correlation"], e["ts"]))
        if step is None:
            continue
        kind = {"allreduce": "allreduce", "broadcast": "broadcast"}[e["args"]["Collective name"]]
        d = per_step.setdefault(step, {}).setdefault(kind, [0.0, 0.0])
        d[0] += e["dur"]
        size = {"Float": 4, "Long": 8}[e["args"]["dtype"]]
        d[1] += max(e["args"]["In msg nelems"], e["args"]["Out msg nelems"]) * size
        comm_intervals.setdefault(step, []).append((e["ts"], e["ts"] + e["dur"]))
    result = import_path(path, tmp_path / "trace")
    tel = read_telemetry(tmp_path / "trace")
    assert result.steps == [s[2] for s in steps]
    for start, end, number in steps:
        assert _value(tel, "cpu_step_ms", 0, number) == pytest.approx((end - start) / 1e3)
        for kind, (dur, nbytes) in per_step[number].items():
            assert _value(tel, "collective_ms", 0, number, kind) == pytest.approx(dur / 1e3)
            assert _value(tel, "collective_bytes", 0, number, kind) == nbytes
        merged, covered = [], 0.0
        for s, e in sorted(comm_intervals[number]):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        covered = sum(e - s for s, e in merged)
        assert _value(tel, "comm_ms", 0, number) == pytest.approx(covered / 1e3)
        assert 0 < _value(tel, "compute_ms", 0, number) < _value(tel, "step_time_ms", 0, number)
        assert _value(tel, "comm_not_overlapped_ms", 0, number) <= covered / 1e3 + 1e-9


def test_trace_gloo_cpu_collectives(tmp_path, fixtures_dir):
    path = fixtures_dir / "pytorch-profiler" / "cpu_only_gloo_rank34.json.gz"
    trace = _load_trace(path)
    first = min((e for e in trace["traceEvents"] if e["name"] == "gloo:all_reduce"), key=lambda e: e["ts"])
    n = trace["distributedInfo"]["world_size"]
    nbytes = math.prod(first["args"]["Input Dims"][0]) * 4
    mine = next(c for c in read_collectives(path) if c.ts == first["ts"])
    assert mine.bytes == nbytes and mine.group_size == n
    assert mine.busbw_gbps == pytest.approx(nbytes / (first["dur"] * 1e3) * 2 * (n - 1) / n)
    result = import_path(path, tmp_path / "gloo")
    assert result.ranks == [34]
    assert read_run_json(tmp_path / "gloo")["world_size"] == n


def test_trace_directory_is_one_multi_rank_run(tmp_path, fixtures_dir):
    traces = tmp_path / "traces"
    traces.mkdir()
    expected = {}
    for rank in (0, 1):
        src = fixtures_dir / "pytorch-profiler" / f"sampled_rank-{rank}.json.gz"
        (traces / src.name).symlink_to(src)
        expected[rank] = {int(e["name"].split("#")[1]): e["dur"] / 1e3 for e in _load_trace(src)["traceEvents"]
                          if e.get("name", "").startswith("ProfilerStep#")}
    assert detect_format(traces) == "pytorch-trace"
    result = import_path(traces, tmp_path / "multi")
    assert result.ranks == [0, 1]
    steps, ranks, grid = read_telemetry(tmp_path / "multi").pivot("cpu_step_ms", by="rank")
    for j, rank in enumerate(ranks):
        np.testing.assert_allclose(grid[:, j], [expected[rank][s] for s in steps])
    kinds = read_telemetry(tmp_path / "multi").entities("collective_ms")
    assert kinds == ["sendrecv"]  # named from ncclKernel_SendRecv_* (no collective args in these traces)
