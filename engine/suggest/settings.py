"""The ranking and similarity settings, read from the knowledge base (`cases/thresholds/suggest.ttl`)."""

from __future__ import annotations

from dataclasses import dataclass

from debugtune.engine.suggest.errors import SuggestError
from debugtune.kg.knowledge import thresholds
from debugtune.kg.store import Store

CRITERIA = ("effectiveness", "cost", "risk")
"""The criteria of the weighted score, in the order of the ``rank by`` clause."""

_KEYS = {
    "effectiveness": "suggest.weight.effectiveness", "cost": "suggest.weight.cost", "risk": "suggest.weight.risk",
    "alpha": "suggest.prior.alpha", "beta": "suggest.prior.beta",
    "half_cost": "suggest.cost.half_score_card_hours", "threshold": "suggest.similarity.threshold",
}


@dataclass(frozen=True)
class SuggestSettings:
    """Default weights, the Beta prior, the cost scale and the similarity threshold."""

    weights: dict[str, float]
    alpha: float
    beta: float
    half_cost: float
    threshold: float


def load_settings(store: Store) -> SuggestSettings:
    """The settings stored as ``dt:Threshold`` data; a missing key is an error naming it."""
    found = thresholds(store).require(*_KEYS.values())
    v = {name: found[key] for name, key in _KEYS.items()}
    if v["alpha"] <= 0 or v["beta"] <= 0 or v["half_cost"] <= 0:
        raise SuggestError("suggest.prior.alpha, suggest.prior.beta and suggest.cost.half_score_card_hours "
                           "must be positive")
    return SuggestSettings({c: v[c] for c in CRITERIA}, v["alpha"], v["beta"], v["half_cost"], v["threshold"])


def check_weights(weights: dict[str, float]) -> dict[str, float]:
    """Weights for the named criteria (others 0); non-negative, not all zero."""
    bad = [k for k in weights if k not in CRITERIA]
    if bad:
        raise SuggestError(f"unknown ranking criterion {bad[0]!r}; use {', '.join(CRITERIA)}")
    out = {c: float(weights.get(c, 0.0)) for c in CRITERIA}
    if any(w < 0 or w != w for w in out.values()) or sum(out.values()) <= 0:
        raise SuggestError(f"ranking weights must be non-negative and not all zero, got {weights}")
    return out
