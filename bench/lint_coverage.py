"""Coverage of the frameworks' own configuration checks by the prevention rules (docs/lint.md, "Coverage").

Every ``assert`` and ``raise`` of the functions that validate a configuration is found by walking their
syntax tree: Megatron-LM ``validate_args`` (megatron/training/arguments.py), ``TransformerConfig.__post_init__``
and ``MLATransformerConfig.__post_init__`` (transformer_config.py), ``ModelParallelConfig.__post_init__`` and
``initialize_model_parallel`` (the MoE and parallel-state checks); DeepSpeed's ``DeepSpeedConfig`` batch and
error checks, its ZeRO, precision and MoE-layer validators and the engine's optimizer sanity checks;
transformers ``TrainingArguments.__post_init__``. For each check it records where it is (release, file,
line), the configuration keys its condition reads (``args.x`` / ``self.x``, with the conditions of the
branches around it), and whether it depends only on the configuration: a condition that calls into the
installed software or hardware (``is_te_min_version``, ``torch.cuda``, ``is_torch_*_available``, device
queries), the process environment (other than the variables the rules read), model or data objects, or
runtime state is *not configuration-only*, and the table says which. A configuration-only check is
*encoded* when a rule of the framework tests the same keys (every key of the check among the keys the
rule's condition reads) and names the same file among its sources; ``bench/lint_coverage_review.tsv`` holds
the decisions made by reading a check (encoded by a named rule, or not encodable and why), which take
precedence. Nothing of the sources is copied: the table names lines and keys.

    python bench/lint_coverage.py --megatron DIR --deepspeed DIR --transformers FILE [--write docs/lint.md]

DIR is a checkout (or an extracted archive) of the release; FILE transformers' training_args.py.
"""

from __future__ import annotations

import argparse
import ast
import csv
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REVIEW = HERE / "lint_coverage_review.tsv"
RELEASES = {"megatron": ("NVIDIA/Megatron-LM", "d98e8a6"), "deepspeed": ("deepspeedai/DeepSpeed", "edaa722"),
            "hf": ("huggingface/transformers", "v4.57.1")}
