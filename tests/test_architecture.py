"""The house rule of DESIGN §1: a stage imports only earlier stages and `kg/`; nothing imports the front door."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Stage order; each entry may import itself and anything before it.
ORDER = ["kg", "native", "engine.telemetry", "engine.capture", "engine.diagnose", "engine.infer",
         "engine.suggest", "query", "engine.tune", "engine.contribute", "engine.prevent", "engine.report"]
FOLDERS = {"kg": "kg", "native": "native", "query": "query", "engine": "engine"}


def _stage_of(module: str) -> str | None:
    """The stage of a dotted module name under `debugtune.`, or 'front' for the front door."""
    if not module.startswith("debugtune"):
        return None
    parts = module.split(".")[1:]
    if not parts:
        return "front"
    if parts[0] in ("ontology", "cases"):
        return "data"
    if parts[0] == "engine":
        return "engine." + parts[1] if len(parts) > 1 else "engine"
    if parts[0] in ("kg", "native", "query"):
        return parts[0]
    return "front"


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "debugtune" and node.level == 0:
            out += [(node.lineno, f"debugtune.{a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def test_stages_import_only_earlier_stages():
    problems = []
    for folder in FOLDERS:
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            own = _stage_of("debugtune." + ".".join(p for p in parts if p != "__init__"))
            if own == "engine":  # engine/__init__.py
                continue
            allowed = set(ORDER[: ORDER.index(own) + 1]) | {"data", "engine"}
            for line, module in _imports(path):
                stage = _stage_of(module)
                if stage is not None and stage not in allowed:
                    problems.append(f"{path.relative_to(REPO)}:{line} ({own}) imports {module} ({stage})")
    assert problems == []


def test_every_engine_stage_is_known():
    stages = {p.name for p in (REPO / "engine").iterdir() if (p / "__init__.py").exists()}
    assert stages <= {s.split(".", 1)[1] for s in ORDER if s.startswith("engine.")}
