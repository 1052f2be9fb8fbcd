"""Fuzz targets for every reader of outside input: importers, lint readers, the DSL, case packages, SPARQL text.

Each target takes a case number, builds a mutant of a real seed input with ``random.Random(case)`` (byte
flips, truncation, huge / non-finite numbers, deep nesting, bad encodings, corrupt compression), feeds it
to the reader and says what happened: ``ok``, ``handled`` (the project's error: a `DebugtuneError`
subclass with a message that names the input) or ``unhandled`` (any other exception, the failure this
suite exists to find). Used by tests/test_fuzz.py (a few hundred seeded cases per reader) and
bench/fuzz.py (thousands, counted per reader).
"""

from __future__ import annotations

import gzip
import json
import random
import re
import shutil
import tempfile
import traceback
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from debugtune.kg.errors import DebugtuneError

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO.parent / "shared" / "fixtures"

_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
HOSTILE_NUMBERS = (b"99999999999999999999", b"1e999", b"-1e999", b"inf", b"-inf", b"nan", b"NaN", b"Infinity",
                   b"-Infinity", b"1" + b"0" * 5000, b"9223372036854775808", b"-9223372036854775809", b"1e-400",
                   b"0x1F", b"-0", b"1_000", b"\xd9\xa3")
BAD_BYTES = (b"\xff", b"\xfe\xff", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf", b"\xc3", b"\\ud800", b'"\\udc80"',
             b"\r", b"\x1b[31m")


@dataclass(frozen=True)
class Outcome:
    """What one fuzz case did: ok, handled or unhandled (with the exception type and a traceback tail)."""

    status: str
    kind: str = ""
    detail: str = ""


def mutate(data: bytes, rng: random.Random, *, json_like: bool = False) -> bytes:
    """One mutant of ``data`` (see the module docstring); JSON-like inputs also get deep nesting."""
    kind = rng.choice(("flip", "truncate", "number", "number", "nest", "encoding", "splice", "empty"))
    if kind == "flip" and data:
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            pos = rng.randrange(len(out) + 1)
            op = rng.random()
            if op < 0.4 and pos < len(out):
                out[pos] = rng.randrange(256)
            elif op < 0.7:
                out[pos:pos] = bytes([rng.randrange(256)])
            elif pos < len(out):
                del out[pos]
        return bytes(out)
    if kind == "truncate" and data:
        return data[:rng.randrange(len(data))]
    if kind == "number":
        spots = list(_NUMBER.finditer(data))
        if spots:
            out = data
            for m in sorted(rng.sample(spots, min(len(spots), rng.randint(1, 3))), key=lambda m: -m.start()):
                out = out[:m.start()] + rng.choice(HOSTILE_NUMBERS) + out[m.end():]
            return out
    if kind == "nest":
        depth = rng.choice((2_000, 5_000, 30_000))
        opener, closer = (b"[", b"]") if rng.random() < 0.5 else (b'{"a":', b"}")
        blob = opener * depth + b"1" + closer * depth
        if json_like and data.lstrip().startswith((b"{", b"[")):
            pos = data.find(b":") + 1 if b":" in data else 0
            return data[:pos] + blob + b"," + data[pos:] if pos else blob
        pos = rng.randrange(len(data) + 1)
        return data[:pos] + b"\n" + blob + b"\n" + data[pos:]
    if kind == "encoding":
        pos = rng.randrange(len(data) + 1)
        return data[:pos] + rng.choice(BAD_BYTES) + data[pos:]
    if kind == "splice" and data:
        a, b = sorted(rng.randrange(len(data) + 1) for _ in range(2))
        return data[:a] + data[a:b] * rng.randint(2, 4) + data[b:]
    return b"" if rng.random() < 0.5 else data


def corrupt_gzip(plain: bytes, rng: random.Random) -> bytes:
    """A gzip stream of ``plain`` with bytes of its compressed body changed, or cut short."""
    packed = bytearray(gzip.compress(plain, mtime=0))
    if rng.random() < 0.5 and len(packed) > 20:
        for _ in range(rng.randint(1, 4)):
            packed[rng.randrange(10, len(packed))] = rng.randrange(256)
        return bytes(packed)
    return bytes(packed[:rng.randrange(10, max(11, len(packed)))])


