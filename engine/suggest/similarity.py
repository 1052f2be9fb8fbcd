"""Case similarity: comparing symptom signatures (symptom, location kind, severity).

A signature is a set of items ``(symptom, location kind, severity)``; a run's comes from its findings
(one item per symptom and location kind, with the highest severity). Two signatures A and B are
compared by an optimal one-to-one matching of their items (greedy beyond six location kinds per symptom):

    m(a, b)  = [sym_a = sym_b] · (1 + [loc_a = loc_b] + (1 − |sev_a − sev_b|)) / 3     ∈ [0, 1]
    w(x)     = (1 + sev_x) / 2                                                       ∈ [0.5, 1]
    sim(A,B) = max over matchings M of  Σ_(a,b)∈M m(a, b) · (w(a) + w(b))  /  (Σ_A w + Σ_B w)

It is symmetric, lies in [0, 1], is 1 exactly for equal signatures, and 0 when no symptom is
shared; an unmatched item costs in proportion to its severity. See docs/query.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from itertools import permutations
from typing import Any
from weakref import WeakKeyDictionary

from debugtune.engine.suggest.errors import SuggestError, unknown
from debugtune.engine.suggest.queries import cases_sparql, run_exists_sparql, signature_sparql
from debugtune.engine.suggest.settings import load_settings
from debugtune.kg.namespaces import check_run_id, local_name
from debugtune.kg.store import Store


@dataclass(frozen=True)
class SignatureItem:
    """One symptom of a signature: its local name, location kind keyword and severity in [0, 1]."""

    symptom: str
    location: str
    severity: float


@dataclass(frozen=True)
class SimilarCase:
    """A stored case and its similarity to a run (``case`` and ``graph`` are IRIs, the rest local names)."""

    case: str
    label: str
    score: float
    cause: str
    remedy: str
    outcome: str
    graph: str
    remedies: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoredCase:
    """A case as read from the graph, with its signature."""

    case: str
    label: str
    cause: str
    remedies: tuple[str, ...]
    outcome: str
    graph: str
    signature: tuple[SignatureItem, ...]


@cache
def location_keyword(iri: str) -> str:
    """``dt:ExpertLocation`` → ``expert`` (the convention of `kg.records.LOCATION_KINDS`)."""
    name = local_name(iri)
    return name[: -len("Location")].lower() if name.endswith("Location") else name.lower()


def outcome_keyword(iri: str | None) -> str:
    """``dt:Success`` → ``success``; empty when absent."""
    return local_name(iri).lower() if iri else ""


def _clamp(x: float) -> float:
    return 0.0 if x != x else min(1.0, max(0.0, float(x)))


def normalise(items: Iterable[SignatureItem | Sequence[Any]]) -> tuple[SignatureItem, ...]:
    """One item per (symptom, location) with the highest severity (clamped to [0, 1]), sorted."""
    best: dict[tuple[str, str], float] = {}
    for it in items:
        sym, loc, sev = (it.symptom, it.location, it.severity) if isinstance(it, SignatureItem) else tuple(it)
        key = (str(sym), str(loc))
        best[key] = max(best.get(key, 0.0), _clamp(sev))
    return tuple(SignatureItem(s, loc, sev) for (s, loc), sev in sorted(best.items()))


def _weight(item: SignatureItem) -> float:
    return (1.0 + item.severity) / 2.0


def _match(a: SignatureItem, b: SignatureItem) -> float:
    same_loc = 1.0 if a.location == b.location else 0.0
    return (1.0 + same_loc + 1.0 - abs(a.severity - b.severity)) / 3.0 * (_weight(a) + _weight(b))


def _best_matching(xs: list[SignatureItem], ys: list[SignatureItem]) -> float:
    """Maximum-weight matching between two groups sharing a symptom.

    Exact (all permutations) for the usual ≤ 6 location kinds; a greedy matching beyond that, so a
    package with odd location kinds cannot make the search explode.
    """
    if len(xs) > len(ys):
        xs, ys = ys, xs
    if len(ys) <= 6:
        return max(sum(_match(x, y) for x, y in zip(xs, perm, strict=False)) for perm in permutations(ys, len(xs)))
    pairs = sorted(((_match(x, y), i, j) for i, x in enumerate(xs) for j, y in enumerate(ys)), reverse=True)
    used_x, used_y, total = set(), set(), 0.0
    for score, i, j in pairs:
        if i not in used_x and j not in used_y:
            used_x.add(i)
            used_y.add(j)
            total += score
    return total


def case_similarity(signature_a: Iterable[SignatureItem | Sequence[Any]],
                    signature_b: Iterable[SignatureItem | Sequence[Any]]) -> float:
    """Similarity of two signatures in [0, 1] (symmetric; the module docstring gives the formula).

    Items may be `SignatureItem`s or ``(symptom, location, severity)`` tuples.
    """
    return normalised_similarity(normalise(signature_a), normalise(signature_b))


@lru_cache(maxsize=65536)
def normalised_similarity(a: tuple[SignatureItem, ...], b: tuple[SignatureItem, ...]) -> float:
    """`case_similarity` of two signatures already in `normalise`'s form (no copying or checking)."""
    shared = {x.symptom for x in a} & {y.symptom for y in b}
    if not shared:
        return 0.0
    total = sum(map(_weight, a)) + sum(map(_weight, b))
    matched = 0.0
    for symptom in shared:
        matched += _best_matching([x for x in a if x.symptom == symptom], [y for y in b if y.symptom == symptom])
    return min(1.0, round(matched / total, 12))


