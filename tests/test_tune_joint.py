"""Joint targets and the seed chain: the violation is at most 0 exactly when every target is met; the manual
procedure keeps the best value of each knob; the needs-a-search check passes on the seed chain and fails as soon as
a one-shot remedy is substituted (issue 15's seed, where any router re-initialisation fixes the run); a run without
a declared replay point gets one from its training checkpoints (`cann-tune checkpoint`), and its targets come from
its diagnosis."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from debugtune.cli.apps import tune_app
from debugtune.engine.suggest import remedy_details
from debugtune.engine.tune import TuneError, TuneSpec, auto_tune, find_run_trial
from debugtune.engine.tune.baselines import coordinate_search, needs_search, single_remedy_grid
from debugtune.engine.tune.data import Objective
from debugtune.engine.tune.run_trial import record_replay_point, training_checkpoints
from debugtune.engine.tune.targets import VIOLATION, Target, Targets, diagnosis_targets
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.records import TuningParameter
from debugtune.scenarios.moe import replay_trial, seed_scenario, train_moe
from debugtune.scenarios.moe_chain import SAVE_EVERY, healthy_twin, seed_chain, train_chain
from tests.diagnose_helpers import diagnosed_on_disk

runner = CliRunner()
CHAIN_REMEDIES = ("RouterInitRescale", "AddLocalityLoss", "RaiseLearningRate", "RaiseRouterTopK", "EnableAuxLoss")


def _param(name, low, high, default, scale="linear", kind="continuous"):
    return TuningParameter(name=name, kind=kind, scale=scale, low=low, high=high, default=default, choices=())


def test_the_violation_is_the_largest_log_ratio_to_a_bound_and_not_above_zero_only_when_all_are_met():
    t = Targets.parse(["util<=15, cross<=0.15", "gain>=2"])
    assert [str(x) for x in t.items] == ["util<=15", "cross<=0.15", "gain>=2"]
    assert t.violation({"util": 30, "cross": 0.15, "gain": 3}) == pytest.approx(math.log(2))
    assert t.violation({"util": 10, "cross": 0.3, "gain": 1}) == pytest.approx(math.log(2))  # twice over, either way
    assert t.met({"util": 15, "cross": 0.0, "gain": 2}) and not t.met({"util": 15, "cross": 0.1, "gain": 1.9})
    assert t.violation({"util": 10}) is None and t.violation({"util": 30}, partial=True) == pytest.approx(math.log(2))
    assert VIOLATION in t.with_violation({"util": 1, "cross": 0.1, "gain": 5})
    with pytest.raises(TuneError, match="metric<=bound"):
        Targets.parse(["util < 15"])
    with pytest.raises(TuneError, match="twice"):
        Targets((Target("a", 1.0), Target("a", 2.0)))
    with pytest.raises(TuneError, match="positive"):
        Targets.parse(["loss<=0"])


def test_the_manual_procedure_keeps_each_knobs_best_value_before_the_next():
    a, b = _param("a", 0.0, 4.0, 0.0), _param("b", 0.0, 4.0, 0.0)
    seen = []

    def trial(p):
        seen.append(dict(p))
        return {"v": abs(p["a"] - 3) + abs(p["b"] - 1) - 0.5}  # reaches 0 only with a=3 and b=1 together

    res = coordinate_search(trial, [a, b], Objective("v"), 0.0)
    # 5 values of a; then b with a kept at 3: b=0 was tried already, b=1 meets the target
    assert res.experiments == 6 and seen[-1] == {"a": 3.0, "b": 1.0}


def _joint_trial(one_shot: bool):
    """A landscape in which only two knobs together meet both targets; ``one_shot`` swaps in a remedy whose knob
    alone does (issue 15's seed)."""

    def trial(p):
        x, y = float(p.get("x", 0.0)), float(p.get("y", 0.0))
        fix = float(p.get("fix", 0.0))
        if one_shot and fix >= 0.5:
            return {"bal": 1.0, "loc": 0.01}
        return {"bal": 20 - 15 * x, "loc": 0.4 - 0.35 * y + 0.1 * x}

    return trial


def test_the_needs_a_search_check_passes_on_a_joint_problem_and_fails_when_a_one_shot_remedy_is_substituted():
    targets = Targets.parse(["bal<=10, loc<=0.15"])
    remedies = {"X": [_param("x", 0.0, 1.0, 0.0)], "Y": [_param("y", 0.0, 1.0, 0.0)]}
    n, found = needs_search(_joint_trial(False), remedies, targets.met)
    assert n == 10 and found == []
    assert targets.met(_joint_trial(False)({"x": 0.75, "y": 1.0}))  # the joint fix exists
    n, found = needs_search(_joint_trial(True), {**remedies, "Fix": [_param("fix", 0.0, 1.0, 0.0)]}, targets.met)
    assert [f.remedy for f in found] == ["Fix", "Fix", "Fix"]  # 0.5, 0.75, 1.0 of its grid fix the run alone


def test_a_one_shot_remedy_fails_the_check_on_the_old_seed_scenario(tmp_path):
    """Issue 15's seed: RouterInitRescale reaches its story target at any value of its range: the check says so."""
    torch.set_num_threads(1)
    train_moe(seed_scenario(steps=4), tmp_path / "old-seed", probe=True, run_id="old-seed")
    trial = find_run_trial(tmp_path / "old-seed")
    assert trial is not None
    st = open_store(None)
    try:
        load_knowledge(st)
        params = {"RouterInitRescale": remedy_details(st, "RouterInitRescale").parameters}
    finally:
        st.close()
    n, found = needs_search(lambda p: replay_trial(p, checkpoint=trial.checkpoint), params,
                            Targets.parse(["expert_util_std<=15"]).met)
    assert n == len(single_remedy_grid(params["RouterInitRescale"])) and len(found) == n


@pytest.fixture(scope="module")
def chain_run(tmp_path_factory):
    """A short seed chain run (its first two training checkpoints), diagnosed into an on-disk store."""
    root = tmp_path_factory.mktemp("chain")
    run_dir = root / "chain-run"
    store, run, report = diagnosed_on_disk(
        root, run_dir, lambda d: train_chain(seed_chain(seed=1), d, run_id="chain-run", steps=SAVE_EVERY + 40))
    return {"dir": run_dir, "store": store, "run": run, "symptoms": {f.symptom for f in report.findings},
            "report": report}


def test_the_chain_s_diagnosis_finds_the_gate_s_gradient_vanished_from_the_start(chain_run):
    """The saturated gate's gradient is a few percent of the layers' norm (the plain ratio does not call it
    vanished) but a thousandth of theirs against its own weights: RouterGradVanishing from step 0, in the root
    cause's chain right after the gate's own init finding and before every later symptom of the story."""
    report = chain_run["report"]
    found = next(f for f in report.findings if f.symptom == "RouterGradVanishing")
    assert found.onset_step == 0
    assert found.evidence["scaled_relative_to_layers"] < 0.01 < found.evidence["relative_to_layers"]
    top = report.hypotheses[0]
    assert top.cause == "GateInitBias"
    chain = [s for s in top.chain[1:] if s != "RouterBiasedAtInit"]
    assert chain[0] == "RouterGradVanishing", top.chain


def test_the_chain_run_declares_no_replay_point_until_the_checkpoint_command_records_one(chain_run):
    assert find_run_trial(chain_run["dir"]) is None
    assert sorted(training_checkpoints(chain_run["dir"])) == [0, SAVE_EVERY]
    res = runner.invoke(tune_app, ["checkpoint", chain_run["run"], "--step", str(SAVE_EVERY + 10), "--store",
                                   chain_run["store"], "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["step"] == SAVE_EVERY and out["trial"] == "debugtune.scenarios.moe_chain:replay_trial"
    trial = find_run_trial(chain_run["dir"])
    assert trial is not None and "locality_coeff" in trial.parameters
    bad = runner.invoke(tune_app, ["checkpoint", chain_run["run"], "--step", "5", "--run-dir",
                                   str(chain_run["dir"] / "nowhere")])
    assert bad.exit_code != 0 and "no training checkpoint at or before step 5" in str(bad.exception)


def test_the_chain_replay_reports_the_three_target_figures_against_the_healthy_twin(chain_run):
    trial = record_replay_point(chain_run["dir"], SAVE_EVERY)
    assert healthy_twin(seed_chain(1)).gate_init_std == 0.02
    before = replay_trial_chain({}, trial.checkpoint)
    again = replay_trial_chain({}, trial.checkpoint)
    before.pop("cost"), again.pop("cost")  # wall time
    assert before == again  # the replay and the healthy reference are deterministic
    assert before["cross_cabinet_share"] > 0.15 and before["expert_util_std"] > 0 and before["loss_ratio"] > 0
    targets = diagnosis_targets(open_store(chain_run["store"]), chain_run["symptoms"])
    assert "CrossCabinetTraffic" in chain_run["symptoms"]
    assert {t.metric for t in targets.items} == {"cross_cabinet_share", "expert_util_std", "loss_ratio"}
    assert not targets.met(before)


def replay_trial_chain(params, checkpoint):
    from debugtune.scenarios.moe_chain import replay_trial as chain_trial

    return chain_trial(params, checkpoint=checkpoint)


def test_a_joint_tuning_tunes_the_union_of_the_remedies_to_the_diagnosis_targets(chain_run):
    record_replay_point(chain_run["dir"], SAVE_EVERY)
    st = open_store(chain_run["store"])
    try:
        targets = diagnosis_targets(st, chain_run["symptoms"])
        res = auto_tune(st, chain_run["run"], None, TuneSpec(remedies=CHAIN_REMEDIES, targets=targets,
                                                             max_experiments=2, executor="inline", record=True))
        assert res.space.names == ("init_std", "locality_coeff", "lr_scale", "topk", "aux_loss_coeff")
        assert res.result.objectives[0].name == VIOLATION and len(res.result.trials) == 2
        assert all(VIOLATION in t.values for t in res.result.trials)
        assert res.as_dict()["remedies"] == list(CHAIN_REMEDIES) and len(res.recorded) == 2
        with pytest.raises(TuneError, match="suggestion"):
            auto_tune(st, chain_run["run"], None, TuneSpec(suggestions=(1, 99), targets=targets, executor="inline"))
    finally:
        st.close()