def classify(fn: Callable[[], object]) -> Outcome:
    try:
        fn()
    except DebugtuneError as err:
        text = str(err)
        if "\n" in text.split("\n", 1)[0] or not text.strip():
            return Outcome("unhandled", "EmptyMessage", text)
        return Outcome("handled", type(err).__name__, text.split("\n", 1)[0][:200])
    except Exception as err:  # noqa: BLE001 - what the fuzzer is looking for
        tail = "".join(traceback.format_exception(err)[-3:])[-600:]
        return Outcome("unhandled", type(err).__name__, tail)
    return Outcome("ok")


# --- importers ---------------------------------------------------------------------------------------

def _small_trace(path: Path, events: int = 300) -> bytes:
    doc = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        doc["traceEvents"] = doc["traceEvents"][:events]
    elif isinstance(doc, list):
        doc = doc[:events]
    return json.dumps(doc).encode()


def _head_lines(path: Path, lines: int = 60) -> bytes:
    return b"".join(path.read_bytes().splitlines(keepends=True)[:lines])


@cache
def importer_seeds() -> tuple[tuple[str, str, tuple[tuple[str, bytes], ...]], ...]:
    """(format, name of the file to import, files of the seed) for every importer."""
    from tests.test_importers_logs import MEGATRON_LOG, NPU_SMI, NVIDIA_SMI

    seeds: list[tuple[str, str, tuple[tuple[str, bytes], ...]]] = [
        ("megatron-log", "train.log", (("train.log", MEGATRON_LOG.encode()),)),
        ("nvidia-smi", "gpu.csv", (("gpu.csv", NVIDIA_SMI.encode()),)),
        ("npu-smi", "npu.log", (("npu.log", NPU_SMI.format(u0=35, m1=3300).encode()),)),
        ("jsonl", "m.jsonl", (("m.jsonl", b"\n".join(json.dumps({"step": s, "loss": 2.0 - s / 10, "lr": 1e-3,
                                                                "rank": s % 2}).encode() for s in range(8))),)),
        ("jsonl", "trainer_state.json", (("trainer_state.json", json.dumps({"global_step": 20, "log_history": [
            {"epoch": 0.5, "grad_norm": 3.2, "learning_rate": 5e-5, "loss": 2.1, "step": 10},
            {"epoch": 1.0, "eval_loss": 1.9, "step": 20}]}).encode()),)),
        ("csv", "m.csv", (("m.csv", b"epoch,step,train_loss_step,val_loss,lr-AdamW\n0,49,0.91,,0.001\n"
                                    b"0,99,0.72,,0.001\n0,99,,0.80,\n"),)),
        ("msprobe", "mon", (("mon/Dec03_10-00-00-rank1-abc/grad_reduced_0-1.csv",
                             b"vpp_stage,name,step,min,max,norm,mean,zeros,nans\n0,1.mlp.w,0,-0.5,0.25,3.0,0.01,0.1,0\n"
                             b"0,1.mlp.w,1,-0.1,0.2,nan,nan,0.2,12\n"),)),
    ]
    prof = FIXTURES / "pytorch-profiler"
    if prof.is_dir():
        for p in sorted(prof.glob("*.json.gz"))[:2]:
            seeds.append(("pytorch-trace", p.name, ((p.name, gzip.compress(_small_trace(p), mtime=0)),)))
    ascend = FIXTURES / "ascend-profiler" / "level1" / "rank0_ascend_pt"
    if ascend.is_dir():
        files = []
        for p in sorted(ascend.rglob("*")):
            if p.is_file():
                rel = "rank0_ascend_pt/" + p.relative_to(ascend).as_posix()
                data = _small_trace(p) if p.name == "trace_view.json" else (
                    _head_lines(p) if p.suffix == ".csv" else p.read_bytes())
                files.append((rel, data))
        seeds.append(("ascend", "rank0_ascend_pt", tuple(files)))
    cluster = FIXTURES / "ascend-cluster"
    if cluster.is_dir():
        seeds.append(("ascend", "cluster", tuple(("cluster/" + p.name, _head_lines(p, 200) if p.suffix == ".csv"
                                                   else p.read_bytes()) for p in sorted(cluster.iterdir())
                                                  if p.suffix in (".csv", ".json"))))
    return tuple(seeds)


