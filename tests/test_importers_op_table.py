"""Per-operation timing tables (ByteDance's straggler-trace layout): per-step telemetry, the rank layout, and the
slow stage found from it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from debugtune.engine.capture.importers import ImportFormatError, detect_format, import_path
from debugtune.engine.capture.importers.op_table import kind_of
from debugtune.engine.diagnose import diagnose_run
from debugtune.engine.telemetry import read_run_json, read_telemetry
from tests.diagnose_helpers import thresholds


def _trace(path, slow_stage: int | None = None, steps: int = 8):
    """8 ranks = 2 stages × 4 data-parallel replicas; per step forward, backward, send/recv, reduce-scatter."""
    rng = np.random.default_rng(0)
    rows = {k: [] for k in ("rank", "stage", "dp_rank", "step", "optype", "start_ts", "duration")}
    for step in range(100, 100 + steps):
        for rank in range(8):
            stage, dp = divmod(rank, 4)
            scale = 1.6 if stage == slow_stage else 1.0
            t = step * 1.0
            for op, dur in (("forward-compute", 0.1 * scale), ("forward-send" if stage == 0 else "forward-recv", 0.02),
                            ("backward-compute", 0.2 * scale), ("grads-reduce-scatter", 0.05)):
                dur *= 1 + 0.02 * rng.standard_normal()
                for key, value in zip(rows, (rank, stage, dp, step, op, t, dur), strict=True):
                    rows[key].append(value)
                t += dur
    pq.write_table(pa.table(rows), path)
    return path


def test_an_op_table_is_per_step_telemetry_with_its_layout(tmp_path):
    src = _trace(tmp_path / "trace-ST.parquet", slow_stage=1)
    assert detect_format(src) == "op-table"
    run = import_path(src, tmp_path / "run").run_dir
    meta = read_run_json(run)
    assert meta["layout"]["stage"]["5"] == 1 and meta["parallel"] == {"pp": 2, "dp": 4}
    assert meta["from_run_start"] is False
    tel = read_telemetry(run)
    steps, ranks, compute = tel.pivot("compute_ms", by="rank")
    assert list(steps) == list(range(100, 108)) and list(ranks) == list(range(8))
    assert np.median(compute[:, 4:]) == pytest.approx(1.6 * np.median(compute[:, :4]), rel=0.05)
    assert set(tel.entities("collective_ms")) == {"reducescatter", "send", "recv"}
    d = diagnose_run(run, thresholds())
    stage = next(f for f in d.findings if f.symptom == "SlowPipelineStage")
    assert stage.entity == "stage:1" and stage.evidence["ranks"] == "4,5,6,7"
    assert not [f for f in d.findings if f.symptom == "SlowRank"]


def test_operation_kinds_and_a_table_without_times(tmp_path):
    assert [kind_of(o) for o in ("grads-reduce-scatter", "params-all-gather", "tp-allreduce", "backward-send",
                                 "forward-send-backward-recv", "forward-compute")] == [
        "reducescatter", "allgather", "allreduce", "send", "sendrecv", None]
    bad = tmp_path / "bad.csv"
    bad.write_text("rank,step,optype,start_ts,duration\n0,1,forward-compute,x,0.1\n")
    with pytest.raises(ImportFormatError, match="must be numbers"):
        import_path(bad, tmp_path / "run", fmt="op-table")
    assert not (tmp_path / "run").exists()
