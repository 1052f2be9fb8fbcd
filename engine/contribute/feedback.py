"""Adoption feedback: a case's remedy worked again (or did not) → its Beta posterior moves.

`record_feedback` adds one success or failure to ``dt:successCount`` / ``dt:failureCount`` of the
case's applied remedy in the local graph (`GRAPH_LOCAL`), and records the feedback itself (case,
remedy, outcome, time) as a ``prov:Activity`` there, in one atomic update. The suggestion ranking
(`engine.suggest`) sums the counts over every graph that records them — the knowledge base, the
local graph, imported packages — so the next `suggest` ranks with the new posterior
``(α0 + successes) / (α0 + β0 + successes + failures)``.

Feedback counts once per case (a package's case, or a knowledge-base case) and reporter: the activity names
its reporter (``prov:wasAssociatedWith``, a hashed identifier: the name given, or this user at this host), and a
second report of the same case by the same reporter is answered "already counted" and changes nothing, so one
team cannot inflate a remedy's success rate by repeating itself.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import re
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from debugtune.engine.contribute.errors import ContributeError
from debugtune.engine.suggest import load_settings
from debugtune.engine.suggest.errors import unknown
from debugtune.engine.suggest.remedies import require_remedy
from debugtune.kg.namespaces import DT, GRAPH_LOCAL, local_name, package_graph
from debugtune.kg.package_archive import ArchiveLimits, content_hash, read_archive
from debugtune.kg.sparql import iri, literal
from debugtune.kg.store import Store

OUTCOMES = {"success": "successCount", "failure": "failureCount"}
_HEX = re.compile(r"^[0-9a-f]{8,64}$")


@dataclass(frozen=True)
class FeedbackResult:
    """The remedy counts after the feedback, and the remedy's posterior success rate."""

    case: str
    outcome: str
    remedies: tuple[dict[str, Any], ...]
    counted: bool = True
    reporter: str = ""
    earlier: str | None = None
    """When not counted: the time of the reporter's earlier feedback on this case."""

    def as_dict(self) -> dict[str, Any]:
        return {"case": self.case, "outcome": self.outcome, "remedies": list(self.remedies), "counted": self.counted,
                "reporter": self.reporter, "earlier": self.earlier}


def reporter_iri(name: str | None = None) -> str:
    """The reporter's identifier: a hash of ``name`` (default ``user@host``), never the name itself."""
    who = name if name else f"{getpass.getuser()}@{socket.gethostname()}"
    return f"urn:debugtune:reporter:{hashlib.sha256(who.strip().encode('utf-8')).hexdigest()[:16]}"


def _earlier(store: Store, case: str, reporter: str) -> str | None:
    rows = store.select(f"""SELECT ?when WHERE {{ GRAPH {iri(GRAPH_LOCAL)} {{ ?e a prov:Activity ;
        prov:used {iri(case)} ; prov:wasAssociatedWith {iri(reporter)} ; prov:endedAtTime ?when }} }}
        ORDER BY ?when LIMIT 1""").column("when")
    return str(rows[0]) if rows else None


def _cases_in_graphs(store: Store, graphs: list[str]) -> list[str]:
    if not graphs:
        return []
    values = " ".join(iri(g) for g in graphs)
    return sorted(store.select(f"SELECT DISTINCT ?c WHERE {{ VALUES ?g {{ {values} }} GRAPH ?g {{ ?c a dt:Case }} }}")
                  .column("c"))


def _one(found: list[str], ref: str) -> str:
    if len(found) == 1:
        return found[0]
    if not found:
        raise ContributeError(f"no case found for {ref!r}: give a case IRI, a case package (zip), "
                              "its content hash, or a case's local name")
    raise ContributeError(f"{ref!r} names {len(found)} cases ({', '.join(found[:5])}); give one case IRI")


