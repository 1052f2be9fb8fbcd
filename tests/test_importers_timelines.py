"""What profilers really write: Chrome/Perfetto timelines whose tracks are workers (no ProfilerStep; steps from
args, a named marker or the repeated operation sequence), CUPTI range-profiler Kineto traces (steps from PARAM's
repeated annotation, counters instead of kernel times), CPU-only gloo traces (said so), and inputs no importer
reads (what they look like, which importer would read them). Real files through the real importers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bench import straggler_traces as st
from debugtune.engine.capture.importers import ImportFormatError, detect_format, import_path
from debugtune.engine.telemetry import read_run_json, read_telemetry

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "pytorch-profiler"


def _write(path: Path, events, wrap: bool = False) -> Path:
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events} if wrap else events, fh)
    return path


def _rows(run):
    return read_telemetry(run).table.to_pylist()


def test_a_worker_timeline_without_steps_recovers_steps_and_workers(tmp_path):
    table = st.simulate(st.plan()["slow-stage"], steps=6, seed=0)
    src = _write(tmp_path / "timeline-ST.json.gz", st.timeline(table, with_steps=False))
    assert detect_format(src) == "worker-timeline"
    result = import_path(src, tmp_path / "run", fmt="pytorch-trace")  # the importer a user tries first hands it on
    assert result.ranks == list(range(8)) and result.steps == list(range(6))
    assert any("repeated operation sequence" in n and "worker" in n for n in result.notes)
    meta = read_run_json(result.run_dir)
    assert meta["parallel"] == {"dp": 2, "pp": 4, "tp": 1}
    assert meta["layout"]["stage"] == {str(r): r // 2 for r in range(8)}
    # the recovered steps are the simulated ones: per worker and step, the same compute as the op table's
    ops = import_path(_parquet(tmp_path, table), tmp_path / "ops").run_dir
    ours = {(r["rank"], r["step"]): r["value"] for r in _rows(result.run_dir) if r["metric"] == "compute_ms"}
    theirs = {(r["rank"], r["step"]): r["value"] for r in _rows(ops) if r["metric"] == "compute_ms"}
    assert ours.keys() == theirs.keys() and all(abs(ours[k] - theirs[k]) < 1e-6 for k in ours)


def _parquet(tmp_path, table):
    import pyarrow.parquet as pq

    pq.write_table(table, tmp_path / "trace.parquet")
    return tmp_path / "trace.parquet"


def _generic(marker: bool):
    """Two processes named 'rank N', a compute and a comm thread each; steps as 'iteration N' markers or not."""
    events = []
    for rank in (0, 1):
        events += [{"ph": "M", "name": "process_name", "pid": 100 + rank, "args": {"name": f"trainer rank {rank}"}},
                   {"ph": "M", "name": "thread_name", "pid": 100 + rank, "tid": 1, "args": {"name": "compute"}},
                   {"ph": "M", "name": "thread_name", "pid": 100 + rank, "tid": 2, "args": {"name": "nccl comm"}}]
        for i in range(4):
            t = 1000.0 * i
            if marker:
                events.append({"ph": "X", "name": f"iteration {10 + i}", "pid": 100 + rank, "tid": 1, "ts": t,
                               "dur": 900.0})
            events += [{"ph": "X", "name": "fwd", "pid": 100 + rank, "tid": 1, "ts": t + 10, "dur": 200.0},
                       {"ph": "X", "name": "bwd", "pid": 100 + rank, "tid": 1, "ts": t + 220,
                        "dur": 400.0 + rank * 100},
                       {"ph": "X", "name": "sync_grads", "pid": 100 + rank, "tid": 2, "ts": t + 700, "dur": 150.0}]
    return events


@pytest.mark.parametrize("marker", [True, False])
def test_a_generic_perfetto_timeline_names_workers_from_its_tracks(tmp_path, marker):
    src = _write(tmp_path / "trace.json.gz", _generic(marker), wrap=True)
    result = import_path(src, tmp_path / "run")
    assert result.format == "worker-timeline" and result.ranks == [0, 1]
    assert result.steps == ([10, 11, 12, 13] if marker else [0, 1, 2, 3])
    assert any(("named step markers" if marker else "repeated operation sequence") in n for n in result.notes)
    rows = _rows(result.run_dir)
    compute = {(r["rank"], r["step"]): r["value"] for r in rows if r["metric"] == "compute_ms"}
    assert compute[(1, result.steps[0])] == pytest.approx((200 + 500) / 1e3)  # µs → ms; rank from the name
    comm = {r["entity"] for r in rows if r["metric"] == "collective_ms"}
    assert comm == {"comm"}  # an op on a communication thread is communication, whatever its name


def test_a_timeline_whose_steps_cannot_be_recovered_says_why(tmp_path):
    events = [{"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10.0 * i, "dur": 5.0} for i in range(9)]
    src = _write(tmp_path / "t.json.gz", events)
    with pytest.raises(ImportFormatError, match="could not be recovered.*args.step.*does not repeat"):
        import_path(src, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def _cupti_trace():
    """The shape of HTA's tests/data/cupti_profiler trace: PARAM's phase annotations wrapping one iteration each,
    kernels as cuda_profiler_range events with SASS counters and equal replay ranges, no correlation on them."""
    counters = {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 100, "smsp__sass_thread_inst_executed_op_"
                "fadd_pred_on.sum": 10, "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum": 4}
    ev = [{"ph": "X", "cat": "user_annotation", "name": "[param|pytorch.model.alex_net|0|0|0]", "pid": 9, "tid": 9,
           "ts": 0.0, "dur": 10_000.0}]
    for phase, t0 in (("warmup", 100.0), ("measure", 5000.0)):
        ev += [{"ph": "X", "cat": "user_annotation", "name": f"[param|m|0|0|0|{phase}|forward]", "pid": 9, "tid": 9,
                "ts": t0, "dur": 4000.0},
               {"ph": "X", "cat": "user_annotation", "name": "[param|clear_cache]", "pid": 9, "tid": 9,
                "ts": t0 + 1, "dur": 200.0},
               {"ph": "X", "cat": "user_annotation", "name": f"[param|m|0|0|0|{phase}|forward]", "pid": 9, "tid": 9,
                "ts": t0 + 300, "dur": 3690.0}]
        ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": t0 + 400 + k,
                "dur": 1.0, "args": {"correlation": int(t0) + k}} for k in range(3)]
    ev += [{"ph": "X", "cat": "cuda_profiler_range", "name": f"kernel{k}", "pid": 0, "tid": 0, "ts": 20_000.0 + 50 * k,
            "dur": 50.0, "args": counters} for k in range(6)]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-PG509-200"}],
            "distributedInfo": {"rank": 0}, "traceEvents": ev}


def test_a_cupti_range_profiler_trace_is_imported_with_steps_and_counters(tmp_path):
    src = tmp_path / "benchmark_result_trace.json.gz"
    with gzip.open(src, "wt") as fh:
        json.dump(_cupti_trace(), fh)
    assert detect_format(src) == "pytorch-trace"
    result = import_path(src, tmp_path / "run")
    assert result.ranks == [0] and result.steps == [0, 1]
    assert any("CUPTI range-profiler" in n and "not measured" in n for n in result.notes)
    assert any("2 steps from the repeated annotation 'forward'" in n for n in result.notes)
    rows = {(r["step"], r["metric"], r["entity"]): r["value"] for r in _rows(result.run_dir)}
    assert rows[(0, "kernel_count", "")] == rows[(1, "kernel_count", "")] == 3
    assert rows[(0, "flop_count", "fp32")] == 3 * (2 * 100 + 10) and rows[(1, "flop_count", "fp16")] == 3 * 2 * 4
    assert (0, "free_ms", "") not in rows  # replay ranges are not kernel times: no device timeline


@pytest.mark.skipif(not (FIXTURES / "cpu_only_gloo_rank34.json.gz").exists(), reason="shared fixtures absent")
def test_a_cpu_only_gloo_trace_says_it_has_no_gpu_kernels(tmp_path):
    result = import_path(FIXTURES / "cpu_only_gloo_rank34.json.gz", tmp_path / "run")
    assert result.ranks == [34]
    assert any(n.startswith("CPU-only trace (no GPU kernels, collectives from gloo") for n in result.notes)
    assert read_run_json(result.run_dir)["notes"] == result.notes


@pytest.mark.parametrize(("name", "content", "says"), [
    ("metrics.json", '{"loss": [1, 2]}', "a JSON document that is not a Chrome trace"),
    ("profile.nsys-rep", "binary", "an Nsight Systems report: export it"),
    ("trace.pftrace", "binary", "a Perfetto protobuf trace: export it as JSON"),
])
def test_an_input_no_importer_reads_says_what_it_looks_like(tmp_path, name, content, says):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ImportFormatError, match=f"looks like {says}"):
        detect_format(path)


def test_the_cli_imports_a_worker_timeline_given_as_a_pytorch_trace(tmp_path):
    """A user's first try: `cann-debug import pytorch-trace timeline-*.json.gz` (the real entry point)."""
    import subprocess
    import sys

    src = _write(tmp_path / "timeline-AR.json.gz", st.timeline(st.simulate(st.plan()["balanced"], steps=3)))
    cmd = [sys.executable, "-c", "import sys; from debugtune.cli import debug_main; sys.argv[0] = 'cann-debug'; "
           "debug_main()", "import", "pytorch-trace", str(src), "--run-dir", str(tmp_path / "run")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "worker-timeline" in done.stdout and "tracks are workers" in done.stdout and "args.step" in done.stdout
