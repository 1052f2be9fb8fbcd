"""Capture: the live probe (``attach``) and the offline importers. Importing this never imports torch."""

from __future__ import annotations

from typing import Any

from debugtune.engine.capture.importers import ImportFormatError, ImportResult, detect_format, formats, import_path

__all__ = ["ImportFormatError", "ImportResult", "attach", "detect_format", "formats", "import_path"]


def attach(*args: Any, **kwargs: Any) -> Any:
    """Attach the live probe to a model and optimizer (see :mod:`debugtune.engine.capture.probe`)."""
    from debugtune.engine.capture.probe import attach as _attach

    return _attach(*args, **kwargs)
