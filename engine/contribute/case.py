"""A solved case from a diagnosed run: what the store knows about the run, the cause and remedy chosen.

`gather` reads the run's findings, hypotheses, experiments and signature from its named graph (and
its run.json when the directory is known). `choose` settles the confirmed cause (the top hypothesis
unless one is given), the applied remedy (given, or the remedy of the best experiment) and the
outcome. Nothing here is scrubbed yet: `engine.contribute.case_graph` writes the scrubbed graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from debugtune.engine.contribute.errors import ContributeError
from debugtune.engine.suggest import SignatureItem, run_signature
from debugtune.engine.suggest.errors import SuggestError, unknown
from debugtune.engine.telemetry.errors import TelemetryError
from debugtune.engine.telemetry.runmeta import RUN_JSON, read_run_json
from debugtune.kg.assertions import read_experiments, read_findings, read_hypotheses
from debugtune.kg.namespaces import KB, local_name, run_base
from debugtune.kg.records import Experiment, Finding, Hypothesis
from debugtune.kg.sparql import iri, literal
from debugtune.kg.store import Store

OUTCOMES = ("success", "failure", "partial")


@dataclass(frozen=True)
class RunFacts:
    """What the store and run.json say about one diagnosed run."""

    run_id: str
    run_dir: str | None
    meta: dict[str, Any]
    findings: tuple[Finding, ...]
    hypotheses: tuple[Hypothesis, ...]
    experiments: tuple[Experiment, ...]
    signature: tuple[SignatureItem, ...]


@dataclass(frozen=True)
class Choice:
    """The confirmed cause, applied remedy and outcome of a case, and where each came from."""

    cause: str
    remedy: str
    outcome: str
    hypothesis: Hypothesis | None
    experiment: Experiment | None
    notes: tuple[str, ...] = ()


def _run_dir(store: Store, run_id: str) -> str | None:
    rows = store.select(f"SELECT ?d WHERE {{ GRAPH {iri(run_base(run_id))} {{ ?r dt:runId {literal(run_id)} ; "
                       f"dt:runDir ?d }} }}").column("d")
    return str(rows[0]) if rows else None


def gather(store: Store, run_id: str, run_dir: str | Path | None = None) -> RunFacts:
    """The diagnosed run ``run_id`` as the store knows it; ContributeError when it was never diagnosed."""
    try:
        signature = run_signature(store, run_id)
    except SuggestError as err:
        raise ContributeError(f"cannot contribute run {run_id!r}: {err} (diagnose it first: "
                              f"cann-debug diagnose RUN_DIR --store ...)") from None
    findings = tuple(read_findings(store, run_id))
    if not findings:
        raise ContributeError(f"run {run_id!r} has no findings: a case needs a symptom signature")
    directory = str(run_dir) if run_dir is not None else _run_dir(store, run_id)
    meta: dict[str, Any] = {}
    if directory and (Path(directory) / RUN_JSON).is_file():
        try:
            meta = read_run_json(directory)
        except TelemetryError as err:
            raise ContributeError(str(err)) from None
    return RunFacts(run_id, directory, meta, findings, tuple(read_hypotheses(store, run_id)),
                    tuple(e for _, e in read_experiments(store, run_id)), signature)


def _require(store: Store, cls: str, name: str) -> str:
    local = local_name(name)
    if not store.ask(f"ASK {{ {iri(KB + local)} a dt:{cls} }}"):
        known = [local_name(x) for x in store.select(f"SELECT DISTINCT ?x WHERE {{ ?x a dt:{cls} }}").column("x")]
        raise ContributeError(unknown(cls.lower(), name, known))
    return local


def best_experiment(experiments: tuple[Experiment, ...], objective: str | None = None,
                    remedy: str | None = None) -> Experiment | None:
    """The best ok experiment (of ``remedy`` if given) by ``objective`` (``name[:min|max]``).

    Without an objective, the first objective name (alphabetically) is minimised.
    """
    ok = [e for e in experiments if e.status == "ok" and (remedy is None or e.remedy == remedy)]
    if not ok:
        return None
    names = sorted({k for e in ok for k in e.objectives})
    if objective is None and not names:
        return sorted(ok, key=lambda e: e.id)[0]
    name, _, direction = (objective or names[0]).partition(":")
    if direction not in ("", "min", "max"):
        raise ContributeError(f"objective {objective!r}: the direction after ':' is min or max")
    sign = -1.0 if direction == "max" else 1.0
    scored = [e for e in ok if name in e.objectives]
    if not scored:
        raise ContributeError(f"no experiment reports the objective {name!r} (they report: {', '.join(names)})")
    return sorted(scored, key=lambda e: (sign * e.objectives[name], e.id))[0]


def choose(store: Store, facts: RunFacts, *, cause: str | None = None, remedy: str | None = None,
           outcome: str = "success", objective: str | None = None) -> Choice:
    """Settle cause, remedy and outcome (see the module docstring)."""
    if outcome not in OUTCOMES:
        raise ContributeError(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
    notes = []
    if cause is not None:
        cause = _require(store, "Cause", cause)
        notes.append(f"confirmed cause {cause} given by the contributor")
    elif facts.hypotheses:
        cause = facts.hypotheses[0].cause
        notes.append(f"confirmed cause {cause}: the top hypothesis ({facts.hypotheses[0].confidence:.2f})")
    else:
        raise ContributeError(f"run {facts.run_id!r} has no hypothesis; pass --cause NAME")
    hypothesis = next((h for h in facts.hypotheses if h.cause == cause), None)
    if remedy is not None:
        remedy = _require(store, "Remedy", remedy)
        experiment = best_experiment(facts.experiments, objective, remedy)
    else:
        experiment = best_experiment(facts.experiments, objective)
        if experiment is None:
            raise ContributeError(f"run {facts.run_id!r} has no successful experiment to take the remedy from; "
                                  "pass --remedy NAME")
        remedy = _require(store, "Remedy", experiment.remedy)
        notes.append(f"applied remedy {remedy}: the best experiment ({experiment.id})")
    if not store.ask(f"ASK {{ {iri(KB + remedy)} dt:addresses {iri(KB + cause)} }}"):
        notes.append(f"note: the knowledge base does not list {remedy} as addressing {cause}")
    return Choice(cause, remedy, outcome, hypothesis, experiment, tuple(notes))
