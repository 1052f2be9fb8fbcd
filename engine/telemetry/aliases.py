"""Metric spellings → canonical metric names, from the knowledge base (``cases/metrics.ttl``).

Loggers name one quantity many ways (Megatron's ``lm loss``, DeepSpeed's ``Train/Samples/train_loss``,
Lightning's ``train_loss``). Each spelling is a ``skos:altLabel`` of a ``dt:Metric`` whose ``dt:metricName``
is the canonical name; an OWL 2 axiom annotation on it says which framework uses it (``skos:note``) and
where that is documented (``dct:source``). Matching ignores case and treats ``/``, ``-``, blanks and ``_``
alike. A name in a logger's namespace (``dt:MetricNamespace``: HF Trainer's W&B and TensorBoard callbacks write
``train/<key>``) whose rest is a known spelling reads as that spelling's metric. Names the table does not know pass
through unchanged.

:class:`AliasPlan` applies the table to one run: a spelling is renamed only when the run does not hold
the canonical name itself, and of several spellings of one metric only the one with the most rows is
renamed, so two different series (HF Trainer's per-step ``loss`` and its end-of-run ``train_loss``
average) are never merged into one.

``python -m debugtune.engine.telemetry.aliases --markdown`` prints the table for ``docs/telemetry.md``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from debugtune.engine.telemetry.schema import dimension_of
from debugtune.kg.namespaces import DCT as _DCT
from debugtune.kg.namespaces import DT as _DT
from debugtune.kg.namespaces import OWL as _OWL
from debugtune.kg.namespaces import SKOS as _SKOS

_METRICS_TTL = "metrics.ttl"
_SEPARATORS = re.compile(r"[/\-\s_]+")


def normalise(name: str) -> str:
    """The matching key of a spelling: lower case, runs of ``/``, ``-``, blanks and ``_`` as one ``_``."""
    return _SEPARATORS.sub("_", name.strip().lower()).strip("_")


@dataclass(frozen=True)
class Alias:
    """One spelling of a canonical metric, with the framework that uses it and the source that says so."""

    spelling: str
    metric: str
    framework: str
    source: str


@dataclass(frozen=True)
class AliasTable:
    """Every spelling of the knowledge base; ``lookup[normalise(s)]`` is the canonical name."""

    aliases: tuple[Alias, ...]
    lookup: Mapping[str, str]
    namespaces: tuple[str, ...] = ()   # normalised prefixes ("train_"), longest first

    def find(self, name: str) -> str | None:
        """The canonical name of ``name``: its own spelling, else its rest after a logger namespace; None if unknown."""
        key = normalise(name)
        if (metric := self.lookup.get(key)) is not None:
            return metric
        for prefix in self.namespaces:
            if key.startswith(prefix) and (metric := self.lookup.get(key[len(prefix):])) is not None:
                return metric
        return None

    def resolve(self, name: str) -> str:
        """The canonical name of ``name``, or ``name`` itself when the table does not know it."""
        return self.find(name) or name

    def spellings(self, metric: str) -> list[str]:
        """The spellings of a canonical metric, as the knowledge base writes them."""
        return [a.spelling for a in self.aliases if a.metric == metric]

    def markdown(self) -> str:
        """The table as Markdown: canonical metric, spelling, framework (linked to its source)."""
        rows = ["| metric | spelling | framework |", "|---|---|---|"]
        for a in sorted(self.aliases, key=lambda a: (a.metric, a.framework, normalise(a.spelling))):
            rows.append(f"| `{a.metric}` | `{a.spelling}` | [{a.framework}]({a.source}) |")
        return "\n".join(rows)


def _kb_file() -> Path:
    from debugtune import cases

    return cases.HERE / _METRICS_TTL


def read_alias_table(path: str | Path | None = None) -> AliasTable:
    """Parse the metric spellings of a Turtle file (default: the shipped ``cases/metrics.ttl``).

    Raises ValueError naming the file when a spelling matches two metrics or an axiom annotation is missing.
    """
    import pyoxigraph as ox

    path = Path(path) if path is not None else _kb_file()
    name_of: dict[str, str] = {}
    prefixes: set[str] = set()
    labels: list[tuple[str, str]] = []
    axioms: dict[str, dict[str, str]] = {}
    for t in ox.parse(path=str(path), format=ox.RdfFormat.TURTLE):
        s, p, o = str(t.subject.value), t.predicate.value, t.object
        if p == _DT + "metricName":
            name_of[s] = o.value
        elif p == _DT + "namespacePrefix":
            prefixes.add(normalise(o.value) + "_")
        elif p == _SKOS + "altLabel" and isinstance(t.subject, ox.NamedNode):
            labels.append((s, o.value))
        elif p in (_OWL + "annotatedSource", _OWL + "annotatedTarget", _SKOS + "note", _DCT + "source"):
            axioms.setdefault(s, {})[p] = o.value
    notes = {(a.get(_OWL + "annotatedSource"), a.get(_OWL + "annotatedTarget")): a for a in axioms.values()
             if _OWL + "annotatedTarget" in a}
    if orphans := sorted(str(target) for source, target in set(notes) - set(labels)):
        raise ValueError(f"{path}: axiom annotations of spellings that are no skos:altLabel: {orphans[:5]}")
    aliases, lookup = [], {normalise(n): n for n in name_of.values()}
    for subject, spelling in labels:
        metric = name_of.get(subject)
        axiom = notes.get((subject, spelling))
        if metric is None or axiom is None or _DCT + "source" not in axiom:
            raise ValueError(f"{path}: spelling {spelling!r} of {subject} has no dt:metricName or no sourced axiom")
        key = normalise(spelling)
        if lookup.get(key, metric) != metric:
            raise ValueError(f"{path}: spelling {spelling!r} names both {lookup[key]!r} and {metric!r}")
        lookup[key] = metric
        aliases.append(Alias(spelling, metric, axiom.get(_SKOS + "note", ""), axiom[_DCT + "source"]))
    return AliasTable(tuple(aliases), lookup, tuple(sorted(prefixes, key=lambda x: (-len(x), x))))


@cache
def alias_table() -> AliasTable:
    """The shipped knowledge base's spellings, parsed once per process."""
    return read_alias_table()