TARGETS = {
    "megatron": [("megatron/training/arguments.py", ("validate_args",), "args"),
                 ("megatron/core/transformer/transformer_config.py",
                  ("TransformerConfig.__post_init__", "MLATransformerConfig.__post_init__"), "self"),
                 ("megatron/core/model_parallel_config.py", ("ModelParallelConfig.__post_init__",), "self"),
                 ("megatron/core/parallel_state.py", ("initialize_model_parallel",), "param")],
    "deepspeed": [("deepspeed/runtime/config.py", ("DeepSpeedConfig._batch_assertion",
                                                   "DeepSpeedConfig._set_batch_related_parameters",
                                                   "DeepSpeedConfig._do_error_check", "get_torch_autocast_dtype",
                                                   "get_communication_data_type", "get_gradient_allreduce_op",
                                                   "get_checkpoint_tag_validation_mode",
                                                   "get_checkpoint_parallel_write_pipeline"), "self"),
                  ("deepspeed/runtime/zero/config.py", ("DeepSpeedZeroConfig.offload_ratio_check",), "self"),
                  ("deepspeed/runtime/precision_config.py", ("DeepSpeedFP16Config._validate_loss_scale",
                                                             "DeepSpeedFP16Config._reject_non_integer_scale_params",
                                                             "DeepSpeedFP16Config._validate_dynamic_loss_scale_params"),
                   "self"),
                  ("deepspeed/moe/layer.py", ("MoE.__init__",), "param"),
                  ("deepspeed/runtime/engine.py", ("DeepSpeedEngine._do_sanity_check",
                                                   "DeepSpeedEngine._do_optimizer_sanity_check",
                                                   "DeepSpeedEngine._configure_basic_optimizer"), "self")],
    "hf": [("training_args.py", ("TrainingArguments.__post_init__",), "self")],
}
STARTUP = {
    # The wider set: the checks a launch meets while the framework builds its engine or model, beyond the
    # config validators above. Each entry is followed into every function it reaches in the same file
    # (self.method(), super().__init__(), a module function called by name); calls into other files are
    # not followed, so each file that builds a part is listed with its constructor.
    "deepspeed": [("deepspeed/runtime/config.py", ("DeepSpeedConfig.__init__",), "self"),
                  ("deepspeed/runtime/engine.py", ("DeepSpeedEngine.__init__",), "self"),
                  ("deepspeed/runtime/pipe/engine.py", ("PipelineEngine.__init__",), "self"),
                  ("deepspeed/runtime/zero/config.py", ("@validator",), "self"),
                  ("deepspeed/runtime/zero/offload_config.py", ("@validator",), "self"),
                  ("deepspeed/runtime/zero/stage_1_and_2.py", ("DeepSpeedZeroOptimizer.__init__",), "self"),
                  ("deepspeed/runtime/zero/stage3.py", ("DeepSpeedZeroOptimizer_Stage3.__init__",), "self"),
                  ("deepspeed/runtime/zero/parameter_offload.py", ("DeepSpeedZeRoOffload.__init__",), "self"),
                  ("deepspeed/runtime/zero/mics.py", ("MiCS_Optimizer.__init__",), "self")],
    # Megatron-LM's GPT model builder and the modules it instantiates for the dense, MoE and MTP layer specs
    # (MLA, hybrid/Mamba, vision and inference-only modules are not part of this set).
    "megatron": [("gpt_builders.py", ("gpt_builder",), "param"),
                 ("megatron/core/models/gpt/gpt_model.py", ("GPTModel.__init__",), "config"),
                 ("megatron/core/models/gpt/gpt_layer_specs.py",
                  ("get_gpt_decoder_block_spec", "get_gpt_layer_with_transformer_engine_spec",
                   "get_gpt_layer_local_spec", "get_gpt_mtp_block_spec"), "config"),
                 ("megatron/core/models/gpt/moe_module_specs.py", ("get_moe_module_spec",), "config"),
                 ("megatron/core/transformer/transformer_block.py", ("TransformerBlock.__init__",), "config"),
                 ("megatron/core/transformer/transformer_layer.py", ("TransformerLayer.__init__",), "config"),
                 ("megatron/core/transformer/attention.py", ("SelfAttention.__init__",), "config"),
                 ("megatron/core/transformer/dot_product_attention.py", ("DotProductAttention.__init__",),
                  "config"),
                 ("megatron/core/transformer/mlp.py", ("MLP.__init__",), "config"),
                 ("megatron/core/transformer/moe/moe_layer.py", ("MoELayer.__init__",), "config"),
                 ("megatron/core/transformer/moe/router.py", ("TopKRouter.__init__",), "config"),
                 ("megatron/core/transformer/moe/experts.py",
                  ("TEGroupedMLP.__init__", "SequentialMLP.__init__"), "config"),
                 ("megatron/core/transformer/moe/shared_experts.py", ("SharedExpertMLP.__init__",), "config"),
                 ("megatron/core/transformer/moe/token_dispatcher.py",
                  ("MoEAllGatherTokenDispatcher.__init__", "MoEAlltoAllTokenDispatcher.__init__",
                   "MoEFlexTokenDispatcher.__init__"), "config"),
                 ("megatron/core/transformer/multi_token_prediction.py", ("MultiTokenPredictionBlock.__init__",),
                  "config")],
    "hf": [],
}
SHORT = {"deepspeed/runtime/pipe/engine.py": "pipe/engine.py"}
"""Check ids are framework:file-name:line; a file whose name another target shares is named with its folder."""
_RUNTIME = re.compile(
    r"is_te_min_version|is_torch_min_version|get_te_version|te_version|HAVE_|torch\.cuda|get_device_arch|"
    r"importlib|is_\w+_available|version\.parse|packaging|torch\.distributed|dist\.|get_accelerator|"
    r"torch\.__version__|is_torch_\w+|_is_torch|device_count|get_world_size|get_rank|torch\.backends|"
    r"\bmodel\b|self\.module|optimizer\b|\bparam\b|isinstance\(self\.\w+, *\(?(torch|nn)|"
    r"torch_npu|is_sagemaker|is_accelerate|accelerator_config|self\.distributed_state|xm\.|smp\.")
