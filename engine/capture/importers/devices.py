"""What device and link a run used: a trace's device name and world size resolved against the knowledge base's
accelerator models and interconnects (``cases/hardware-peaks.ttl``).

The link a collective crosses is known when every rank fits on one node (the world size is at most the devices
the trace lists, or the model's usual devices per node): it is then the model's intra-node interconnect. Across
nodes the inter-node fabric is not in the trace, so it stays unknown unless the user names it
(``--interconnect``). Names given by the user are matched against the interconnects' keys and labels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pyoxigraph as ox

from debugtune import cases
from debugtune.engine.capture.importers.errors import ImportFormatError

CATALOG_FILE = cases.HERE / "hardware-peaks.ttl"
_DT = "https://w3id.org/debugtune#"
_SKOS = "http://www.w3.org/2004/02/skos/core#"


@dataclass(frozen=True)
class Model:
    name: str
    label: str
    pattern: re.Pattern[str]
    link: str | None
    per_node: int | None


@dataclass(frozen=True)
class Link:
    key: str
    label: str
    names: frozenset[str]


def _solutions(store: ox.Store, sparql: str) -> ox.QuerySolutions:
    result = store.query(sparql)
    assert isinstance(result, ox.QuerySolutions), "a SELECT"
    return result


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


@lru_cache(maxsize=1)
def catalog() -> tuple[tuple[Model, ...], tuple[Link, ...]]:
    """The accelerator models (most specific pattern first) and interconnects of the shipped knowledge base."""
    store = ox.Store()
    store.load(path=str(CATALOG_FILE), format=ox.RdfFormat.TURTLE)
    links: dict[str, Link] = {}
    by_iri: dict[str, str] = {}
    q = f"""SELECT ?l ?key ?label (GROUP_CONCAT(?alt; SEPARATOR="|") AS ?alts) WHERE {{
        ?l a <{_DT}Interconnect> ; <{_DT}linkKey> ?key ; <{_SKOS}prefLabel> ?label .
        OPTIONAL {{ ?l <{_SKOS}altLabel> ?alt }} }} GROUP BY ?l ?key ?label"""
    for row in _solutions(store, q):
        key, label = row["key"].value, row["label"].value
        alts = row["alts"].value.split("|") if row["alts"] is not None else []
        links[key] = Link(key, label, frozenset(_norm(n) for n in (key, label, *alts) if n))
        by_iri[row["l"].value] = key
    models = []
    q = f"""SELECT ?m ?label ?pattern ?link ?n WHERE {{
        ?m a <{_DT}AcceleratorModel> ; <{_SKOS}prefLabel> ?label ; <{_DT}namePattern> ?pattern .
        OPTIONAL {{ ?m <{_DT}intraNodeInterconnect> ?link }} OPTIONAL {{ ?m <{_DT}devicesPerNode> ?n }} }}"""
    for row in _solutions(store, q):
        link = by_iri.get(row["link"].value) if row["link"] is not None else None
        per_node = int(row["n"].value) if row["n"] is not None else None
        models.append(Model(row["m"].value.rsplit("/", 1)[-1], row["label"].value,
                            re.compile(row["pattern"].value, re.IGNORECASE), link, per_node))
    models.sort(key=lambda m: -len(m.pattern.pattern))
    return tuple(models), tuple(sorted(links.values(), key=lambda lk: lk.key))


def device_model(name: str | None) -> Model | None:
    """The accelerator model a device name (as a profiler records it) belongs to."""
    if not name:
        return None
    models, _ = catalog()
    return next((m for m in models if m.pattern.search(name)), None)


def link_key(name: str | None) -> str | None:
    """The interconnect key a user-given or trace-given link name stands for (None when unknown)."""
    if not name:
        return None
    want = _norm(name)
    _, links = catalog()
    return next((lk.key for lk in links if want in lk.names), None)


def known_links() -> list[str]:
    return [lk.key for lk in catalog()[1]]


def resolve(device_name: str | None, world_size: int | None, devices_listed: int | None, *,
            device: str | None = None, interconnect: str | None = None,
            traced_link: str | None = None) -> dict[str, Any]:
    """The run.json facts about the device and the link: ``accelerator`` (the name), ``accelerator_model``,
    ``interconnect`` (a link key) and ``interconnect_from`` (how it was decided). ``device``/``interconnect``
    are the user's overrides; ``traced_link`` a link the trace itself names (Ascend transports)."""
    out: dict[str, Any] = {}
    name = device or device_name
    if name:
        out["accelerator"] = name
    model = device_model(name)
    if model is not None:
        out["accelerator_model"] = model.label
    elif device:
        raise ImportFormatError(device, "unknown device (the knowledge base knows: "
                                + ", ".join(m.label for m in catalog()[0]) + ")", field="--device")
    if interconnect:
        key = link_key(interconnect)
        if key is None:
            raise ImportFormatError(interconnect, f"unknown interconnect (one of: {', '.join(known_links())})",
                                    field="--interconnect")
        return {**out, "interconnect": key, "interconnect_from": "given"}
    if traced_link and link_key(traced_link):
        return {**out, "interconnect": link_key(traced_link), "interconnect_from": "trace"}
    if model is not None and model.link:
        per_node = max(devices_listed or 0, model.per_node or 0)
        if world_size and per_node and world_size <= per_node:
            return {**out, "interconnect": model.link,
                    "interconnect_from": f"{model.label}: {world_size} rank(s) fit on one node of {per_node}"}
        out["interconnect_from"] = (f"unknown: {world_size or '?'} ranks span nodes, the inter-node link is not "
                                    "in the trace (give --interconnect)")
    return out
