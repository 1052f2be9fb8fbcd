"""The text form of `cann-debug kb show` (its data: `debugtune.kb_view.show`): one heading per section, a
section with nothing in it says so, so every section is always there to read."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _num(v: Any) -> str:
    return "" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def _table(console: Console, title: str, columns: list[str], rows: list[list[Any]]) -> None:
    console.print(f"\n[bold]{escape(title)}[/] ({len(rows)})")
    if not rows:
        console.print("  none")
        return
    table = Table(show_edge=False, pad_edge=False, box=None)
    for c in columns:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*(escape(_num(v)) for v in r))
    console.print(table)


def print_item(console: Console, data: dict[str, Any]) -> None:
    it = data["item"]
    console.print(f"[bold]{escape(it['name'])}[/] ({', '.join(it['kinds'])}): {escape(it['label'] or '')}")
    console.print(escape(it["iri"]), highlight=False)
    if it["definition"]:
        console.print(escape(it["definition"]))
    for src in it["sources"]:
        console.print(f"  source: {escape(src)}", highlight=False)
    if it["files"]:
        console.print(f"  files: {escape(', '.join(it['files']))}", highlight=False)
    for st in it["statements"]:
        console.print(f"  {escape(str(st['property']))}: {escape(_num(st['value']))}", highlight=False)
    links = [("links out", "to", data["links_out"]), ("links in", "from", data["links_in"])]
    for title, end, rows in links:
        _table(console, title, [end, "strength", "lag", "min lag", "sources"],
               [[r[end], r["strength"], r["lag_steps"], r["min_lag_steps"], "\n".join(r["sources"])] for r in rows])
    _table(console, "remedies", ["remedy", "effectiveness", "cost", "risk", "addresses", "tuning parameters"],
           [[r["remedy"], r["effectiveness"], r["cost"], r["risk"], ", ".join(r["addresses"]),
             "\n".join(f"{p['name']} {p['kind']} [{_num(p['low'])}, {_num(p['high'])}] default {_num(p['default'])}"
                       for p in r["parameters"]) or "none"] for r in data["remedies"]])
    _table(console, "cases", ["case", "as", "outcome", "label"],
           [[r["case"], ", ".join(r["as"]), r["outcome"], r["label"]] for r in data["cases"]])
    _table(console, "calibration profiles", ["profile", "cause", "symptom rates"],
           [[r["profile"], r["cause"], ", ".join(f"{k} {v:g}" for k, v in r["rates"].items() if v)]
            for r in data["calibration"]])
    _table(console, "thresholds that apply", ["key", "value", "via"],
           [[r["key"], r["value"], "; ".join(r["via"])] for r in data["thresholds"]])
    _table(console, "detectors that judge it", ["detector", "symptom", "dimension", "marked in KB"],
           [[r["detector"], r["symptom"], r["dimension"], "yes" if r["marked_in_kb"] else "no"]
            for r in data["detectors"]])
    _table(console, "prevention rules that mention it", ["rule", "as", "label"],
           [[r["rule"], ", ".join(r["as"]), r["label"]] for r in data["prevention_rules"]])
