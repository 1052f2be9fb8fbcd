"""The argument dump at the top of a Megatron-LM log → run.json: world size, parallel sizes, model size, MoE
settings, precision and schedule.

Megatron's ``_print_args`` (``megatron/training/arguments.py``) prints every argument between
``------------------------ arguments ------------------------`` and ``-------------------- end of arguments
---------------------`` as ``  <name> <dots> <value>`` (Python ``str`` of the value: ``None``, ``True``, ``[1, 2]``,
``bf16``); ``validate_args`` prints ``using world size: 8, data-parallel size: 2, ... tensor-model-parallel
size: 2, pipeline-model-parallel size: 2``; the model set-up prints `` > number of parameters on (tensor,
pipeline) model parallel rank (0, 0): 123456``. Names are Megatron's argument names (MindSpeed keeps them).
Paths, hosts and tokens in the dump (``data_path``, ``save``, ``load``, ...) are not copied: run.json holds no
absolute paths.
"""

from __future__ import annotations

import ast
import re
from typing import Any

ARGS_START = re.compile(r"-{3,}\s*arguments\s*-{3,}\s*$")
ARGS_END = re.compile(r"-{3,}\s*end of arguments\s*-{3,}\s*$")
ARG = re.compile(r"^(?:.*?\]:)?\s+([a-z_][a-z0-9_]*) \.{2,} (.*?)\s*$")
WORLD = re.compile(r"using world size:\s*(\d+)(.*)$")
PARAMS = re.compile(r"number of parameters on \(([^)]*)\) model parallel rank \(([^)]*)\):\s*(\d+)")
TOTAL_BILLIONS = re.compile(r"Total number of parameters in billions:\s*([\d.]+)")

# run.json key → Megatron argument, per section
_PARALLEL = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size", "dp": "data_parallel_size",
             "cp": "context_parallel_size", "ep": "expert_model_parallel_size", "etp": "expert_tensor_parallel_size",
             "vpp": "virtual_pipeline_model_parallel_size"}
_MODEL = {"num_layers": "num_layers", "hidden_size": "hidden_size", "ffn_hidden_size": "ffn_hidden_size",
          "num_attention_heads": "num_attention_heads", "num_query_groups": "num_query_groups",
          "seq_length": "seq_length", "max_position_embeddings": "max_position_embeddings",
          "vocab_size": "padded_vocab_size", "normalization": "normalization",
          "position_embedding": "position_embedding_type", "activation": "swiglu"}
_MOE = {"num_experts": "num_experts", "top_k": "moe_router_topk", "router_score_function": "moe_router_score_function",
        "load_balancing": "moe_router_load_balancing_type", "aux_loss_coeff": "moe_aux_loss_coeff",
        "z_loss_coeff": "moe_z_loss_coeff", "capacity_factor": "moe_expert_capacity_factor",
        "token_drop_policy": "moe_token_drop_policy", "pad_to_capacity": "moe_pad_expert_input_to_capacity",
        "token_dispatcher": "moe_token_dispatcher_type", "layer_freq": "moe_layer_freq",
        "grouped_gemm": "moe_grouped_gemm", "shared_expert_size": "moe_shared_expert_intermediate_size",
        "ffn_hidden_size": "moe_ffn_hidden_size", "router_dtype": "moe_router_dtype",
        "router_bias_update_rate": "moe_router_bias_update_rate", "expert_bias": "moe_router_enable_expert_bias",
        "per_layer_logging": "moe_per_layer_logging"}
_SCHEDULE = {"optimizer": "optimizer", "lr": "lr", "min_lr": "min_lr", "lr_decay_style": "lr_decay_style",
             "lr_warmup_iters": "lr_warmup_iters", "lr_warmup_fraction": "lr_warmup_fraction",
             "lr_decay_iters": "lr_decay_iters", "train_iters": "train_iters", "global_batch_size": "global_batch_size",
             "micro_batch_size": "micro_batch_size", "clip_grad": "clip_grad", "weight_decay": "weight_decay",
             "adam_beta1": "adam_beta1", "adam_beta2": "adam_beta2", "adam_eps": "adam_eps",
             "init_method_std": "init_method_std", "seed": "seed", "log_interval": "log_interval",
             "eval_interval": "eval_interval"}
