"""`contribute`: a diagnosed run → a scrubbed, SHACL-checked RO-Crate case package (zip).

Layout (docs/contribute.md)::

    ro-crate-metadata.json   RO-Crate 1.1 metadata: root dt:CasePackage Dataset, licence, author, date, parts
    case.ttl                 the case graph (engine.contribute.case_graph)
    environment.json         versions only (Python, framework, packages, OS and device kind)
    privacy-report.json      what was hashed or removed, where (never a value)
    sandbox/config.json      with a sandbox: scenario, synthetic-data generator, seeds, fault, remedy
    sandbox/validate.py      the validation script (runs only on `cann-tune sandbox run`)
    sandbox/expected.json    the claim, the figures measured here, the tolerances

The package is checked exactly as an importer checks it (structure and SHACL shapes) before the
zip is written, atomically.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyoxigraph as ox

from debugtune.engine.contribute.case import Choice, RunFacts, choose, gather
from debugtune.engine.contribute.case_graph import case_triples, environment, turtle
from debugtune.engine.contribute.sandbox import SCENARIOS, SandboxSpec, Verdict, build_sandbox
from debugtune.engine.contribute.scrub import Scrubber, identifying_values, local_identity
from debugtune.engine.telemetry.atomic import atomic_write_bytes
from debugtune.kg.knowledge import thresholds
from debugtune.kg.namespaces import DT, SKOS
from debugtune.kg.package_archive import METADATA, archive_bytes, content_hash
from debugtune.kg.package_crate import Part, crate_metadata, license_iri, metadata_bytes
from debugtune.kg.packages import check_package
from debugtune.kg.store import Store

NOT_INCLUDED = ("model weights and checkpoints", "training data", "raw telemetry (only the symptom signature and "
                "the findings' figures)", "the run directory", "replay checkpoint references",
                "run.json fields other than versions")


@dataclass(frozen=True)
class ContributeOptions:
    """How to build a package (the `cann-tune contribute` options)."""

    license: str = "CC-BY-SA-4.0"
    attribution: str | None = None
    privacy_safe: bool = True
    redact: tuple[str, ...] = ()
    cause: str | None = None
    remedy: str | None = None
    outcome: str = "success"
    objective: str | None = None
    title: str | None = None
    description: str | None = None
    source: str | None = None
    sandbox: Mapping[str, Any] | None = None
    """A sandbox spec (`SandboxSpec` fields as JSON); None for no sandbox."""
    sandbox_timeout_s: float = 600.0


@dataclass(frozen=True)
class ContributeResult:
    """The package written and what went into it."""

    path: Path
    case: str
    cause: str
    remedy: str
    outcome: str
    files: dict[str, int]
    content_hash: str
    privacy: dict[str, Any]
    notes: tuple[str, ...] = ()
    sandbox: Verdict | None = None
    signature: tuple[dict[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "case": self.case, "cause": self.cause, "remedy": self.remedy,
                "outcome": self.outcome, "files": self.files, "content_hash": self.content_hash,
                "privacy": {k: v for k, v in self.privacy.items() if k != "items"}, "notes": list(self.notes),
                "signature": list(self.signature), "sandbox": self.sandbox.as_dict() if self.sandbox else None}


def _scrubber(facts: RunFacts, options: ContributeOptions) -> Scrubber:
    known: dict[str, set[str]] = {kind: set(v) for kind, v in identifying_values(facts.meta).items()}
    for kind, values in local_identity().items():
        known.setdefault(kind, set()).update(values)
    known.setdefault("name", set()).update(options.redact)
    known.setdefault("run-id", set()).add(facts.run_id)
    if facts.run_dir:
        directory = Path(facts.run_dir)
        known.setdefault("path", set()).update({str(directory), str(directory.resolve())})
        known["name"].add(directory.name)
    return Scrubber(known, enabled=options.privacy_safe)


def _sandbox_spec(facts: RunFacts, choice: Choice, options: ContributeOptions) -> SandboxSpec | None:
    if options.sandbox is None:
        return None
    program = facts.meta.get("program")
    remedy = choice.experiment.parameters if choice.experiment is not None else None
    model = {k: facts.meta[k] for k in ("num_experts", "top_k") if isinstance(facts.meta.get(k), int)}
    data = {"model": model, **options.sandbox} if program == "moe_lm" else dict(options.sandbox)
    return SandboxSpec.from_mapping(data, "sandbox spec", scenario=program if program in SCENARIOS else None,
                                    remedy=remedy)


def _parts(case_iri: str, case_ttl: bytes, env: dict[str, Any], report: dict[str, Any],
           sandbox: Mapping[str, bytes]) -> list[Part]:
    def js(obj: Any) -> bytes:
        return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8")

    parts = [Part("case.ttl", case_ttl, "The case graph: signature, confirmed cause, applied remedy, outcome, "
                  "experiments and provenance.", about=(case_iri,)),
             Part("environment.json", js(env), "Environment snapshot of the run: versions only."),
             Part("privacy-report.json", js(report), "What the privacy scrubber hashed or removed, and where.")]
    descriptions = {"sandbox/config.json": "Sandbox: synthetic-data generator settings, seeds, fault and remedy.",
                    "sandbox/validate.py": "Sandbox validation script: trains without and with the remedy; "
                                           "runs only on `cann-tune sandbox run`.",
                    "sandbox/expected.json": "Sandbox: the claim, the figures measured by the contributor, "
                                             "tolerances."}
    parts += [Part(name, data, descriptions.get(name, "sandbox file"), code=name.endswith(".py"))
              for name, data in sorted(sandbox.items())]
    return parts


def contribute(store: Store, run_id: str, out: str | os.PathLike[str], *, run_dir: str | Path | None = None,
               options: ContributeOptions = ContributeOptions()) -> ContributeResult:
    """Build, check and write the case package of a diagnosed run (see the module docstring)."""
    license_iri(options.license)
    facts = gather(store, run_id, run_dir)
    choice = choose(store, facts, cause=options.cause, remedy=options.remedy, outcome=options.outcome,
                    objective=options.objective)
    spec = _sandbox_spec(facts, choice, options)
    scrub = _scrubber(facts, options)
    attribution = scrub.text(options.attribution or "anonymous contributor",
                             "ro-crate-metadata.json: attribution", keep=("user",))
    case_iri = f"urn:debugtune:case:{uuid.uuid4().hex}"
    triples = case_triples(facts, choice, scrub, case_iri=case_iri, attribution=attribution,
                           title=options.title, description=options.description,
                           source=scrub.url(options.source, "case.ttl: source") if options.source else None)
    env = environment(facts.meta, scrub)
    sandbox_files: dict[str, bytes] = {}
    verdict = None
    if spec is not None:
        key = SCENARIOS[spec.scenario].threshold_key
        limit = thresholds(store)[key]  # the sandbox claim is checked with it
        sandbox_files, verdict = build_sandbox(spec, limit, scrub, timeout_s=options.sandbox_timeout_s)
    report = {**scrub.report(), "not_included": list(NOT_INCLUDED)}
    parts = _parts(case_iri, turtle(triples), env, report, sandbox_files)
    symptoms = sorted({s.symptom for s in facts.signature})
    label = next((t.object.value for t in triples if t.predicate.value == SKOS + "prefLabel"
                  and isinstance(t.subject, ox.NamedNode) and t.subject.value == case_iri
                  and isinstance(t.object, ox.Literal)), case_iri)
    meta = crate_metadata(
        name=f"debugtune case: {label}", description=f"A solved training problem contributed as a debugtune case "
        f"package: confirmed cause {choice.cause}, applied remedy {choice.remedy}, outcome {choice.outcome}.",
        license_id=options.license, author=attribution,
        date_published=datetime.now(UTC).date().isoformat(), parts=parts, about=(case_iri,),
        root_types=(DT + "CasePackage",), keywords=("debugtune", choice.cause, choice.remedy, *symptoms))
    files = {METADATA: metadata_bytes(meta), **{p.name: p.data for p in parts}}
    check_package(store, files, "the new package")
    path = Path(out)
    atomic_write_bytes(path, archive_bytes(files))
    return ContributeResult(path, case_iri, choice.cause, choice.remedy, choice.outcome,
                            {n: len(d) for n, d in sorted(files.items())}, content_hash(files), report,
                            choice.notes, verdict, _signature(facts))


def _signature(facts: RunFacts) -> tuple[dict[str, Any], ...]:
    return tuple({"symptom": s.symptom, "location": s.location, "severity": round(s.severity, 4)}
                 for s in facts.signature)

