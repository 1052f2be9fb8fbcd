"""Preflight: the knowledge base's initialisation checks evaluated on the live model before its first step.

A configuration file cannot show every mistake: a router whose bias favours one expert is made by the
initialisation code, not by a launch flag. `preflight` looks at the model as built — before the optimizer
has taken a step — and judges each check the way the diagnosis judges the same symptom after the fact: the
threshold comes from the knowledge base (`moe.router_init.spread` for ``RouterBiasedAtInit``), the causes are
those with a causal link to the symptom, the fix the most effective remedy of the likeliest cause. Code here
only measures (the bias spread of each router it finds); what counts as wrong, why, and what to do is data.
``debugtune.attach(..., preflight=True)`` runs it and stops before step 1 on a finding.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from debugtune.engine.prevent.errors import LintError
from debugtune.kg.knowledge import thresholds
from debugtune.kg.namespaces import KB, local_name
from debugtune.kg.sparql import iri
from debugtune.kg.store import Store

ROUTER_SEGMENT = re.compile(r"^(router|gate|gating|wg)$")
"""A module path segment that names an MoE router (``blocks.0.moe.router.gate``, Mixtral's ``...moe.gate``,
DeepSpeed's ``gate.wg``); a gated MLP's ``gate_proj`` is not one."""


class PreflightError(LintError):
    """The live model fails a preflight check: raised by ``attach(..., preflight=True)`` before step 1."""

    def __init__(self, result: PreflightResult):
        self.result = result
        super().__init__("preflight: " + "; ".join(f.message for f in result.findings))


@dataclass(frozen=True)
class Check:
    """One initialisation check: the symptom it judges, its threshold key and the measurement (per entity)."""

    id: str
    symptom: str
    threshold_key: str
    measure: Callable[[Any], list[tuple[str, float, dict[str, Any]]]]


@dataclass(frozen=True)
class PreflightFinding:
    """A check that failed on one entity, with the causes and the fix the knowledge base gives."""

    check: str
    symptom: str
    entity: str
    value: float
    threshold: float
    causes: tuple[str, ...]
    fix: str
    evidence: dict[str, Any]
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.check, "symptom": self.symptom, "entity": self.entity, "value": self.value,
                "threshold": self.threshold, "causes": list(self.causes), "fix": self.fix,
                "evidence": dict(self.evidence), "message": self.message}


@dataclass(frozen=True)
class PreflightResult:
    """Every check run, what it judged (entities per check) and the findings."""

    judged: dict[str, tuple[str, ...]]
    findings: tuple[PreflightFinding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "judged": {k: list(v) for k, v in self.judged.items()},
                "findings": [f.as_dict() for f in self.findings]}


def routers(model: Any) -> list[tuple[str, Any]]:
    """The model's router layers: linear modules with a bias and two or more outputs on a router-named path."""
    found = []
    for name, module in model.named_modules():
        bias = getattr(module, "bias", None)
        out = getattr(module, "out_features", None)
        if bias is None or not isinstance(out, int) or out < 2:
            continue
        if any(ROUTER_SEGMENT.match(seg) for seg in name.split(".")):
            found.append((name, module))
    return found


def router_bias_spread(model: Any) -> list[tuple[str, float, dict[str, Any]]]:
    """Per router: how far the favoured expert's bias lies above the median expert's (nats), as the probe's
    ``router_bias_spread`` measures it."""
    out = []
    for name, module in routers(model):
        b = module.bias.detach().float().cpu().numpy().reshape(-1)
        top = int(np.argmax(b))
        spread = float(b[top] - np.median(b))
        out.append((name, spread, {"favoured_expert": top, "experts": int(b.size),
                                   "preference_factor": float(np.exp(min(spread, 50.0)))}))
    return out


CHECKS = (Check("moe.router_init", "RouterBiasedAtInit", "moe.router_init.spread", router_bias_spread),)
"""The preflight checks (a contract test runs each on a model that fails it and on one that passes)."""


def _causes_and_fix(store: Store, symptom: str) -> tuple[tuple[str, ...], str]:
    """Causes linked to ``symptom`` (strongest link first) and the most effective remedy of the first one."""
    rows = store.select(f"""SELECT ?cause ?strength WHERE {{
        ?l a dt:CausalLink ; dt:from ?cause ; dt:to {iri(KB + symptom)} ; dt:strength ?strength .
        ?cause a dt:Cause }} ORDER BY DESC(?strength) ?cause""").dicts()
    causes = tuple(dict.fromkeys(local_name(r["cause"]) for r in rows))
    if not causes:
        return (), ""
    fix = store.select(f"""SELECT ?remedy ?label WHERE {{
        ?remedy a dt:Remedy ; dt:addresses {iri(KB + causes[0])} ; dt:effectiveness ?e .
        OPTIONAL {{ ?remedy skos:prefLabel ?label }} }} ORDER BY DESC(?e) ?remedy LIMIT 1""").dicts()
    if not fix:
        return causes, ""
    label = fix[0]["label"]
    return causes, local_name(fix[0]["remedy"]) + (f" ({label})" if label else "")


def preflight(model: Any, store: Store, *, checks: Iterable[Check] = CHECKS) -> PreflightResult:
    """Run ``checks`` on ``model`` with the store's thresholds (the knowledge base must be loaded)."""
    checks = tuple(checks)
    th = thresholds(store).require(*(check.threshold_key for check in checks))
    judged: dict[str, tuple[str, ...]] = {}
    findings = []
    for check in checks:
        limit = th[check.threshold_key]
        measured = check.measure(model)
        judged[check.id] = tuple(name for name, _v, _e in measured)
        for entity, value, evidence in measured:
            if not value >= limit:
                continue
            causes, fix = _causes_and_fix(store, check.symptom)
            because = f", as {' or '.join(causes[:2])} makes it" if causes else ""
            message = (f"{check.symptom} at {entity}: {value:.3g} ≥ {limit:g} ({check.threshold_key}){because}"
                       + (f"; fix: {fix}" if fix else ""))
            findings.append(PreflightFinding(check.id, check.symptom, entity, value, limit, causes, fix, evidence,
                                             message))
    return PreflightResult(judged, tuple(findings))
