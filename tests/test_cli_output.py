"""Output that reads: every command at ``COLUMNS=80`` (contribute, import and feedback included) prints no
line wider than 80 (tables fit, no cell cut, no ``None``), ``--wide`` keeps every column, ``--help`` lists
commands without importing them and never cuts an option name, and the ``serve`` banner names every page the
app serves."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from rich.console import Console
from typer.testing import CliRunner

from debugtune.cli.apps import DEBUG_COMMANDS, TUNE_COMMANDS, debug_app, tune_app
from debugtune.cli.common import Col, console, show_table
from debugtune.kg import open_store
from debugtune.kg.assertions import replace_diagnosis
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.records import Finding
from tests.app_server import free_port
from tests.conftest import SHARED_FIXTURES
from tests.report_fixtures import seed_run

WIDTH = 80
TRACE = SHARED_FIXTURES / "pytorch-profiler" / "cpu_only_gloo_rank34.json.gz"
LONG_ENTITY = "decoder.layers.11.mlp.experts.local_experts.3.linear_fc1"
BAD_SCRIPT = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 "
              "--num-attention-heads 12 --seq-length 2048 --max-position-embeddings 2048 "
              "--tensor-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 32 --lr 3e-4 --bf16 "
              "--tensor-model-paralel-size 2\n")
HEAVY = ("torch", "rdflib", "pyshacl", "plotly", "fastapi", "uvicorn", "scipy", "networkx", "GPy", "emukit",
         "owlready2", "pyarrow")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """An on-disk store with the seed scenario diagnosed and a run whose entity name is long."""
    from debugtune.api import diagnose

    root = tmp_path_factory.mktemp("cliout")
    store_dir = root / "store"
    st = open_store(store_dir)
    load_knowledge(st)
    run_id = diagnose(seed_run(), store=st).run
    long = Finding(id=f"GradientVanishing@{LONG_ENTITY}", symptom="GradientVanishing", dimension="gradient",
                   entity=LONG_ENTITY, onset_step=3, end_step=90, severity=0.7,
                   evidence={"grad_norm_ratio_to_median": 1.2e-4, "period_steps": 128.0, "layers_below": 3.0},
                   detector="gradient.vanishing")
    replace_diagnosis(st, "long-names", {"steps": 100}, [long])
    st.close()
    script = root / "bad.sh"
    script.write_text(BAD_SCRIPT)
    trial = root / "trial.py"
    trial.write_text(textwrap.dedent("""
        import json, sys
        std = float(sys.argv[1])
        print(json.dumps({"cv": abs(std - 0.01) * 10, "loss": 2.0 + std}))
    """))
    return {"store": str(store_dir), "run": run_id, "run_dir": str(seed_run()), "script": str(script),
            "trial": str(trial), "root": root}


def _wide_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line.rstrip()) > WIDTH]


def _commands(w) -> list[tuple[object, list[str]]]:
    s = ["--store", w["store"]]
    trial = f"{sys.executable} {w['trial']} {{init_std}}"
    return [
        (debug_app, ["kb", "stats", *s]),
        (debug_app, ["diagnose", w["run_dir"], *s]),
        (debug_app, ["root-cause", w["run"], "--explain", *s]),
        (debug_app, ["root-cause", "long-names", "--explain", *s]),
        (debug_app, ["query", f"suggest for run {w['run']} limit 5", *s]),
        (debug_app, ["query", f"causes of run {w['run']}", *s]),
        (debug_app, ["query", f"symptoms of run {w['run']}", *s]),
        (debug_app, ["query", "symptoms of run long-names", *s]),
        (debug_app, ["query", "remedies for cause GateInitBias", *s]),
        (debug_app, ["query", f"explain cause GateInitBias for run {w['run']}", *s]),
        (debug_app, ["query", "runs", *s]),
        (debug_app, ["query", "--raw-sparql", "SELECT ?r ?l WHERE { ?r a dt:Remedy ; skos:prefLabel ?l }", *s]),
        (debug_app, ["lint", w["script"], *s]),
        (debug_app, ["lint", "--list-rules", *s]),
        (debug_app, ["report", w["run"], "--html", str(w["root"] / "r.html"), *s]),
        *([(debug_app, ["import", str(TRACE), "--run-dir", str(w["root"] / "imp"), "--replace"])]
          if TRACE.is_file() else []),
        (tune_app, ["auto", w["run"], "--remedy", "RouterInitRescale", "--trial", trial, "-o", "cv", "-o", "loss",
                    "--max-experiments", "3", "--random", "--executor", "inline", "--no-record", *s]),
        (tune_app, ["roi", "--params", "7e9", "--cards", "1024", *s]),
        (tune_app, ["contribute", w["run"], "-o", str(w["root"] / "case.zip"), "--remedy", "RouterInitRescale",
                    "--outcome", "success", *s]),
        # into a store of their own, so the shared one keeps its cases and success rates for the other tests
        (tune_app, ["import", str(w["root"] / "case.zip"), "--store", "memory"]),
        (tune_app, ["feedback", "Switch-InitScale", "--outcome", "success", "--reporter", "cli-80", "--store",
                    "memory"]),
    ]


def test_every_command_fits_80_columns(world, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    runner = CliRunner()
    for app, args in _commands(world):
        r = runner.invoke(app, args)
        assert r.exit_code in (0, 1, 2), (args, r.output, r.exception)
        assert _wide_lines(r.stdout) == [], (args, r.stdout)
        assert not re.search(r"\bNone\b", r.stdout), (args, r.stdout)
        if args[0] in ("diagnose", "root-cause", "query", "roi", "auto", "lint", "report", "stats", "contribute",
                       "import", "feedback"):
            assert r.exit_code in (0, 1), (args, r.output)


def test_findings_show_every_evidence_value_and_whole_names(world, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    out = CliRunner().invoke(debug_app, ["diagnose", world["run_dir"], "--store", world["store"]]).stdout
    assert _wide_lines(out) == []
    for word in ("blocks.0.moe.router", "blocks.0.moe.router/expert:0", "relative_to_layers"):
        assert any(word in line.split() for line in out.splitlines()), word  # never split across lines
    from debugtune.cli.diagnose_cmd import print_findings
    from debugtune.kg.assertions import read_findings

    st = open_store(world["store"])
    try:
        [long] = read_findings(st, "long-names")
    finally:
        st.close()
    with console.capture() as cap:
        print_findings([long])
    text = cap.get()
    assert _wide_lines(text) == [] and LONG_ENTITY in text.split()  # a 57-character name whole on its line
    for key in long.evidence:  # all of them, the period among them
        assert key in text
    assert "period_steps 128" in text


def test_suggest_table_moves_what_does_not_fit_under_it_and_wide_keeps_it(world, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    q = ["query", f"suggest for run {world['run']} limit 3", "--store", world["store"]]
    narrow = CliRunner().invoke(debug_app, q).stdout
    wide = CliRunner().invoke(debug_app, [*q, "--wide"]).stdout
    header = next(line for line in narrow.splitlines() if line.lstrip().startswith("rank"))
    assert "config" not in header and "(card-h)" in narrow  # the unit in the header (it may wrap)
    assert "config changes:" in narrow and "unset →" in narrow  # a None default reads 'unset'
    assert "2,300" in narrow  # a cost with its thousands, its unit in the header
    wide_header = next(line for line in wide.splitlines() if line.lstrip().startswith("rank"))
    assert "config changes" in wide_header and "cases" in wide_header and max(map(len, wide.splitlines())) > WIDTH
    assert "weights" not in narrow  # an unset detail is not printed as an empty line


def test_show_table_never_breaks_a_word():
    narrow = Console(width=60, highlight=False)  # its own console: another test may have sized the shared one
    words = ["alpha_beta_gamma_delta", "moe_router_enable_expert_bias", "x" * 20]
    rows = [[w, "some longer text that may wrap over several lines", "1,234", w[::-1]] for w in words]
    with narrow.capture() as cap:
        show_table([Col("name", keep=True), Col("text"), Col("n", "right"), Col("reversed", detail=False)], rows,
                   title="t", out=narrow)
    text = cap.get()
    assert _wide_lines(text) == [] and max(len(line.rstrip()) for line in text.splitlines()) <= 60
    tokens = set(text.split())
    assert all(w in tokens for w in words)
    assert "--wide" in text or all(w[::-1] in tokens for w in words)


def test_help_loads_no_command_module_and_no_engine():
    code = ("import sys; from debugtune.cli import debug_main; sys.argv = ['cann-debug', '--help']\n"
            "try:\n    debug_main()\nexcept SystemExit:\n    pass\n"
            "import json; print(json.dumps(sorted(m for m in sys.modules if m.startswith('debugtune.cli.') "
            f"or m.split('.')[0] in {HEAVY!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == ["debugtune.cli.apps"], loaded
    help_text = done.stdout
    for name in DEBUG_COMMANDS:
        assert re.search(rf"^\s+{re.escape(name)}\s", help_text, re.M), name


def test_lint_loads_only_what_lint_needs(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8}')
    code = ("import sys; from debugtune.cli import debug_main\n"
            f"sys.argv = ['cann-debug', 'lint', {str(cfg)!r}, '--store', 'memory']\n"
            "try:\n    debug_main()\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m.startswith('debugtune.cli.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "['debugtune.cli.apps', 'debugtune.cli.common', " \
                                                   "'debugtune.cli.lint_cmd']"


@pytest.mark.parametrize(("app", "table"), [(debug_app, DEBUG_COMMANDS), (tune_app, TUNE_COMMANDS)])
def test_command_tables_match_the_commands(app, table, monkeypatch):
    """The listing's line is the first sentence of each command's docstring; every registered command is listed;
    no option name is cut in any command's help at 80 columns."""
    import typer

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    group = typer.main.get_command(app)
    runner = CliRunner()
    for name, (_, line) in table.items():
        cmd = group.load(name)
        doc = " ".join((cmd.help or "").split())
        assert doc.startswith(line.rstrip(".")), (name, doc, line)
        r = runner.invoke(app, [name, "--help"])
        assert r.exit_code == 0, r.output
        assert _wide_lines(r.output) == [], r.output
        subcommands = getattr(cmd, "commands", {})
        for sub in subcommands.values():
            sub_help = runner.invoke(app, [name, sub.name, "--help"]).output
            assert _wide_lines(sub_help) == [], sub_help
            for p in sub.params:
                for opt in p.opts:
                    assert opt in sub_help, (name, sub.name, opt)
        for p in cmd.params:
            for opt in (*p.opts, *p.secondary_opts):
                if opt.startswith("-"):
                    assert opt in r.output, (name, opt)  # whole: never `--deterministic-r…`
    registered = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}
    registered |= {g.name for g in app.registered_groups}
    assert registered <= set(table), registered - set(table)