def resolve_case(store: Store, ref: str | os.PathLike[str]) -> str:
    """The case IRI named by ``ref``: a package zip, a package content hash (or its first 8+ hex digits),
    a case IRI, or a case's local name or label."""
    text = str(ref)
    if Path(text).is_file():
        digest = content_hash(read_archive(text, ArchiveLimits()))
        found = _cases_in_graphs(store, [package_graph(digest)])
        if not found:
            raise ContributeError(f"{text}: this package is not imported into {store.target}; "
                                  "import it first (cann-tune import)")
        return _one(found, text)
    if _HEX.match(text):
        graphs = [g for g in store.graphs() if g.startswith(package_graph(text))]
        if graphs:
            return _one(_cases_in_graphs(store, graphs), text)
    every = "SELECT DISTINCT ?c ?label WHERE { ?c a dt:Case . OPTIONAL { ?c skos:prefLabel ?label } }"
    rows = store.select(every).dicts()
    if ":" in text:
        return _one(sorted({r["c"] for r in rows if r["c"] == text}), text)
    found = sorted({r["c"] for r in rows if _tail(r["c"]) == text or r["label"] == text})
    if not found:
        raise ContributeError(unknown("case", text, sorted({_tail(r["c"]) for r in rows})))
    return _one(found, text)


def _tail(case: str) -> str:
    """The last part of a case IRI after '/', '#' or ':'."""
    return re.split(r"[/#:]", case)[-1]


def record_feedback(store: Store, ref: str | os.PathLike[str], outcome: str, *,
                    reporter: str | None = None) -> FeedbackResult:
    """Count one success or failure for the applied remedy of the case ``ref`` (see the module docstring), once
    per case and ``reporter`` (default: this user at this host)."""
    if outcome not in OUTCOMES:
        raise ContributeError(f"outcome must be success or failure, got {outcome!r}")
    case = resolve_case(store, ref)
    remedies = sorted(store.select(f"SELECT DISTINCT ?r WHERE {{ {iri(case)} dt:appliedRemedy ?r . ?r a dt:Remedy }}")
                      .column("r"))
    if not remedies:
        raise ContributeError(f"case {case} has no applied remedy known to this knowledge base; nothing to count")
    who = reporter_iri(reporter)
    earlier = _earlier(store, case, who)
    if earlier is not None:
        return FeedbackResult(case, outcome, tuple(_counts(store, r) for r in remedies), False, who, earlier)
    prop, g = f"dt:{OUTCOMES[outcome]}", iri(GRAPH_LOCAL)
    event = f"urn:debugtune:feedback:{uuid.uuid4().hex}"
    when = literal(datetime.now(UTC).isoformat(timespec="seconds")) + "^^xsd:dateTime"
    used = ", ".join(iri(x) for x in [case, *remedies])
    store.update(f"""
        DELETE {{ GRAPH {g} {{ ?r {prop} ?old }} }}
        INSERT {{ GRAPH {g} {{ ?r {prop} ?new }} }}
        WHERE {{ VALUES ?r {{ {' '.join(iri(r) for r in remedies)} }}
                 OPTIONAL {{ GRAPH {g} {{ ?r {prop} ?old }} }}
                 BIND(COALESCE(?old, 0) + 1 AS ?new) }} ;
        INSERT DATA {{ GRAPH {g} {{ {iri(event)} a prov:Activity ;
            skos:prefLabel "adoption feedback"@en ; prov:used {used} ; prov:wasAssociatedWith {iri(who)} ;
            dt:outcome {iri(DT + outcome.capitalize())} ; prov:endedAtTime {when} . }} }}""")
    return FeedbackResult(case, outcome, tuple(_counts(store, r) for r in remedies), True, who)


def _counts(store: Store, remedy: str) -> dict[str, Any]:
    """Totals over every graph and the posterior, as the ranking reads them (`engine.suggest.remedies`)."""
    facts = require_remedy(store, remedy)
    return {"remedy": local_name(remedy), "successes": facts.successes, "failures": facts.failures,
            "success_rate": round(facts.success_rate(load_settings(store)), 4)}
