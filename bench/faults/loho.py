"""Leave one harness out: calibrate on every run of one harness, score the other's, both ways.

Every family of the first harness (``debugtune/scenarios``) shares one training loop, one way of injecting each
fault and one logging pattern, so leaving a family out still leaves its harness in. The second harness
(``bench/harness2``) has its own loops (plain PyTorch, the HF Trainer, Lightning, logs imported from JSONL or
TensorBoard), injections and programs: what a new user changes. A harness-2 run's family is prefixed ``h2.``.
The gap between leave-one-family-out and leave-one-harness-out is what calibration learnt about the harness.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.faults.calibration import Figures, Sample, figures
from bench.faults.lofo import Fold, held_out
from debugtune.engine.diagnose import Thresholds
from debugtune.engine.infer.model import CausalModel

SECOND = "h2"


def harness_of(s: Sample) -> str:
    return SECOND if s.family.startswith(SECOND + ".") else "h1"


@dataclass
class Loho:
    folds: list[Fold]        # one per harness held out (calibrated on the other)
    pooled: Figures


def loho(samples: Sequence[Sample], model: CausalModel, th: Thresholds, *,
         progress: Callable[[str], None] | None = None) -> Loho | None:
    """Each harness scored by a calibration fitted on the other; None with fewer than two harnesses."""
    names = sorted({harness_of(s) for s in samples})
    if len(names) < 2:
        return None
    folds = []
    for name in names:
        test = [s for s in samples if harness_of(s) == name]
        fold, _ = held_out(name, [s for s in samples if harness_of(s) != name], test, model, th)
        folds.append(fold)
        if progress:
            progress(f"held out harness {name}: {len(test)} runs, temperature {fold.temperature:.2f}")
    return Loho(folds, figures([a for f in folds for a in f.answers]))
