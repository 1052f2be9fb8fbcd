"""What the derivation rules compute before a rule reads it: Megatron-LM's pipeline layout, pipeline split and
conditional rewrites (cases/prevention/derived-megatron-checks.ttl), through the real reader and config graph,
and the SPARQL function the layout derivation calls (engine/prevent/functions.py)."""

from __future__ import annotations

import pyoxigraph as ox
import pytest

from debugtune.engine.prevent.functions import MAX_EXPANDED, expand_repeats
from debugtune.engine.prevent.lint import Linter
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge

_STORE = open_store(None)
load_knowledge(_STORE)
LINTER = Linter.from_store(_STORE)
GROUP, ONE = "[(]([^)]+)[)][*]([0-9]+)", "(.)[*]([0-9]+)"  # the patterns of parse_str_to_list, as the rule writes them


def _unroll(text: str) -> str | None:
    first = expand_repeats(ox.Literal(text.replace(",", "")), ox.Literal(GROUP))
    second = expand_repeats(first, ox.Literal(ONE)) if first is not None else None
    return None if second is None else second.value


@pytest.mark.parametrize(("layout", "unrolled"), [
    # the examples of PipelineParallelLayerLayout.parse_str_to_list (Megatron-LM d98e8a6)
    ("xy(ab|cd|ef)*2,pq", "xyab|cd|efab|cd|efpq"), ("(ab)*3", "ababab"), ("ab,(cd|)*2", "abcd|cd|"),
    ("(|ab)*2,cd", "|ab|abcd"), ("Et*3|(tt|)*6mL", "Ettt|" + "tt|" * 6 + "mL"), ("E|t|L", "E|t|L"),
])
def test_layout_unrolls_as_megatron_parses_it(layout, unrolled):
    assert _unroll(layout) == unrolled


def test_expand_repeats_refuses_what_it_cannot_expand():
    assert expand_repeats(ox.Literal("(t)*3"), ox.Literal("[(")) is None           # not a regular expression
    assert expand_repeats(ox.Literal("t*3"), ox.Literal("(t)[*]")) is None         # no count group
    assert expand_repeats(ox.Literal("t*x"), ox.Literal("(.)[*](x)")) is None      # a count that is no number
    assert expand_repeats(ox.Literal(f"t*{MAX_EXPANDED + 1}"), ox.Literal(ONE)) is None
    assert expand_repeats(ox.NamedNode("urn:x"), ox.Literal(ONE)) is None


def _settings(text: str) -> dict:
    return LINTER.graph(LINTER.read("<derive>", text=text))[1].settings()


def test_layout_gives_stages_and_virtual_pipeline_size():
    s = _settings("--num-layers 2 --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Et|(t|)*1,L|'")
    assert s["pipeline_layout_expanded"] == "Et|t|L|" and s["pipeline_layout_num_stages"] == 4
    assert s["pipeline_layout_vpp_size"] == 2 and s["virtual_pipeline_model_parallel_size"] == 2
    one = _settings("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Et|tL'")
    assert one["pipeline_layout_vpp_size"] == 1 and "virtual_pipeline_model_parallel_size" not in one  # 1 → None
    odd = _settings("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'E|t|tL'")
    assert odd["pipeline_layout_num_stages"] == 3 and "pipeline_layout_vpp_size" not in odd


def test_layout_stages_not_divisible_by_pp_is_refused():
    result = LINTER.lint_path("<x>", text="--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'E|t|tL'")
    assert "MEGA945" in result.rule_ids()
    assert "MEGA945" not in LINTER.lint_path(
        "<x>", text="--pipeline-model-parallel-size 3 --pipeline-model-parallel-layout 'E|t|tL'").rule_ids()


@pytest.mark.parametrize(("args", "vpp"), [
    ("--num-layers 8 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2", 2),
    ("--num-layers 7 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
     "--account-for-embedding-in-pipeline-split", 2),                    # (7 + 1) / 2 / 2
    ("--num-layers 8 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 4", None),  # 1 → None
    ("--num-layers 8 --pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2", 2),
    ("--hybrid-layer-pattern 'M*M*|M*M*|M*M*|M*M*' --pipeline-model-parallel-size 2", 2),  # 4 segments / PP 2
    ("--num-layers 8 --pipeline-model-parallel-size 2", None),
])
def test_virtual_pipeline_size_as_validate_args_sets_it(args, vpp):
    assert _settings(args).get("virtual_pipeline_model_parallel_size") == vpp


def test_pipeline_split_and_uneven_middle_stages():
    s = _settings("--num-layers 6 --pipeline-model-parallel-size 4 --account-for-embedding-in-pipeline-split "
                  "--account-for-loss-in-pipeline-split")
    assert s["pipeline_split_num_layers"] == 8 and s["pipeline_split_layers_per_rank"] == 2
    u = _settings("--num-layers 12 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 2 "
                  "--decoder-last-pipeline-num-layers 2")
    assert (u["pipeline_middle_num_layers"], u["pipeline_middle_stages"], u["pipeline_middle_layers_per_rank"]) == \
        (8, 2, 4)
    assert "pipeline_middle_stages" not in _settings("--num-layers 12 --pipeline-model-parallel-size 4")


def test_conditional_rewrites():
    hybrid = _settings("--num-layers 3 --hybrid-layer-pattern 'M*M*|M-/MM/MM'")
    assert hybrid["num_layers"] == 6 and hybrid["mtp_num_layers_effective"] == 2  # the pattern wins over --num-layers
    s = _settings("--num-experts 0 --fp16 --async-save --moe-expert-capacity-factor -1 --use-mup --hidden-size 64")
    assert "num_experts" not in s and "moe_expert_capacity_factor_effective" not in s
    assert s["check_for_nan_in_loss_and_grad_effective"] is False and s["async_save_effective"] is False
    assert s["use_dist_ckpt"] is True and s["mup_base_hidden_size_effective"] == 64
    kept = _settings("--fp16 --loss-scale 1024 --async-save --ckpt-format torch --moe-expert-capacity-factor 1.5")
    assert kept["check_for_nan_in_loss_and_grad_effective"] is True and kept["async_save_effective"] is True
    assert kept["moe_expert_capacity_factor_effective"] == 1.5
    cp = _settings("--context-parallel-size 2 --cp-comm-type p2p a2a")
    assert cp["cp_comm_type_is_list"] is True and cp["cp_comm_type_is_str"] is False
