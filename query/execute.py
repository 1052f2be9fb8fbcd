"""Running a DSL query: parse, resolve and compile against a store, execute, shape."""

from __future__ import annotations

from debugtune.engine.suggest import SuggestError
from debugtune.kg.store import Store
from debugtune.query.compiler import Compiled, compile_ast
from debugtune.query.errors import DslValueError
from debugtune.query.parser import parse
from debugtune.query.shape import DslResult


def compile_text(text: str, store: Store) -> Compiled:
    """Parse and compile ``text``; the result's ``sparql`` is what `run_query` will run."""
    return compile_ast(parse(text), store)


def run_query(text: str, store: Store) -> DslResult:
    """Run one DSL query; DSL problems raise `DslError` subclasses (syntax, unknown name, bad value)."""
    compiled = compile_text(text, store)
    try:
        rows, details, notes = compiled.runner(store)
    except SuggestError as err:
        raise DslValueError(str(err)) from None
    return DslResult(query=text, kind=compiled.kind, columns=compiled.columns, rows=rows, sparql=compiled.sparql,
                     python_step=compiled.python_step, details=details, notes=notes)
