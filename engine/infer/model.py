"""The causal knowledge the engine scores with, read from the store: causes, symptoms, causal links
(strength = P(effect | antecedent), typical lag) and confirmed-case counts per cause."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from debugtune.kg.namespaces import KB
from debugtune.kg.records import Finding
from debugtune.kg.store import Store


@dataclass(frozen=True)
class Link:
    """A causal link ``source → target`` (local names) with its strength, typical lag in steps, and the
    earliest step of the run at which the effect can begin (``dt:minLagSteps``)."""

    source: str
    target: str
    strength: float
    lag: int | None = None
    min_lag: int = 0
    measured: bool = False  # added by calibration on the fault bench (``dt:measured``), not written by an author


@dataclass
class CausalModel:
    """Causes (local name → label), symptoms (local name → dimension keyword), links and case counts."""

    causes: dict[str, str]
    symptoms: dict[str, str]
    links: list[Link]
    case_counts: dict[str, int]
    labels: dict[str, str] = field(default_factory=dict)
    from_start: frozenset[str] = frozenset()
    profiles: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()
    """Symptoms judged only from a quantity many set-ups do not log (``dt:optionalObservation``)."""
    preconditions: frozenset[str] = frozenset()
    """Symptoms that are facts about the set-up, not failures (``dt:precondition``)."""
    advisory: frozenset[str] = frozenset()
    """Causes that are advice, never the root cause of a problem (``dt:advisory``)."""
    needs_judged: dict[str, frozenset[str]] = field(default_factory=dict)
    """Cause → symptoms a run must be able to judge for the cause to apply (``dt:appliesWhenJudged``)."""
    specific: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Cause → the symptoms that speak for it in particular (``dt:SpecificEvidence``, engine.infer.specific)."""
    counter: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Cause → the symptoms whose presence speaks against it (``dt:CounterEvidence``)."""
    sufficient: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Cause → its specific evidence that is a fault by definition (``dt:sufficientAlone``)."""
    outcomes: frozenset[str] = frozenset()
    """Symptoms that are harm to the training's outcome (``dt:isOutcome``), not internal states."""
    signs: frozenset[str] = frozenset()
    """Observations that speak for a working run (``dt:healthSign``): counter-evidence only, never a finding."""
    belies: dict[str, frozenset[str]] = field(default_factory=dict)
    """Sign → the symptoms whose observation contradicts it (``dt:belies``): then it does not stand."""

    def split_signs(self, findings: Iterable[Finding]) -> tuple[list[Finding], list[Finding]]:
        """``findings`` as (findings, standing signs of health): see :func:`split_signs`."""
        return split_signs(findings, self.signs, self.belies)

    def __post_init__(self) -> None:
        self.children: dict[str, list[Link]] = defaultdict(list)
        self.parents: dict[str, list[Link]] = defaultdict(list)
        for link in self.links:
            self.children[link.source].append(link)
            self.parents[link.target].append(link)
        self._reach: dict[tuple[str, frozenset[str]], frozenset[str]] = {}

    def reach(self, cause: str, blocked: frozenset[str] = frozenset()) -> frozenset[str]:
        """The cause and every symptom its authored links reach, not through a symptom of ``blocked`` (judged and
        not seen: a chain runs through what happened). Measured calibration links are left out: they say how often
        a symptom showed under the cause on the bench, not that the cause produces it."""
        key = (cause, blocked)
        if key not in self._reach:
            seen, todo = {cause}, [cause]
            while todo:
                node = todo.pop()
                if node in blocked:
                    continue
                for link in self.children.get(node, ()):
                    if not link.measured and link.target not in seen:
                        seen.add(link.target)
                        todo.append(link.target)
            self._reach[key] = frozenset(seen)
        return self._reach[key]

    def label(self, name: str) -> str:
        return self.labels.get(name) or self.causes.get(name) or name


def _local(iri: str) -> str | None:
    return iri[len(KB):] if isinstance(iri, str) and iri.startswith(KB) else None