_STATE = re.compile(
    r"data_ptr|process_group|_group\b|\bpg_collection\b|\bmpu\b|\.grid\b|param_id|params_already_reduced|"
    r"param_group|\bparams?_|numel|\bbucket\b|extra_large_param|loss_scaler|\bdataset\b|\btensor\b|"
    r"submodules\.|_cls\b|\bvp_stage\b|is_(first|last)_pp_stage|is_vp_(first|last)_stage|\bpp_rank\b|"
    r"local_expert_indices|\bep_size\b|\btp_size\b|supports_\w+|_is_fused_impl_supported|hasattr\(|getattr\(param")
"""Start-up checks that read what the training code builds or passes at run time: the model's modules and
parameters, tensors, the optimizer's groups and buckets, process groups and ranks, the dataset."""
_ENV = re.compile(r"os\.environ|os\.getenv")
_MODELED_ENV = ("CUDA_DEVICE_MAX_CONNECTIONS",)


@dataclass
class Check:
    framework: str
    file: str
    function: str
    line: int
    kind: str
    keys: tuple[str, ...]
    conditions: tuple[str, ...]
    config_only: bool = True
    why_not: str = ""
    rules: tuple[str, ...] = ()
    note: str = ""
    scope: str = "validators"
    """``validators`` (the config validators of TARGETS) or ``startup`` (only in the wider set, STARTUP)."""

    @property
    def id(self) -> str:
        return f"{self.framework}:{SHORT.get(self.file, self.file.rsplit('/', 1)[-1])}:{self.line}"


def _functions(tree: ast.Module, names: Iterable[str]) -> list[tuple[str, ast.FunctionDef]]:
    wanted, out = set(names), []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in wanted:
            out.append((node.name, node))
        if isinstance(node, ast.ClassDef):
            for b in node.body:
                if isinstance(b, ast.FunctionDef) and f"{node.name}.{b.name}" in wanted:
                    out.append((f"{node.name}.{b.name}", b))
    return out


def _reachable(tree: ast.Module, entries: Iterable[str]) -> list[tuple[str, ast.FunctionDef]]:
    """The entry functions and every function of the same file they reach: ``self.m()`` (a method of the
    class, else of any class of the file), ``super().__init__()`` (the base class's constructor) and module
    functions called by name; ``@validator`` stands for every pydantic validator of the file."""
    table: dict[str, ast.FunctionDef] = {}
    bases: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            table[node.name] = node
        if isinstance(node, ast.ClassDef):
            bases[node.name] = [ast.unparse(b) for b in node.bases]
            for b in node.body:
                if isinstance(b, ast.FunctionDef):
                    table[f"{node.name}.{b.name}"] = b
    todo = [n for e in entries for n in (
        [k for k, f in table.items() if any("validator" in ast.unparse(d) for d in f.decorator_list)]
        if e == "@validator" else [e])]
    seen: dict[str, ast.FunctionDef] = {}
    while todo:
        name = todo.pop()
        if name in seen or name not in table:
            continue
        seen[name] = table[name]
        cls = name.split(".")[0] if "." in name else ""
        for node in ast.walk(table[name]):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name):
                todo.append(f.id)
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                own = [c for c in [cls, *bases.get(cls, [])] if f"{c}.{f.attr}" in table]
                todo += [f"{own[0]}.{f.attr}"] if own else [k for k in table if k.endswith("." + f.attr)]
            elif (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call)
                  and ast.unparse(f.value.func) == "super"):
                todo += [f"{b}.{f.attr}" for b in bases.get(cls, [])]
    return sorted(seen.items(), key=lambda kv: kv[1].lineno)


