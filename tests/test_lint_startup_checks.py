"""The four start-up failures and silent settings of issue 35, each linted in the form a user writes it, on
both sides of the rule and of its version range (the rules' own examples are in tests/test_lint_rules.py)."""

from __future__ import annotations

import json

import pytest

from debugtune.engine.prevent.lint import Linter
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge

_STORE = open_store(None)
load_knowledge(_STORE)
LINTER = Linter.from_store(_STORE)


def _found(text: str, *, framework: str = "auto", version: str | None = None, path: str = "<cfg>") -> dict[str, str]:
    result = LINTER.lint_path(path, framework=framework, text=text, version=version)
    assert not result.rule_errors, result.rule_errors
    return {v.rule_id: v.severity for v in result.violations}


def _ds(zero: dict, **top) -> str:
    return json.dumps({"train_micro_batch_size_per_gpu": 1, **top, "zero_optimization": zero})


@pytest.mark.parametrize("zero", [{"stage": 2, "offload_param": {"device": "cpu"}},
                                  {"stage": 1, "offload_param": {"device": "nvme", "nvme_path": "/nvme"}},
                                  {"stage": 2, "cpu_offload_param": True}])
def test_parameter_offload_below_stage_3_is_a_warning(zero):
    assert _found(_ds(zero)).get("DS014") == "warning"


@pytest.mark.parametrize("zero", [
    {"stage": 3, "offload_param": {"device": "cpu"}}, {"stage": 3, "cpu_offload_param": True},
    {"stage": 2, "offload_optimizer": {"device": "cpu"}}, {"stage": 2, "offload_param": {"device": "none"}}])
def test_parameter_offload_where_it_works_or_is_off_is_quiet(zero):
    assert "DS014" not in _found(_ds(zero))


def _mds(extra: str) -> str:
    return ("deepspeed pretrain_gpt.py --num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
            "--max-position-embeddings 2048 --micro-batch-size 2 --global-batch-size 64 --deepspeed "
            "--deepspeed_config ds_config.json " + extra)


@pytest.mark.parametrize("extra", ["--zero-stage 2", "--zero-stage 3 --pipeline-model-parallel-size 1",
                                   "--zero-stage 2 --pipeline-model-parallel-size 2"])
def test_megatron_deepspeed_zero2_under_the_pipeline_engine_is_an_error(extra):
    assert _found(_mds(extra), path="run.sh").get("MEG083") == "error"


@pytest.mark.parametrize("extra", ["--zero-stage 2 --no-pipeline-parallel", "--zero-stage 1", ""])
def test_megatron_deepspeed_without_the_pipeline_engine_or_with_zero1_is_quiet(extra):
    assert "MEG083" not in _found(_mds(extra), path="run.sh")


def test_megatron_deepspeed_arguments_are_unknown_to_a_megatron_lm_launch():
    """Without --deepspeed the script is Megatron-LM's: --zero-stage is no argument of it (MEG105), and MEG083
    has nothing to judge."""
    text = _mds("--zero-stage 2").replace(" --deepspeed ", " ")
    result = LINTER.lint_path("run.sh", text=text)
    unknown = [v.message for v in result.violations if v.rule_id == "MEG105"]
    assert any("--zero-stage" in m for m in unknown) and "MEG083" not in result.rule_ids()


def _client(opt: str, **zero_extra) -> str:
    settings = {"train_micro_batch_size_per_gpu": 1, "client_optimizer": opt,
                "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, **zero_extra}}
    return "framework: deepspeed\nsettings: " + json.dumps(settings)


@pytest.mark.parametrize(("version", "opt", "expected"), [
    (None, "AdamW", {"DS018": "error"}), ("0.18.0", "AdamW", {"DS018": "error"}),
    ("0.17.6", "DeepSpeedCPULion", {}), ("0.17.5", "DeepSpeedCPULion", {"DS049": "error"}),
    ("0.8.3", "AdamW", {"DS049": "error"}), ("0.8.2", "AdamW", {"DS050": "warning"}),
    ("0.12.0", "DeepSpeedCPUAdam", {}), ("0.8.2", "DeepSpeedCPUAdam", {})])
def test_zero_offload_client_optimizer_by_release(version, opt, expected):
    found = _found(_client(opt), version=version)
    assert {k: v for k, v in found.items() if k in ("DS018", "DS049", "DS050")} == expected


def test_zero_offload_client_optimizer_allowed_when_not_forced():
    assert "DS049" in _found(_client("AdamW"), version="0.16.0")  # forced (the default): refused
    text = _client("AdamW").replace('"client_optimizer"', '"zero_force_ds_cpu_optimizer": false, "client_optimizer"')
    assert _found(text, version="0.16.0").keys().isdisjoint({"DS018", "DS049", "DS050"})


def test_zero_offload_version_from_the_config_itself():
    text = _client("DeepSpeedCPULion").replace("framework: deepspeed", 'framework: deepspeed\nversion: "0.16.0"')
    assert _found(text).get("DS049") == "error" and "DS049" not in _found(_client("DeepSpeedCPULion"))


_LAST = "--num-layers 20 --decoder-last-pipeline-num-layers 1"


@pytest.mark.parametrize(("version", "rule", "severity"), [
    (None, "MEG074", "error"), ("0.16.0", "MEG074", "error"), ("0.15.0", "MEG081", "warning"),
    ("0.12.0", "MEG081", "warning")])
def test_last_stage_override_with_one_stage_by_release(version, rule, severity):
    found = _found(_LAST, framework="megatron", version=version)
    assert found.get(rule) == severity
    assert not ({"MEG074", "MEG081", "MEG082"} - {rule}) & found.keys()


def test_both_overrides_with_one_stage_pass_the_new_check_but_still_shrink_the_model():
    found = _found("--num-layers 20 --decoder-first-pipeline-num-layers 1 --decoder-last-pipeline-num-layers 1",
                   framework="megatron")
    assert found.get("MEG082") == "warning" and "MEG074" not in found and "MEGT2342" not in found


@pytest.mark.parametrize("version", [None, "0.15.0"])
@pytest.mark.parametrize("args", [
    "--num-layers 20 --decoder-last-pipeline-num-layers 20",
    "--num-layers 20 --pipeline-model-parallel-size 4 --decoder-last-pipeline-num-layers 2"])
def test_stage_overrides_that_build_the_stated_model_are_quiet(args, version):
    assert not {"MEG074", "MEG081", "MEG082"} & _found(args, framework="megatron", version=version).keys()
