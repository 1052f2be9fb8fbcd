"""The benchmark matrix: program × fault × severity × seed, plus the healthy and look-alike controls.

A cell's run id is an opaque hash, so nothing in the run directory the diagnoser reads (its name,
run.json, telemetry) tells which fault was injected; the labels stay in the bench's own output.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from debugtune.scenarios.faults import FAULTS, LEAD, LOOKALIKES, SEVERITIES, injection
from debugtune.scenarios.programs import PROGRAMS

SEEDS = (0, 1, 2)
QUICK_SEVERITY = "severe"
QUICK_SEED = 0
QUICK_FAMILIES = ("mlp", "regression", "multilabel", "recurrent", "autoencoder", "moe_top1", "moe_top2", "ddp")
"""The families of the CI subset (their first programs train in about a second each; the MoE and the gloo
runs are the slow ones), in the order faults are spread over them."""
QUICK_SLOW = ("moe_top1", "moe_top2")
QUICK_PER_FAULT = 2
MATRIX_VERSION = 2


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
    def family(self) -> str:
        """The program's family (what leave-one-family-out scoring leaves out whole)."""
        return PROGRAMS[self.program].family

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
        return {**asdict(self), "family": self.family, "onset_step": self.onset, "overrides": self.overrides,
                "run_id": self.run_id}

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
    """The CI subset: one seed, the severe injections; each fault on ``QUICK_PER_FAULT`` of the quick families it
    applies to (the family order rotated from one fault to the next, so the generic faults spread over them),
    each look-alike on one, and the healthy run of every program used."""
    cells = [Cell("fault", f.name, p, QUICK_SEVERITY, QUICK_SEED)
             for i, f in enumerate(FAULTS.values()) for p in _quick_programs(f.programs, i, QUICK_PER_FAULT)]
    cells += [Cell("control", lk.name, p, "mild", QUICK_SEED) for i, lk in enumerate(LOOKALIKES.values())
              if lk.name != "Healthy" for p in _quick_programs(lk.programs, i, 1, slow_last=True)]
    cells += [healthy_cell(p, QUICK_SEED) for p in dict.fromkeys(c.program for c in cells)]
    return _dedupe(cells)


def _quick_programs(programs: tuple[str, ...], shift: int, count: int, slow_last: bool = False) -> list[str]:
    """Up to ``count`` first programs of distinct quick families among ``programs``, the family order rotated by
    ``shift``; with ``slow_last`` the MoE families come after the others whatever the rotation (controls)."""
    head = [f for f in QUICK_FAMILIES if not (slow_last and f in QUICK_SLOW)]
    k = shift % len(head)
    order = head[k:] + head[:k] + [f for f in QUICK_FAMILIES if f not in head]
    fams = {PROGRAMS[p].family for p in programs}
    return [LEAD[f] for f in order if f in fams and LEAD[f] in programs][:count]


def references(cells: list[Cell]) -> list[Cell]:
    """The healthy runs the manifestation criteria compare against (one per program and seed)."""
    return _dedupe([healthy_cell(c.program, c.seed) for c in cells])


def _dedupe(cells: list[Cell]) -> list[Cell]:
    seen: dict[tuple, Cell] = {}
    for c in cells:
        seen.setdefault((c.kind, c.name, c.program, c.severity, c.seed), c)
    return list(seen.values())
