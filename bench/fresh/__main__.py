"""``python -m bench.fresh``: programs written for this bench by people who did not read the diagnoser, each with
the mistakes a user makes, trained with the probe, diagnosed and scored.

The fault bench's two harnesses were calibrated on, and the classic programs (``bench.classic_faults``) were
looked at while the diagnoser changed. The suites here (``bench/fresh/suite_*.py``) were written from a brief that
names the public API (``debugtune.attach``, ``probe.log``, ``probe.watch_router``) and the causes only: their own
data, loops, schedules and injections, in magnitudes of their own choosing, without reading the engine or the
knowledge base and without running the diagnoser. Their first measurement is the held-out figure; a change made
after reading it is no longer held out on them, and the notes say which.

Each suite module holds ``PROGRAMS`` (name → ``train(run_dir, seed, fault) -> task losses``), ``FAULTS`` (name →
{fault: cause}) and optionally ``BALANCE`` (name → the experts' CV after the last training). A fault counts where
it harmed the run against its healthy twin (``bench.classic_faults.harmed``; for MoE causes, or the balance
criterion ``unbalanced``), and the healthy twin that learnt is scored for false positives.

    python -m bench.fresh [--seeds 2] [--first-seed 0] [--jobs 2] [--suites a b] [--keep DIR] [--rediagnose] [--json]

``--keep`` trains into DIR (default ``bench/fresh/out``) and keeps every run; ``--rediagnose`` diagnoses the kept
runs again without training (for a change of the diagnosis alone).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.classic_faults import harmed, score_jobs, unbalanced
from bench.classic_programs import late_loss

SUITES = ("a", "b", "c")
OUT = Path(__file__).resolve().parent / "out"
MOE_CAUSES = {"AuxLossDisabled", "GateInitBias"}


def _suite(name: str) -> ModuleType:
    return importlib.import_module(f"bench.fresh.suite_{name}")


def _diagnosed(run_dir: Path) -> dict[str, Any]:
    from debugtune.api import diagnose

    report = diagnose(run_dir)
    return {"causes": [[h.cause, round(h.confidence, 3)] for h in report.hypotheses],
            "findings": sorted({f.symptom for f in report.findings}), "signs": [s.symptom for s in report.signs]}


def _trained(suite: ModuleType, program: str, seed: int, fault: str | None, run_dir: Path,
             rediagnose: bool) -> dict[str, Any]:
    """One run: trained (or its kept losses read back), diagnosed, summarised."""
    saved = run_dir / "fresh-losses.json"
    if rediagnose and saved.is_file():
        kept = json.loads(saved.read_text())
        losses, cv = kept["losses"], kept["cv"]
    else:
        losses = [float(x) for x in suite.PROGRAMS[program](run_dir, seed, fault)]
        balance = getattr(suite, "BALANCE", {}).get(program)
        cv = balance() if balance is not None else None
        saved.write_text(json.dumps({"losses": losses, "cv": cv}))
    return {"loss_first": losses[0], "loss_end": late_loss(losses), "expert_cv": cv, **_diagnosed(run_dir)}


def one(job: tuple[str, str, int, str, bool]) -> list[dict[str, Any]]:
    """The healthy twin of one program and seed, then each of its faults."""
    suite_name, program, seed, out, rediagnose = job
    import torch

    torch.set_num_threads(1)
    suite = _suite(suite_name)
    base = Path(out) / suite_name / program / f"s{seed}"
    base.mkdir(parents=True, exist_ok=True)
    name = f"{suite_name}.{program}"
    twin = _trained(suite, program, seed, None, base / "healthy", rediagnose)
    rows = [{"program": name, "seed": seed, "fault": None, "cause": None, **twin,
             "learnt": twin["loss_end"] < twin["loss_first"]}]
    for fault, cause in suite.FAULTS[program].items():
        row = _trained(suite, program, seed, fault, base / fault, rediagnose)
        loss = harmed(row["loss_end"], twin["loss_first"], twin["loss_end"])
        balance = unbalanced(row["expert_cv"], twin["expert_cv"])
        rows.append({"program": name, "seed": seed, "fault": fault, "cause": cause, **row,
                     "manifested": loss or balance if cause in MOE_CAUSES else loss})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fresh", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=2, help="seeds per program")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--suites", nargs="*", default=list(SUITES), choices=SUITES)
    ap.add_argument("--programs", nargs="*", help="these programs only (suite.program or program)")
    ap.add_argument("--jobs", type=int, default=2, help="programs trained side by side")
    ap.add_argument("--keep", type=Path, default=OUT, help="where the runs are trained and kept")
    ap.add_argument("--rediagnose", action="store_true", help="diagnose the kept runs again, no training")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args(argv)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    jobs = [(s, p, seed, str(args.keep), args.rediagnose)
            for seed in range(args.first_seed, args.first_seed + args.seeds)
            for s in args.suites for p in _suite(s).PROGRAMS
            if not args.programs or p in args.programs or f"{s}.{p}" in args.programs]
    return score_jobs(one, jobs, args.jobs, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
