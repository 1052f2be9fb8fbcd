"""Manifestation criteria (``criteria.yaml``) evaluated on a training's own outputs.

``check(name, outcome, healthy, onset)`` says whether fault (or look-alike) ``name`` manifested in
``outcome`` and why, with ``healthy`` the plain healthy run of the same program and seed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from debugtune.kg.errors import DebugtuneError
from debugtune.scenarios.common import window_mean
from debugtune.scenarios.programs import Outcome

CRITERIA_FILE = Path(__file__).with_name("criteria.yaml")


class CriteriaError(DebugtuneError):
    """criteria.yaml is malformed; the message names the entry."""


@dataclass(frozen=True)
class Verdict:
    manifested: bool
    why: str


def _final(o: Outcome) -> float:
    loss = o.series["loss"]
    return float("nan") if not np.all(np.isfinite(loss)) else window_mean(loss)


def _final_in_units_of(o: Outcome, h: Outcome) -> float:
    """The final loss of ``o`` in the units of ``h``: rescaled by the ratio of their chance losses where those
    differ (a reconstruction of raw, unstandardised inputs has a loss in other units than the healthy one)."""
    f = _final(o)
    co, ch = o.summary.get("chance_loss"), h.summary.get("chance_loss")
    if co and ch and abs(co - ch) > 1e-6 * ch:
        f *= ch / co
    return f


def nonfinite(o: Outcome, h: Outcome, onset: int) -> Verdict:
    bad = np.flatnonzero(~np.isfinite(o.series["loss"]))
    return Verdict(bool(len(bad)), f"first non-finite loss at step {bad[0]}" if len(bad) else "loss finite")


def _harm_bar(o: Outcome, ref: float, ratio: float, margin: float, range_frac: float | None) -> float:
    """min(ratio * healthy + margin, healthy + range_frac * (chance loss - healthy))."""
    bar = ratio * ref + margin
    chance = o.summary.get("chance_loss")
    if range_frac is not None and chance is not None and chance > ref:
        bar = min(bar, ref + range_frac * (chance - ref))
    return bar


def final_loss_above_healthy(o: Outcome, h: Outcome, onset: int, ratio: float, margin: float,
                             range_frac: float | None = None) -> Verdict:
    f, ref = _final_in_units_of(o, h), _final(h)
    bar = _harm_bar(h, ref, ratio, margin, range_frac)
    ok = not np.isfinite(f) or f >= bar
    return Verdict(bool(ok), f"final loss {f:.4g} vs bar {bar:.4g} (healthy {ref:.4g})")


def final_loss_not_above_healthy(o: Outcome, h: Outcome, onset: int, ratio: float, margin: float) -> Verdict:
    f, ref = _final(o), _final(h)
    bar = ratio * ref + margin
    return Verdict(bool(np.isfinite(f) and f <= bar), f"final loss {f:.4g} vs bar {bar:.4g} (healthy {ref:.4g})")


def learned(o: Outcome, h: Outcome, onset: int, max_chance_frac: float) -> Verdict:
    """The program's own verdict where it gives one (``learned``/``why`` in its summary), else a finite final
    loss at most ``max_chance_frac`` of the chance loss."""
    if "learned" in o.summary:
        return Verdict(bool(o.summary["learned"]), str(o.summary.get("why", "")))
    f, chance = _final(o), o.summary.get("chance_loss")
    if chance is None:
        return Verdict(bool(np.isfinite(f)), f"final loss {f:.4g} (no chance loss)")
    ok = bool(np.isfinite(f) and f <= max_chance_frac * chance)
    return Verdict(ok, f"final loss {f:.4g} vs {max_chance_frac} x chance {chance:.4g}")


def summary_at_least(o: Outcome, h: Outcome, onset: int, key: str, min: float) -> Verdict:  # noqa: A002
    v = float(o.summary.get(key, float("nan")))
    return Verdict(bool(v >= min), f"{key} {v:.3g} (min {min})")


def summary_at_most(o: Outcome, h: Outcome, onset: int, key: str, max: float) -> Verdict:  # noqa: A002
    v = float(o.summary.get(key, float("nan")))
    return Verdict(bool(v <= max), f"{key} {v:.3g} (max {max})")


def dead_units(o: Outcome, h: Outcome, onset: int, min: float) -> Verdict:  # noqa: A002
    d = o.summary.get("dead_frac", 0.0)
    return Verdict(d >= min, f"dead ReLU units {d:.2f} (min {min})")


def relu_sparse_not_dead(o: Outcome, h: Outcome, onset: int, min_zero: float, max_dead: float) -> Verdict:
    z, d = o.summary.get("act_zero_frac", 0.0), o.summary.get("dead_frac", 0.0)
    return Verdict(z >= min_zero and d < max_dead, f"zero activations {z:.2f}, dead units {d:.2f}")


def saturated(o: Outcome, h: Outcome, onset: int, min: float) -> Verdict:  # noqa: A002
    s = o.summary.get("sat_frac", 0.0)
    return Verdict(s >= min, f"saturated activations {s:.2f} (min {min})")


def _spike(loss: np.ndarray, onset: int, before: int, within: int) -> tuple[float, float]:
    """(median of the `before` steps before onset, max loss in [onset, onset+within)); NaN max = inf."""
    pre = float(np.median(loss[max(0, onset - before): onset]))
    win = loss[onset: onset + within]
    peak = float(np.inf) if not np.all(np.isfinite(win)) else float(np.max(win))
    return pre, peak


def spike_then_damage(o: Outcome, h: Outcome, onset: int, before: int, within: int, spike: float,
                      after_from: int, after_to: int, damage: float, margin: float) -> Verdict:
    loss = o.series["loss"]
    pre, peak = _spike(loss, onset, before, within)
    after = loss[onset + after_from: onset + after_to]
    blown = not np.all(np.isfinite(loss[onset:]))
    late = float(np.mean(after)) if len(after) and np.all(np.isfinite(after)) else float("inf")
    ok = peak >= spike * pre and (blown or late >= damage * pre + margin)
    return Verdict(bool(ok), f"pre {pre:.3g}, peak {peak:.3g}, after {late:.3g}")


def spike_then_recover(o: Outcome, h: Outcome, onset: int, before: int, within: int, spike: float,
                       after_from: int, after_to: int, recover: float, margin: float) -> Verdict:
    loss = o.series["loss"]
    pre, peak = _spike(loss, onset, before, within)
    after = loss[onset + after_from: onset + after_to]
    late = float(np.mean(after)) if len(after) and np.all(np.isfinite(after)) else float("inf")
    ok = peak >= spike * pre and late <= recover * pre + margin
    return Verdict(bool(ok), f"pre {pre:.3g}, peak {peak:.3g}, after {late:.3g}")


def top2_share(o: Outcome, h: Outcome, onset: int, span: float, min: float) -> Verdict:  # noqa: A002
    share = o.series["top2_share"]
    end = onset + max(1, int(span * len(share)))
    m = float(np.mean(share[onset:end]))
    return Verdict(m >= min, f"top-2 experts take {m:.2f} of tokens over steps {onset}..{end - 1}")


def expert_cv_above_healthy(o: Outcome, h: Outcome, onset: int, ratio: float) -> Verdict:
    cv, ref = o.summary["expert_cv_last_half"], h.summary["expert_cv_last_half"]
    return Verdict(bool(cv >= ratio * ref), f"expert CV {cv:.2f} vs healthy {ref:.2f}")


def expert_step_cv_above_healthy(o: Outcome, h: Outcome, onset: int, ratio: float) -> Verdict:
    cv, ref = o.summary["expert_step_cv_last_half"], h.summary["expert_step_cv_last_half"]
    return Verdict(bool(cv >= ratio * ref), f"per-step expert CV {cv:.2f} vs healthy {ref:.2f}")


def dropped_tokens(o: Outcome, h: Outcome, onset: int, min: float) -> Verdict:  # noqa: A002
    d = o.series["dropped_frac"]
    m = float(np.mean(d[len(d) // 2:]))
    return Verdict(m >= min, f"dropped {m:.2f} of assignments over the last half")


def slow_rank(o: Outcome, h: Outcome, onset: int, ratio: float) -> Verdict:
    med = np.median(o.series["compute_ms"][:, onset:], axis=1)
    r = int(np.argmax(med))
    others = float(np.median(np.delete(med, r)))
    x = float(med[r] / others) if others > 0 else float("inf")
    return Verdict(x >= ratio, f"rank {r} computes {x:.2f}x the other ranks' median")


def data_wait_share(o: Outcome, h: Outcome, onset: int, share: float) -> Verdict:
    wait = np.median(o.series["data_ms"][:, onset:], axis=1)
    step = np.median(o.series["step_ms"][:, onset:], axis=1)
    frac = wait / np.maximum(step, 1e-9)
    return Verdict(bool(np.all(frac >= share)), "data wait share per rank " + ", ".join(f"{f:.2f}" for f in frac))


KINDS: dict[str, Callable[..., Verdict]] = {f.__name__: f for f in (
    nonfinite, final_loss_above_healthy, final_loss_not_above_healthy, learned, summary_at_least, summary_at_most,
    dead_units, relu_sparse_not_dead, saturated, spike_then_damage, spike_then_recover, top2_share,
    expert_cv_above_healthy, expert_step_cv_above_healthy, dropped_tokens, slow_rank, data_wait_share)}


@lru_cache(maxsize=4)
def load(path: Path = CRITERIA_FILE) -> dict[str, Any]:
    """The criteria of every fault and look-alike: {name: spec}; malformed entries raise CriteriaError."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise CriteriaError(f"{path}: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("faults"), dict):
        raise CriteriaError(f"{path}: expected a mapping with 'faults' and 'lookalikes'")
    out = {**doc["faults"], **(doc.get("lookalikes") or {})}
    for name, spec in out.items():
        _validate(path, name, spec)
    return out


