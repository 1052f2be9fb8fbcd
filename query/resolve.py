"""Names in a query → IRIs, resolved against the graph (local names, skos:prefLabel, skos:altLabel).

An unknown name raises DslNameError with the closest known ones (difflib).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from debugtune.kg.errors import KgError
from debugtune.kg.namespaces import DT, KB, check_run_id, local_name, run_base, run_graph
from debugtune.kg.sparql import iri, literal
from debugtune.kg.store import Store
from debugtune.query import ast
from debugtune.query.errors import DslNameError

KEYWORD_CLASSES = ("Dimension", "RiskLevel", "LocationKind", "Outcome", "ExperimentStatus")
"""Ontology classes whose individuals have a ``dt:keyword`` users type (gradient, medium, expert, ...)."""


def _norm(text: str) -> str:
    return re.sub(r"[\s_\-]+", " ", text.strip().lower())


def suggestions(word: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` known words close to ``word`` (case-insensitive)."""
    by_lower: dict[str, str] = {}
    for k in sorted(known):
        by_lower.setdefault(k.lower(), k)
    return [by_lower[m] for m in difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=0.5)]


@dataclass
class Vocabulary:
    """The names of causes, symptoms and remedies, and the keywords of ontology individuals (lazy, cached)."""

    store: Store
    _items: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    _keywords: dict[str, dict[str, str]] | None = None

    def items(self, cls: str) -> dict[str, list[str]]:
        """For class ``cls`` (Cause, Symptom, Remedy): normalised name → IRIs (local name and labels)."""
        if cls not in self._items:
            rows = self.store.select(f"""SELECT DISTINCT ?x ?label WHERE {{ ?x a dt:{cls} .
                OPTIONAL {{ {{ ?x skos:prefLabel ?label }} UNION {{ ?x skos:altLabel ?label }} }} }}""").dicts()
            names: dict[str, list[str]] = {}
            for r in rows:
                if not isinstance(r["x"], str) or r["x"].startswith("_:"):
                    continue
                for name in (local_name(r["x"]), r["label"]):
                    if name:
                        bucket = names.setdefault(_norm(str(name)), [])
                        if r["x"] not in bucket:
                            bucket.append(r["x"])
            self._items[cls] = names
        return self._items[cls]

    def local_names(self, cls: str) -> list[str]:
        return sorted({local_name(i) for iris in self.items(cls).values() for i in iris})

    def resolve(self, cls: str, ident: ast.Ident) -> str:
        """The IRI of a cause/symptom/remedy named by local name or label; prefers the kb: namespace."""
        names = self.items(cls)
        exact = [i for iris in names.values() for i in iris if local_name(i) == ident.text]
        found = sorted(set(exact)) or names.get(_norm(ident.text), [])
        if not found:
            known = self.local_names(cls)
            raise DslNameError(cls.lower(), ident.text, suggestions(ident.text, known),
                               ident.pos.line, ident.pos.column)
        return sorted(found, key=lambda i: (not i.startswith(KB), i))[0]

    def keywords(self, cls: str) -> dict[str, str]:
        """keyword → IRI of the individuals of an ontology class (``Dimension``: gradient → dt:GradientFlow)."""
        if self._keywords is None:
            rows = self.store.select(f"""SELECT ?cls ?kw ?x WHERE {{
                VALUES ?cls {{ {' '.join(iri(DT + c) for c in KEYWORD_CLASSES)} }}
                ?x a ?cls ; dt:keyword ?kw }}""").dicts()
            self._keywords = {}
            for r in rows:
                self._keywords.setdefault(local_name(r["cls"]), {})[str(r["kw"]).lower()] = r["x"]
        return self._keywords.get(cls, {})

    def keyword(self, cls: str, word: str, what: str, pos: ast.Pos) -> str:
        """The IRI of keyword ``word`` of class ``cls``; unknown → DslNameError listing close ones."""
        known = self.keywords(cls)
        if word.lower() not in known:
            near = suggestions(word, known) or sorted(known)
            raise DslNameError(what, word, near, pos.line, pos.column)
        return known[word.lower()]

    def keyword_names(self) -> dict[str, str]:
        """IRI → keyword of every keyword individual (for shaping results)."""
        self.keywords(KEYWORD_CLASSES[0])
        return {x: kw for by_kw in (self._keywords or {}).values() for kw, x in by_kw.items()}

    def risk_rank(self, level: str) -> int:
        """The ``dt:rank`` of a risk level IRI (1 = low)."""
        value = self.store.select(f"SELECT ?r WHERE {{ {iri(level)} dt:rank ?r }}").scalar()
        return int(value or 0)

    def run_id(self, run: ast.RunRef) -> str:
        """The id of the run a query names (by id, or by run directory for a quoted path)."""
        if run.path is not None:
            return self._run_by_path(run)
        run_id = run.id or ""  # a reference without a path has an id (the grammar); "" fails the check
        try:
            check_run_id(run_id)
        except ValueError:
            raise DslNameError("run", run_id, (), run.pos.line, run.pos.column) from None
        if not self.store.ask(f"ASK {{ GRAPH {iri(run_graph(run_id))} {{ {iri(run_base(run_id))} "
                              f"a dt:TrainingRun }} }}"):
            raise DslNameError("run", run_id, suggestions(run_id, self.run_ids()), run.pos.line, run.pos.column)
        return run_id

    def run_ids(self) -> list[str]:
        return self.store.select("SELECT DISTINCT ?id WHERE { ?r a dt:TrainingRun ; dt:runId ?id }").column("id")

    def _run_by_path(self, run: ast.RunRef) -> str:
        text = run.path or ""
        candidates = [text]
        try:
            resolved = str(Path(text).expanduser().resolve())
            candidates.append(resolved)
        except (OSError, RuntimeError, ValueError):
            pass
        values = " ".join(literal(c) for c in dict.fromkeys(candidates))
        rows = self.store.select(f"""SELECT DISTINCT ?id WHERE {{ VALUES ?dir {{ {values} }}
            ?r a dt:TrainingRun ; dt:runDir ?dir ; dt:runId ?id }} ORDER BY ?id""").column("id")
        if rows:
            return str(rows[0])
        name = Path(text).name
        try:
            if name and self.store.ask(f"ASK {{ {iri(run_base(check_run_id(name)))} a dt:TrainingRun }}"):
                return name
        except (ValueError, KgError):
            pass
        raise DslNameError("run directory", text, suggestions(name, self.run_ids()), run.pos.line, run.pos.column)