def _checks_in(fn: ast.FunctionDef) -> list[tuple[str, int, list[str], ast.AST]]:
    out: list[tuple[str, int, list[str], ast.AST]] = []

    def block(stmts: list[ast.stmt], conds: list[str]) -> None:
        for s in stmts:
            if isinstance(s, ast.Assert):
                out.append(("assert", s.lineno, conds + [ast.unparse(s.test)], s))
            elif isinstance(s, ast.Raise):
                out.append(("raise", s.lineno, list(conds), s))
            elif isinstance(s, ast.If):
                block(s.body, conds + [ast.unparse(s.test)])
                block(s.orelse, conds + [f"not ({ast.unparse(s.test)})"])
            elif isinstance(s, (ast.For, ast.While, ast.With, ast.Try)):
                for part in ("body", "orelse", "finalbody"):
                    block(getattr(s, part, []) or [], conds)
                for h in getattr(s, "handlers", []) or []:
                    block(h.body, conds + ["<exception handler>"])
            elif isinstance(s, (ast.FunctionDef, ast.ClassDef)):
                continue

    block(fn.body, [])
    return out


def _keys(conditions: list[str], root: str, params: set[str]) -> tuple[str, ...]:
    found: list[str] = []
    for c in conditions:
        if root == "args":
            found += re.findall(r"\bargs\.([A-Za-z_][A-Za-z0-9_]*)", c)
        elif root == "self":
            found += re.findall(r"\bself\.(?:_config\.)?([A-Za-z_][A-Za-z0-9_]*)", c)
        elif root == "config":
            found += re.findall(r"\bconfig\.([A-Za-z_][A-Za-z0-9_]*)", c)
        else:
            found += [n for n in re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)\b", c) if n in params]
    return tuple(dict.fromkeys(k for k in found if not k.startswith("_")))


def extract(framework: str, base: Path, wide: bool = False) -> list[Check]:
    """The checks of the config validators (TARGETS); with ``wide`` also those of the start-up set (STARTUP)
    that the validators do not already hold. A file of STARTUP missing from ``base`` is an error."""
    out: list[Check] = []
    seen: set[str] = set()
    sets = [("validators", TARGETS[framework])] + ([("startup", STARTUP[framework])] if wide else [])
    for scope, targets in sets:
        for rel, names, root in targets:
            path = base / rel if (base / rel).exists() else base
            tree = ast.parse(path.read_text(encoding="utf-8"))
            functions = _functions(tree, names) if scope == "validators" else _reachable(tree, names)
            for name, fn in functions:
                params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
                local = _local_keys(fn, root, params) if scope == "startup" else {}
                for kind, line, conds, _node in _checks_in(fn):
                    keys = _keys(conds, root, params)
                    keys += tuple(k for c in conds for n in re.findall(r"\b[A-Za-z_]\w*\b", c)
                                  for k in local.get(n, ()) if k not in keys)
                    check = _classified(Check(framework, rel, name, line, kind, tuple(dict.fromkeys(keys)),
                                              tuple(conds), scope=scope))
                    if check.id not in seen:
                        seen.add(check.id)
                        out.append(check)
    return out


def _local_keys(fn: ast.FunctionDef, root: str, params: set[str]) -> dict[str, tuple[str, ...]]:
    """Locals of ``fn`` assigned from the configuration (``size = self.autotp_size()``): the keys they hold."""
    out: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            keys = _keys([ast.unparse(node.value)], root, params - {node.targets[0].id})
            if keys and not _STATE.search(ast.unparse(node.value)):
                out[node.targets[0].id] = keys
    return out


def _classified(check: Check) -> Check:
    """Mark a check that does not depend on the configuration alone, with why."""
    text = " and ".join(check.conditions)
    if check.scope == "startup" and _STATE.search(text):
        check.config_only = False
        check.why_not = "reads what the training code builds at run time (model, tensors, groups, ranks)"
    elif _RUNTIME.search(text):
        check.config_only = False
        check.why_not = "depends on the installed software, hardware or runtime objects"
    elif _ENV.search(text) and not any(v in text for v in _MODELED_ENV):
        check.config_only, check.why_not = False, "depends on the process environment"
    elif "<exception handler>" in check.conditions:
        check.config_only, check.why_not = False, "raised when parsing a value fails (a type check)"
    elif not check.keys:
        check.config_only, check.why_not = False, "reads no configuration key (an internal invariant)"
    return check


