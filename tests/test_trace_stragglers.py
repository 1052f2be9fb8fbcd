"""Stragglers by group and stage: ranks compared only within their communicator or pipeline stage, a slow stage
named with its ranks, a straggler slow for a short whole window named StragglerRank, evidence-scaled
confidence. Telemetry written with the real writer, diagnosed and ranked with the real knowledge base."""

from __future__ import annotations

import numpy as np
import pytest

from debugtune.engine.diagnose.groups import layout
from debugtune.engine.infer import candidate_causes, infer, rank
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge
from tests.diagnose_helpers import finding, run_and_diagnose, symptoms

C = "communication"




def _ranks(compute: np.ndarray, comm_base: float = 40.0, entity: str = "allreduce") -> dict:
    """Per rank: compute, the collective the others wait in (shortest for the slowest), step time."""
    n, steps = compute.shape
    out = {}
    for r in range(n):
        wait = compute.max(axis=0) - compute[r]
        out[r] = [(C, "compute_ms", "", compute[r]), (C, "collective_ms", entity, comm_base + wait),
                  (C, "comm_ms", "", comm_base + wait), (C, "step_time_ms", "", compute.max(axis=0) + comm_base)]
    return out


def _top(model, th, d):
    causes = [c for c in model.causes if any(link.target in symptoms(d) for link in model.children.get(c, ()))]
    return rank(model, causes, d.findings, d.judged, d.edges, th, d.steps, from_run_start=False)


def test_a_slow_stage_is_named_with_its_ranks_not_one_of_them(tmp_path, th, model):
    rng = np.random.default_rng(0)
    compute = 100 * (1 + 0.03 * rng.standard_normal((8, 12)))
    compute[4:] *= 1.6  # stage 1 of pp=2 (Megatron order: ranks 4-7)
    d = run_and_diagnose(tmp_path, th, _ranks(compute), meta={"parallel": {"tp": 1, "pp": 2, "dp": 4}})
    stage = finding(d, "SlowPipelineStage")
    assert stage.entity == "stage:1" and stage.evidence["ranks"] == "4,5,6,7"
    assert stage.evidence["stage_ratio"] == pytest.approx(1.6, rel=0.05)
    assert "SlowRank" in d.judged and "SlowRank" not in symptoms(d)  # compared within the stage: nobody is slow
    assert _top(model, th, d).scores[0].cause == "PipelineStageImbalance"


def test_a_straggler_of_a_short_whole_window_is_a_judged_straggler(tmp_path, th, model):
    rng = np.random.default_rng(1)
    compute = 100 * (1 + 0.03 * rng.standard_normal((8, 10)))
    compute[3] *= 2.0  # slow from the first profiled step, 10 steps (fewer than diagnose.min_steps)
    d = run_and_diagnose(tmp_path, th, _ranks(compute))
    slow, own = finding(d, "SlowRank"), finding(d, "SlowCompute")
    assert slow.entity == own.entity == "rank:3"
    assert slow.evidence["compute_outlier"] is True and slow.evidence["whole_window"] is True
    assert slow.evidence["steps_judged"] == 10 and slow.evidence["confidence"] == "confirmed"
    assert "StepTimeRegression" not in d.judged  # too short to judge a trend; not held against the straggler
    r = _top(model, th, d)
    assert r.scores[0].cause == "StragglerRank" and r.hypotheses and r.hypotheses[0].cause == "StragglerRank"


def test_the_vote_compares_ranks_of_the_same_communicator_only(tmp_path, th):
    """Two data-parallel groups whose collectives take different times by design: rank 1 waits least in its own
    group (0, 1) because it computes longest; across groups the others' collective times would drown it."""
    rng = np.random.default_rng(2)
    compute = 100 * (1 + 0.02 * rng.standard_normal((8, 30)))
    compute[1] *= 1.5
    ranks = {}
    for group, members in (("1", range(4)), ("2", range(4, 8))):
        sub = _ranks(compute[list(members)], comm_base=40.0 if group == "1" else 400.0, entity=f"allreduce@pg:{group}")
        ranks.update({m: sub[i] for i, m in enumerate(members)})
    d = run_and_diagnose(tmp_path, th, ranks)
    slow = finding(d, "SlowRank")
    assert slow.entity == "rank:1" and slow.detector == "communication.slow_rank.vote"


def test_stages_from_process_groups_and_point_to_point_peers():
    meta = {"world_size": 4, "groups": [{"name": "0", "desc": "default_pg", "ranks": [0, 1, 2, 3]},
                                        {"name": "1", "desc": "undefined", "ranks": [0, 1]},
                                        {"name": "2", "desc": "undefined", "ranks": [2, 3]},
                                        {"name": "3", "desc": "undefined", "ranks": [0, 2]},
                                        {"name": "4", "desc": "undefined", "ranks": [1, 3]}],
            "p2p": [[0, 2], [1, 3]]}
    lay = layout(meta, [0, 1, 2, 3])
    assert lay.stages == {0: [0, 1], 1: [2, 3]} and "point-to-point" in lay.source
    assert layout({**meta, "p2p": []}, [0, 1, 2, 3]).stages == {}
    assert layout({"world_size": 8, "parallel": {"tp": 2, "pp": 4}}, range(8)).stages == {
        0: [0, 1], 1: [2, 3], 2: [4, 5], 3: [6, 7]}


def test_shifting_slowest_rank_is_compute_imbalance_not_a_slow_rank(tmp_path, th, model):
    rng = np.random.default_rng(3)
    compute = 100 * np.exp(0.35 * rng.standard_normal((8, 36)))  # CV ≈ 0.36, a different rank slowest each step
    d = run_and_diagnose(tmp_path, th, _ranks(compute))
    imb = finding(d, "ComputeImbalance")
    assert imb.evidence["compute_cv"] > 0.2 and imb.evidence["slowest_rank_share"] < 0.6
    assert "SlowCompute" not in symptoms(d)
    assert _top(model, th, d).scores[0].cause == "SequenceLengthImbalance"
    compute[4:] *= 1.4  # and a long last stage, as in ByteDance's SE trace: the imbalance still explains both
    d = run_and_diagnose(tmp_path / "se", th, _ranks(compute), meta={"parallel": {"tp": 1, "pp": 2, "dp": 4}})
    assert {"ComputeImbalance", "SlowPipelineStage"} <= symptoms(d)
    r = _top(model, th, d)
    # named, or (with the compute-jitter leak the CPU DDP controls calibrate, cases/thresholds/leaks.ttl) left
    # undetermined with it leading: never another cause named
    if r.hypotheses:
        assert r.hypotheses[0].cause == "SequenceLengthImbalance"
    else:
        assert r.undetermined is not None and r.undetermined.candidates[0][0] == "SequenceLengthImbalance"


def test_one_step_of_two_ranks_is_at_most_suspected_and_weighs_less(tmp_path, th):
    compute = np.array([[100.0], [160.0]])
    d = run_and_diagnose(tmp_path, th, _ranks(compute))
    slow = finding(d, "SlowRank")
    assert slow.evidence["confidence"] == "suspected" and slow.evidence["evidence_weight"] < 0.5
    store = open_store(None)
    load_knowledge(store)
    report = infer(store, d, th)
    assert "StragglerRank" in candidate_causes(store, d.run)
    assert not report.hypotheses or report.hypotheses[0].confidence < 0.5
