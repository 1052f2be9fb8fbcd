"""One thresholds API (`debugtune.kg.knowledge.Thresholds`): a missing key is one error naming every missing key,
and no module of the package falls back on a Python value for a knowledge-base threshold."""

from __future__ import annotations

import ast
import re

import pytest
from module_imports import REPO, package_files

from debugtune.engine.diagnose import MissingThresholdError as DiagnoseMissing
from debugtune.engine.diagnose import Thresholds as DiagnoseThresholds
from debugtune.kg import open_store
from debugtune.kg.errors import KgError, MissingThresholdError
from debugtune.kg.knowledge import Thresholds, load_knowledge, thresholds


@pytest.fixture(scope="module")
def shipped():
    store = open_store(None)
    load_knowledge(store)
    yield thresholds(store)
    store.close()


def test_one_class_and_one_error():
    assert DiagnoseThresholds is Thresholds and DiagnoseMissing is MissingThresholdError
    assert issubclass(MissingThresholdError, KgError)


def test_require_names_every_missing_key(shipped):
    assert shipped.require("infer.temperature") == {"infer.temperature": shipped["infer.temperature"]}
    with pytest.raises(MissingThresholdError) as err:
        shipped.require("infer.temperature", "no.such.key", "nor.this")
    assert err.value.keys == ("no.such.key", "nor.this")
    assert "'no.such.key', 'nor.this'" in str(err.value) and "cases/thresholds" in str(err.value)
    with pytest.raises(MissingThresholdError, match="'no.such.key'"):
        shipped["no.such.key"]


def test_no_default_can_be_given():
    th = Thresholds({"a.window": 4.6})
    assert th.as_int("a.window") == 5 and th.get("a.window") == 4.6 and th.get("b") is None
    assert "a.window" in th and "b" not in th
    with pytest.raises(TypeError):
        th.get("b", 0.5)  # type: ignore[call-arg]
    assert not hasattr(th, "int")


def _fallbacks(path, keys: set[str]) -> list[str]:
    """``x.get(KEY, default)`` where KEY is a threshold key of the shipped KB or a ``*_KEY`` constant."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and len(node.args) == 2):
            continue
        if isinstance(node.args[1], ast.Constant) and node.args[1].value is None:
            continue
        key = node.args[0]
        if (isinstance(key, ast.Constant) and key.value in keys) or (isinstance(key, ast.Name)
                                                                     and key.id.endswith("_KEY")):
            out.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_python_fallback_for_a_knowledge_base_value(shipped):
    problems = []
    own_error = re.compile(r"lacks the (\w+ )?threshold|threshold\(s\)|has no dt:Threshold")
    for path in package_files():
        problems += _fallbacks(path, set(shipped))
        text = path.read_text(encoding="utf-8")
        problems += [f"{path.relative_to(REPO)}: its own missing-threshold error" for _ in own_error.finditer(text)]
    assert problems == []
