"""A scenario run has a trial of its own: the MoE seed scenario's replay checkpoint declares it, so
`cann-tune auto RUN --top-suggestion` needs no other flag; the remedies its trial cannot set are passed over (shown,
never first); a parameter without effect stops the tuning early; the shipped histories carry their sources; the
DSL shows near misses when no case is similar enough."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from debugtune.api import diagnose
from debugtune.cli.apps import debug_app, tune_app
from debugtune.engine.suggest import applicable_first, suggest
from debugtune.engine.tune import TuneSpec, auto_tune, find_run_trial
from debugtune.engine.tune.baselines import experiments_to_target, grid_values, remedy_grid, symptom_grid
from debugtune.engine.tune.data import Objective
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge
from debugtune.scenarios.moe import (
    REPLAY_STEPS,
    TRIAL_PARAMETERS,
    build_moe,
    expert_utilisation,
    replay_trial,
    seed_scenario,
    train_moe,
    train_step,
)
from tests.diagnose_helpers import diagnosed_on_disk

runner = CliRunner()


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory):
    """The seed scenario (60 steps) trained with the probe into an on-disk store's run, diagnosed."""
    root = tmp_path_factory.mktemp("seed")
    run_dir = root / "seed-run"
    store, run, report = diagnosed_on_disk(root, run_dir, lambda d: train_moe(seed_scenario(steps=60), d, probe=True,
                                                                                run_id="seed-run"))
    assert report.hypotheses and report.hypotheses[0].cause == "GateInitBias"
    return {"dir": run_dir, "store": store, "run": run}


def test_the_scenario_run_declares_its_trial_and_the_replay_reproduces_the_run(seed_run):
    trial = find_run_trial(seed_run["dir"])
    assert trial is not None and trial.trial == "debugtune.scenarios.moe:replay_trial" and trial.step == 0
    assert set(trial.parameters) == set(TRIAL_PARAMETERS) and trial.objectives[0] == "expert_util_std:min"
    baseline = replay_trial({}, checkpoint=trial.checkpoint)
    assert baseline["expert_util_std"] > 30  # the biased router sends every token to expert 0
    fixed = replay_trial({"init_std": 0.02}, checkpoint=trial.checkpoint)
    assert fixed["expert_util_std"] < trial.target < baseline["expert_util_std"]
    again = replay_trial({"init_std": 0.02}, checkpoint=trial.checkpoint)
    assert {k: v for k, v in again.items() if k != "cost"} == {k: v for k, v in fixed.items() if k != "cost"}
    # the baseline replay is the run itself: training straight on gives the same shares over the same steps
    job = build_moe(seed_scenario(steps=60))
    tokens = np.array([train_step(job)["tokens_per_expert"] for _ in range(REPLAY_STEPS)])
    assert expert_utilisation(tokens)["std_pp"] == pytest.approx(baseline["expert_util_std"])