def load_model(store: Store) -> CausalModel:
    """Read the causal model from every graph of ``store`` (knowledge base and imported packages).

    Two links between the same pair combine to the stronger one. Calibration profiles
    (``dt:CalibrationProfile``, cases/links-calibrated.ttl) are read per cause.
    """
    best: dict[tuple[str, str], Link] = {}
    for r in store.select("""
            SELECT ?from ?to ?s ?lag ?measured WHERE {
              ?l a dt:CausalLink ; dt:from ?from ; dt:to ?to ; dt:strength ?s .
              OPTIONAL { ?l dt:typicalLagSteps ?lag } OPTIONAL { ?l dt:measured ?measured } }""").dicts():
        a, b = _local(r["from"]), _local(r["to"])
        if a is None or b is None or not isinstance(r["s"], int | float):
            continue
        link = Link(a, b, min(max(float(r["s"]), 0.0), 1.0), None if r["lag"] is None else int(r["lag"]),
                    measured=r["measured"] is True)
        if (a, b) not in best or link.strength > best[(a, b)].strength:
            best[(a, b)] = link
    for r in store.select("""
            SELECT ?from ?to (MAX(?m) AS ?min) WHERE {
              ?l dt:from ?from ; dt:to ?to ; dt:minLagSteps ?m } GROUP BY ?from ?to""").dicts():
        pair = (_local(r["from"]), _local(r["to"]))
        if pair in best and isinstance(r["min"], int | float):
            best[pair] = replace(best[pair], min_lag=int(r["min"]))
    _inherit_broader(store, best)
    labels: dict[str, str] = {}
    causes: dict[str, str] = {}
    for r in store.select("""
            SELECT ?c (SAMPLE(?l) AS ?label) WHERE { ?c a dt:Cause . OPTIONAL { ?c skos:prefLabel ?l } }
            GROUP BY ?c""").dicts():
        if (name := _local(r["c"])) is not None:
            causes[name] = str(r["label"] or name)
    symptoms: dict[str, str] = {}
    for r in store.select("""
            SELECT ?s (SAMPLE(?kw) AS ?dim) (SAMPLE(?l) AS ?label) WHERE {
              ?s a dt:Symptom . OPTIONAL { ?s dt:inDimension/dt:keyword ?kw } OPTIONAL { ?s skos:prefLabel ?l } }
            GROUP BY ?s""").dicts():
        if (name := _local(r["s"])) is not None:
            symptoms[name] = str(r["dim"] or "")
            labels[name] = str(r["label"] or name)
    counts: dict[str, int] = {}
    for r in store.select("""
            SELECT ?c (COUNT(DISTINCT ?case) AS ?n) WHERE { ?case a dt:Case ; dt:confirmedCause ?c }
            GROUP BY ?c""").dicts():
        if (name := _local(r["c"])) is not None:
            counts[name] = int(r["n"])
    from_start = _flagged(store, "dt:Cause", "dt:presentFromStart")
    optional = _flagged(store, "dt:Symptom", "dt:optionalObservation")
    preconditions = _flagged(store, "dt:Symptom", "dt:precondition")
    advisory = _flagged(store, "dt:Cause", "dt:advisory")
    needs: dict[str, set[str]] = defaultdict(set)
    for r in store.select("SELECT ?c ?s WHERE { ?c a dt:Cause ; dt:appliesWhenJudged ?s }").dicts():
        if (c := _local(r["c"])) is not None and (sym := _local(r["s"])) is not None:
            needs[c].add(sym)
    profiles: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for r in store.select("""
            SELECT ?p ?c ?s ?v WHERE { ?p a dt:CalibrationProfile ; dt:profileOf ?c ; dt:symptomRate ?r .
                                       ?r dt:symptom ?s ; dt:value ?v }""").dicts():
        c, sym = _local(r["c"]), _local(r["s"])
        if c is not None and sym is not None and isinstance(r["v"], int | float):
            profiles[c].setdefault(r["p"], {})[sym] = min(max(float(r["v"]), 0.0), 1.0)
    return CausalModel(causes, symptoms, list(best.values()), counts, labels, from_start,
                       {c: [ps[k] for k in sorted(ps)] for c, ps in profiles.items()}, optional, preconditions,
                       advisory, {c: frozenset(v) for c, v in needs.items()},
                       _evidence_items(store, "dt:SpecificEvidence"), _evidence_items(store, "dt:CounterEvidence"),
                       _evidence_items(store, "dt:SpecificEvidence", "dt:sufficientAlone true"),
                       _flagged(store, "dt:Symptom", "dt:isOutcome"), health_signs(store), _belies(store))


