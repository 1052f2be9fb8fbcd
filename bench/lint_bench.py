"""Interception benchmark of the pre-launch linter (docs/lint.md).

Builds valid launch configurations written from the frameworks' documented examples (Megatron-LM GPT-3,
Llama 2/3, Mixtral, DeepSeek-V2/V3, Qwen3 and GPT-OSS-style MoE; DeepSpeed ZeRO 0-3 with and without CPU/NVMe
offload; Hugging Face Trainer fine-tuning), then breaks them by mutation. Every mutation operator below is
written from a documented constraint (the Megatron/DeepSpeed/transformers checks, the MoE papers) and checks
with its own Python predicate that the mutant really breaks it; none reads the rule queries. Each mutant is
labelled with its error class.

Prints interception recall per class and overall (a mutant is intercepted when the linter reports a
violation of its class; "any" counts a violation of any class), false alarms on the valid set, and lint time
per configuration next to the time to only read the same files (the peer: parsing without checking).

    python bench/lint_bench.py [--mutants-per-op N] [--seed S] [--json]

Figures depend on the machine and its load; rerun for the numbers you report.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import random
import re
import shlex
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from debugtune.engine.prevent.errors import LintInputError
from debugtune.engine.prevent.lint import Linter
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge

CLASSES = ("parallel-divisibility", "batch-arithmetic", "mutual-exclusion", "missing-requirement", "moe-routing",
           "precision", "version-specific", "value-range")
CHECK_MUTANTS = Path(__file__).resolve().parent / "lint_check_mutants.tsv"


# ---------------------------------------------------------------------------------------------------------
# Configuration specs and their rendering into real files
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Spec:
    name: str
    framework: str
    fmt: str                     # megatron: script | args | model_args | native; deepspeed: json | native; hf: json
    args: dict[str, Any]         # megatron: option (no dashes) -> value/True; deepspeed: JSON; hf: TrainingArguments
    launch: dict[str, int] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    version: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)   # deepspeed: settings given in code (moe, pp); hf: model

    def world(self) -> int:
        return self.launch.get("nnodes", 1) * self.launch.get("nproc_per_node", 1)


def render(spec: Spec, folder: Path) -> tuple[Path, dict[str, str]]:
    """Write the spec as the file a user would lint; returns the path and the launch environment to pass."""
    env = dict(spec.env)
    if spec.framework == "megatron":
        words = []
        for opt, value in spec.args.items():
            if value is True:
                words.append(f"--{opt}")
            elif isinstance(value, list):
                words.append(f"--{opt} " + " ".join(map(str, value)))
            else:
                words.append(f"--{opt} {value}")
        if spec.fmt == "script":
            path = folder / f"{spec.name}.sh"
            groups = [words[i:i + 6] for i in range(0, len(words), 6)]
            arrays = "\n".join(f"ARGS_{i}=(\n    " + "\n    ".join(g) + "\n)" for i, g in enumerate(groups))
            exports = "".join(f"export {k}={v}\n" for k, v in spec.env.items())
            path.write_text(
                f"#!/bin/bash\n# {spec.name}\n{exports}GPUS_PER_NODE={spec.launch['nproc_per_node']}\n"
                f"NNODES={spec.launch['nnodes']}\nDISTRIBUTED_ARGS=(--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES "
                f"--master_addr $MASTER_ADDR --master_port 6000)\n{arrays}\n"
                "torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \\\n    "
                + " \\\n    ".join(f"${{ARGS_{i}[@]}}" for i in range(len(groups))) + "\n")
            return path, {}
        if spec.fmt == "args":
            path = folder / f"{spec.name}.args"
            path.write_text("\n".join(words) + "\n")
            env.update(WORLD_SIZE=str(spec.world()), GPUS_PER_NODE=str(spec.launch["nproc_per_node"]))
            return path, env
        if spec.fmt == "model_args":
            path = folder / f"{spec.name}.yaml"
            # lists as Megatron's CI writes them: "[a b]" (the runner strips the brackets and splits)
            model_args = {f"--{k}": ("[" + " ".join(map(str, v)) + "]" if isinstance(v, list) else v)
                          for k, v in spec.args.items()}
            path.write_text(yaml.safe_dump({"ENV_VARS": spec.env, "TEST_TYPE": "release", "MODEL_ARGS": model_args},
                                           sort_keys=False))
            env.update(WORLD_SIZE=str(spec.world()), GPUS_PER_NODE=str(spec.launch["nproc_per_node"]))
            return path, env
        path = folder / f"{spec.name}.yaml"
        doc: dict[str, Any] = {"framework": "megatron"}
        if spec.version:
            doc["version"] = spec.version
        doc.update({"env": spec.env, "launch": spec.launch, "args": " ".join(words)})
        if spec.extra.get("settings"):
            doc["settings"] = spec.extra["settings"]  # config fields a --yaml-cfg sets
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path, {}
    if spec.framework == "deepspeed":
        settings = {**copy.deepcopy(spec.args), **copy.deepcopy(spec.extra)}
        if spec.fmt == "json" and not spec.extra:
            path = folder / f"{spec.name}.json"
            path.write_text(json.dumps(spec.args, indent=2) + "\n")
            env["WORLD_SIZE"] = str(spec.world())
            return path, env
        path = folder / f"{spec.name}.yaml"
        doc = {"framework": "deepspeed", **({"version": spec.version} if spec.version else {}),
               "launch": {"world_size": spec.world()}, "settings": settings}
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path, env
    data = {**spec.args, **({"model_config": spec.extra} if spec.extra else {})}
    if spec.version:
        path = folder / f"{spec.name}.yaml"
        path.write_text(yaml.safe_dump({"framework": "hf", "version": spec.version,
                                        "launch": {"world_size": spec.world()}, "settings": data}, sort_keys=False))
        return path, env
    path = folder / f"{spec.name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    env["WORLD_SIZE"] = str(spec.world())
    return path, env


# ---------------------------------------------------------------------------------------------------------
# Valid configurations (from the documented examples)
# ---------------------------------------------------------------------------------------------------------
# name, layers, hidden, heads, query groups (None = MHA), ffn (None = default), seq, llama-style, MoE settings
ARCHS: list[tuple[str, int, int, int, int | None, int | None, int, bool, dict[str, Any]]] = [
    ("gpt3-126m", 12, 768, 12, None, None, 2048, False, {}),              # Megatron GPT-3 small
    ("gpt3-350m", 24, 1024, 16, None, None, 2048, False, {}),
    ("gpt3-1.3b", 24, 2048, 16, None, None, 2048, False, {}),
    ("gpt3-2.7b", 32, 2560, 32, None, None, 2048, False, {}),
    ("gpt3-6.7b", 32, 4096, 32, None, None, 2048, False, {}),
    ("gpt3-13b", 40, 5120, 40, None, None, 2048, False, {}),
    ("gpt3-175b", 96, 12288, 96, None, None, 2048, False, {}),            # examples/gpt3/train_gpt3_175b_distributed.sh
    ("llama2-7b", 32, 4096, 32, None, 11008, 4096, True, {}),
    ("llama2-13b", 40, 5120, 40, None, 13824, 4096, True, {}),
    ("llama2-70b", 80, 8192, 64, 8, 28672, 4096, True, {}),
    ("llama3-8b", 32, 4096, 32, 8, 14336, 8192, True, {}),
    ("llama3-70b", 80, 8192, 64, 8, 28672, 8192, True, {}),
    ("mixtral-8x7b", 32, 4096, 32, 8, 14336, 4096, True,                   # examples/mixtral
     {"num-experts": 8, "moe-router-topk": 2, "moe-aux-loss-coeff": 1e-2, "moe-grouped-gemm": True}),
    ("mixtral-8x22b", 56, 6144, 48, 8, 16384, 4096, True,
     {"num-experts": 8, "moe-router-topk": 2, "moe-aux-loss-coeff": 1e-2, "moe-grouped-gemm": True}),
    ("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 4096, True,                   # modelopt Qwen3 config
     {"num-experts": 128, "moe-router-topk": 8, "moe-ffn-hidden-size": 768, "moe-aux-loss-coeff": 1e-3,
      "moe-router-dtype": "fp32", "moe-grouped-gemm": True}),
    ("gpt-oss-style", 24, 2880, 64, 8, 2880, 4096, True,                   # examples/gptoss/02_train.sh
     {"num-experts": 32, "moe-router-topk": 4, "moe-aux-loss-coeff": 1e-3, "moe-z-loss-coeff": 1e-3,
      "moe-router-dtype": "fp32", "moe-grouped-gemm": True}),
    ("deepseek-v3-proxy", 16, 7168, 128, None, 18432, 4096, True,          # functional test deepseekv3_proxy
     {"num-experts": 64, "moe-router-topk": 8, "moe-ffn-hidden-size": 2048,
      "moe-shared-expert-intermediate-size": 2048, "moe-router-load-balancing-type": "seq_aux_loss",
      "moe-aux-loss-coeff": 1e-4, "moe-router-score-function": "sigmoid", "moe-router-enable-expert-bias": True,
      "moe-router-bias-update-rate": 1e-3, "moe-router-num-groups": 8, "moe-router-group-topk": 4,
      "moe-router-topk-scaling-factor": 2.5, "moe-router-dtype": "fp32", "moe-grouped-gemm": True,
      "multi-latent-attention": True, "q-lora-rank": 1536, "kv-lora-rank": 512}),
    ("deepseek-v2-lite", 26, 2048, 16, None, 10944, 4096, True,
     {"num-experts": 64, "moe-router-topk": 6, "moe-ffn-hidden-size": 1408, "moe-router-load-balancing-type":
      "seq_aux_loss", "moe-aux-loss-coeff": 1e-3, "moe-router-dtype": "fp32", "moe-z-loss-coeff": 1e-3,
      "moe-grouped-gemm": True}),
]

# (nnodes, gpus per node, TP, PP, CP, EP, micro batch, global batch)
LAYOUTS = {
    "dense": [(1, 8, 1, 1, 1, 1, 4, 256), (2, 8, 2, 2, 1, 1, 2, 512), (4, 8, 4, 2, 2, 1, 1, 256),
              (8, 8, 8, 4, 1, 1, 1, 1024)],
    "moe": [(1, 8, 1, 1, 1, 8, 1, 64), (2, 8, 2, 2, 1, 4, 1, 256), (4, 8, 2, 4, 1, 8, 1, 512),
            (8, 8, 4, 4, 1, 8, 1, 1024)],
}
FORMATS = ("script", "args", "model_args", "native")


def _divides(a: int, b: int) -> bool:
    return b % a == 0


def megatron_constraints(s: Spec) -> list[str]:
    """The documented constraints of a Megatron-LM launch (the bench's own model of them)."""
    a = s.args
    tp, pp, cp = a.get("tensor-model-parallel-size", 1), a.get("pipeline-model-parallel-size", 1), \
        a.get("context-parallel-size", 1)
    ep, world = a.get("expert-model-parallel-size", 1), s.world()
    etp = a.get("expert-tensor-parallel-size", tp)
    broken = []
    if not _divides(tp * pp * cp, world):
        broken.append("world % (tp*pp*cp)")
    if not _divides(etp * ep * pp, world):
        broken.append("world % (etp*ep*pp)")
    if a["num-attention-heads"] % tp:
        broken.append("heads % tp")
    groups = a.get("num-query-groups")
    if groups and groups % tp and tp % groups:
        broken.append("groups vs tp")
    if a.get("ffn-hidden-size") and a["ffn-hidden-size"] % tp:
        broken.append("ffn % tp")
    if a["num-layers"] % pp:
        broken.append("layers % pp")
    if cp > 1 and a["seq-length"] % (2 * cp):
        broken.append("seq % 2cp")
    dp = world // (tp * pp * cp) if _divides(tp * pp * cp, world) else None
    if dp and a["global-batch-size"] % (a["micro-batch-size"] * dp):
        broken.append("gbs % (mbs*dp)")
    if a.get("num-experts") and ep > 1 and a["num-experts"] % ep:
        broken.append("experts % ep")
    if a.get("num-experts") and a.get("moe-router-topk", 2) > a["num-experts"]:
        broken.append("topk > experts")
    if a.get("fp16") and a.get("bf16"):
        broken.append("fp16 & bf16")
    return broken


def megatron_valid() -> list[Spec]:
    out = []
    for i, (name, layers, hidden, heads, groups, ffn, seq, llama, moe) in enumerate(ARCHS):
        for j, (nn, g, tp, pp, cp, ep, mbs, gbs) in enumerate(LAYOUTS["moe" if moe else "dense"]):
            if (i + j) % 2 and len(out) >= 2 * i + 1:
                continue
            if heads % tp or layers % pp or (groups and groups % tp and tp % groups) or (ffn and ffn % tp):
                continue
            a: dict[str, Any] = {
                "num-layers": layers, "hidden-size": hidden, "num-attention-heads": heads, "seq-length": seq,
                "max-position-embeddings": seq, "micro-batch-size": mbs, "global-batch-size": gbs,
                "tensor-model-parallel-size": tp, "pipeline-model-parallel-size": pp,
                "lr": 3.0e-4, "min-lr": 3.0e-5, "lr-decay-style": "cosine", "lr-warmup-iters": 2000,
                "train-iters": 500000, "weight-decay": 0.1, "clip-grad": 1.0, "bf16": True,
                "use-distributed-optimizer": True, "overlap-grad-reduce": True, "overlap-param-gather": True,
                "data-path": "/data/corpus_text_document", "split": "949,50,1",
                "save": "/ckpt/" + name, "save-interval": 1000, "log-interval": 10,
            }
            if cp > 1:
                a["context-parallel-size"] = cp
            if tp > 1:
                a["sequence-parallel"] = True
            if groups:
                a.update({"group-query-attention": True, "num-query-groups": groups})
            if ffn:
                a["ffn-hidden-size"] = ffn
            if llama:
                a.update({"swiglu": True, "normalization": "RMSNorm", "position-embedding-type": "rope",
                          "untie-embeddings-and-output-weights": True, "disable-bias-linear": True})
            if moe:
                a.update(moe)
                a.update({"expert-model-parallel-size": ep, "expert-tensor-parallel-size": 1,
                          "moe-token-dispatcher-type": "alltoall", "disable-bias-linear": True})
                if moe.get("multi-latent-attention"):
                    a.pop("group-query-attention", None)
                    a.pop("num-query-groups", None)
            dp = nn * g // (tp * pp * cp)
            while a["global-batch-size"] // (mbs * dp) < 2 * pp:
                a["global-batch-size"] *= 2
            spec = Spec(f"{name}-{nn}x{g}-tp{tp}pp{pp}cp{cp}ep{ep}", "megatron", FORMATS[(i + j) % 4], a,
                        {"nnodes": nn, "nproc_per_node": g},
                        {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if (tp > 1 or cp > 1) else {})
            assert not megatron_constraints(spec), (spec.name, megatron_constraints(spec))
            out.append(spec)
    return out


def deepspeed_valid() -> list[Spec]:
    """ZeRO 0-3, with and without CPU/NVMe offload, bf16 or fp16 (docs/_pages/config-json.md examples)."""
    out = []
    variants = [
        (0, None, None, "bf16"), (1, None, None, "bf16"), (1, "cpu", None, "fp16"), (2, None, None, "bf16"),
        (2, "cpu", None, "bf16"), (2, None, None, "fp16"), (3, None, None, "bf16"), (3, "cpu", "cpu", "bf16"),
        (3, "nvme", "nvme", "bf16"), (3, "cpu", None, "fp16"), (3, None, "cpu", "bf16"), (2, "cpu", None, "fp16"),
    ]
    for i, (stage, opt_off, param_off, precision) in enumerate(variants):
        world = (8, 16, 32, 64)[i % 4]
        micro, gas = (4, 2, 1, 8)[i % 4], (2, 4, 8, 1)[i % 4]
        cfg: dict[str, Any] = {
            "train_batch_size": micro * gas * world, "train_micro_batch_size_per_gpu": micro,
            "gradient_accumulation_steps": gas, "gradient_clipping": 1.0, "steps_per_print": 100,
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                                      "weight_decay": 0.1}},
            "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4,
                                                              "warmup_num_steps": 1000, "total_num_steps": 100000}},
            "zero_optimization": {"stage": stage},
            "wall_clock_breakdown": False,
        }
        if precision == "bf16":
            cfg["bf16"] = {"enabled": True}
        else:
            cfg["fp16"] = {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                           "hysteresis": 2, "min_loss_scale": 1}
        z = cfg["zero_optimization"]
        if stage >= 1:
            z.update({"reduce_bucket_size": 500000000, "allgather_bucket_size": 500000000,
                      "overlap_comm": True, "contiguous_gradients": True})
        if stage == 3:
            z.update({"stage3_prefetch_bucket_size": 50000000, "stage3_param_persistence_threshold": 100000,
                      "stage3_max_live_parameters": 1000000000, "stage3_gather_16bit_weights_on_model_save": True})
        if opt_off:
            z["offload_optimizer"] = {"device": opt_off, "pin_memory": True,
                                      **({"nvme_path": "/local_nvme"} if opt_off == "nvme" else {})}
        if param_off:
            z["offload_param"] = {"device": param_off, "pin_memory": True,
                                  **({"nvme_path": "/local_nvme"} if param_off == "nvme" else {})}
        extra: dict[str, Any] = {}
        if i % 3 == 2 and stage in (1, 2):
            extra = {"moe": {"num_experts": 8, "ep_size": 4, "k": 2, "capacity_factor": 1.25,
                             "split_params_for_optimizer": True}}
        out.append(Spec(f"ds-zero{stage}-{opt_off or 'nooff'}-{param_off or 'nop'}-{precision}-{i}", "deepspeed",
                        "json" if i % 2 == 0 else "native", cfg, {"nnodes": world // 8, "nproc_per_node": 8},
                        extra=extra))
    return out


def hf_valid() -> list[Spec]:
    """Trainer fine-tuning setups (transformers docs: TrainingArguments, Mixtral/OLMoE configs)."""
    base = {"output_dir": "out", "per_device_train_batch_size": 8, "gradient_accumulation_steps": 4,
            "learning_rate": 2e-5, "num_train_epochs": 3, "warmup_ratio": 0.03, "lr_scheduler_type": "cosine",
            "logging_steps": 10, "save_strategy": "steps", "save_steps": 500, "bf16": True, "report_to": "none"}
    out = [
        Spec("hf-sft", "hf", "json", dict(base), {"nnodes": 1, "nproc_per_node": 8}),
        Spec("hf-eval-best", "hf", "json", {**base, "eval_strategy": "steps", "eval_steps": 250,
                                            "load_best_model_at_end": True, "metric_for_best_model": "eval_loss"},
             {"nnodes": 1, "nproc_per_node": 8}),
        Spec("hf-epoch", "hf", "json", {**base, "eval_strategy": "epoch", "save_strategy": "epoch",
                                        "load_best_model_at_end": True}, {"nnodes": 2, "nproc_per_node": 8}),
        Spec("hf-fsdp", "hf", "json", {**base, "fsdp": "full_shard auto_wrap", "gradient_checkpointing": True,
                                       "dataloader_num_workers": 4, "dataloader_prefetch_factor": 2},
             {"nnodes": 2, "nproc_per_node": 8}),
        Spec("hf-mixtral", "hf", "json", dict(base), {"nnodes": 1, "nproc_per_node": 8},
             extra={"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2,
                    "output_router_logits": True, "router_aux_loss_coef": 0.02}),
        Spec("hf-olmoe", "hf", "json", {**base, "max_steps": 10000}, {"nnodes": 1, "nproc_per_node": 8},
             extra={"model_type": "olmoe", "num_experts": 64, "num_experts_per_tok": 8, "norm_topk_prob": False,
                    "output_router_logits": True, "router_aux_loss_coef": 0.01}),
        Spec("hf-old-release", "hf", "json", {**base, "evaluation_strategy": "steps", "eval_steps": 500},
             {"nnodes": 1, "nproc_per_node": 8}, version="4.40.2"),
    ]
    return out


# ---------------------------------------------------------------------------------------------------------
# Mutation operators: one documented constraint each, broken on purpose
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    name: str
    cls: str
    framework: str
    applies: Callable[[Spec], bool]
    apply: Callable[[Spec, random.Random], None]
    broken: Callable[[Spec], bool]
    source: str
    check_rule: str | None = None   # a mutation of one Megatron-LM check: the rule generated from that check


def _pick(rng: random.Random, values: list[int], keep: Callable[[int], bool]) -> int | None:
    good = [v for v in values if keep(v)]
    return rng.choice(good) if good else None


def _set(key: str, value: Any) -> Callable[[Spec, random.Random], None]:
    def f(s: Spec, rng: random.Random) -> None:
        s.args[key] = value
    return f


def _moe(s: Spec) -> bool:
    return "num-experts" in s.args


def _ds_stage(s: Spec) -> int:
    return s.args["zero_optimization"]["stage"]


def _m_heads(s: Spec, rng: random.Random) -> None:
    h = s.args["num-attention-heads"]
    tp = _pick(rng, [3, 5, 6, 7, 9, 10, 12], lambda t: h % t != 0)
    s.args["tensor-model-parallel-size"] = tp
    s.args["sequence-parallel"] = True
    s.launch = {"nnodes": 1, "nproc_per_node": tp * s.args.get("pipeline-model-parallel-size", 1)
                * s.args.get("context-parallel-size", 1)}


def _mp(s: Spec) -> int:
    a = s.args
    return a.get("tensor-model-parallel-size", 1) * a.get("pipeline-model-parallel-size", 1) * \
        a.get("context-parallel-size", 1)


def _m_world(s: Spec, rng: random.Random) -> None:
    mp = _mp(s)
    s.launch = {"nnodes": 1, "nproc_per_node": _pick(rng, [3, 5, 6, 7, 10, 12, 14], lambda g: g % mp != 0)
                or mp * 3 + 1}


def _m_layers(s: Spec, rng: random.Random) -> None:
    pp = rng.choice([p for p in (3, 4, 8) if s.args["num-layers"] % p])
    s.args["pipeline-model-parallel-size"] = pp
    s.launch = {"nnodes": pp, "nproc_per_node": 8}


def _m_experts(s: Spec, rng: random.Random) -> None:
    ep = s.args.get("expert-model-parallel-size", 1)
    if ep == 1:
        s.args["expert-model-parallel-size"] = ep = 8
    s.args["num-experts"] = rng.choice([e for e in (6, 10, 12, 20, 36) if e % ep])
    s.args["moe-router-topk"] = min(s.args.get("moe-router-topk", 2), 2)
    for k in ("moe-router-num-groups", "moe-router-group-topk"):
        s.args.pop(k, None)


def _m_cp(s: Spec, rng: random.Random) -> None:
    s.args["context-parallel-size"] = 2
    s.args["seq-length"] = s.args["max-position-embeddings"] = rng.choice([2050, 4094, 4098, 1030])
    s.launch["nnodes"] = max(s.launch["nnodes"], 1) * 2


def _m_ffn(s: Spec, rng: random.Random) -> None:
    tp = s.args.get("tensor-model-parallel-size", 1)
    if tp == 1:
        s.args["tensor-model-parallel-size"] = tp = 2
        s.args["sequence-parallel"] = True
        s.launch["nnodes"] *= 2
    s.args["ffn-hidden-size"] = 4 * s.args["hidden-size"] + rng.choice([1, 3, 5, 7])


def _m_groups(s: Spec, rng: random.Random) -> None:
    s.args["tensor-model-parallel-size"] = 4
    s.args["sequence-parallel"] = True
    s.args["num-attention-heads"] = 24
    s.args["hidden-size"] = 24 * 128
    s.args["group-query-attention"] = True
    s.args["num-query-groups"] = rng.choice([6, 3])
    s.args.pop("multi-latent-attention", None)
    s.launch = {"nnodes": 4, "nproc_per_node": 8}


def _m_gbs(s: Spec, rng: random.Random) -> None:
    s.args["global-batch-size"] = s.args["global-batch-size"] + rng.choice([1, 3, 5, 7, 9])


def _m_ds_batch(s: Spec, rng: random.Random) -> None:
    s.args["train_batch_size"] = s.args["train_batch_size"] + rng.choice([-3, -1, 1, 2, 5, 6])


def _m_ds_batch_world(s: Spec, rng: random.Random) -> None:
    s.launch = {"nnodes": 1, "nproc_per_node": rng.choice([3, 5, 6, 7])}


def _ds_batch_ok(s: Spec) -> bool:
    a = s.args
    return a["train_batch_size"] == a["train_micro_batch_size_per_gpu"] * a["gradient_accumulation_steps"] * s.world()


def _m_vpp_batch(s: Spec, rng: random.Random) -> None:
    s.args.update({"pipeline-model-parallel-size": 4, "num-layers": 32, "num-layers-per-virtual-pipeline-stage": 2,
                   "micro-batch-size": 1})
    s.launch = {"nnodes": 1, "nproc_per_node": 8}
    s.args["tensor-model-parallel-size"] = 2
    s.args["sequence-parallel"] = True
    s.args.pop("context-parallel-size", None)
    s.args.pop("expert-model-parallel-size", None)
    s.args["global-batch-size"] = rng.choice([1, 2, 3])


def _m_remove(*keys: str) -> Callable[[Spec, random.Random], None]:
    def f(s: Spec, rng: random.Random) -> None:
        for k in keys:
            s.args.pop(k, None)
    return f


def _m_remove_one(*keys: str) -> Callable[[Spec, random.Random], None]:
    def f(s: Spec, rng: random.Random) -> None:
        s.args.pop(rng.choice(keys), None)
    return f


def _ds_zero(**updates: Any) -> Callable[[Spec, random.Random], None]:
    def f(s: Spec, rng: random.Random) -> None:
        s.args["zero_optimization"].update(copy.deepcopy(updates))
    return f


def _ds_top(**updates: Any) -> Callable[[Spec, random.Random], None]:
    def f(s: Spec, rng: random.Random) -> None:
        s.args.update(copy.deepcopy(updates))
    return f


def _m_version(version: str, **args: Any) -> Callable[[Spec, random.Random], None]:
    def f(s: Spec, rng: random.Random) -> None:
        s.version = version
        if s.fmt != "native":
            s.fmt = "native"
        s.args.update(args)
    return f


def _m_ep_tp_nosp(s: Spec, rng: random.Random) -> None:
    s.version = rng.choice(["0.12.0", "0.13.0", "0.14.0"])
    s.fmt = "native"
    s.args.pop("sequence-parallel", None)
    s.args.update({"tensor-model-parallel-size": 2, "expert-model-parallel-size": 4})
    s.launch = {"nnodes": 2, "nproc_per_node": 8}
    for k in ("moe-router-dtype", "moe-router-enable-expert-bias", "moe-router-bias-update-rate",
              "moe-router-score-function", "moe-router-num-groups", "moe-router-group-topk",
              "moe-router-topk-scaling-factor", "moe-shared-expert-intermediate-size", "multi-latent-attention",
              "q-lora-rank", "kv-lora-rank"):
        s.args.pop(k, None)
    if s.args.get("moe-router-load-balancing-type") == "seq_aux_loss":
        s.args["moe-aux-loss-coeff"] = 1e-3


def _m_ep_fp16(s: Spec, rng: random.Random) -> None:
    _m_ep_tp_nosp(s, rng)
    s.args["sequence-parallel"] = True
    s.version = "0.15.0"
    s.args.pop("bf16", None)
    s.args["fp16"] = True
    s.args["loss-scale"] = 65536


def _m_cf_old(s: Spec, rng: random.Random) -> None:
    _m_ep_tp_nosp(s, rng)
    s.args["sequence-parallel"] = True
    s.version = rng.choice(["0.10.0", "0.11.0"])
    s.args["moe-token-dispatcher-type"] = "allgather"
    s.args["expert-model-parallel-size"] = 1
    s.args["moe-expert-capacity-factor"] = 1.25


def _m_groups_old(s: Spec, rng: random.Random) -> None:
    _m_groups(s, rng)
    s.args["num-query-groups"] = 2
    s.version = rng.choice(["0.12.0", "0.14.0", "0.15.0"])
    s.fmt = "native"


def _m_new_flag_old_version(s: Spec, rng: random.Random) -> None:
    flag, first = rng.choice([("moe-router-dtype", "0.12.0"), ("cross-entropy-fusion-impl", "0.12.0"),
                              ("main-grads-dtype", "0.11.0"), ("moe-router-score-function", "0.11.0")])
    s.version = {"0.12.0": "0.11.0", "0.11.0": "0.10.0"}[first]
    s.fmt = "native"
    s.args[flag] = {"moe-router-dtype": "fp32", "cross-entropy-fusion-impl": "native", "main-grads-dtype": "fp32",
                    "moe-router-score-function": "softmax"}[flag]


def _m_hf_old(s: Spec, rng: random.Random) -> None:
    s.version = "4.40.2"
    s.args.pop("evaluation_strategy", None)
    s.args.update({"eval_strategy": "steps", "eval_steps": 500})


def _m_hf_removed(s: Spec, rng: random.Random) -> None:
    s.version = rng.choice(["4.53.0", "4.55.0", "4.57.1", None])
    strategy = s.args.pop("eval_strategy", "steps")
    s.args["evaluation_strategy"] = strategy
    if strategy == "steps":
        s.args.setdefault("eval_steps", 250)


def _m_hf_best(s: Spec, rng: random.Random) -> None:
    eval_key = "evaluation_strategy" if s.version and s.version < "4.41" else "eval_strategy"
    s.args.update({"load_best_model_at_end": True, eval_key: "epoch", "save_strategy": "steps"})


def _m_bias_softmax(s: Spec, rng: random.Random) -> None:
    s.args["moe-router-enable-expert-bias"] = True
    s.args.pop("moe-router-score-function", None)


def _topk_over(s: Spec, rng: random.Random) -> None:
    s.args["moe-router-topk"] = s.args["num-experts"] + rng.choice([1, 2, 8])
    for k in ("moe-router-num-groups", "moe-router-group-topk"):
        s.args.pop(k, None)


MEG_SRC = "NVIDIA/Megatron-LM megatron/training/arguments.py validate_args; transformer_config.py"
DS_SRC = "deepspeedai/DeepSpeed docs/_pages/config-json.md; runtime/config.py; runtime/engine.py"
HF_SRC = "huggingface/transformers training_args.py TrainingArguments.__post_init__"


def _heads_broken(s: Spec) -> bool:
    return s.args["num-attention-heads"] % s.args["tensor-model-parallel-size"] != 0


OPS: list[Op] = [
    # --- parallel-divisibility
    Op("heads % tp", "parallel-divisibility", "megatron", lambda s: True, _m_heads, _heads_broken, MEG_SRC),
    Op("world % (tp*pp*cp)", "parallel-divisibility", "megatron", lambda s: _mp(s) > 1, _m_world,
       lambda s: s.world() % _mp(s) != 0, MEG_SRC),
    Op("layers % pp", "parallel-divisibility", "megatron", lambda s: any(s.args["num-layers"] % p for p in (3, 4, 8)),
       _m_layers, lambda s: s.args["num-layers"] % s.args["pipeline-model-parallel-size"] != 0, MEG_SRC),
    Op("experts % ep", "parallel-divisibility", "megatron", _moe, _m_experts,
       lambda s: s.args["num-experts"] % s.args["expert-model-parallel-size"] != 0, MEG_SRC),
    Op("seq % 2cp", "parallel-divisibility", "megatron", lambda s: True, _m_cp,
       lambda s: s.args["seq-length"] % (2 * s.args["context-parallel-size"]) != 0, MEG_SRC),
    Op("ffn % tp", "parallel-divisibility", "megatron", lambda s: True, _m_ffn,
       lambda s: s.args["ffn-hidden-size"] % s.args["tensor-model-parallel-size"] != 0,
       "megatron/core/tensor_parallel/layers.py (divide asserts)"),
    Op("query groups vs tp", "parallel-divisibility", "megatron", lambda s: True, _m_groups,
       lambda s: s.args["num-query-groups"] % 4 != 0 and 4 % s.args["num-query-groups"] != 0, MEG_SRC),
    Op("hidden % heads", "parallel-divisibility", "megatron", lambda s: "kv-channels" not in s.args,
       lambda s, rng: s.args.update({"hidden-size": s.args["hidden-size"] + rng.choice([1, 3, 5, 7])}),
       lambda s: s.args["hidden-size"] % s.args["num-attention-heads"] != 0, MEG_SRC),
    Op("ds experts % ep", "parallel-divisibility", "deepspeed", lambda s: "moe" in s.extra,
       lambda s, rng: s.extra["moe"].update({"num_experts": rng.choice([6, 10, 14])}),
       lambda s: s.extra["moe"]["num_experts"] % s.extra["moe"]["ep_size"] != 0, "deepspeed/moe/layer.py"),
    Op("ds autotp % world", "parallel-divisibility", "deepspeed", lambda s: True,
       lambda s, rng: s.args.update({"tensor_parallel": {"autotp_size": rng.choice([3, 5, 6, 7])}}),
       lambda s: s.world() % s.args["tensor_parallel"]["autotp_size"] != 0, DS_SRC),
    # --- batch-arithmetic
    Op("gbs % (mbs*dp)", "batch-arithmetic", "megatron", lambda s: True, _m_gbs,
       lambda s: "gbs % (mbs*dp)" in megatron_constraints(s), MEG_SRC),
    Op("micro batch <= 0", "batch-arithmetic", "megatron", lambda s: True, _set("micro-batch-size", 0),
       lambda s: s.args["micro-batch-size"] <= 0, MEG_SRC),
    Op("vpp needs >= pp micro-batches", "batch-arithmetic", "megatron", lambda s: not _moe(s), _m_vpp_batch,
       lambda s: s.args["global-batch-size"] // (s.args["micro-batch-size"] * 2) < 4,
       "megatron/core/pipeline_parallel/schedules.py"),
    Op("ds train != micro*gas*dp", "batch-arithmetic", "deepspeed", lambda s: True, _m_ds_batch,
       lambda s: not _ds_batch_ok(s), DS_SRC),
    Op("ds world changes the dp size", "batch-arithmetic", "deepspeed", lambda s: True, _m_ds_batch_world,
       lambda s: not _ds_batch_ok(s), "https://github.com/hiyouga/LlamaFactory/issues/2574"),
    Op("ds batch <= 0", "batch-arithmetic", "deepspeed", lambda s: True,
       _ds_top(train_micro_batch_size_per_gpu=0), lambda s: s.args["train_micro_batch_size_per_gpu"] <= 0, DS_SRC),
    # --- mutual-exclusion
    Op("train-iters & train-samples", "mutual-exclusion", "megatron", lambda s: True,
       _set("train-samples", 256000000), lambda s: "train-samples" in s.args and "train-iters" in s.args, MEG_SRC),
    Op("warmup fraction & iters", "mutual-exclusion", "megatron", lambda s: "lr-warmup-iters" in s.args,
       _set("lr-warmup-fraction", 0.01), lambda s: "lr-warmup-fraction" in s.args, MEG_SRC),
    Op("fsdp2 & distributed optimizer", "mutual-exclusion", "megatron", lambda s: True,
       _set("use-torch-fsdp2", True), lambda s: s.args.get("use-distributed-optimizer") is True, MEG_SRC),
    Op("mock data & data path", "mutual-exclusion", "megatron", lambda s: True, _set("mock-data", True),
       lambda s: "data-path" in s.args, MEG_SRC),
    Op("selective recompute & method", "mutual-exclusion", "megatron", lambda s: True,
       lambda s, rng: s.args.update({"recompute-granularity": "selective", "recompute-method": rng.choice(
           ["uniform", "block"])}), lambda s: True, MEG_SRC),
    Op("num-layers & encoder-num-layers", "mutual-exclusion", "megatron", lambda s: True,
       lambda s, rng: s.args.update({"encoder-num-layers": s.args["num-layers"]}), lambda s: True, MEG_SRC),
    Op("mla & gqa", "mutual-exclusion", "megatron", lambda s: True,
       lambda s, rng: s.args.update({"multi-latent-attention": True, "group-query-attention": True,
                                     "num-query-groups": s.args.get("num-query-groups", 8)}), lambda s: True,
       MEG_SRC),
    Op("ds zero 2/3 & pipeline", "mutual-exclusion", "deepspeed", lambda s: _ds_stage(s) >= 2 and "moe" not in s.extra,
       lambda s, rng: s.extra.update({"pipeline_parallel_size": rng.choice([2, 4])}), lambda s: True,
       "deepspeed/runtime/pipe/engine.py"),
    Op("ds amp & zero", "mutual-exclusion", "deepspeed", lambda s: _ds_stage(s) >= 1,
       lambda s, rng: (s.args.pop("bf16", None), s.args.pop("fp16", None), s.args.update({"amp": {"enabled": True}})),
       lambda s: True, DS_SRC),
    Op("ds 1-bit adam & zero", "mutual-exclusion", "deepspeed", lambda s: _ds_stage(s) >= 1,
       lambda s, rng: s.args["optimizer"].update({"type": rng.choice(["OneBitAdam", "ZeroOneAdam", "OneBitLamb"])}),
       lambda s: True, "deepspeed/runtime/engine.py"),
    Op("hf fsdp full_shard & shard_grad_op", "mutual-exclusion", "hf", lambda s: True,
       _ds_top(fsdp="full_shard shard_grad_op"), lambda s: True, HF_SRC),
    Op("hf prefetch without workers", "mutual-exclusion", "hf", lambda s: True,
       lambda s, rng: (s.args.pop("dataloader_num_workers", None), s.args.update({"dataloader_prefetch_factor": 2})),
       lambda s: True, HF_SRC),
    # --- missing-requirement
    Op("tp comm overlap needs sp", "missing-requirement", "megatron", lambda s: True,
       lambda s, rng: (s.args.pop("sequence-parallel", None), s.args.update({"tp-comm-overlap": True})),
       lambda s: "sequence-parallel" not in s.args, MEG_SRC),
    Op("overlap param gather needs dist-opt", "missing-requirement", "megatron", lambda s: True,
       _m_remove("use-distributed-optimizer"), lambda s: "use-distributed-optimizer" not in s.args, MEG_SRC),
    Op("overlap param gather needs grad reduce", "missing-requirement", "megatron", lambda s: True,
       _m_remove("overlap-grad-reduce"), lambda s: "overlap-grad-reduce" not in s.args, MEG_SRC),
    Op("full recompute needs method", "missing-requirement", "megatron", lambda s: True,
       _set("recompute-granularity", "full"), lambda s: "recompute-method" not in s.args, MEG_SRC),
    Op("save needs save interval", "missing-requirement", "megatron", lambda s: True, _m_remove("save-interval"),
       lambda s: "save-interval" not in s.args, MEG_SRC),
    Op("required model size argument", "missing-requirement", "megatron", lambda s: True,
       _m_remove_one("hidden-size", "num-attention-heads", "max-position-embeddings", "num-layers", "seq-length"),
       lambda s: True, MEG_SRC),
    Op("ep needs experts", "missing-requirement", "megatron", lambda s: not _moe(s),
       lambda s, rng: s.args.update({"expert-model-parallel-size": rng.choice([2, 4, 8])}), lambda s: True, MEG_SRC),
    Op("pad to capacity needs capacity", "missing-requirement", "megatron", _moe,
       _set("moe-pad-expert-input-to-capacity", True), lambda s: "moe-expert-capacity-factor" not in s.args,
       "megatron/core/transformer/transformer_config.py"),
    Op("ds param offload needs zero-3", "missing-requirement", "deepspeed", lambda s: _ds_stage(s) < 3,
       lambda s, rng: s.args["zero_optimization"].update({"offload_param": {"device": rng.choice(["cpu", "nvme"]),
                                                                            "nvme_path": "/nvme"}}),
       lambda s: True, DS_SRC),
    Op("ds nvme needs path", "missing-requirement", "deepspeed", lambda s: _ds_stage(s) == 3,
       _ds_zero(offload_param={"device": "nvme"}), lambda s: True, DS_SRC),
    Op("ds optimizer offload needs zero", "missing-requirement", "deepspeed", lambda s: _ds_stage(s) == 0,
       _ds_zero(offload_optimizer={"device": "cpu"}), lambda s: True, "https://github.com/deepspeedai/DeepSpeed/issues/610"),
    Op("hf load best needs matching strategies", "missing-requirement", "hf", lambda s: True,
       _m_hf_best, lambda s: True, HF_SRC),
    Op("hf plateau scheduler needs eval", "missing-requirement", "hf",
       lambda s: "eval_strategy" not in s.args and "evaluation_strategy" not in s.args,
       _ds_top(lr_scheduler_type="reduce_lr_on_plateau"), lambda s: True, HF_SRC),
    # --- moe-routing
    Op("topk > experts", "moe-routing", "megatron", _moe, _topk_over,
       lambda s: s.args["moe-router-topk"] > s.args["num-experts"], "project rule G1 (moe-config-anchors.md)"),
    Op("no load balancing", "moe-routing", "megatron", _moe,
       _m_remove("moe-aux-loss-coeff", "moe-router-enable-expert-bias", "moe-router-bias-update-rate"),
       lambda s: True, "megatron/core/transformer/moe/router.py (coefficient default 0.0)"),
    Op("top-1 softmax without pre-softmax", "moe-routing", "megatron",
       lambda s: _moe(s) and s.args.get("moe-router-score-function", "softmax") == "softmax",
       lambda s, rng: (s.args.update({"moe-router-topk": 1}), [s.args.pop(k, None) for k in (
           "moe-router-num-groups", "moe-router-group-topk")]), lambda s: True,
       "megatron/core/transformer/transformer_config.py; minimind#858"),
    Op("expert bias with softmax", "moe-routing", "megatron", _moe,
       _m_bias_softmax, lambda s: True, "https://github.com/NVIDIA/Megatron-LM/issues/1971"),
    Op("router groups do not divide experts", "moe-routing", "megatron", _moe,
       lambda s, rng: s.args.update({"moe-router-num-groups": rng.choice([3, 5, 6, 7]), "moe-router-group-topk": 2}),
       lambda s: s.args["num-experts"] % s.args["moe-router-num-groups"] != 0,
       "megatron/core/transformer/moe/moe_utils.py"),
    Op("group topk > groups", "moe-routing", "megatron", _moe,
       lambda s, rng: s.args.update({"moe-router-num-groups": 2, "moe-router-group-topk": rng.choice([3, 4])}),
       lambda s: True, MEG_SRC),
    Op("capacity factor < 1", "moe-routing", "megatron", _moe,
       lambda s, rng: s.args.update({"moe-expert-capacity-factor": rng.choice([0.25, 0.5, 0.75, 0.9])}),
       lambda s: True, "Switch Transformer arXiv 2101.03961"),
    Op("capacity factor with sinkhorn", "moe-routing", "megatron", _moe,
       lambda s, rng: s.args.update({"moe-expert-capacity-factor": 1.25, "moe-router-load-balancing-type": "sinkhorn"}),
       lambda s: True, MEG_SRC),
    Op("one coefficient per balancing type", "moe-routing", "megatron", _moe,
       lambda s, rng: s.args.update({"moe-router-load-balancing-type": ["aux_loss", "seq_aux_loss"],
                                     "moe-aux-loss-coeff": 1e-2}), lambda s: True, MEG_SRC),
    Op("expert model parallel beyond a node", "moe-routing", "megatron", _moe,
       lambda s, rng: (s.args.update({"expert-model-parallel-size": 16, "num-experts": max(16, s.args["num-experts"])}),
                       s.launch.update({"nnodes": max(s.launch["nnodes"], 2) * 2})),
       lambda s: s.args["expert-model-parallel-size"] * s.args.get("expert-tensor-parallel-size", 1) > 8,
       "megatron/core/transformer/moe/README.md"),
    Op("hf router logits off", "moe-routing", "hf", lambda s: bool(s.extra),
       lambda s, rng: s.extra.update({"output_router_logits": False}), lambda s: True,
       "https://github.com/huggingface/transformers/pull/44586"),
    Op("hf topk > experts", "moe-routing", "hf", lambda s: bool(s.extra),
       lambda s, rng: s.extra.update({"num_experts_per_tok": 80}), lambda s: True, HF_SRC),
    Op("ds moe k > experts", "moe-routing", "deepspeed", lambda s: "moe" in s.extra,
       lambda s, rng: s.extra["moe"].update({"k": 16}), lambda s: True, "deepspeed/moe/sharded_moe.py"),
    # --- precision
    Op("fp16 & bf16", "precision", "megatron", lambda s: True, _set("fp16", True), lambda s: True, MEG_SRC),
    Op("fp8 param gather without fp8", "precision", "megatron", lambda s: True, _set("fp8-param-gather", True),
       lambda s: "fp8-format" not in s.args, MEG_SRC),
    Op("fp16 cross entropy without fp16", "precision", "megatron", lambda s: True, _set("fp16-lm-cross-entropy", True),
       lambda s: "fp16" not in s.args, MEG_SRC),
    Op("fp32 residual without mixed precision", "precision", "megatron", lambda s: True,
       lambda s, rng: (s.args.pop("bf16", None), s.args.update({"fp32-residual-connection": True})), lambda s: True,
       MEG_SRC),
    Op("te cross entropy fusion", "precision", "megatron", lambda s: True,
       lambda s, rng: s.args.update({"cross-entropy-loss-fusion": True, "cross-entropy-fusion-impl": "te"}),
       lambda s: True, "https://github.com/NVIDIA/Megatron-LM/issues/1627"),
    Op("fp8 & fp4", "precision", "megatron", lambda s: True,
       lambda s, rng: s.args.update({"fp8-format": rng.choice(["e4m3", "hybrid"]), "fp4-format": "e2m1"}),
       lambda s: True, MEG_SRC),
    Op("ds fp16 & bf16", "precision", "deepspeed", lambda s: True,
       lambda s, rng: s.args.update({"fp16": {"enabled": True}, "bf16": {"enabled": True}}), lambda s: True, DS_SRC),
    Op("ds bf16 optimizer states need master weights", "precision", "deepspeed", lambda s: "bf16" in s.args,
       lambda s, rng: s.args["bf16"].update({"bf16_optimizer_states": True}), lambda s: True,
       "deepspeed/runtime/precision_config.py"),
    Op("ds lamb static loss scale", "precision", "deepspeed", lambda s: "fp16" in s.args,
       lambda s, rng: (s.args["optimizer"].update({"type": "Lamb"}), s.args["fp16"].update({"loss_scale": 1024})),
       lambda s: True, "deepspeed/runtime/engine.py"),
    Op("hf fp16 & bf16", "precision", "hf", lambda s: True, _ds_top(fp16=True, bf16=True), lambda s: True, HF_SRC),
    Op("hf bf16 with apex", "precision", "hf", lambda s: True, _ds_top(bf16=True, half_precision_backend="apex"),
       lambda s: True, HF_SRC),
    # --- version-specific
    Op("flag newer than the release", "version-specific", "megatron", lambda s: True, _m_new_flag_old_version,
       lambda s: True, "argparse of NVIDIA/Megatron-LM tags core_v0.10.0-core_v0.12.0"),
    Op("ep+tp without sp before 0.15", "version-specific", "megatron", _moe, _m_ep_tp_nosp, lambda s: True,
       "megatron/core/model_parallel_config.py @ core_v0.14.0"),
    Op("ep with fp16 before 0.16", "version-specific", "megatron", _moe, _m_ep_fp16, lambda s: True,
       "megatron/training/arguments.py @ core_v0.15.0"),
    Op("capacity factor without alltoall before 0.12", "version-specific", "megatron", _moe, _m_cf_old,
       lambda s: True, "megatron/core/transformer/transformer_config.py @ core_v0.11.0"),
    Op("query groups as a divisor of tp before 0.16", "version-specific", "megatron", lambda s: True, _m_groups_old,
       lambda s: True, "megatron/core/transformer/transformer_config.py @ core_v0.15.0"),
    Op("deprecated argument", "version-specific", "megatron", lambda s: True,
       lambda s, rng: s.args.update(rng.choice([{"batch-size": 8}, {"checkpoint-activations": True},
                                                {"model-parallel-size": 2}, {"warmup": 100}])),
       lambda s: True, MEG_SRC),
    Op("argument removed in the newest release", "version-specific", "megatron", lambda s: s.version is None,
       _set("use-legacy-models", True), lambda s: True, "argparse of Megatron-LM core_v0.18.0"),
    Op("ds legacy stage 1", "version-specific", "deepspeed", lambda s: _ds_stage(s) == 1,
       _ds_zero(legacy_stage1=True), lambda s: True, "deepspeed/runtime/zero/config.py"),
    Op("ds deprecated cpu_offload", "version-specific", "deepspeed", lambda s: _ds_stage(s) in (1, 2),
       _ds_zero(cpu_offload=True), lambda s: True, "deepspeed/runtime/zero/config.py"),
    Op("hf eval_strategy before 4.41", "version-specific", "hf", lambda s: True, _m_hf_old, lambda s: True, HF_SRC),
    Op("hf evaluation_strategy removed", "version-specific", "hf", lambda s: s.version is None, _m_hf_removed,
       lambda s: True, HF_SRC),
]


def _value(word: str) -> Any:
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            pass
    return word


def _options(text: str) -> dict[str, Any]:
    """Argument words as a spec's options: a flag is True, several values a list."""
    out: dict[str, Any] = {}
    opt = None
    for w in shlex.split(text):
        if w.startswith("--"):
            opt = w[2:]
            out[opt] = True
        elif opt is not None:
            cur, v = out[opt], _value(w)
            out[opt] = v if cur is True else (cur + [v] if isinstance(cur, list) else [cur, v])
    return out


_SHELL_SPECIAL = re.compile(r"""[|()*'"$;&<>\s\[\]{}]""")


def check_ops(path: Path = CHECK_MUTANTS) -> list[Op]:
    """One operator per Megatron-LM check that bench/lint_framework_rules.py encoded: it sets the arguments (and
    --yaml-cfg fields) under which the check's own condition fails, found by evaluating the check, and removes
    the other options the check reads so that they take the defaults that evaluation assumed."""
    if not path.is_file():
        return []
    ops = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            ops.append(_check_op(row))
    return ops


def _check_op(row: dict[str, str]) -> Op:
    args = _options(row["args"])
    settings = json.loads(row["settings"]) if row["settings"] else {}
    unset = [o.removeprefix("--") for o in row["unset"].split() if o.removeprefix("--") not in args]
    world = int(row["world_size"]) if row["world_size"] else None
    quoted = any(_SHELL_SPECIAL.search(str(v)) for v in args.values())

    def applies(s: Spec) -> bool:  # settings need our YAML; a value with shell syntax the YAML formats
        return s.version is None and (not settings or s.fmt == "native") and \
            (not quoted or s.fmt in ("model_args", "native"))

    def apply(s: Spec, rng: random.Random) -> None:
        for o in unset:
            s.args.pop(o, None)
        s.args.update(copy.deepcopy(args))
        if settings:
            s.extra["settings"] = copy.deepcopy(settings)
        if world is not None:
            s.launch = {"nnodes": 1, "nproc_per_node": world}

    def broken(s: Spec) -> bool:
        return all(s.args.get(k) == v for k, v in args.items()) and not any(o in s.args for o in unset) and \
            (world is None or s.world() == world)

    return Op(f"check {row['check']}", row["class"], "megatron", applies, apply, broken,
              f"NVIDIA/Megatron-LM @ d98e8a6 {row['check'].split(':', 1)[1]}", check_rule=row["rule"])


def mutants(valid: list[Spec], per_op: int, rng: random.Random, checks: list[Op] | None = None,
            per_check: int = 2) -> list[tuple[Spec, Op]]:
    out = []
    for op in OPS + (checks or []):
        bases = [s for s in valid if s.framework == op.framework and op.applies(s)]
        if not bases:
            continue
        for k in range(per_check if op.check_rule else per_op):
            base = bases[k % len(bases)] if k < len(bases) else rng.choice(bases)
            spec = copy.deepcopy(base)
            spec.name = f"{base.name}--{op.name.replace(' ', '_').replace('/', '').replace(':', '_')}-{k}"
            op.apply(spec, rng)
            if not op.broken(spec):
                raise AssertionError(f"mutation {op.name} did not break {base.name}")
            out.append((spec, op))
    return out


# ---------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------
def real_corpus(linter: Linter, cache: Path) -> dict[str, Any]:
    """Lint every configuration of the real corpus (bench/lint_corpus.tsv, fetched into ``cache``): a false
    alarm is a configuration the linter blocks (an error, or unreadable), reported by framework."""
    from bench.lint_corpus import read_manifest

    by_fw: dict[str, Counter] = defaultdict(Counter)
    alarms, missing = [], 0
    for entry in read_manifest():
        path = entry.local(cache)
        if not path.is_file():
            missing += 1
            continue
        c = by_fw[entry.framework]
        c["configs"] += 1
        where = f"{entry.repo}@{entry.commit[:7]}:{entry.path}"
        try:
            result = linter.lint_path(str(path), env=entry.environment(), version=entry.version or None)
        except LintInputError as err:
            c["unreadable"] += 1
            alarms.append((entry.framework, where, [("unreadable", err.detail)]))
            continue
        c["warned"] += bool(result.warnings)
        c["not_checked"] += len(result.unjudged)
        if result.errors:
            c["false_alarms"] += 1
            alarms.append((entry.framework, where, [(v.rule_id, v.message) for v in result.errors]))
    return {"by_framework": {fw: dict(c) for fw, c in sorted(by_fw.items())}, "false_alarm_list": alarms,
            "not_fetched": missing}


def _print_real(real: dict[str, Any], show: int) -> None:
    print("real configurations (bench/lint_corpus.tsv):")
    print(f"  {'framework':10} {'configs':>8} {'false alarms':>13} {'with warnings':>14} {'rules not checked':>18}")
    for fw, c in real["by_framework"].items():
        print(f"  {fw:10} {c.get('configs', 0):8d} {c.get('false_alarms', 0) + c.get('unreadable', 0):13d} "
              f"{c.get('warned', 0):14d} {c.get('not_checked', 0):18d}")
    if real["not_fetched"]:
        print(f"  {real['not_fetched']} configurations not fetched (python bench/lint_corpus.py fetch)")
    for fw, where, what in real["false_alarm_list"][:show]:
        print(f"  false alarm ({fw}) {where}: {what}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real-only", action="store_true", help="only the real-configuration corpus")
    parser.add_argument("--corpus-cache", type=Path, default=None,
                        help="where bench/lint_corpus.py fetch put the real configurations")
    parser.add_argument("--mutants-per-op", type=int, default=22)
    parser.add_argument("--mutants-per-check", type=int, default=2,
                        help="mutants of each Megatron-LM check a generated rule encodes (lint_check_mutants.tsv)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--show-misses", type=int, default=10)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

    store = open_store(None)
    t0 = time.perf_counter()
    load_knowledge(store)
    linter = Linter.from_store(store)
    setup = time.perf_counter() - t0
    from bench.lint_corpus import default_cache

    cache = args.corpus_cache or default_cache()
    real = real_corpus(linter, cache) if cache.is_dir() else None
    if args.real_only:
        if real is None:
            print(f"no corpus in {cache}: run python bench/lint_corpus.py fetch first", file=sys.stderr)
            return 2
        if args.json:
            print(json.dumps(real, indent=2))
        else:
            _print_real(real, args.show_misses)
        return 0

    valid = megatron_valid() + deepspeed_valid() + hf_valid()
    checks = check_ops()
    broken = mutants(valid, args.mutants_per_op, rng, checks, args.mutants_per_check)
    with tempfile.TemporaryDirectory(prefix="lint-bench-") as tmp:
        folder = Path(tmp)
        false_alarms, lint_times, read_times = [], [], []
        for spec in valid:
            path, env = render(spec, folder)
            t = time.perf_counter()
            linter.read(str(path), env=env)
            read_times.append(time.perf_counter() - t)
            t = time.perf_counter()
            result = linter.lint_path(str(path), env=env, version=None)
            lint_times.append(time.perf_counter() - t)
            if result.violations or result.rule_errors:
                false_alarms.append((spec.name, [(v.rule_id, v.message) for v in result.violations],
                                     result.rule_errors))
        per_class: dict[str, Counter] = defaultdict(Counter)
        per_op: dict[str, Counter] = defaultdict(Counter)
        own: dict[str, Counter] = defaultdict(Counter)   # a check's mutants: did the rule of that check fire
        misses = []
        for spec, op in broken:
            path, env = render(spec, folder)
            t = time.perf_counter()
            result = linter.lint_path(str(path), env=env)
            lint_times.append(time.perf_counter() - t)
            classes = {v.error_class for v in result.violations}
            hit, any_hit = op.cls in classes, bool(result.violations)
            per_class[op.cls].update(total=1, hit=hit, any=any_hit)
            per_op[op.name].update(total=1, hit=hit)
            if op.check_rule:
                own[op.check_rule].update(total=1, hit=op.check_rule in result.rule_ids())
            if not hit:
                misses.append((spec.name, op.name, sorted(result.rule_ids()), result.rule_errors))

    total = sum(c["total"] for c in per_class.values())
    hits = sum(c["hit"] for c in per_class.values())
    anys = sum(c["any"] for c in per_class.values())
    figures = {
        "valid_configs": len(valid), "valid_by_framework": dict(Counter(s.framework for s in valid)),
        "broken_configs": total, "operators": len(OPS),
        "recall_by_class": {cls: {"caught": per_class[cls]["hit"], "total": per_class[cls]["total"],
                                  "recall": round(per_class[cls]["hit"] / max(1, per_class[cls]["total"]), 4),
                                  "any_violation": per_class[cls]["any"]} for cls in CLASSES},
        "recall_overall": round(hits / max(1, total), 4), "any_violation_overall": round(anys / max(1, total), 4),
        "false_alarms": len(false_alarms),
        "lint_ms_median": round(statistics.median(lint_times) * 1000, 2),
        "lint_ms_p95": round(sorted(lint_times)[int(0.95 * (len(lint_times) - 1))] * 1000, 2),
        "read_ms_median": round(statistics.median(read_times) * 1000, 2),
        "lint_vs_read_ratio": round(statistics.median(lint_times) / max(1e-9, statistics.median(read_times)), 1),
        "setup_s": round(setup, 2), "rules": len(linter.rules),
        "check_operators": len(checks),
        "generated_rules_caught": sum(1 for c in own.values() if c["hit"]),
        "generated_rules_without_mutant": sorted(op.check_rule for op in checks if op.check_rule not in own),
        "generated_rules_missed": sorted(r for r, c in own.items() if not c["hit"]),
    }
    if args.json:
        print(json.dumps({**figures, "misses": misses[:args.show_misses], "false_alarm_list": false_alarms,
                          "real": real}, indent=2))
        return 0 if not false_alarms else 1
    print(f"lint bench: {len(valid)} valid configurations {figures['valid_by_framework']}, {total} broken ones "
          f"from {len(OPS)} mutation operators, {len(linter.rules)} rules (setup {setup:.1f} s)")
    print(f"{'class':24} {'caught':>7} {'total':>6} {'recall':>8} {'any viol.':>10}")
    for cls in CLASSES:
        c = per_class[cls]
        print(f"{cls:24} {c['hit']:7d} {c['total']:6d} {c['hit'] / max(1, c['total']):8.2%} "
              f"{c['any'] / max(1, c['total']):10.2%}")
    print(f"{'overall':24} {hits:7d} {total:6d} {hits / max(1, total):8.2%} {anys / max(1, total):10.2%}"
          f"   (goal ≥ 99.8%)")
    print(f"false alarms on the valid set: {len(false_alarms)} of {len(valid)} (goal 0)")
    print(f"generated rules (Megatron-LM checks) caught by a mutant of their own check: "
          f"{figures['generated_rules_caught']} of {len(checks)}"
          + (f"; no mutant: {figures['generated_rules_without_mutant']}" if figures["generated_rules_without_mutant"]
             else "") + (f"; missed: {figures['generated_rules_missed']}" if figures["generated_rules_missed"] else ""))
    print(f"lint time per configuration: median {figures['lint_ms_median']} ms, p95 {figures['lint_ms_p95']} ms; "
          f"reading alone (peer): median {figures['read_ms_median']} ms → lint/read = {figures['lint_vs_read_ratio']}x")
    for name, violations, errors in false_alarms[:args.show_misses]:
        print(f"  false alarm {name}: {violations} {errors}")
    for name, op, got, errors in misses[:args.show_misses]:
        print(f"  missed {name} ({op}): linter said {got} {errors}")
    if real is not None:
        _print_real(real, args.show_misses)
    else:
        print(f"real configurations: none in {cache} (python bench/lint_corpus.py fetch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