def fuzz_importer(case: int, work: Path) -> Outcome:
    """Import a mutant of one importer seed (some cases by autodetection)."""
    from debugtune.engine.capture.importers import import_path

    rng = random.Random(case)
    fmt, target, files = importer_seeds()[case % len(importer_seeds())]
    folder = work / f"in{case}"
    shutil.rmtree(folder, ignore_errors=True)
    victim = rng.randrange(len(files))
    for k, (name, data) in enumerate(files):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if k == victim:
            plain = gzip.decompress(data) if name.endswith(".gz") else data
            if name.endswith(".gz") and rng.random() < 0.3:
                data = corrupt_gzip(plain, rng)
            else:
                mutant = mutate(plain, rng, json_like=name.endswith((".json", ".gz", ".jsonl")))
                data = gzip.compress(mutant, mtime=0) if name.endswith(".gz") else mutant
        path.write_bytes(data)
    out = work / f"run{case}"
    try:
        return classify(lambda: import_path(folder / target, out, fmt=None if rng.random() < 0.2 else fmt))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


# --- lint readers --------------------------------------------------------------------------------------

LINT_SEEDS = (
    ("launch.sh", "#!/bin/bash\nGPUS=8\nNNODES=${NNODES:-2}\nWORLD=$(($GPUS*$NNODES))\nARGS=(\n --num-layers 24 "
                  "--hidden-size 2048\n --num-attention-heads 16 # heads\n)\ntorchrun pretrain_gpt.py ${ARGS[@]} "
                  "--tensor-model-parallel-size 2 --micro-batch-size 2 --global-batch-size 64 --lr 3.0e-4 \\\n"
                  "  --bf16 --train-iters 1000 --save \"$CKPT\"\n"),
    ("model_config.yaml", "ENV_VARS:\n  CUDA_DEVICE_MAX_CONNECTIONS: 1\nMODEL_ARGS:\n  --tensor-model-parallel-size: 2"
                          "\n  --bf16: true\n  --num-experts: 8\n  --data-path: ${DATA_PATH}/corpus\n"),
    ("gpt.yaml", "language_model:\n  num_layers: 24\n  num_moe_experts: 8\n  layernorm_epsilon: 1.e-5\n"
                 "model_parallel:\n  tensor_model_parallel_size: 2\nmicro_batch_size: 2\nlr: 2.5e-4\n"),
    ("ds.json", json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4,
                            "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},
                            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95]}}}, indent=2)),
    ("config.json", json.dumps({"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2,
                                "output_dir": "o", "learning_rate": 1e-5, "per_device_train_batch_size": 8})),
    ("job.yaml", "framework: deepspeed\nversion: '0.16.0'\nlaunch: {world_size: 8}\nsettings:\n"
                 "  bf16: {enabled: true}\n  train_batch_size: 32\n  train_micro_batch_size_per_gpu: 2\n"),
)


@cache
def _linter():
    from debugtune.engine.prevent.lint import Linter
    from debugtune.kg import open_store
    from debugtune.kg.knowledge import load_knowledge

    store = open_store(None)
    load_knowledge(store)
    return Linter.from_store(store)


def fuzz_lint(case: int, work: Path) -> Outcome:
    """Lint a mutant of one configuration seed, read from a file."""
    rng = random.Random(case)
    name, text = LINT_SEEDS[case % len(LINT_SEEDS)]
    path = work / f"c{case}_{name}"
    path.write_bytes(mutate(text.encode(), rng, json_like=name.endswith(".json")))
    try:
        return classify(lambda: _linter().lint_path(str(path)))
    finally:
        path.unlink(missing_ok=True)


# --- the DSL -------------------------------------------------------------------------------------------

DSL_SEEDS = ("suggest for run moe-1 limit 5", "causes of run moe-1", "symptoms of run moe-1 where severity >= 0.5",
             "cases similar to run moe-1 threshold 0.5", "remedies for cause GateInitBias",
             "explain cause GateInitBias for run moe-1", "runs", 'suggest for run moe-1 where risk <= medium and '
             'cost < 10 limit 3')


@cache
def _dsl_store():
    from tests.query_kb import make_store

    return make_store()


def fuzz_dsl(case: int, work: Path) -> Outcome:
    """Run a mutant DSL query (text, decoded as the command line would: bad bytes become surrogates)."""
    from debugtune.query import run_query

    rng = random.Random(case)
    raw = mutate(DSL_SEEDS[case % len(DSL_SEEDS)].encode(), rng)
    text = raw.decode("utf-8", "surrogateescape")
    return classify(lambda: run_query(text, _dsl_store()))


# --- case packages -------------------------------------------------------------------------------------

@cache
def _package_seed(work: Path) -> dict[str, bytes]:
    from tests.test_packages import make_package, read_zip

    return read_zip(make_package(work / "seed.zip"))


@cache
def _package_store():
    from tests.test_packages import fresh_store

    return fresh_store()


