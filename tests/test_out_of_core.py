"""Out-of-core diagnosis (DuckDB scans, ``--engine ray``, ``--follow``) finds what the in-memory path finds.

Small runs with the knowledge base's scan sizes shrunk (chunks of 128 steps, windows of a few chunks, nothing
resident but the loss) so that every mechanism of the big runs is exercised: several windows and chunks, the
per-rank metrics only scanned or read a batch of ranks at a time. Findings must agree field by field."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

from bench import scale_data
from debugtune.engine.diagnose import DiagnoseError, Thresholds, diagnose_run
from debugtune.engine.diagnose.follow import Follower
from debugtune.engine.diagnose.run import choose_engine
from tests.diagnose_helpers import thresholds, write_run

RANKS, STEPS = 24, 1500


@pytest.fixture(scope="module")
def th() -> Thresholds:
    return Thresholds({**dict(thresholds()), "diagnose.scan.chunk_steps": 128, "diagnose.scan.window_cells": 24 * 512,
                       "diagnose.out_of_core.resident_rows": 4000, "diagnose.out_of_core.grid_cells": 10_000})


@pytest.fixture(scope="module")
def scale_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("ooc") / "run"
    scale_data.write(run, RANKS, STEPS, workers=1)
    return run


def same(a, b) -> None:
    """Two diagnoses agree: the same findings (symptom, where, steps, severity, evidence) and coverage."""
    assert [f.id for f in a.findings] == [f.id for f in b.findings]
    for x, y in zip(a.findings, b.findings, strict=True):
        assert (x.symptom, x.entity, x.onset_step, x.end_step, x.detection_step) == \
            (y.symptom, y.entity, y.onset_step, y.end_step, y.detection_step), x.id
        assert x.severity == pytest.approx(y.severity, rel=1e-12, abs=1e-15), x.id
        assert x.evidence.keys() == y.evidence.keys(), x.id
        for k, v in x.evidence.items():
            w = y.evidence[k]
            if isinstance(v, float) and isinstance(w, float):
                assert v == pytest.approx(w, rel=1e-9, abs=1e-12) or (math.isnan(v) and math.isnan(w)), (x.id, k)
            else:
                assert v == w, (x.id, k)
    assert a.coverage == b.coverage and a.steps == b.steps and sorted(a.notes) == sorted(b.notes)


def test_the_scale_run_out_of_core_equals_in_memory(scale_run, th):
    mem = diagnose_run(scale_run, th, engine="memory")
    ooc = diagnose_run(scale_run, th, engine="duckdb")
    assert ooc.engine == "duckdb" and mem.engine == "memory" and ooc.rows == mem.rows == 3 * RANKS * STEPS + 2 * STEPS
    same(mem, ooc)
    slow, onset = scale_data.straggler(RANKS, STEPS)
    found = {f.symptom: f for f in ooc.findings}
    assert found["SlowRank"].entity == f"rank:{slow}" and abs(found["SlowRank"].onset_step - onset) <= 10
    assert found["LossOscillation"].evidence["period_steps"] == pytest.approx(scale_data.PERIOD, rel=0.05)


def _stages(run, slow_stage: bool) -> None:
    """16 ranks in 4 pipeline stages (Megatron order): stage 3 computes 1.6× longer, or replicas vary per step
    alike on every stage (uneven sequence lengths)."""
    rng = np.random.default_rng(1)
    steps = 700
    lengths = np.exp(0.3 * rng.standard_normal((4, steps)))
    ranks = {}
    for r in range(16):
        stage, replica = r // 4, r % 4
        compute = 100 * (1 + 0.02 * rng.standard_normal(steps))
        compute *= 1.6 if slow_stage and stage == 3 else 1.0
        if not slow_stage:
            compute *= lengths[replica]
        comm = 10 + 0.5 * rng.standard_normal(steps)
        ranks[r] = [("communication", "compute_ms", "", compute), ("communication", "comm_ms", "", comm),
                    ("communication", "step_time_ms", "", compute + comm + 20),
                    ("communication", "collective_bytes", "allreduce", np.full(steps, 64 * 2**20)),
                    ("communication", "collective_ms", "allreduce", comm),
                    ("communication", "alltoall_bytes", "", np.full(steps, 1e6) * (3 if r == 5 else 1)),
                    ("convergence", "loss", "", 3 - np.arange(steps) / steps)]
    write_run(run, ranks, meta={"parallel": {"pp": 4, "dp": 4}, "interconnect": "nvlink_h100"})


@pytest.mark.parametrize("slow_stage", [True, False], ids=["slow-stage", "replica-variation"])
def test_stages_replicas_shares_and_bandwidth_out_of_core_equal_in_memory(tmp_path, th, slow_stage):
    _stages(tmp_path, slow_stage)
    mem = diagnose_run(tmp_path, th, engine="memory")
    same(mem, diagnose_run(tmp_path, th, engine="duckdb"))
    symptoms = {f.symptom for f in mem.findings}
    assert ("SlowPipelineStage" if slow_stage else "ReplicaComputeVariation") in symptoms
    assert "AllToAllImbalance" in symptoms and "LowBandwidthUtilization" in symptoms


def test_a_series_too_large_to_hold_is_aggregated_in_duckdb(scale_run, th):
    """Nothing resident: the loss series comes from a GROUP BY step in DuckDB, and the oscillation is the same."""
    tight = Thresholds({**dict(th), "diagnose.out_of_core.resident_rows": 0})
    same(diagnose_run(scale_run, th, engine="memory", dimensions=["convergence"]),
         diagnose_run(scale_run, tight, engine="duckdb", dimensions=["convergence"]))


def test_auto_chooses_out_of_core_above_the_size(scale_run, th):
    assert choose_engine(scale_run, th, "auto") == "memory"
    small = Thresholds({**dict(th), "diagnose.out_of_core.rows": 1000})
    assert choose_engine(scale_run, small, "auto") == "duckdb"
    with pytest.raises(DiagnoseError, match="unknown engine"):
        choose_engine(scale_run, th, "spark")


def test_a_corrupt_part_is_named_out_of_core(tmp_path, scale_run, th):
    run = tmp_path / "run"
    shutil.copytree(scale_run, run)
    part = next((run / "telemetry" / "rank=3").glob("*.parquet"))
    part.write_bytes(b"PAR1 not really")
    with pytest.raises(DiagnoseError, match=r"rank=3.*corrupt"):
        diagnose_run(run, th, engine="duckdb")


def test_follow_rejudges_only_the_new_steps_and_agrees_with_a_fresh_diagnosis(tmp_path, th):
    run = tmp_path / "run"
    scale_data.write(run, RANKS, STEPS, workers=1, last=1000)
    follow = Follower(run, th)
    first = follow.step()
    assert first.diagnosis is not None and first.scanned_rows > 0
    assert follow.step().diagnosis is None  # nothing new
    scale_data.write(run, RANKS, STEPS, workers=1, first=1000, last=STEPS)
    second = follow.step()
    assert second.new_rows == 3 * RANKS * 500 + 2 * 500 and second.new_steps == 500
    assert second.diagnosis is not None
    # only the chunks the new parts touched were scanned again: from step 896 (chunk 7 of 128 steps) on
    assert first.scanned_rows == 3 * RANKS * 1000 and second.scanned_rows == 3 * RANKS * (STEPS - 7 * 128)
    same(diagnose_run(run, th, engine="memory"), second.diagnosis)


ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'debugtune[ray]'); the Ray path is not "
                          "tested")


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_path_gives_the_local_paths_findings(ray_cluster, scale_run, th):
    local = diagnose_run(scale_run, th, engine="duckdb")
    remote = diagnose_run(scale_run, th, engine="ray")
    assert remote.engine == "ray"
    same(local, remote)
