# ruff: noqa: UP032, E501  (the lines are built with Megatron's own str.format strings, kept as Megatron writes them)
"""A small Megatron-LM MoE training log, written with Megatron's own format strings.

Formats (NVIDIA/Megatron-LM, main): ``_print_args`` in ``megatron/training/arguments.py`` (``'  {} {} {}'``
with ``'.' * (48 - len(arg))``, sorted case-insensitively, between the ``arguments`` banners); the
``using world size: ...`` line of ``validate_args``; `` > number of parameters on (tensor, pipeline) model
parallel rank ...`` of the model set-up; ``training_log`` in ``megatron/training/training.py`` (the iteration
line, MoE losses through the MoE metrics tracker, printed as ``' {}: {:.6E} |'``); ``Timers.log`` in
``megatron/core/timers.py`` (``'\\n    {}: ({:.2f}, {:.2f})'`` with the name ``ljust(48, '.')``); the
validation line of ``evaluate_and_print_results``. The field order and spacing of a real MoE line are those
of the Mixtral 8x7B log in NVIDIA/Megatron-LM issue #756.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

ARGS = {
    "bf16": True, "fp16": False, "fp8": None, "params_dtype": "torch.bfloat16", "world_size": 16,
    "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "context_parallel_size": 1,
    "expert_model_parallel_size": 4, "expert_tensor_parallel_size": 1, "data_parallel_size": 4,
    "virtual_pipeline_model_parallel_size": 2, "sequence_parallel": True, "num_layers": 8, "hidden_size": 1024,
    "ffn_hidden_size": 3584, "num_attention_heads": 16, "num_query_groups": 4, "seq_length": 4096,
    "max_position_embeddings": 4096, "padded_vocab_size": 32000, "swiglu": True, "num_experts": 8,
    "moe_router_topk": 2, "moe_router_load_balancing_type": "aux_loss", "moe_aux_loss_coeff": 0.01,
    "moe_z_loss_coeff": 0.001, "moe_expert_capacity_factor": None, "moe_token_dispatcher_type": "alltoall",
    "moe_grouped_gemm": True, "moe_router_score_function": "softmax", "moe_per_layer_logging": False,
    "optimizer": "adam", "lr": 3e-4, "min_lr": 3e-5, "lr_decay_style": "cosine", "lr_warmup_iters": 10,
    "lr_decay_iters": 200, "train_iters": 200, "global_batch_size": 256, "micro_batch_size": 1,
    "clip_grad": 1.0, "weight_decay": 0.1, "adam_beta1": 0.9, "adam_beta2": 0.95, "init_method_std": 0.02,
    "seed": 1234, "log_interval": 1, "eval_interval": 40, "loss_scale": None, "initial_loss_scale": 4294967296,
    "data_path": ["/mnt/data/pile/pile_text_document"], "save": "/mnt/ckpt/mixtral", "load": None,
    "tensorboard_dir": "/mnt/tb/mixtral", "moe_layer_freq": 1,
}


def _args_block(args: dict) -> list[str]:
    lines = ["  {} {} {}".format(arg, "." * (48 - len(arg)), value) for arg, value in args.items()]
    return ["------------------------ arguments ------------------------",
            *sorted(lines, key=lambda x: x.lower()),
            "-------------------- end of arguments ---------------------"]


def megatron_moe_log(iterations: int = 120, period: int = 16, nan_at: int | None = 57, timers: bool = True) -> str:
    """The log of a MoE run whose loss oscillates with ``period`` iterations (log interval 1)."""
    out = _args_block(ARGS)
    out.append("using world size: 16, data-parallel size: 4, context-parallel size: 1, hierarchical "
               "context-parallel sizes: None, tensor-model-parallel size: 2, pipeline-model-parallel size: 2")
    for tp in range(2):
        for pp in range(2):
            out.append(" > number of parameters on (tensor, pipeline) model parallel rank ({}, {}): {}".format(
                tp, pp, 412_000_000 + 1_000 * pp))
    t = datetime(2024, 4, 6, 2, 0, 0)
    for it in range(1, iterations + 1):
        t += timedelta(seconds=5.4)
        loss = 7.0 * math.exp(-it / 150) + 0.35 * math.sin(2 * math.pi * it / period) + 2.0
        nan = it == nan_at
        line = f" [{t.strftime('%Y-%m-%d %H:%M:%S')}]"
        line += " iteration {:8d}/{:8d} |".format(it, ARGS["train_iters"])
        line += " consumed samples: {:12d} |".format(it * ARGS["global_batch_size"])
        line += " elapsed time per iteration (ms): {:.1f} |".format(5400.0 + 40 * math.cos(it))
        line += " throughput per GPU (TFLOP/s/GPU): {:.1f} |".format(239.8 - math.cos(it))
        line += " learning rate: {:.6E} |".format(3e-4 * min(1.0, it / 10))
        line += " global batch size: {:5d} |".format(ARGS["global_batch_size"])
        if not nan:
            line += " {}: {:.6E} |".format("lm loss", loss)
            line += " {}: {:.6E} |".format("load_balancing_loss", 1.02 + 0.01 * math.sin(2 * math.pi * it / period))
            line += " {}: {:.6E} |".format("z_loss", 0.03)
        line += " loss scale: {:.1f} |".format(1.0)
        line += " grad norm: {:.3f} |".format(float("nan") if nan else 1.4 + 0.3 * math.sin(2 * math.pi * it / period))
        line += " num zeros: {} |".format(0.0)
        line += " number of skipped iterations: {:3d} |".format(1 if nan else 0)
        line += " number of nan iterations: {:3d} |".format(1 if nan else 0)
        out.append(line)
        if timers and it % 20 == 0:
            out.append("(min, max) time across ranks (ms):")
            for name, lo, hi in (("forward-backward", 5100.0, 5150.0), ("all-grads-sync", 120.0, 180.0),
                                 ("params-all-gather", 20.0, 30.0), ("optimizer", 60.0, 62.5)):
                out.append("    {}: ({:.2f}, {:.2f})".format((name + " ").ljust(48, "."), lo, hi))
        if it % ARGS["eval_interval"] == 0:
            out.append("-" * 100)
            out.append(f" validation loss at iteration {it} | lm loss value: {loss + 0.1:.6E} | "
                       f"lm loss PPL: {math.exp(loss + 0.1):.6E} | ")
            out.append("-" * 100)
    return "\n".join(out) + "\n"