def require_run(store: Store, run_id: str) -> None:
    """Raise SuggestError naming the closest runs when ``run_id`` is not in the store."""
    try:
        check_run_id(run_id)
    except ValueError as err:
        raise SuggestError(str(err)) from None
    if not store.ask(run_exists_sparql(run_id)):
        known = store.select("SELECT DISTINCT ?id WHERE { ?r a dt:TrainingRun ; dt:runId ?id }").column("id")
        raise SuggestError(unknown("run", run_id, known))


def run_signature(store: Store, run_id: str, *, check: bool = True) -> tuple[SignatureItem, ...]:
    """The signature of a run: its findings' symptoms, location kinds and severities.

    An unknown run raises SuggestError (``check=False`` skips that query when the caller checked).
    """
    if check:
        require_run(store, run_id)
    rows = store.select(signature_sparql(run_id)).dicts()
    return normalise(SignatureItem(local_name(r["symptom"]), location_keyword(r["location"]), float(r["severity"]))
                     for r in rows)


def _value(term: Any) -> str | None:
    return None if term is None else term.value


_CACHE: WeakKeyDictionary[Store, tuple[int, list[StoredCase]]] = WeakKeyDictionary()


def stored_cases(store: Store, causes: Iterable[str] | None = None) -> list[StoredCase]:
    """Every case of every named graph (or those confirming one of ``causes``, IRIs), sorted by IRI.

    Read once per version of the store (`Store.version`) and kept: reading a thousand cases takes far
    longer than a suggestion may (bench/case_scale.py).
    """
    version = store.version()
    if version is None:
        return _read_cases(store, causes)
    cached = _CACHE.get(store)
    if cached is None or cached[0] != version:
        cached = _CACHE[store] = (version, _read_cases(store, None))
    if causes is None:
        return list(cached[1])
    wanted = {local_name(c) for c in causes}
    return [c for c in cached[1] if c.cause in wanted]


def _read_cases(store: Store, causes: Iterable[str] | None) -> list[StoredCase]:
    result = store.select(cases_sparql(None if causes is None else list(causes)))
    col = {v: i for i, v in enumerate(result.variables)}
    acc: dict[str, dict[str, Any]] = {}
    short = cache(local_name)
    for row in result.rows:  # plain term values: thousands of rows, so no per-cell conversion
        g, case, label, cause, remedy, outcome, symptom, location, severity = (
            _value(row[col[v]]) for v in ("g", "case", "label", "cause", "remedy", "outcome", "symptom", "location",
                                          "severity"))
        assert case is not None and severity is not None  # required patterns of cases_sparql bind them
        c = acc.get(case)
        if c is None:
            c = acc[case] = {"graphs": set(), "label": label, "cause": cause, "remedies": set(),
                             "outcome": outcome, "items": {}}
        c["graphs"].add(g)
        if remedy:
            c["remedies"].add(short(remedy))
        key = (short(symptom), location_keyword(location))
        c["items"][key] = max(c["items"].get(key, 0.0), _clamp(float(severity)))
    return [StoredCase(case, c["label"] or local_name(case), local_name(c["cause"]) if c["cause"] else "",
                       tuple(sorted(c["remedies"])), outcome_keyword(c["outcome"]), min(c["graphs"]),
                       tuple(SignatureItem(sym, loc, sev) for (sym, loc), sev in sorted(c["items"].items())))
            for case, c in sorted(acc.items())]


def similar_cases(store: Store, run_id: str, *, threshold: float | None = None,
                  limit: int | None = None) -> list[SimilarCase]:
    """Cases (from any named graph) whose signature is at least ``threshold`` similar to the run's.

    ``threshold`` defaults to the knowledge base's ``suggest.similarity.threshold`` (0.85). Best first;
    ties by case IRI.
    """
    if threshold is None:
        threshold = load_settings(store).threshold
    if not 0.0 <= threshold <= 1.0:
        raise SuggestError(f"a similarity threshold lies in [0, 1], got {threshold}")
    if limit is not None and limit < 0:
        raise SuggestError(f"limit must be non-negative, got {limit}")
    found = [c for c in _scored(store, run_id) if c.score >= threshold]
    return found if limit is None else found[:limit]


def _scored(store: Store, run_id: str) -> list[SimilarCase]:
    """Every stored case with its similarity to the run, best first; ties by case IRI."""
    signature = run_signature(store, run_id)
    found = []
    for c in stored_cases(store):
        score = normalised_similarity(signature, c.signature)
        found.append(SimilarCase(c.case, c.label, score, c.cause, c.remedies[0] if c.remedies else "",
                                 c.outcome, c.graph, c.remedies))
    found.sort(key=lambda s: (-s.score, s.case))
    return found


def near_misses(store: Store, run_id: str, *, threshold: float | None = None, limit: int = 3) -> list[SimilarCase]:
    """The best cases below ``threshold`` (default the knowledge base's), best first: what `similar_cases`
    would find with a lower threshold (cases sharing no symptom left out), so an empty answer still shows how
    close the knowledge base comes."""
    if threshold is None:
        threshold = load_settings(store).threshold
    return [c for c in _scored(store, run_id) if 0 < c.score < threshold][:max(0, limit)]
