"""Readers of launch configurations: shell scripts, argument lists, Megatron YAML, DeepSpeed JSON, Hugging
Face TrainingArguments, our YAML; unknown keys are reported, unreadable input names file and position."""

from __future__ import annotations

import json

import pytest

from debugtune.engine.prevent.errors import LintInputError
from debugtune.engine.prevent.lint import Linter
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge

_STORE = open_store(None)
load_knowledge(_STORE)
LINTER = Linter.from_store(_STORE)

SCRIPT = r"""#!/bin/bash
# GPT-3 style launch (after examples/gpt3/train_gpt3_175b_distributed.sh)
export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8
NNODES=${NNODES:-2}
WORLD=$(($GPUS_PER_NODE*$NNODES))
CHECKPOINT_PATH=$1
DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE   # processes per node
    --nnodes $NNODES
)
GPT_MODEL_ARGS=(
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16
    --seq-length 2048 --max-position-embeddings 2048
)
OTHER="--bf16 --lr 3.0e-4 --min-lr 3.0e-5"
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${GPT_MODEL_ARGS[@]} $OTHER \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --micro-batch-size 2 --global-batch-size 64 --train-iters 1000 \
    --save "$CHECKPOINT_PATH" --save-interval 500 --mock-data 2>&1 | tee log.txt
"""


def _graph(text: str, name: str = "x.sh", **kw):
    checked, graph, errors = LINTER.graph(LINTER.read(name, text=text, **kw))
    assert not errors
    return checked, graph.settings()


def _file(folder, name: str, text: str):
    """Write ``text`` to ``folder/name`` and read it back (checked settings and graph values)."""
    (folder / name).write_text(text)
    checked, graph, errors = LINTER.graph(LINTER.read(str(folder / name)))
    assert not errors
    return checked, graph.settings()


def test_launch_script_arrays_arithmetic_and_derived_sizes():
    fallback, values = _graph(SCRIPT)  # NNODES=${NNODES:-2}: a fallback the environment did not confirm
    assert fallback.doc.unresolved["nnodes"] == "${NNODES:-2}" and "world_size" not in values
    checked, values = _graph(SCRIPT, env={"NNODES": "2"})
    doc = checked.doc
    assert doc.source_kind == "launch-script" and doc.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert values["nnodes"] == 2 and values["nproc_per_node"] == 8 and values["world_size"] == 16
    assert values["tensor_model_parallel_size"] == 2 and values["bf16"] is True and values["lr"] == 3e-4
    assert values["data_parallel_size"] == 4 and values["num_micro_batches"] == 8
    assert checked.origin["num_layers"] == "set" and checked.origin["context_parallel_size"] == "default"
    assert doc.lines["num_layers"] == 13 and doc.lines["tensor_model_parallel_size"] == 19
    assert doc.unresolved == {"save": "$1"}
    result = LINTER.lint_path("x.sh", text=SCRIPT, env={"NNODES": "2"})
    assert not result.errors, [v.message for v in result.violations]


def test_environment_from_the_cli_resolves_variables():
    text = "torchrun --nproc_per_node $GPUS pretrain_gpt.py --tensor-model-parallel-size $TP"
    _, values = _graph(text, env={"GPUS": "8", "TP": "3"})
    assert values["world_size"] == 8 and values["tensor_model_parallel_size"] == 3
    result = LINTER.lint_path("x.sh", text=text, env={"GPUS": "8", "TP": "3"})
    assert "MEG001" in result.rule_ids()
    unresolved = LINTER.lint_path("x.sh", text=text)
    assert unresolved.unresolved == {"nproc_per_node": "$GPUS", "tensor_model_parallel_size": "$TP"}
    assert "MEG001" not in unresolved.rule_ids()


def test_world_size_from_environment_and_inline_assignments():
    _, values = _graph("WORLD_SIZE=32 python pretrain_gpt.py --micro-batch-size 1")
    assert values["world_size"] == 32
    _, values = _graph("export NNODES=4 GPUS_PER_NODE=8\npython pretrain_gpt.py --micro-batch-size 1")
    assert values["world_size"] == 32 and values["gpus_per_node"] == 8