def _validate(path: Path, name: str, spec: Any) -> None:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise CriteriaError(f"{path}: {name}: a criterion is one mapping entry (a kind, 'any' or 'all')")
    (kind, args), = spec.items()
    if kind in ("any", "all"):
        if not isinstance(args, list) or not args:
            raise CriteriaError(f"{path}: {name}.{kind}: expected a non-empty list")
        for sub in args:
            _validate(path, f"{name}.{kind}", sub)
    elif kind not in KINDS:
        raise CriteriaError(f"{path}: {name}: unknown criterion kind {kind!r}; known: {', '.join(KINDS)}")
    elif not isinstance(args, dict):
        raise CriteriaError(f"{path}: {name}.{kind}: expected a mapping of parameters")


def _evaluate(spec: Mapping[str, Any], o: Outcome, h: Outcome, onset: int) -> Verdict:
    (kind, args), = spec.items()
    if kind in ("any", "all"):
        verdicts = [_evaluate(s, o, h, onset) for s in args]
        ok = any(v.manifested for v in verdicts) if kind == "any" else all(v.manifested for v in verdicts)
        return Verdict(ok, "; ".join(v.why for v in verdicts))
    return KINDS[kind](o, h, onset, **args)


def check(name: str, outcome: Outcome, healthy: Outcome, onset: int) -> Verdict:
    """Whether ``name`` (a fault or look-alike of criteria.yaml) manifested in ``outcome``."""
    specs = load()
    if name not in specs:
        raise CriteriaError(f"{CRITERIA_FILE}: no criterion for {name!r}")
    return _evaluate(specs[name], outcome, healthy, onset)
