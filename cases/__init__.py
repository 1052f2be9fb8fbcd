"""The knowledge base as Turtle data: symptoms, causes, causal links, remedies, cases, thresholds, rules."""

from pathlib import Path

HERE = Path(__file__).resolve().parent


def turtle_files() -> list[Path]:
    """Every knowledge-base Turtle file, sorted (sub-folders included)."""
    return sorted(HERE.rglob("*.ttl"))
