"""Every prevention rule in the knowledge graph carries its own test: a configuration that triggers it and
one that does not (dt:exampleViolating / dt:examplePassing), linted through the real readers and graph."""

from __future__ import annotations

from collections import Counter

import pytest

from debugtune.engine.prevent.lint import Linter
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.namespaces import KB

_STORE = open_store(None)
load_knowledge(_STORE)
LINTER = Linter.from_store(_STORE)
RULES = {r.rule_id: r for r in LINTER.rules}


def _lint(rule, text: str, kind: str):
    framework = rule.framework if rule.framework != "any" else "auto"
    return LINTER.lint_path(f"<{rule.rule_id} {kind}>", framework=framework, text=text, only={rule.rule_id})


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_fires_on_its_violating_example(rule_id):
    rule = RULES[rule_id]
    assert rule.violating, f"{rule_id} has no dt:exampleViolating"
    for text in rule.violating:
        result = _lint(rule, text, "violating")
        assert not result.rule_errors, result.rule_errors
        hits = [v for v in result.violations if v.rule_id == rule_id]
        assert hits, f"{rule_id} does not fire on:\n{text}"
        assert all(v.severity == rule.severity and v.message and "{?" not in v.message for v in hits)


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_is_quiet_on_its_passing_example(rule_id):
    rule = RULES[rule_id]
    assert rule.passing, f"{rule_id} has no dt:examplePassing"
    for text in rule.passing:
        result = _lint(rule, text, "passing")
        assert not result.rule_errors, result.rule_errors
        assert rule_id not in result.rule_ids(), f"{rule_id} fires on its passing example:\n{text}"


def test_rule_counts_per_family():
    by_prefix = Counter(rid.rstrip("0123456789B") for rid in RULES if not rid.startswith("LRN"))
    assert by_prefix["MEG"] >= 60 and by_prefix["DS"] >= 20 and by_prefix["MOE"] >= 10 and by_prefix["HF"] >= 10
    assert {r.framework for r in RULES.values()} <= {"megatron", "deepspeed", "hf", "any"}


def test_every_rule_is_sourced_and_classified():
    classes = {"parallel-divisibility", "batch-arithmetic", "mutual-exclusion", "missing-requirement", "moe-routing",
               "precision", "version-specific", "value-range", "environment", "unknown-key"}
    for rule in RULES.values():
        assert rule.sources and all(s.startswith("https://") for s in rule.sources), rule.rule_id
        assert rule.error_class in classes, rule.rule_id
        assert rule.label and rule.fix, rule.rule_id


def test_prevented_causes_exist_in_the_knowledge_base():
    causes = set(_STORE.query("SELECT ?c WHERE { ?c a dt:Cause }").column("c"))
    if not causes:
        pytest.skip("the knowledge base has no causes yet (cases/causes.ttl)")
    for rule in RULES.values():
        for cause in rule.prevents:
            assert KB + cause in causes, f"{rule.rule_id} prevents unknown cause {cause}"


def test_version_ranges_select_the_rule_of_the_release():
    old = LINTER.lint_path("<v>", framework="megatron", version="0.14.0",
                           text="--num-experts 8 --expert-model-parallel-size 2 --tensor-model-parallel-size 2")
    new = LINTER.lint_path("<v>", framework="megatron", version="0.15.0",
                           text="--num-experts 8 --expert-model-parallel-size 2 --tensor-model-parallel-size 2")
    assert "MOE006" in old.rule_ids() and "MOE005" not in old.rule_ids()
    assert "MOE005" in new.rule_ids() and "MOE006" not in new.rule_ids()
    assert [v.severity for v in old.violations if v.rule_id == "MOE006"] == ["error"]


def test_the_valid_reference_configurations_have_no_errors():
    """cases/prevention/valid: the configurations learned rules are checked against; no KB rule blocks them."""
    from debugtune.engine.prevent.learn import VALID_CONFIGS

    paths = sorted(VALID_CONFIGS.iterdir())
    assert {LINTER.read(str(p)).framework for p in paths} == {"megatron", "deepspeed", "hf"}
    for path in paths:
        result = LINTER.lint_path(str(path))
        assert not result.errors and not result.rule_errors, (path.name, [v.message for v in result.errors])


def test_every_key_a_rule_reads_is_a_known_key_by_its_own_name():
    """A condition that names an alias or a key no release has never matches: the graph uses canonical names."""
    import re

    for rule in RULES.values():
        frameworks = ("megatron", "deepspeed", "hf") if rule.framework == "any" else (rule.framework,)
        for key in set(re.findall(r"cfg:([A-Za-z_][A-Za-z0-9_.]*[A-Za-z0-9_])", rule.query)):
            key = re.sub(r"\.(length|product)$", "", key)
            assert any(key in LINTER.registry.for_framework(f).keys or
                       LINTER.registry.for_framework(f).in_open_section(key) for f in frameworks), (rule.rule_id, key)