def test_argument_list_flags_equals_and_negative_numbers():
    text = "--sequence-parallel\n--no-masked-softmax-fusion\n--moe-expert-capacity-factor=-1\n" \
           "--moe-router-load-balancing-type aux_loss seq_aux_loss --moe-aux-loss-coeff 1e-2 1e-4"
    checked, values = _graph(text, name="args.txt")
    assert checked.doc.source_kind == "args"
    assert values["sequence_parallel"] is True and values["masked_softmax_fusion"] is False
    assert values["moe_expert_capacity_factor"] == -1.0
    assert sorted(values["moe_router_load_balancing_type"]) == ["aux_loss", "seq_aux_loss"]
    assert values["moe_aux_loss_coeff.length"] == 2


def test_megatron_model_args_yaml(tmp_path):
    text = ("ENV_VARS:\n  CUDA_DEVICE_MAX_CONNECTIONS: 1\nMODEL_ARGS:\n  --tensor-model-parallel-size: 2\n"
            "  --use-distributed-optimizer: true\n  --bf16: true\n  --fp16: false\n  --num-experts: 8\n"
            "  --data-path: ${DATA_PATH}/corpus\nTEST_TYPE: release\n")
    checked, values = _file(tmp_path, "model_config.yaml", text)
    assert checked.doc.framework == "megatron" and checked.doc.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert values["use_distributed_optimizer"] is True and values["num_experts"] == 8
    assert checked.doc.lines["tensor_model_parallel_size"] == 4
    assert checked.doc.unresolved == {"data_path": "${DATA_PATH}/corpus"}
    # The CI passes `--fp16: false` as the two words `--fp16 false`: the parser refuses the stray value.
    assert [(i.kind, i.key, i.raw) for i in checked.issues] == [("invalid-value", "fp16", "false")]


def test_megatron_yaml_cfg_sections_and_aliases(tmp_path):
    _, values = _file(tmp_path, "gpt.yaml",
                      "language_model:\n  num_layers: 24\n  num_moe_experts: 8\n  layernorm_epsilon: 1.e-5\n"
                      "  gated_linear_unit: false\nmodel_parallel:\n  tensor_model_parallel_size: 2\n"
                      "micro_batch_size: 2\nlr: 2.5e-4\n")
    assert values["num_experts"] == 8 and values["layernorm_epsilon"] == 1e-5 and values["lr"] == 2.5e-4
    assert values["tensor_model_parallel_size"] == 2 and values["gated_linear_unit"] is False


