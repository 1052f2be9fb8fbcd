"""Writing SPARQL safely: literals and IRIs from Python values, never by raw concatenation."""

from __future__ import annotations

from debugtune.kg.errors import KgError
from debugtune.kg.namespaces import XSD

_BAD_IRI_CHARS = set('<>"{}|^`\\ \n\r\t')


def iri(value: str) -> str:
    """``<value>`` after checking it cannot break out of an IRI reference."""
    if not value or any(c in _BAD_IRI_CHARS for c in value):
        raise KgError(f"not a valid IRI: {value!r}")
    return f"<{value}>"


def literal(value: object) -> str:
    """A SPARQL literal for a Python value (numbers typed, strings escaped)."""
    if isinstance(value, bool):
        return f'"{str(value).lower()}"^^<{XSD}boolean>'
    if isinstance(value, int):
        return f'"{value}"^^<{XSD}integer>'
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            text = "NaN" if value != value else ("INF" if value > 0 else "-INF")
            return f'"{text}"^^<{XSD}double>'
        return f'"{value!r}"^^<{XSD}double>'
    text = str(value)
    for a, b in (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r")):
        text = text.replace(a, b)
    return f'"{text}"'
