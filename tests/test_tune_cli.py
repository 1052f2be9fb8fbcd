"""`cann-tune auto` end to end on an on-disk store: history from a similar run, recording, budget, errors.

The graph holds a target MoE run whose findings match the knowledge base's GateInitBias case, a similar
run that was tuned before (its experiments are the history), a dissimilar run (ignored) and one earlier
experiment of the target itself. Trials are real processes started from a command template.
"""

from __future__ import annotations

import json
import math
import re
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from debugtune.cli.apps import tune_app
from debugtune.engine.suggest import load_settings
from debugtune.engine.telemetry import write_run_json
from debugtune.engine.tune import TrialSpecError, load_history
from debugtune.kg import open_store
from debugtune.kg.assertions import add_experiments, read_experiments, replace_diagnosis
from debugtune.kg.errors import DebugtuneError
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.records import Experiment, Finding

runner = CliRunner()
BEST = 0.008  # the init std where the trial's expert CV is lowest


def gate_init_findings(severity: float = 0.6) -> list[Finding]:
    """The signature of the knowledge base's Switch-InitScale case (GateInitBias)."""
    return [Finding("f1", "ExpertImbalance", "gradient", "blocks.0.moe/expert:0", 10, 200, severity),
            Finding("f2", "RouterGradVanishing", "gradient", "blocks.0.moe.router", 12, 200, 0.5),
            Finding("f3", "LossOscillation", "convergence", "", 20, 200, 0.5)]


def cv_of(init_std: float, best: float = BEST) -> float:
    return 0.05 + 0.4 * abs(math.log10(init_std / best))