def fuzz_package(case: int, work: Path) -> Outcome:
    """Import a mutant package (one file mutated, or the zip itself corrupted); a refusal changes nothing."""
    from debugtune.kg.packages import import_package

    rng = random.Random(case)
    files = dict(_package_seed(work.parent))
    path = work / f"p{case}.zip"
    name = rng.choice(sorted(files))
    files[name] = mutate(files[name], rng, json_like=name.endswith(".json"))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, data in files.items():
            zf.writestr(n, data)
    if rng.random() < 0.15:
        blob = bytearray(path.read_bytes())
        for _ in range(rng.randint(1, 6)):
            blob[rng.randrange(len(blob))] = rng.randrange(256)
        path.write_bytes(bytes(blob))
    store = _package_store()
    before = store.count()
    try:
        outcome = classify(lambda: import_package(store, path))
        if outcome.status == "handled" and store.count() != before:
            return Outcome("unhandled", "HalfWritten", "a refused package changed the store")
        if outcome.status == "ok":
            for graph in store.graphs():
                if graph.startswith("urn:debugtune:package:"):
                    store.clear(graph)
        return outcome
    finally:
        path.unlink(missing_ok=True)


# --- SPARQL text ---------------------------------------------------------------------------------------

SPARQL_SEEDS = (
    "SELECT ?c ?l WHERE { ?c a dt:Cause ; skos:prefLabel ?l FILTER(lang(?l) = 'en') } ORDER BY ?c LIMIT 5",
    "ASK { kb:GateInitBias a dt:Cause }",
    "CONSTRUCT { ?s ?p ?o } WHERE { GRAPH ?g { ?s ?p ?o } } LIMIT 3",
    "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o OPTIONAL { ?o ?q ?r } FILTER(?n < 3 || ?n > 10) }",
    "PREFIX ex: <http://example.org/> SELECT * WHERE { VALUES ?x { ex:a\\'b 1 2.5 'x' } BIND(STR(?x) AS ?y) }",
    "SELECT * WHERE { { ?s ?p ?o } UNION { ?s a ?t } MINUS { ?s skos:broader ?b } }",
)


@cache
def _sparql_workers():
    """A small store and one query worker process: a query that crashed the engine kills only the worker."""
    from debugtune.kg import open_store
    from debugtune.kg.query_workers import QueryWorkers

    store = open_store(None)
    store.load_data("<urn:a> <urn:p> 1 . <urn:b> <urn:p> 'x' . <urn:a> <urn:q> <urn:b> .", graph="urn:g")
    workers = QueryWorkers(1, 20.0)
    workers.share(store)
    return store, workers


def count_solutions(store, text: str) -> int:
    """Run a query on a worker (see `_sparql_workers`) and count what it returned."""
    result = store.query(text)
    return len(getattr(result, "rows", ())) if not isinstance(result, bool) else int(result)


def fuzz_sparql(case: int, work: Path) -> Outcome:
    """Guard a mutant SPARQL text, then run what the guard lets through on a small store in a worker process."""
    from debugtune.kg.query_workers import WorkerError
    from debugtune.kg.sparql_guard import check_sparql

    rng = random.Random(case)
    text = mutate(SPARQL_SEEDS[case % len(SPARQL_SEEDS)].encode(), rng).decode("utf-8", "replace")
    store, workers = _sparql_workers()

    def run() -> None:
        check_sparql(text)
        workers.call(count_solutions, store, text)

    outcome = classify(run)
    if outcome.kind == WorkerError.__name__:
        return outcome if "died" in outcome.detail else Outcome("handled", "stopped", "stopped at the time limit")
    if outcome.status == "unhandled" and outcome.kind in ("ValueError", "RuntimeError", "OSError"):
        return Outcome("handled", outcome.kind, "an evaluation error of a well-formed query")
    return outcome


TARGETS: dict[str, Callable[[int, Path], Outcome]] = {
    "importers": fuzz_importer, "lint": fuzz_lint, "dsl": fuzz_dsl, "packages": fuzz_package, "sparql": fuzz_sparql,
}


def run_cases(target: str, cases: range, work: Path | None = None) -> list[Outcome]:
    """The outcomes of ``cases`` of one target, in a scratch folder."""
    own = work is None
    folder = Path(tempfile.mkdtemp(prefix=f"fuzz-{target}-")) if own else work
    (folder / target).mkdir(parents=True, exist_ok=True)
    try:
        return [TARGETS[target](case, folder / target) for case in cases]
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)