_PRECISION = {"params_dtype": "params_dtype", "fp8_format": "fp8", "initial_loss_scale": "initial_loss_scale",
              "loss_scale": "loss_scale", "loss_scale_window": "loss_scale_window", "hysteresis": "hysteresis",
              "accumulate_allreduce_grads_in_fp32": "accumulate_allreduce_grads_in_fp32"}


def parse_value(text: str) -> Any:
    """A printed argument value back as Python: None, booleans, numbers, lists; anything else the string."""
    text = text.strip()
    if text in ("None", "True", "False") or re.match(r"^[-+]?(\d|\.\d)", text) or text[:1] in "[({":
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
    return text


def world_line(text: str) -> dict[str, int]:
    """The sizes of a ``using world size: ...`` line: world_size plus the '<name> size: N' pairs."""
    m = WORLD.search(text)
    if not m:
        return {}
    out = {"world_size": int(m.group(1))}
    names = {"data-parallel": "data_parallel_size", "tensor-model-parallel": "tensor_model_parallel_size",
             "pipeline-model-parallel": "pipeline_model_parallel_size", "context-parallel": "context_parallel_size",
             "expert-model-parallel": "expert_model_parallel_size"}
    for name, value in re.findall(r"([a-z\-]+) size:\s*(\d+)", m.group(2)):
        if name in names:
            out[names[name]] = int(value)
    return out


def _pick(args: dict[str, Any], table: dict[str, str]) -> dict[str, Any]:
    return {k: args[a] for k, a in table.items() if a in args and args[a] is not None and args[a] is not False}


def run_meta(args: dict[str, Any], params: dict[str, int] | None = None,
             total_billions: float | None = None) -> dict[str, Any]:
    """run.json fields from the parsed arguments, the per-rank parameter counts and the printed total."""
    meta: dict[str, Any] = {}
    parallel = {k: int(v) for k, v in _pick(args, _PARALLEL).items() if isinstance(v, int)}
    world = args.get("world_size")
    if "dp" not in parallel and isinstance(world, int):
        replica = parallel.get("tp", 1) * parallel.get("pp", 1) * parallel.get("cp", 1)
        if replica and world % replica == 0:
            parallel["dp"] = world // replica
    layers_per_stage = args.get("num_layers_per_virtual_pipeline_stage")
    if "vpp" not in parallel and isinstance(layers_per_stage, int) and isinstance(args.get("num_layers"), int):
        parallel["vpp"] = args["num_layers"] // max(parallel.get("pp", 1) * layers_per_stage, 1)
    if args.get("sequence_parallel") is True:
        parallel["sequence_parallel"] = True
    if isinstance(world, int):
        meta["world_size"] = world
    if parallel:
        meta["parallel"] = parallel
    model = _pick(args, _MODEL)
    if model.get("activation") is True:
        model["activation"] = "swiglu"
    if params:
        model["parameters_per_rank"] = params  # "(tensor, pipeline)" rank → count, as Megatron prints them
        if len(params) == parallel.get("tp", 1) * parallel.get("pp", 1):  # every model-parallel rank printed
            model["parameters"] = sum(params.values())
    if total_billions is not None:
        model["parameters"] = int(round(total_billions * 1e9))
    if model:
        meta["model"] = model
    if args.get("num_experts"):
        meta["moe"] = _pick(args, _MOE)
    precision = "fp8" if args.get("fp8") else "bf16" if args.get("bf16") else "fp16" if args.get("fp16") else \
        "fp32" if args else None
    if precision:
        meta["precision"] = {"dtype": precision, **_pick(args, _PRECISION)}
    schedule = _pick(args, _SCHEDULE)
    if schedule:
        meta["schedule"] = schedule
    return meta
