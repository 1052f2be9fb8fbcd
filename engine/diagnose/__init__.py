"""Diagnose: the detectors over a run's telemetry, and the correlation graph of findings.

``diagnose_run(run_dir, thresholds)`` reads the telemetry, runs the registered detectors of the dimensions that
were asked for (gradient, convergence, communication, hardware; ``detectors.DETECTORS``), links co-moving
findings, and returns a :class:`Diagnosis` that also says what could not be judged and why.
"""

from debugtune.engine.diagnose.detectors import DETECTORS
from debugtune.engine.diagnose.errors import DiagnoseError, MissingThresholdError
from debugtune.engine.diagnose.frame import Grid, TelemetryView
from debugtune.engine.diagnose.registry import Detector, NotJudged
from debugtune.engine.diagnose.run import Diagnosis, diagnose_run, diagnose_view
from debugtune.engine.diagnose.thresholds import Thresholds

__all__ = [
    "DETECTORS", "Detector", "Diagnosis", "DiagnoseError", "Grid", "MissingThresholdError", "NotJudged",
    "TelemetryView", "Thresholds", "diagnose_run", "diagnose_view",
]
