"""Whether the frozen weights are still as their layer's constructor left them (``run.json`` ``probe.params``).

Freezing most of a model is a fine-tuning recipe when the frozen part was trained before (linear probing, a
frozen backbone). Freezing a body that was never trained, because the pretrained weights were not loaded or the
freeze loop caught the wrong modules, leaves a readout over random features: a fault whatever the loss does.
PyTorch's constructors initialise ``Linear``, ``Conv*``, ``RNN``/``LSTM``/``GRU`` weights and biases uniformly on a
symmetric interval (Kaiming-uniform with a = √5, bound 1/√fan_in; Xavier-uniform for attention's input projection),
and training moves them off it: the tails grow. A tensor of n values uniform on [−b, b] has max|w| / std = √3 up to
O(1/n) and a sample std within about 0.5·√(0.8/n) of b/√3, so at n ≥ 1,000 (``probe.frozen_init.min_elements``) the
ratio lies within ±5% of √3 (``probe.frozen_init.band``, over three standard errors); a normal init (BERT's 0.02) puts
it near √(2 ln n) ≈ 3.7 and is not claimed, nor are constant tensors (norm layers' ones and zeros). The test reads
each frozen tensor once, when the probe attaches.
"""

from __future__ import annotations

import math
from typing import Any

MIN_ELEMENTS_KEY = "probe.frozen_init.min_elements"
BAND_KEY = "probe.frozen_init.band"
KEYS = (MIN_ELEMENTS_KEY, BAND_KEY)


def as_constructed(w: Any, min_elements: int, band: float) -> bool | None:
    """True where ``w`` is uniform on an interval symmetric about 0 (as a constructor leaves it), False where it
    is not, None where it cannot tell (too few values, constant, or not finite)."""
    if w.numel() < min_elements or not w.dtype.is_floating_point:
        return None
    x = w.detach().double().flatten()
    std = float(x.std())
    if not math.isfinite(std) or std == 0.0:
        return None
    mean = float(x.mean())
    ratio = float(x.abs().max()) / (math.sqrt(3.0) * std)
    return abs(mean) < band * std and abs(ratio - 1.0) <= band


def frozen_init(names: list[str], params: list[Any], frozen: list[int], th: Any) -> dict[str, Any]:
    """``frozen_judged``: frozen tensors the test can read; ``frozen_as_constructed`` and their names (≤ 100)."""
    min_elements, band = th.get(MIN_ELEMENTS_KEY), th.get(BAND_KEY)
    if min_elements is None or band is None:
        return {}
    judged, hits = 0, []
    for i in frozen:
        verdict = as_constructed(params[i], int(min_elements), float(band))
        if verdict is None:
            continue
        judged += 1
        if verdict:
            hits.append(names[i])
    return {"frozen_judged": judged, "frozen_as_constructed": len(hits), "frozen_as_constructed_names": hits[:100]}
