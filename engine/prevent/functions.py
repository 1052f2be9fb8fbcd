"""SPARQL functions the derivation rules call where SPARQL 1.1 has no operator for what a framework computes.

A derivation rule (``cases/prevention/derived*.ttl``) stays the place where the framework's rewrite is written,
with its source line; these functions only give it the string operation it needs. ``dtfn:expandRepeats(text,
pattern)`` replaces every match of ``pattern`` (a Python regular expression with two groups: a text and a count)
by the text repeated count times, left to right as :func:`re.sub` does — the unrolling Megatron-LM applies to
``--pipeline-model-parallel-layout`` (``"(tt|)*2"`` → ``"tt|tt|"``). Its result is unbound (the derivation then
adds nothing) when the pattern is not a valid expression or the expansion would exceed :data:`MAX_EXPANDED`
characters (a layout of a few thousand stages is already far beyond any model).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pyoxigraph as ox

from debugtune.engine.prevent.vocab import FN

MAX_EXPANDED = 1_000_000

Term = ox.NamedNode | ox.BlankNode | ox.Literal | ox.Triple


def expand_repeats(text: Term, pattern: Term) -> ox.Literal | None:
    """``text`` with each ``pattern`` match (group 1 = what, group 2 = how many times) written out."""
    if not isinstance(text, ox.Literal) or not isinstance(pattern, ox.Literal):
        return None
    try:
        regex = re.compile(pattern.value)
    except re.error:
        return None
    if regex.groups < 2:
        return None
    size = len(text.value)
    try:
        for m in regex.finditer(text.value):
            size += len(m.group(1) or "") * int(m.group(2))
            if size > MAX_EXPANDED:
                return None
        return ox.Literal(regex.sub(lambda m: (m.group(1) or "") * int(m.group(2)), text.value))
    except (TypeError, ValueError):  # a count group that is unset or not a number
        return None


FUNCTIONS: dict[ox.NamedNode, Callable[..., Term | None]] = {ox.NamedNode(FN + "expandRepeats"): expand_repeats}
"""What :class:`~debugtune.engine.prevent.graph.ConfigGraph` registers for every update and query."""
