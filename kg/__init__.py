"""The knowledge graph: stores (embedded or remote Oxigraph / SPARQL 1.1), knowledge loading, rules."""

from debugtune.kg.errors import (
    DebugtuneError,
    EndpointError,
    FixpointError,
    KgError,
    RdfSyntaxError,
    SparqlSyntaxError,
    StoreLockedError,
)
from debugtune.kg.open import open_store
from debugtune.kg.results import AskResult, GraphResult, QueryResult, SelectResult, to_python
from debugtune.kg.store import OxigraphStore, Store

__all__ = [
    "AskResult", "DebugtuneError", "EndpointError", "FixpointError", "GraphResult", "KgError", "OxigraphStore",
    "QueryResult", "RdfSyntaxError", "SelectResult", "SparqlSyntaxError", "Store", "StoreLockedError",
    "open_store", "to_python",
]