def test_deepspeed_json_sections_auto_and_duplicates(tmp_path):
    checked, values = _file(tmp_path, "ds.json", json.dumps(
        {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4,
         "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95]}}}, indent=2) + "\n")
    assert checked.doc.framework == "deepspeed"
    assert values["zero_optimization.stage"] == 3 and values["zero_optimization.offload_param.device"] == "cpu"
    assert values["train_batch_size"] == "auto" and values["optimizer.params.lr"] == 1e-4
    assert not checked.issues and checked.doc.lines["zero_optimization.stage"] == 5
    dup = LINTER.lint_path("d.json", text='{"train_micro_batch_size_per_gpu": 1,\n "steps_per_print": 1,\n'
                                          ' "steps_per_print": 2}')
    assert [(v.rule_id, v.line) for v in dup.violations if v.rule_id == "DS104"] == [("DS104", 2)]


def test_hf_training_arguments_with_model_config(tmp_path):
    checked, values = _file(tmp_path, "config.json", json.dumps(
        {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "num_local_experts": 8,
         "num_experts_per_tok": 2}))
    assert checked.doc.framework == "hf" and values["model.num_local_experts"] == 8
    assert values["model.output_router_logits"] is False and not checked.issues
    result = LINTER.lint_path(str(tmp_path / "config.json"))
    assert "HF019" in result.rule_ids()


def test_native_yaml_wraps_a_native_file(tmp_path):
    (tmp_path / "ds.json").write_text('{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 2,\n'
                                      ' "gradient_accumulation_steps": 2}')
    (tmp_path / "job.yaml").write_text("framework: deepspeed\nversion: '0.16.0'\nlaunch: {world_size: 8}\n"
                                       "file: ds.json\nsettings:\n  bf16: {enabled: true}\n")
    result = LINTER.lint_path(str(tmp_path / "job.yaml"))
    assert result.framework == "deepspeed" and result.version == "0.16.0"
    assert "DS001" in result.rule_ids()
    (tmp_path / "ds.json").write_text('{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2,\n'
                                      ' "gradient_accumulation_steps": 2}')
    assert not LINTER.lint_path(str(tmp_path / "job.yaml")).violations


@pytest.mark.parametrize(("name", "text", "rule", "closest"), [
    ("x.sh", "torchrun examples/bert/pretrain_bert.py --tensor-model-paralel-size 2", "MEG100",
     "--tensor-model-parallel-size"),
    ("x.sh", "--tensor-model-paralel-size 2", "MEG105", "--tensor-model-parallel-size"),
    ("d.json", '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "overlap_com": true}}',
     "DS100", "zero_optimization.overlap_comm"),
    ("d.json", '{"train_micro_batch_size_per_gpu": 1, "gradient_clip": 1.0}', "DS101", "gradient_clipping"),
    ("h.json", '{"output_dir": "o", "learnin_rate": 1e-5}', "HF100", "learning_rate"),
])
def test_unknown_keys_are_reported_with_the_closest_known_key(name, text, rule, closest):
    result = LINTER.lint_path(name, text=text)
    hits = [v for v in result.violations if v.rule_id == rule]
    assert len(hits) == 1 and f"did you mean {closest}?" in hits[0].message
    assert {v.rule_id for v in result.violations} & {"MEG100", "MEG105"} <= {rule}
    assert hits[0].keys[0].origin == "issue" and hits[0].line == 1


def test_unknown_key_of_an_older_release_is_version_specific():
    result = LINTER.lint_path("x.sh", text="--moe-router-dtype fp32 --num-experts 8", version="0.11.0")
    assert [v.rule_id for v in result.violations if v.error_class == "version-specific"] == ["MEG103"]
    # An argument the newest release removed: the configuration is linted for the newest release that has it.
    older = LINTER.lint_path("x.sh", text="--use-legacy-models")
    assert older.version == "0.17.0" and "MEG104" not in older.rule_ids() and "removed in 0.18.0" in older.notes[0]
    # No release has both: the newest is linted, and the removed argument is an error there.
    mixed = LINTER.lint_path("x.sh", text="--use-legacy-models --activation-offload-fraction 0.5")
    assert mixed.version is None and "MEG104" in mixed.rule_ids() and "MEG100" not in mixed.rule_ids()


@pytest.mark.parametrize(("name", "text", "line", "column", "words"), [
    ("bad.json", '{"train_batch_size": 8,\n  "zero_optimization": {"stage": 2,}\n}', 2, 36, "invalid JSON"),
    ("bad.yaml", "framework: megatron\nsettings:\n  a: [1, 2\n  b: 3\n", 4, 4, "invalid YAML"),
    ("bad.sh", "torchrun pretrain_gpt.py \\\n  --data-path 'unterminated\n  --lr 1e-4\n", 2, None, "single quote"),
    ("bad.sh", 'ARGS=(\n --lr 1e-4\n', 1, None, "unterminated array"),
    ("bad.yaml", "- just\n- a list\n", 1, None, "expected a mapping"),
    ("what.json", '{"alpha": 1, "beta": 2}', None, None, "cannot tell the framework"),
])
def test_unreadable_config_names_file_and_position(tmp_path, name, text, line, column, words):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(LintInputError) as info:
        LINTER.lint_path(str(path))
    err = info.value
    assert err.path == str(path) and err.line == line and (column is None or err.column == column)
    assert words in str(err) and str(err).startswith(str(path))


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(LintInputError, match="no such file"):
        LINTER.lint_path(str(tmp_path / "absent.sh"))
    (tmp_path / "blob.sh").write_bytes(b"--lr 1\n\xff\xfe\x00")
    with pytest.raises(LintInputError) as info:
        LINTER.lint_path(str(tmp_path / "blob.sh"))
    assert info.value.line == 2