def test_serve_banner_names_every_page(world):
    from debugtune.cli.serve_cmd import SERVED
    from debugtune.server import create_app

    st = open_store(None)
    app = create_app(st)
    app.state.settings.close()  # no query worker is needed to list the routes
    st.close()
    listed = {path for _, path in SERVED}
    for route in app.routes:
        path = getattr(route, "path", "")
        methods = getattr(route, "methods", set()) or set()
        if "GET" not in methods or path.startswith(("/static", "/favicon", "/openapi", "/docs/", "/redoc")):
            continue
        generic = re.sub(r"\{[^}]+\}", "{id}", path)
        assert generic in listed or path in listed, path
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", "from debugtune.cli import debug_main; debug_main()", "serve",
                             "--store", "memory", "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**_env(), "COLUMNS": str(WIDTH)})
    try:
        lines = [proc.stdout.readline() for _ in range(len(SERVED) + 1)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = "".join(lines)
    assert _wide_lines(text) == [], text
    for name, path in SERVED:
        assert f"http://127.0.0.1:{port}{path}" in text, (name, text)


def _env() -> dict[str, str]:
    return dict(os.environ)


def test_kb_check_reports_its_stages():
    """`kb check` shows what it is doing while pyshacl runs (its spinner reads these stages)."""
    from debugtune.kg.validate import validate_store

    graph = "https://w3id.org/debugtune/graph/small"
    st = open_store(None)
    st.load_data("@prefix dt: <https://w3id.org/debugtune#> . <urn:x> a dt:Cause .", graph=graph)
    stages: list[str] = []
    validate_store(st, graphs=(graph,), progress=stages.append)
    assert stages[0] == "reading small for pyshacl" and re.fullmatch(r"validating \d+ triples .*", stages[-1])