def _rule_keys(linter: object) -> dict[str, tuple[str, set[str], tuple[str, ...]]]:
    from debugtune.engine.prevent.unjudged import _keys as query_keys

    out = {}
    for r in linter.rules:  # type: ignore[attr-defined]
        keys = {re.sub(r"\.(length|product)$", "", k) for k in query_keys(r.query)}
        out[r.rule_id] = (r.framework, keys, r.sources)
    return out


def _canonical(framework: str, registry: object) -> dict[str, str]:
    """Config field or dest name → the linter's key (aliases of renamed dests and --yaml-cfg fields)."""
    keys = registry.for_framework(framework)  # type: ignore[attr-defined]
    table = {k: k for k in keys.keys}
    table.update(keys.aliases)
    extra = {"num_moe_experts": "num_experts", "moe_router_topk": "moe_router_topk",
             "tensor_model_parallel_size": "tensor_model_parallel_size",
             "pipeline_model_parallel_size": "pipeline_model_parallel_size",
             "context_parallel_size": "context_parallel_size",
             "expert_model_parallel_size": "expert_model_parallel_size",
             "expert_tensor_parallel_size": "expert_tensor_parallel_size",
             "virtual_pipeline_model_parallel_size": "virtual_pipeline_model_parallel_size",
             "train_batch_size": "train_batch_size", "train_micro_batch_size_per_gpu": "train_micro_batch_size_per_gpu",
             "gradient_accumulation_steps": "gradient_accumulation_steps", "world_size": "world_size",
             "fp16_enabled": "fp16.enabled", "bfloat16_enabled": "bf16.enabled", "amp_enabled": "amp.enabled",
             "zero_enabled": "zero_optimization.stage", "zero_optimization_stage": "zero_optimization.stage",
             "ep_size": "moe.ep_size", "num_experts": "num_experts", "k": "moe.k"}
    for k, v in extra.items():
        table.setdefault(k, v)
    return table


def match(checks: list[Check], linter: object) -> None:
    """Fill ``rules`` of each configuration-only check (review file first, then the key rule)."""
    review = _review()
    rule_keys = _rule_keys(linter)
    encodes: dict[str, list[str]] = defaultdict(list)
    for r in linter.store_rows if hasattr(linter, "store_rows") else []:  # type: ignore[attr-defined]
        encodes[r[0]].append(r[1])
    for c in checks:
        decided = review.get(c.id)
        if decided is not None:
            verdict, text = decided
            if verdict == "rule":
                c.rules, c.config_only = tuple(text.split(",")), True
            elif verdict == "translate":  # a rule of the same keys tests something else: only one naming it
                c.rules, c.config_only = tuple(sorted(encodes.get(c.id, []))), True
            else:
                c.config_only, c.why_not, c.rules = False, text, ()
            c.note = "reviewed"
            continue
        if c.id in encodes:
            c.rules, c.config_only = tuple(sorted(encodes[c.id])), True
            continue
        if not c.config_only:
            continue
        table = _canonical(c.framework, linter.registry)  # type: ignore[attr-defined]
        keys = {table.get(k, k) for k in c.keys}
        base = c.file.rsplit("/", 1)[-1]
        found = [rid for rid, (fw, rk, sources) in rule_keys.items()
                 if fw in (c.framework, "any") and keys <= rk and any(base in s for s in sources)]
        found.sort(key=lambda rid: len(rule_keys[rid][1]))
        c.rules = tuple(found[:2])


def _review() -> dict[str, tuple[str, str]]:
    if not REVIEW.is_file():
        return {}
    with REVIEW.open(newline="") as f:
        return {r["check"]: (r["verdict"], r["detail"]) for r in csv.DictReader(f, delimiter="\t")}


def _figures(cs: list[Check]) -> tuple[int, int, int]:
    cfg = [c for c in cs if c.config_only]
    return len(cs), len(cfg), sum(1 for c in cfg if c.rules)


