"""Text that reaches the page is escaped: HTML text and attributes, plotly labels, and JSON inside ``<script>``.

Plotly renders a subset of HTML tags in its labels and decodes ``&lt;``-style entities, so a label is
HTML-escaped before plotly sees it and shows up literally. JSON embedded in a ``<script>`` element has
every ``<``, ``>`` and ``&`` written as a ``\\u`` escape (characters that only occur inside JSON strings),
so neither ``</script>`` nor ``<!--`` can end or change the element; U+2028/U+2029 are escaped as well.
Numbers in numpy arrays are written with a fixed number of significant digits and ``null`` for
non-finite values, which keeps large figures small.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

SIGNIFICANT = 5
_SCRIPT_SAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def h(text: Any) -> str:
    """HTML-escape any value's text for element content or a quoted attribute (None is shown as nothing)."""
    return "" if text is None else html.escape(str(text), quote=True)


def ptext(text: Any) -> str:
    """A label for plotly: its HTML-like markup neutralised so the text shows as written."""
    return html.escape(str(text), quote=False)


def _number(x: float) -> str:
    if not math.isfinite(x):
        return "null"
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.{SIGNIFICANT}g}"


def _array(a: np.ndarray) -> str:
    if a.dtype.kind in "iub":
        return json.dumps(a.astype(np.int64).tolist())
    if a.dtype.kind == "f":
        if a.ndim == 1:
            return "[" + ",".join(_number(float(x)) for x in a) + "]"
        return "[" + ",".join(_array(row) for row in a) + "]"
    return _value(a.tolist())


def _value(obj: Any) -> str:
    if isinstance(obj, np.ndarray):
        return _array(obj)
    if isinstance(obj, Mapping):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_value(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list | tuple):
        return "[" + ",".join(_value(v) for v in obj) + "]"
    if isinstance(obj, bool) or obj is None:
        return json.dumps(obj)
    if isinstance(obj, int | np.integer):
        return str(int(obj))
    if isinstance(obj, float | np.floating):
        return _number(float(obj))
    return json.dumps(str(obj), ensure_ascii=False)


def script_json(obj: Any) -> str:
    """``obj`` as JSON that is safe inside a ``<script>`` element (see the module docstring)."""
    text = _value(obj)
    for bad, good in _SCRIPT_SAFE.items():
        text = text.replace(bad, good)
    return text
