"""Forward-chaining SPARQL rules: each `ontology/rules/*.rq` is one `INSERT … WHERE` run to a fixpoint.

Rule files are plain SPARQL 1.1 Update that insert into the inferred graph. The runner makes the
rule's WHERE clause see the union of the chosen graphs by adding standard ``USING <g>`` clauses,
so the same rules run on the embedded store and on any SPARQL 1.1 endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from debugtune import ontology
from debugtune.kg.errors import FixpointError, KgError, SparqlSyntaxError
from debugtune.kg.namespaces import GRAPH_INFERRED
from debugtune.kg.sparql_scan import with_using as scan_with_using
from debugtune.kg.sparql_scan import words
from debugtune.kg.store import Store


@dataclass(frozen=True)
class Rule:
    """One inference rule: a name and its SPARQL update text."""

    name: str
    text: str
    source: str


@dataclass(frozen=True)
class RuleReport:
    """What a fixpoint run did: rounds, inferred triples before and after."""

    rounds: int
    before: int
    after: int

    @property
    def added(self) -> int:
        return self.after - self.before


def load_rules(folder: Path | None = None) -> list[Rule]:
    """Rules from ``folder`` (default ``ontology/rules``), in file-name order."""
    folder = folder or ontology.RULES_DIR
    rules = [Rule(p.stem, p.read_text(encoding="utf-8"), str(p)) for p in sorted(folder.glob("*.rq"))]
    for r in rules:
        if not _is_rule(r.text):
            raise KgError(f"{r.source}: a rule must be an INSERT … WHERE update")
    return rules


def _is_rule(text: str) -> bool:
    """An INSERT … WHERE update: a top-level INSERT followed by a top-level WHERE."""
    top = [w.text for w in words(text) if w.depth == 0]
    return "INSERT" in top and "WHERE" in top[top.index("INSERT"):]


def with_using(rule_text: str, graphs: Sequence[str]) -> str:
    """The rule with ``USING <g>`` for each graph placed before its WHERE."""
    return scan_with_using(rule_text, graphs, ())


def run_rules(store: Store, rules: Sequence[Rule] | None = None, *, graphs: Sequence[str] | None = None,
              max_rounds: int = 10, inferred_graph: str = GRAPH_INFERRED) -> RuleReport:
    """Apply every rule until the inferred graph stops growing; raise FixpointError after ``max_rounds``."""
    rules = load_rules() if rules is None else list(rules)
    scope = sorted(set(graphs if graphs is not None else store.graphs()) | {inferred_graph})
    before = last = store.count(inferred_graph)
    for round_no in range(1, max_rounds + 1):
        for rule in rules:
            try:
                store.update(with_using(rule.text, scope))
            except SparqlSyntaxError as err:
                raise KgError(f"{rule.source}: {err}") from None
        size = store.count(inferred_graph)
        if size == last:
            return RuleReport(round_no, before, size)
        last = size
    raise FixpointError(
        f"inference rules still derived new triples after {max_rounds} rounds "
        f"({last - before} inferred so far); a rule may generate new nodes each round "
        f"(rules: {', '.join(r.name for r in rules)})")


def clear_inferred(store: Store, inferred_graph: str = GRAPH_INFERRED) -> None:
    """Drop the inferred graph so the next run recomputes it from scratch."""
    store.clear(inferred_graph)


__all__ = ["Rule", "RuleReport", "clear_inferred", "load_rules", "run_rules", "with_using"]
