"""Content negotiation for the SPARQL endpoint: Accept header → a results or RDF format, or None (406)."""

from __future__ import annotations

import pyoxigraph as ox

RESULTS_FORMATS: dict[str, ox.QueryResultsFormat] = {
    "application/sparql-results+json": ox.QueryResultsFormat.JSON,
    "application/sparql-results+xml": ox.QueryResultsFormat.XML,
    "text/csv": ox.QueryResultsFormat.CSV,
    "text/tab-separated-values": ox.QueryResultsFormat.TSV,
    "application/json": ox.QueryResultsFormat.JSON,
    "application/xml": ox.QueryResultsFormat.XML,
}
"""SELECT results: media type → format; the first is the default for ``*/*``."""

BOOLEAN_TYPES = ("application/sparql-results+json", "application/sparql-results+xml", "application/json",
                 "application/xml")
"""ASK results: JSON or XML only (CSV/TSV have no boolean form)."""

GRAPH_FORMATS: dict[str, ox.RdfFormat] = {
    "text/turtle": ox.RdfFormat.TURTLE,
    "application/n-triples": ox.RdfFormat.N_TRIPLES,
    "application/rdf+xml": ox.RdfFormat.RDF_XML,
    "application/ld+json": ox.RdfFormat.JSON_LD,
    "text/plain": ox.RdfFormat.N_TRIPLES,
    "application/x-turtle": ox.RdfFormat.TURTLE,
}
"""CONSTRUCT/DESCRIBE results and Graph Store bodies: media type → RDF format; Turtle is the default."""

QUAD_FORMATS: dict[str, ox.RdfFormat] = {"application/n-quads": ox.RdfFormat.N_QUADS,
                                         "application/trig": ox.RdfFormat.TRIG}


def parse_accept(header: str | None) -> list[tuple[str, float, int]]:
    """(media range, q, position) of an Accept header; a missing header accepts anything."""
    if not header or not header.strip():
        return [("*/*", 1.0, 0)]
    out = []
    for pos, part in enumerate(header.split(",")):
        fields = [f.strip() for f in part.split(";")]
        media, q = fields[0].lower(), 1.0
        for f in fields[1:]:
            key, _, value = f.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if media:
            out.append((media, q, pos))
    return out


def _quality(media: str, ranges: list[tuple[str, float, int]]) -> tuple[float, int, int]:
    """q of the most specific range matching ``media``, its specificity and (negated) position."""
    kind = media.split("/")[0]
    best: tuple[float, int, int] | None = None
    for rng, q, pos in ranges:
        spec = 2 if rng == media else 1 if rng == kind + "/*" else 0 if rng == "*/*" else -1
        if spec >= 0 and (best is None or spec > best[1]):
            best = (q, spec, -pos)
    return best or (0.0, -1, 0)


def choose(header: str | None, offers: list[str]) -> str | None:
    """The offered media type the client prefers (ties: the client's order, then ours); None when none fits."""
    ranges = parse_accept(header)
    scored = []
    for rank, media in enumerate(offers):
        q, spec, pos = _quality(media, ranges)
        if q > 0:
            scored.append((q, spec if spec == 2 else 0, pos, -rank, media))
    return max(scored)[-1] if scored else None


def media_type(content_type: str | None) -> tuple[str, str | None]:
    """The bare media type of a Content-Type header (lower case) and its charset parameter, if any."""
    if not content_type:
        return "", None
    fields = [f.strip() for f in content_type.split(";")]
    charset = None
    for f in fields[1:]:
        key, _, value = f.partition("=")
        if key.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
    return fields[0].lower(), charset
