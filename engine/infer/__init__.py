"""Infer: SPARQL rules to a fixpoint, then causal scoring of every candidate cause, calibrated,
explained and asserted back into the run's graph."""

from debugtune.engine.infer.causal import UNKNOWN, CauseScore, SymptomEvidence
from debugtune.engine.infer.engine import Ranking, candidate_causes, infer, rank
from debugtune.engine.infer.model import CausalModel, Link, load_model
from debugtune.engine.infer.report import REPORT_FILE, Candidate, DiagnosisReport

__all__ = [
    "REPORT_FILE", "UNKNOWN", "Candidate", "CausalModel", "CauseScore", "DiagnosisReport", "Link", "Ranking",
    "SymptomEvidence", "candidate_causes", "infer", "load_model", "rank",
]
