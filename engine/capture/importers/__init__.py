"""Offline importers: profiler output and logs on disk → the long-form telemetry of a run directory.

``import_path(path, run_dir)`` autodetects the format (``detect_format``) unless one is named (``formats()``).
"""

from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.registry import (
    IMPORTERS,
    ImportResult,
    detect_format,
    formats,
    import_path,
    importer,
)

__all__ = ["IMPORTERS", "ImportFormatError", "ImportResult", "detect_format", "formats", "import_path", "importer"]
