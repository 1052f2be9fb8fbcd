"""Detector and engine settings read from the knowledge base: `debugtune.kg.knowledge.Thresholds`, the one
thresholds API (kept importable here, where the detectors have always found it)."""

from __future__ import annotations

from debugtune.kg.knowledge import Thresholds

__all__ = ["Thresholds"]