def summary(checks: list[Check]) -> list[str]:
    """One row per framework: the config validators alone, and the wider start-up set."""
    rows = ["| framework | release read | validators: checks / config-only / encoded | coverage | "
            "start-up set: checks / config-only / encoded | coverage |", "|---|---|---|---|---|---|"]
    for fw in ("megatron", "deepspeed", "hf"):
        cs = [c for c in checks if c.framework == fw]
        narrow, wide = _figures([c for c in cs if c.scope == "validators"]), _figures(cs)
        repo, rel = RELEASES[fw]
        rows.append(f"| {fw} | {repo} @ {rel} | {narrow[0]} / {narrow[1]} / {narrow[2]} | "
                    f"{narrow[2] / max(1, narrow[1]):.0%} | {wide[0]} / {wide[1]} / {wide[2]} | "
                    f"{wide[2] / max(1, wide[1]):.0%} |")
    return rows


def table(checks: list[Check]) -> str:
    lines = summary(checks) + [""]
    by_fw: dict[str, list[Check]] = defaultdict(list)
    for c in checks:
        by_fw[c.framework].append(c)
    for fw in ("megatron", "deepspeed", "hf"):
        repo, rel = RELEASES[fw]
        lines += [f"<details><summary>{fw}: every check ({repo} @ {rel})</summary>", "",
                  "| check | set | keys | rule, or why none can |", "|---|---|---|---|"]
        for c in by_fw.get(fw, []):
            link = f"[{SHORT.get(c.file, c.file.rsplit('/', 1)[-1])}:{c.line}](https://github.com/{repo}/blob/{rel}/" \
                   f"{'src/transformers/' if fw == 'hf' else ''}{c.file}#L{c.line})"
            keys = ", ".join(c.keys[:6]) + (" …" if len(c.keys) > 6 else "")
            if c.rules:
                what = ", ".join(c.rules)
            elif c.config_only:
                what = "**not encoded**"
            else:
                what = c.why_not
            lines.append(f"| {link} `{c.function.rsplit('.', 1)[-1]}` | {c.scope} | {keys} | {what} |")
        lines += ["", "</details>", ""]
    return "\n".join(lines)


def gaps(checks: list[Check]) -> list[str]:
    """The configuration-only checks no rule encodes, with their condition."""
    return [f"{c.id}\t{c.scope}\t{c.function}\t{','.join(c.keys)}\t{' && '.join(c.conditions)[:300]}"
            for c in checks if c.config_only and not c.rules]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--megatron", type=Path, required=True)
    ap.add_argument("--deepspeed", type=Path, required=True)
    ap.add_argument("--transformers", type=Path, required=True, help="transformers' training_args.py")
    ap.add_argument("--write", type=Path, help="replace the coverage section of this Markdown file")
    ap.add_argument("--gaps", action="store_true", help="list the configuration-only checks no rule encodes")
    args = ap.parse_args(argv)
    from debugtune.engine.prevent.lint import Linter
    from debugtune.kg import open_store
    from debugtune.kg.knowledge import load_knowledge

    store = open_store(None)
    load_knowledge(store)
    linter = Linter.from_store(store)
    linter.store_rows = [(r["check"], r["id"]) for r in store.select(  # type: ignore[attr-defined]
        "SELECT ?check ?id WHERE { ?r dt:encodesCheck ?check ; dt:ruleId ?id }").dicts()]
    checks = extract("megatron", args.megatron, wide=True) + extract("deepspeed", args.deepspeed, wide=True) + \
        extract("hf", args.transformers)
    match(checks, linter)
    text = table(checks)
    if args.gaps:
        print("\n".join(gaps(checks)))
        return 0
    if args.write:
        doc = args.write.read_text()
        start, end = "<!-- coverage:start -->", "<!-- coverage:end -->"
        if start in doc and end in doc:
            doc = doc[:doc.index(start) + len(start)] + "\n" + text + "\n" + doc[doc.index(end):]
        else:
            doc += f"\n{start}\n{text}\n{end}\n"
        args.write.write_text(doc)
        print("\n".join(summary(checks) + ["", "gaps (configuration-only, no rule):"] + gaps(checks)))
    else:
        print(text)
    counts = Counter((c.framework, c.config_only, bool(c.rules)) for c in checks)
    print({f"{fw} {'config' if co else 'other'} {'encoded' if e else ''}".strip(): n
           for (fw, co, e), n in sorted(counts.items())}, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
