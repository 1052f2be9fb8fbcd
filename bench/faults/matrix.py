"""The benchmark matrix: program × fault × severity × seed, plus the healthy and look-alike controls.

A cell's run id is an opaque hash, so nothing in the run directory the diagnoser reads (its name,
run.json, telemetry) tells which fault was injected; the labels stay in the bench's own output.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from debugtune.scenarios.faults import FAULTS, LOOKALIKES, SEVERITIES, injection

SEEDS = (0, 1, 2)
QUICK_SEVERITY = "severe"
QUICK_SEED = 0
QUICK_LOOKALIKES = ("Healthy", "WarmupTransient", "ScheduledLRDrop", "RecoveringSpike", "NormalReLUSparsity")
MATRIX_VERSION = 1


@dataclass(frozen=True)
class Cell:
    """One training of the matrix. ``kind`` is "fault" or "control" (healthy or a benign look-alike)."""

    kind: str
    name: str
    program: str
    severity: str
    seed: int

    @property
    def is_fault(self) -> bool:
        return self.kind == "fault"

    @property
    def overrides(self) -> dict[str, Any]:
        return injection(self.name).resolve(self.program, self.severity)

    @property
    def onset(self) -> int:
        return injection(self.name).onset_step(self.program)

    @property
    def run_id(self) -> str:
        """Opaque and stable: a hash of what defines the training (not guessable from the run dir)."""
        key = json.dumps({"v": MATRIX_VERSION, "program": self.program, "overrides": self.overrides,
                          "seed": self.seed}, sort_keys=True, default=str)
        return "r" + hashlib.sha256(key.encode()).hexdigest()[:12]

    def label(self) -> dict[str, Any]:
        return {**asdict(self), "onset_step": self.onset, "overrides": self.overrides, "run_id": self.run_id}

    def __str__(self) -> str:
        sev = "" if self.kind == "control" else f"/{self.severity}"
        return f"{self.program}:{self.name}{sev}:s{self.seed}"


def healthy_cell(program: str, seed: int) -> Cell:
    return Cell("control", "Healthy", program, "mild", seed)


def full_matrix(seeds: tuple[int, ...] = SEEDS) -> list[Cell]:
    """Every fault on every program it applies to × both severities × ``seeds``, and every control."""
    cells = [Cell("fault", f.name, p, sev, s) for f in FAULTS.values() for p in f.programs
             for sev in SEVERITIES for s in seeds]
    cells += [Cell("control", lk.name, p, "mild", s) for lk in LOOKALIKES.values() for p in lk.programs
              for s in seeds]
    return _dedupe(cells)


def quick_matrix() -> list[Cell]:
    """One seed, one severity, every fault on one representative program, and a few controls."""
    cells = []
    for f in FAULTS.values():
        program = "digits_mlp" if "digits_mlp" in f.programs else f.programs[0]
        cells.append(Cell("fault", f.name, program, QUICK_SEVERITY, QUICK_SEED))
    programs = sorted({c.program for c in cells})
    cells += [healthy_cell(p, QUICK_SEED) for p in programs]
    for name in QUICK_LOOKALIKES[1:]:
        lk = LOOKALIKES[name]
        program = "digits_mlp" if "digits_mlp" in lk.programs else lk.programs[0]
        cells.append(Cell("control", name, program, "mild", QUICK_SEED))
    return _dedupe(cells)


def references(cells: list[Cell]) -> list[Cell]:
    """The healthy runs the manifestation criteria compare against (one per program and seed)."""
    return _dedupe([healthy_cell(c.program, c.seed) for c in cells])


def _dedupe(cells: list[Cell]) -> list[Cell]:
    seen: dict[tuple, Cell] = {}
    for c in cells:
        seen.setdefault((c.kind, c.name, c.program, c.severity, c.seed), c)
    return list(seen.values())
