"""Learned rules know their scope, are checked against the valid configurations before they are stored,
and record the run they came from (docs/lint.md, "Learning rules from solved runs")."""

from __future__ import annotations

import json

import pytest

from debugtune.engine.prevent.learn import LearnError, learn_from_run
from debugtune.engine.prevent.lint import Linter
from debugtune.kg import open_store
from debugtune.kg.assertions import replace_diagnosis
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.namespaces import GRAPH_LOCAL, run_base
from debugtune.kg.records import Finding, Hypothesis

DENSE = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 12 --hidden-size 768 --num-attention-heads 12 "
         "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --lr 1e-4 "
         "--bf16 --moe-router-score-function softmax")
MOE = DENSE + " --num-experts 8 --moe-router-topk 2 --moe-aux-loss-coeff 1e-2"


@pytest.fixture
def store():
    st = open_store(None)
    load_knowledge(st)
    return st


def _diagnosed(store, run_id: str, cause: str) -> None:
    finding = Finding(id="f1", symptom="ExpertImbalance", dimension="convergence", entity="layers.3/expert:5",
                      onset_step=100, end_step=900, severity=0.9, evidence={"max_vio": 3.0}, detector="moe.imbalance")
    replace_diagnosis(store, run_id, {"world_size": 8}, [finding], hypotheses=[
        Hypothesis(cause=cause, confidence=0.9, chain=(cause, "ExpertImbalance"), findings=("f1",),
                   explanation="confirmed", rank=1)])


def _json(moe: bool) -> str:
    settings = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 128,
                "max_position_embeddings": 128, "micro_batch_size": 4, "global_batch_size": 4, "lr": 3e-3}
    if moe:
        settings |= {"num_experts": 8, "moe_router_topk": 1, "moe_aux_loss_coeff": 1e-2,
                     "moe_router_enable_expert_bias": False}
    return json.dumps({"framework": "megatron", "launch": {"world_size": 1}, "settings": settings})


def test_a_learned_moe_rule_needs_experts_and_records_its_run(store):
    _diagnosed(store, "router-init", "GateInitBias")
    rule = learn_from_run(store, "router-init")
    # The template kept for the cause: experts with expert-bias balancing stated off, an error, MoE only.
    assert (rule.rule_id, rule.severity) == ("LRN-GateInitBias", "error")
    assert "cfg:num_experts ?scope_experts" in rule.query
    linter = Linter.from_store(store)
    assert rule.rule_id in linter.lint_path("moe.json", text=_json(moe=True)).rule_ids()
    assert rule.rule_id not in linter.lint_path("dense.json", text=_json(moe=False)).rule_ids()
    assert rule.rule_id not in linter.lint_path("moe.sh", text=MOE).rule_ids()  # the default, as Mixtral runs
    rows = store.query(f"""SELECT ?case ?key WHERE {{ GRAPH <{GRAPH_LOCAL}> {{
        ?r dt:ruleId "{rule.rule_id}" ; dt:learnedFromCase ?case ; dt:requiresKey ?key }} }}""").dicts()
    assert rows == [{"case": run_base("router-init"), "key": "num_experts"}]


def test_a_refused_change_gives_way_to_the_remedys_next_one(store):
    _diagnosed(store, "aux-strong", "AuxLossTooStrong")
    rule = learn_from_run(store, "aux-strong", remedy="EnableBiasBalancing")
    # Its first change (expert bias off) is how the valid Mixtral runs: refused; the next one (a softmax score)
    # is learned, for configurations with experts only.
    assert rule.rule_id == "LRN-AuxLossTooStrong-moe_router_score_function"
    linter = Linter.from_store(store)
    assert rule.rule_id not in linter.lint_path("dense.sh", text=DENSE).rule_ids()
    assert rule.rule_id in linter.lint_path("moe.sh", text=MOE).rule_ids()


def test_a_rule_that_fires_on_a_valid_configuration_is_refused(store):
    # Clipping at 1.0 is what the valid GPT-3 reference does: a rule against it is refused, with the reason.
    _diagnosed(store, "lr-high", "LearningRateTooHigh")
    with pytest.raises(LearnError, match="fires on the valid configuration megatron-gpt3-126m.sh"):
        learn_from_run(store, "lr-high", remedy="TightenGradClip")
    assert not store.query(f"ASK {{ GRAPH <{GRAPH_LOCAL}> {{ ?r a dt:PreventionRule }} }}")


def test_the_confidence_floor_comes_from_the_knowledge_base(store):
    store.update('DELETE { GRAPH ?g { ?t ?p ?o } } WHERE { GRAPH ?g { '
                 '?t dt:thresholdKey "prevent.learn_min_confidence" ; ?p ?o } }')
    _diagnosed(store, "no-floor", "GateInitBias")
    with pytest.raises(LearnError, match="prevent.learn_min_confidence"):
        learn_from_run(store, "no-floor")
