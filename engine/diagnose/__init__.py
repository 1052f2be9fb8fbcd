"""Diagnose: the four detector families over a run's telemetry, and the correlation graph of findings.

``diagnose_run(run_dir, thresholds)`` reads the telemetry, runs the families that were asked for
(gradient, convergence, communication, hardware), links co-moving findings, and returns a
:class:`Diagnosis` that also says what could not be diagnosed and why.
"""

from debugtune.engine.diagnose.errors import DiagnoseError, MissingThresholdError
from debugtune.engine.diagnose.frame import Grid, TelemetryView
from debugtune.engine.diagnose.run import FAMILIES, Diagnosis, diagnose_run, diagnose_view
from debugtune.engine.diagnose.thresholds import Thresholds

__all__ = [
    "FAMILIES", "Diagnosis", "DiagnoseError", "Grid", "MissingThresholdError", "TelemetryView", "Thresholds",
    "diagnose_run", "diagnose_view",
]