def test_auto_with_no_trial_flag_tunes_the_best_applicable_remedy_to_the_target(seed_run):
    r = runner.invoke(tune_app, ["auto", seed_run["run"], "--top-suggestion", "--store", seed_run["store"],
                                 "--executor", "inline", "--budget", "5%", "--max-experiments", "4", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["remedy"] == "RouterInitRescale" and out["objectives"] == ["expert_util_std:min", "loss_jitter:min"]
    passed = {p["remedy"]: p for p in out["passed_over"]}
    assert passed["EnableBiasBalancing"]["missing"] == ["bias_update_rate"]  # ranked first, cannot be applied
    assert out["stop_reason"] == "target" and len(out["trials"]) <= 4
    assert out["best"]["values"]["expert_util_std"] <= 15.0
    assert 0 < out["budget_share"] < 1  # 8 replayed steps of a 60-step run; the demo checks 5% of 300 steps
    assert all(t["status"] == "ok" for t in out["trials"])


def test_applicable_suggestions_come_first_and_say_what_they_lack(seed_run):
    st = open_store(seed_run["store"])
    try:
        ranked = suggest(st, seed_run["run"])
        judged = applicable_first(ranked, TRIAL_PARAMETERS)
    finally:
        st.close()
    assert ranked[0].remedy == "EnableBiasBalancing"
    flags = [a.applicable for a in judged]
    assert flags == sorted(flags, reverse=True) and judged[0].applicable
    bias = next(a for a in judged if a.suggestion.remedy == "EnableBiasBalancing")
    assert not bias.applicable and "bias_update_rate" in bias.reason
    assert all(a.applicable for a in applicable_first(ranked, None) if a.suggestion.parameters)


def test_a_parameter_without_effect_stops_early_and_says_so(seed_run):
    st = open_store(seed_run["store"])
    try:
        res = auto_tune(st, seed_run["run"], None, TuneSpec(remedy="CapExpertCapacity", max_experiments=8,
                                                            executor="inline", record=False))
        with pytest.raises(Exception, match="cannot set bias_update_rate"):
            auto_tune(st, seed_run["run"], None, TuneSpec(remedy="EnableBiasBalancing", executor="inline"))
    finally:
        st.close()
    assert res.result.stop_reason == "no-effect" and len(res.result.trials) == 3
    assert len({t.params["capacity_factor"] for t in res.result.trials}) == 3
    assert "capacity_factor had no effect on this run" in res.no_effect


def test_manual_grids_and_their_count_to_target(seed_run):
    st = open_store(seed_run["store"])
    try:
        from debugtune.engine.suggest import remedy_details
        from debugtune.engine.tune.baselines import symptom_parameters

        params = remedy_details(st, "RouterRebalance").parameters
        knobs = symptom_parameters(st, seed_run["run"], TRIAL_PARAMETERS)
    finally:
        st.close()
    grid = remedy_grid(params)
    assert len(grid) == 10 and all(set(c) == {"aux_loss_coeff", "init_std"} for c in grid)  # 5 values each
    std = next(p for p in params if p.name == "init_std")
    assert grid_values(std)[0] == pytest.approx(std.low) and grid_values(std)[-1] == pytest.approx(std.high)
    outward = grid_values(std, order="outward")  # the documented default first, then the nearest values
    assert outward[0] == std.default and sorted(outward[1:]) == grid_values(std) and outward[-1] == std.low
    names = {p.name for p in knobs}
    assert {"init_std", "aux_loss_coeff", "capacity_factor"} <= names and "bias_update_rate" not in names
    one, two = symptom_grid(knobs, 1), symptom_grid(knobs, 2)
    assert one != two and sorted(map(str, one)) == sorted(map(str, two))  # the same grid, another order
    ckpt = find_run_trial(seed_run["dir"]).checkpoint
    counted = experiments_to_target(lambda p: replay_trial(p, checkpoint=ckpt), [{"capacity_factor": 2.0},
                                    {"init_std": 0.02}], Objective("expert_util_std"), 15.0)
    assert counted.experiments == 2 and counted.cost > 0


def test_shipped_histories_have_parameters_values_and_sources():
    st = open_store(None)
    load_knowledge(st)
    rows = st.query("""SELECT ?e ?remedy ?params ?src (COUNT(?o) AS ?n) WHERE {
        ?case dt:hasExperiment ?e . ?e dt:remedy ?remedy ; dt:parametersJson ?params ; dct:source ?src ;
        dt:objective ?o } GROUP BY ?e ?remedy ?params ?src""").dicts()
    ours = [r for r in rows if "arxiv.org" in r["src"]]
    assert len(ours) >= 7 and all(r["n"] >= 2 for r in ours)
    cf = {json.loads(r["params"])["capacity_factor"] for r in ours if r["remedy"].endswith("RaiseCapacityFactor")}
    assert cf == {1.0, 1.25, 2.0}
    value = st.query("""SELECT ?v WHERE { kb:case\\/Switch-CapacityFactor dt:hasExperiment ?e .
        ?e dt:parametersJson ?p ; dt:objective ?o . ?o dt:metricName "neg_log_perplexity" ; dt:value ?v .
        FILTER(CONTAINS(?p, "1.25")) }""").scalar()
    assert value == pytest.approx(-1.553)  # Switch Transformer, Table 1 (Switch-Base; MoE-Base's -1.559 apart)
    tables = {r["c"]: r["t"] for r in st.query("SELECT ?c ?t WHERE { ?c a dt:Case ; dt:sourceTable ?t }").dicts()}
    assert len(tables) >= 4 and all(t.startswith("Table ") for t in tables.values())


def test_cases_similar_to_shows_near_misses_when_none_passes(seed_run):
    r = runner.invoke(debug_app, ["query", f"cases similar to run {seed_run['run']}", "--store", seed_run["store"],
                                  "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    note = " ".join(out.get("notes", []))
    assert not out["rows"] and "nearest:" in note and "Switch-InitScale" in note
    assert Path(seed_run["dir"], "replay-checkpoint.pt").is_file()


def test_every_harness_program_run_has_its_trial_and_auto_needs_no_trial_flag(tmp_path):
    """Not only the seed scenario: a run of any harness program writes its replay checkpoint before step 0, the
    trial replays it (the same losses as training with the change from the start), and `cann-tune auto RUN
    --top-suggestion` tunes the best remedy that trial can set."""
    from debugtune.scenarios import programs
    from debugtune.scenarios.faults import FAULTS

    torch.set_num_threads(1)
    fault = {"steps": 60, **FAULTS["LearningRateTooHigh"].resolve("blobs_mlp", "mild")}
    programs.run("blobs_mlp", fault, seed=0, run_dir=tmp_path / "blobs", probe=True, run_id="blobs-hot")
    trial = find_run_trial(tmp_path / "blobs")
    assert trial is not None and trial.trial == "debugtune.scenarios.programs:replay_trial" and trial.step == 0
    assert {"lr_scale", "clip_grad"} <= set(trial.parameters) and "aux_loss_coeff" not in trial.parameters
    assert "init_std" in programs.trial_parameters("moe_lm") and trial.objectives == ("loss:min",)
    replayed = programs.replay_trial({"clip_grad": 0.5}, checkpoint=trial.checkpoint)
    direct = programs.run("blobs_mlp", {**fault, "grad_clip": 0.5}, seed=0).summary["final_loss"]
    assert replayed["loss"] == direct and replayed["cost"] > 0
    with pytest.raises(ValueError, match="cannot set bias_update_rate"):
        programs.replay_trial({"bias_update_rate": 1e-3}, checkpoint=trial.checkpoint)
    store = str(tmp_path / "store")
    st = open_store(store)
    try:
        load_knowledge(st)
        diagnose(tmp_path / "blobs", store=st, save=False)
    finally:
        st.close()
    r = runner.invoke(tune_app, ["auto", "blobs-hot", "--top-suggestion", "--store", store, "--executor", "inline",
                                 "--max-experiments", "3", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert {p["name"] for p in out["parameters"]} <= set(trial.parameters) and out["objectives"] == ["loss:min"]
    assert out["trials"] and all(t["status"] == "ok" for t in out["trials"]), out["trials"]