def canonical(name: str) -> str:
    """The canonical metric name of a spelling (unknown names unchanged)."""
    return alias_table().resolve(name)


class AliasPlan:
    """Which stored metric names of one run are renamed to their canonical name (see the module docstring).

    ``stored``: metric name → number of rows, for the whole run (so every read of a run renames alike).
    """

    def __init__(self, stored: Mapping[str, int], table: AliasTable | None = None) -> None:
        table = table or alias_table()
        best: dict[str, tuple[int, str]] = {}
        for name, rows in stored.items():
            target = table.resolve(name)
            if target == name or target in stored:
                continue
            key = (-int(rows), name)
            if target not in best or key < best[target]:
                best[target] = key
        self.rename: dict[str, str] = {name: target for target, (_, name) in best.items()}
        self._table = table
        self._stored = stored

    def __bool__(self) -> bool:
        return bool(self.rename)

    def output(self, stored_name: str) -> str:
        """The name a stored metric is read as."""
        return self.rename.get(stored_name, stored_name)

    def dimension(self, stored_name: str) -> str | None:
        """The dimension a renamed metric moves to (its canonical name's), else None (keep the stored one)."""
        target = self.rename.get(stored_name)
        return dimension_of(target) if target is not None else None

    def requested(self, names: Iterable[str]) -> set[str]:
        """Output names a caller asking for ``names`` gets: a stored name as read, else its canonical name."""
        return {self.output(n) if n in self._stored else self._table.resolve(n) for n in names}

    def stored_for(self, outputs: set[str]) -> list[str]:
        """The stored names read as one of ``outputs`` (for pushing a metric filter down)."""
        return sorted(n for n in self._stored if self.output(n) in outputs) or sorted(outputs)

    def moved_into(self, dimensions: set[str]) -> list[str]:
        """Stored names renamed into one of ``dimensions`` (rows a dimension filter must not drop)."""
        return sorted(n for n in self.rename if self.dimension(n) in dimensions)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--markdown"]):
        print("usage: python -m debugtune.engine.telemetry.aliases [--markdown]", file=sys.stderr)
        return 2
    table = alias_table()
    if args:
        print(table.markdown())
    else:
        for a in table.aliases:
            print(f"{a.spelling}\t{a.metric}\t{a.framework}\t{a.source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