def _evidence_items(store: Store, cls: str, also: str = "") -> dict[str, tuple[str, ...]]:
    """Cause → the symptoms of its ``cls`` items (``dt:evidenceFor``, ``dt:symptom``; those with the property
    ``also`` too), sorted."""
    out: dict[str, set[str]] = defaultdict(set)
    extra = f" ; {also}" if also else ""
    for r in store.select(f"SELECT ?c ?s WHERE {{ ?e a {cls} ; dt:evidenceFor ?c ; dt:symptom ?s{extra} }}").dicts():
        if (c := _local(r["c"])) is not None and (sym := _local(r["s"])) is not None:
            out[c].add(sym)
    return {c: tuple(sorted(v)) for c, v in out.items()}


def _belies(store: Store) -> dict[str, frozenset[str]]:
    """Sign of health → the symptoms that belie it (``dt:belies``)."""
    out: dict[str, set[str]] = defaultdict(set)
    for r in store.select("SELECT ?s ?sign WHERE { ?s a dt:Symptom ; dt:belies ?sign }").dicts():
        if (sym := _local(r["s"])) is not None and (sign := _local(r["sign"])) is not None:
            out[sign].add(sym)
    return {k: frozenset(v) for k, v in out.items()}


def health_signs(store: Store) -> frozenset[str]:
    """The symptoms that speak for a working run (``dt:healthSign``): reported as signs, never as findings."""
    return _flagged(store, "dt:Symptom", "dt:healthSign")


def split_signs(findings: Iterable[Finding], signs: frozenset[str], belies: dict[str, frozenset[str]]
                ) -> tuple[list[Finding], list[Finding]]:
    """(findings, standing signs of health): a sign of health (``signs``) is never a finding, and one that another
    observed finding belies (``belies``: sign → symptoms, ``dt:belies``) does not stand."""
    findings = list(findings)
    seen = {f.symptom for f in findings}
    return ([f for f in findings if f.symptom not in signs],
            [f for f in findings if f.symptom in signs and not seen & belies.get(f.symptom, frozenset())])


def split_stored_signs(store: Store, stored: Iterable[Finding]) -> tuple[list[Finding], list[Finding]]:
    """A run's findings as read back from the graph, split as :func:`split_signs` with the knowledge in ``store``."""
    return split_signs(stored, health_signs(store), _belies(store))


def _flagged(store: Store, cls: str, flag: str) -> frozenset[str]:
    """Local names of the ``cls`` individuals whose boolean ``flag`` is true."""
    rows = store.select(f"SELECT DISTINCT ?x WHERE {{ ?x a {cls} ; {flag} true }}").column("x")
    return frozenset(name for x in rows if (name := _local(x)) is not None)


def _inherit_broader(store: Store, best: dict[tuple[str, str], Link]) -> None:
    """A broader symptom with narrower ones (``skos:broader``: UpdateRatioAbnormal over UpdateRatioTooHigh and
    UpdateRatioTooLow) is reported through them only, so a link to it becomes links to each narrower one that
    has none of its own, its strength shared equally (which one a cause shows is for the calibration profiles
    to say), and the narrower ones lead where the broader one leads."""
    narrower: dict[str, list[str]] = defaultdict(list)
    for r in store.select("SELECT ?n ?b WHERE { ?n a dt:Symptom ; skos:broader ?b . ?b a dt:Symptom }").dicts():
        narrow, broad = _local(r["n"]), _local(r["b"])
        if narrow is not None and broad is not None:
            narrower[broad].append(narrow)
    for broad, names in narrower.items():
        for (a, b), link in list(best.items()):
            if b == broad:
                del best[(a, b)]
                for narrow in names:
                    best.setdefault((a, narrow), replace(link, target=narrow, strength=link.strength / len(names)))
            elif a == broad:
                for narrow in names:
                    best.setdefault((narrow, b), replace(link, source=narrow))
