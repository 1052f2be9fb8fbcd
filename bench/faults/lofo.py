"""Leave one family out: calibrate on every program family but one, score the one left out, for each in turn.

A family is a kind of training program (MLP classifiers, recurrent models, MoE LMs, ...;
``debugtune.scenarios.programs.Program.family``). What is fitted — profiles, links, leaks, the temperature and the
confidence map — sees only the other families; the last two are fitted on their own out-of-family predictions (an inner
leave-one-family-out), so they carry the cost of generalising to a family it has not seen. The candidates
come from the rules over the knowledge base *without* any calibration (``base_store``), so a link learned on
the held-out family cannot make its cause a candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from bench.faults.calibration import (
    Answer,
    Calibration,
    Figures,
    Sample,
    Scored,
    answer,
    apply,
    figures,
    fit,
    fit_confidence_map,
    fit_temperature,
    score,
)
from debugtune.engine.diagnose import Thresholds
from debugtune.engine.infer.model import CausalModel


@dataclass
class Fold:
    family: str
    temperature: float
    answers: list[Answer]
    figures: Figures


@dataclass
class Lofo:
    folds: list[Fold]
    pooled: Figures
    answers: list[Answer]
    out_of_family: list[Scored]   # every run scored by the calibration that did not see its family


def families(samples: Sequence[Sample]) -> list[str]:
    return sorted({s.family for s in samples})


def _scored_out_of_family(samples: Sequence[Sample], model: CausalModel, th: Thresholds) -> list[Scored]:
    """Every run of ``samples`` scored by a calibration fitted on the other families of ``samples``."""
    out: list[Scored] = []
    for fam in families(samples):
        train = [s for s in samples if s.family != fam]
        m, t = apply(model, th, fit(train, model, th))
        out += score([s for s in samples if s.family == fam], m, t)
    return out


def held_out(name: str, train: Sequence[Sample], test: Sequence[Sample], model: CausalModel,
             th: Thresholds) -> tuple[Fold, list[Scored]]:
    """Calibrate on ``train`` (profiles, links, leaks; the temperature and the confidence map on its own
    out-of-family predictions) and answer ``test`` with it."""
    cal = fit(train, model, th)
    m, t = apply(model, th, cal)
    inner = _scored_out_of_family(train, model, th)
    temperature = fit_temperature(inner, t)
    _, t = apply(model, th, replace(cal, confidence_map=fit_confidence_map(inner, temperature, t)))
    scored = score(test, m, t)
    answers = [answer(s, temperature, t) for s in scored]
    return Fold(name, temperature, answers, figures(answers)), scored


def lofo(samples: Sequence[Sample], model: CausalModel, th: Thresholds, *,
         progress: Callable[[str], None] | None = None) -> Lofo:
    """Leave each family out in turn; the figures of each fold and of all held-out answers pooled."""
    folds: list[Fold] = []
    oof: list[Scored] = []
    for fam in families(samples):
        test = [s for s in samples if s.family == fam]
        fold, scored = held_out(fam, [s for s in samples if s.family != fam], test, model, th)
        oof += scored
        folds.append(fold)
        if progress:
            progress(f"held out {fam}: {len(test)} runs, temperature {fold.temperature:.2f}")
    pooled = [a for f in folds for a in f.answers]
    return Lofo(folds, figures(pooled), pooled, oof)


def shipped(samples: Sequence[Sample], model: CausalModel, th: Thresholds,
            out_of_family: Sequence[Scored] | None = None) -> Calibration:
    """The calibration the knowledge base ships: profiles, links and leaks fitted on every family, and the
    temperature fitted on the out-of-family predictions (so its confidences hold for a new family)."""
    cal = fit(samples, model, th)
    oof = list(out_of_family) if out_of_family is not None else _scored_out_of_family(samples, model, th)
    _, t = apply(model, th, cal)
    temperature = fit_temperature(oof, t)
    return replace(cal, temperature=temperature, confidence_map=fit_confidence_map(oof, temperature, t))


def in_distribution(samples: Sequence[Sample], model: CausalModel, th: Thresholds, cal: Calibration) -> Figures:
    """The figures of a calibration on the very runs it was fitted on (printed beneath LOFO, never alone)."""
    m, t = apply(model, th, cal)
    return figures([answer(s, t["infer.temperature"], t) for s in score(samples, m, t)])
