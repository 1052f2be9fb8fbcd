"""The OWL ontology, SHACL shapes, SPARQL inference rules and JSON-LD contexts (data, not code)."""

from pathlib import Path

HERE = Path(__file__).resolve().parent
ONTOLOGY = HERE / "debugtune.ttl"
SHAPES = HERE / "shapes.ttl"
RULES_DIR = HERE / "rules"
CONTEXTS_DIR = HERE / "contexts"