def _experiments(prefix: str, values: list[float], best: float) -> list[Experiment]:
    return [Experiment(f"{prefix}-{i}", "RouterInitRescale", {"init_std": v}, {"cv": cv_of(v, best), "loss": 2.0},
                       1.0, 0) for i, v in enumerate(values)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("tunecli")
    run_dir = root / "moe-target"
    run_dir.mkdir()
    write_run_json(run_dir, {"run_id": "moe-target", "card_hours": 10.0})
    store_dir = root / "store"
    st = open_store(store_dir)
    load_knowledge(st)
    replace_diagnosis(st, "moe-target", {"run_dir": str(run_dir)}, gate_init_findings())
    replace_diagnosis(st, "moe-related", {}, gate_init_findings(0.7))
    replace_diagnosis(st, "dense-other", {}, [Finding("g1", "LossSpike", "convergence", "", 5, 6, 0.9)])
    add_experiments(st, "moe-related", _experiments("old", [0.002, 0.005, 0.01, 0.03, 0.1], BEST * 1.2))
    add_experiments(st, "dense-other", _experiments("other", [0.05, 0.09], 0.05))
    add_experiments(st, "moe-target", _experiments("first", [0.05], BEST))
    st.close()
    script = root / "trial.py"
    script.write_text(textwrap.dedent(f"""
        import json, math, sys
        std = float(sys.argv[1])
        cost = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
        print("training with init std", std)
        print(json.dumps({{"cv": 0.05 + 0.4 * abs(math.log10(std / {BEST})), "loss": 2.0 + std, "cost": cost}}))
    """))
    return {"store": str(store_dir), "script": str(script), "run_dir": str(run_dir)}


def _auto(world, *args: str, cost: float = 1.0):
    trial = f"{sys.executable} {world['script']} {{init_std}} {cost}"
    return runner.invoke(tune_app, ["auto", "moe-target", "--remedy", "RouterInitRescale", "--trial", trial,
                                    "--store", world["store"], *args])


def test_history_comes_from_similar_runs_and_the_target_s_own_experiments(world):
    st = open_store(world["store"])
    try:
        h = load_history(st, "moe-target", "RouterInitRescale", ["cv"])
    finally:
        st.close()
    assert [t.name for t in h.tasks] == ["run:moe-related"]
    assert len(h.tasks[0]) == 5 and h.tasks[0].similarity > 0.85
    assert h.prior == (({"init_std": 0.05}, {"cv": pytest.approx(cv_of(0.05)), "loss": 2.0}),)
    assert "run:dense-other" in h.skipped and "similarity" in h.skipped["run:dense-other"]


def test_a_run_that_shares_most_of_the_target_s_findings_lends_its_experiments_to_the_tuning(tmp_path):
    """A related run whose diagnosis adds two findings to the target's (the seed chain's wide runs add
    DeadExperts and ZeroUpdate) is under the suggestions' similarity threshold and above the tuning history's:
    RGPE weighs it again on the target's own experiments, so it enters the history; a run with nothing in
    common does not."""
    st = open_store(tmp_path / "store")
    try:
        load_knowledge(st)
        replace_diagnosis(st, "moe-target", {}, gate_init_findings())
        extra = [Finding("g2", "DeadExperts", "gradient", "blocks.0.moe/expert:3", 30, 200, 0.8),
                 Finding("g3", "ZeroUpdate", "gradient", "blocks.0.moe", 30, 200, 0.6)]
        replace_diagnosis(st, "moe-partial", {}, [*gate_init_findings(0.7), *extra])
        replace_diagnosis(st, "dense-other", {}, [Finding("g1", "LossSpike", "convergence", "", 5, 6, 0.9)])
        add_experiments(st, "moe-partial", _experiments("old", [0.002, 0.01, 0.1], BEST))
        add_experiments(st, "dense-other", _experiments("other", [0.05, 0.09], 0.05))
        h = load_history(st, "moe-target", "RouterInitRescale", ["cv"])
        strict = load_history(st, "moe-target", "RouterInitRescale", ["cv"], threshold=load_settings(st).threshold)
    finally:
        st.close()
    assert [t.name for t in h.tasks] == ["run:moe-partial"]
    assert 0.5 <= h.tasks[0].similarity < 0.85
    assert "run:dense-other" in h.skipped
    assert strict.tasks == () and "run:moe-partial" in strict.skipped


def test_auto_tunes_from_history_records_every_experiment_and_reports_json(world):
    r = _auto(world, "--objective", "cv", "--max-experiments", "3", "--seed", "1", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["remedy"] == "RouterInitRescale" and out["stop_reason"] == "max-experiments"
    # the target already has one experiment, so BO starts at once, with the related run in the ensemble
    assert [t["origin"] for t in out["trials"]] == ["bo"] * 3
    assert set(out["trials"][0]["weights"]) == {"run:moe-related", "target"}
    assert out["history"][0]["task"] == "run:moe-related" and out["prior_experiments"] == 1
    assert out["best"]["values"]["cv"] <= 0.2
    assert out["run_cost_card_hours"] == 10.0 and out["spent"] == pytest.approx(3.0)
    st = open_store(world["store"])
    try:
        recorded = [e for _, e in read_experiments(st, "moe-target") if e.id.startswith(out["session"])]
    finally:
        st.close()
    assert [e.id for e in recorded] == out["recorded"] and len(recorded) == 3
    assert all(e.status == "ok" and "init_std" in e.parameters and "cv" in e.objectives for e in recorded)


def test_budget_in_percent_of_the_run_cost_stops_the_session(world):
    r = _auto(world, "--objective", "cv", "--max-experiments", "5", "--budget", "50%", "--no-record", "--json",
              cost=2.0)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["budget_card_hours"] == 5.0 and out["stop_reason"] == "budget"
    assert len(out["trials"]) == 2 and out["spent"] <= 5.0 and out["recorded"] == []


def test_the_table_shows_experiments_best_pareto_front_and_cost(world):
    r = _auto(world, "-o", "cv", "-o", "loss", "--multi-objective", "--max-experiments", "3", "--no-record",
              "--budget", "4")
    assert r.exit_code == 0, r.output
    for text in ("RouterInitRescale: 3 experiment(s)", "best", "Pareto front", "hypervolume",
                 "card-hours spent of 4 budget", "history", "run:moe-related"):
        assert text in r.output, r.output


def test_failed_trials_are_recorded_as_failed(world):
    trial = f"{sys.executable} -c \"import sys; sys.exit('diverged')\" {{init_std}}"
    r = runner.invoke(tune_app, ["auto", "moe-target", "--remedy", "RouterInitRescale", "--trial", trial, "-o", "cv",
                                 "--max-experiments", "2", "--store", world["store"], "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert [t["status"] for t in out["trials"]] == ["failed", "failed"] and out["best"] is None
    assert "exit code 1: diverged" in out["trials"][0]["error"]
    st = open_store(world["store"])
    try:
        statuses = {e.status for _, e in read_experiments(st, "moe-target") if e.id.startswith(out["session"])}
    finally:
        st.close()
    assert statuses == {"failed"}


@pytest.mark.parametrize("args, error, message", [
    (["--remedy", "NoSuchRemedy"], DebugtuneError, "NoSuchRemedy"),
    (["--trial", "python t.py {lr}"], TrialSpecError, r"\{lr\} is not a tuning parameter"),
    (["--budget", "lots"], DebugtuneError, "expected a percentage"),
    (["--deterministic-replay", "/nonexistent/ckpt.pt"], DebugtuneError, "checkpoint not found"),
])
def test_bad_requests_are_clear_errors(world, args, error, message):
    base = ["auto", "moe-target", "--remedy", "RouterInitRescale", "--trial", "python t.py {init_std}",
            "--store", world["store"], "-o", "cv"]
    for i in range(0, len(args), 2):  # the given options replace the defaults
        if args[i] in base:
            base[base.index(args[i]) + 1] = args[i + 1]
        else:
            base += args[i:i + 2]
    r = runner.invoke(tune_app, base)
    assert isinstance(r.exception, error), r.output
    assert re.search(message, str(r.exception))


def test_a_run_without_a_trial_of_its_own_needs_one_and_two_kinds_exclude_each_other(world):
    r = runner.invoke(tune_app, ["auto", "moe-target", "--remedy", "RouterInitRescale", "--store", world["store"]])
    assert isinstance(r.exception, DebugtuneError) and "has no trial of its own" in str(r.exception)
    assert "--trial" in str(r.exception) and "debugtune.checkpoint" in str(r.exception)
    r = runner.invoke(tune_app, ["auto", "moe-target", "--remedy", "RouterInitRescale", "--store", world["store"],
                                 "--trial", "python t.py {init_std}", "--trial-fn", "m:f"])
    assert r.exit_code == 2 and "at most one of --trial" in r.output


def test_remedy_and_top_suggestion_exclude_each_other(world):
    r = runner.invoke(tune_app, ["auto", "moe-target", "--remedy", "RouterInitRescale", "--top-suggestion",
                                 "--trial", "python t.py {init_std}", "--store", world["store"]])
    assert isinstance(r.exception, DebugtuneError) and "exactly one of --remedy" in str(r.exception)


def test_the_combined_gate_init_remedy_spans_router_std_and_balance_loss(world):
    """kb:RouterRebalance (cases/remedies-tuning.ttl) tunes both knobs, with the single-knob remedies' ranges."""
    from debugtune.engine.suggest import remedy_details
    from debugtune.engine.tune import SearchSpace

    st = open_store(world["store"])
    try:
        remedy = remedy_details(st, "RouterRebalance")
        single = {p.name: p for r in ("RouterInitRescale", "EnableAuxLoss") for p in remedy_details(st, r).parameters}
    finally:
        st.close()
    assert "GateInitBias" in remedy.addresses
    combined = {p.name: p for p in remedy.parameters}
    assert sorted(combined) == ["aux_loss_coeff", "init_std"]
    for name, p in combined.items():
        q = single[name]
        assert (p.kind, p.scale, p.low, p.high, p.default) == (q.kind, q.scale, q.low, q.high, q.default) == \
            (q.kind, "log", q.low, q.high, q.default)
    assert SearchSpace(list(combined.values())).dim == 2
