"""The telemetry store: long-form Parquet per rank (writer, filtered reader) and ``run.json`` metadata.

Layout of a run directory::

    <run_dir>/run.json                                   run metadata + environment snapshot
    <run_dir>/telemetry/rank=<r>/part-<seq>.parquet      rows: run, rank, step, dimension, metric, entity, value
"""

from debugtune.engine.telemetry.errors import TelemetryError
from debugtune.engine.telemetry.reader import Telemetry, read_telemetry, telemetry_dataset
from debugtune.engine.telemetry.runmeta import environment_snapshot, read_run_json, update_run_json, write_run_json
from debugtune.engine.telemetry.schema import COLUMNS, METRICS, SCHEMA, dimension_of
from debugtune.engine.telemetry.writer import TelemetryWriter

__all__ = [
    "COLUMNS", "METRICS", "SCHEMA", "Telemetry", "TelemetryError", "TelemetryWriter", "dimension_of",
    "environment_snapshot", "read_run_json", "read_telemetry", "telemetry_dataset", "update_run_json",
    "write_run_json",
]
