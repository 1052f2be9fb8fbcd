"""`cann-debug demo`: the main job on a fresh machine (grows with each stage of the pipeline)."""

from __future__ import annotations

import time

from rich.table import Table

from debugtune.cli.apps import debug_app
from debugtune.cli.common import StoreOption, console
from debugtune.cli.query_cmd import print_result
from debugtune.kg import open_store
from debugtune.kg.knowledge import class_counts, load_knowledge

EXAMPLE = """SELECT ?cause ?strength WHERE {
  ?link dt:from ?c ; dt:to kb:ExpertImbalance ; dt:strength ?strength .
  ?c a dt:Cause ; skos:prefLabel ?cause .
} ORDER BY DESC(?strength) LIMIT 5"""


@debug_app.command("demo")
def demo(store: StoreOption = None) -> None:
    """Load the knowledge base, show what it holds and run an example query."""
    t0 = time.perf_counter()
    st = open_store(store or "memory")
    loaded = load_knowledge(st)
    console.print(f"loaded {sum(loaded.values())} triples into {st.target} in {time.perf_counter() - t0:.2f} s")
    table = Table(title="knowledge base")
    table.add_column("class")
    table.add_column("count", justify="right")
    for cls, n in class_counts(st).items():
        table.add_row(cls, str(n))
    console.print(table)
    console.print("[bold]Which causes most often lead to expert imbalance?[/]")
    console.print(EXAMPLE, markup=False, highlight=False)
    print_result(st.query(EXAMPLE), json_out=False)
