"""Whether the frozen weights are still as their layer's constructor left them (``run.json`` ``probe.params``).

Freezing most of a model is a fine-tuning recipe when the frozen part was trained before (linear probing, a
frozen backbone). Freezing a body that was never trained, because the pretrained weights were not loaded (a
transformers model built from its config instead of ``from_pretrained``) or the freeze loop caught the wrong
modules, leaves a readout over random features: a fault whatever the loss does. Two constructor laws are read:

- **Uniform.** PyTorch's constructors initialise ``Linear``, ``Conv*``, ``RNN``/``LSTM``/``GRU`` weights and biases
  uniformly on a symmetric interval (Kaiming-uniform with a = √5, bound 1/√fan_in; Xavier-uniform for attention's
  input projection), and training moves them off it: the tails grow. A tensor of n values uniform on [−b, b] has
  max|w| / std = √3 up to O(1/n) and a sample std within about 0.5·√(0.8/n) of b/√3, so at n ≥ 1,000
  (``probe.frozen_init.min_elements``) the ratio lies within ±5% of √3 (``probe.frozen_init.band``).
- **Normal at a constructor's std.** transformers' ``_init_weights`` draws linear and embedding weights from
  N(0, ``config.initializer_range``) (0.02 by default, as Megatron's ``init_method_std``), ``nn.Embedding`` from
  N(0, 1). A tensor reads so when its mean is within the band of its std of 0, its std within the band of one of
  those values (the model's own ``config.initializer_range`` where it has one; the sample std's relative error is
  1/√(2n), 2.2% at 1,000 values) and its excess kurtosis within ``probe.frozen_init.kurtosis_band`` of a normal's
  0 (uniform: −1.2; trained weights grow heavy tails). A normal law at any other std is not claimed: a trained
  tensor can be bell-shaped, but it does not keep the constructor's std.

Constant tensors (norm layers' ones and zeros) are not judged. The test reads each frozen tensor once, when the
probe attaches.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

MIN_ELEMENTS_KEY = "probe.frozen_init.min_elements"
MAX_ELEMENTS_KEY = "probe.frozen_init.max_elements"
BAND_KEY = "probe.frozen_init.band"
KURTOSIS_KEY = "probe.frozen_init.kurtosis_band"
NORMAL_STD_KEYS = ("probe.frozen_init.std_initializer_range", "probe.frozen_init.std_embedding")
KEYS = (MIN_ELEMENTS_KEY, BAND_KEY)


def as_constructed(w: Any, min_elements: int, band: float, normal_stds: Iterable[float] = (),
                   kurtosis_band: float | None = None, max_elements: int | None = None) -> bool | None:
    """True where ``w`` is uniform on an interval symmetric about 0, or normal about 0 at one of ``normal_stds``
    (as a constructor leaves it; the normal law only with ``kurtosis_band``), False where it is not, None where it
    cannot tell (too few values, constant, or not finite). A tensor of more than ``max_elements`` values is read
    on an evenly strided sample of about that many: a large frozen embedding is never copied whole."""
    n = w.numel()
    if n < min_elements or not w.dtype.is_floating_point:
        return None
    if max_elements and n > max_elements:  # torch.take indexes the logical layout: no copy of a strided tensor
        import torch

        x = torch.take(w.detach(), torch.arange(0, n, n // max_elements, device=w.device))
    else:
        x = w.detach().reshape(-1)
    x = x.double()
    std = float(x.std())
    if not math.isfinite(std) or std == 0.0:
        return None
    mean = float(x.mean())
    if abs(mean) >= band * std:
        return False
    if abs(float(x.abs().max()) / (math.sqrt(3.0) * std) - 1.0) <= band:
        return True
    if kurtosis_band is None or not any(s > 0 and abs(std / s - 1.0) <= band for s in normal_stds):
        return False
    excess = float((((x - mean) / std) ** 4).mean()) - 3.0
    return abs(excess) <= kurtosis_band


def normal_stds(model: Any, th: Any) -> list[float]:
    """The stds a constructor draws normal weights at: the knowledge base's, and the model's own
    ``config.initializer_range`` where it declares one (transformers models do)."""
    out = [float(v) for v in (th.get(k) for k in NORMAL_STD_KEYS) if v is not None]
    declared = getattr(getattr(model, "config", None), "initializer_range", None)
    if isinstance(declared, (int, float)) and not isinstance(declared, bool) and declared > 0:
        out.append(float(declared))
    return out


def frozen_init(names: list[str], params: list[Any], frozen: list[int], th: Any,
                stds: Iterable[float] = ()) -> dict[str, Any]:
    """``frozen_judged``: frozen tensors the test can read; ``frozen_as_constructed`` and their names (≤ 100)."""
    min_elements, band = th.get(MIN_ELEMENTS_KEY), th.get(BAND_KEY)
    if min_elements is None or band is None:
        return {}
    kurtosis, cap, stds = th.get(KURTOSIS_KEY), th.get(MAX_ELEMENTS_KEY), list(stds)
    judged, hits = 0, []
    for i in frozen:
        verdict = as_constructed(params[i], int(min_elements), float(band), stds, kurtosis,
                                 int(cap) if cap else None)
        if verdict is None:
            continue
        judged += 1
        if verdict:
            hits.append(names[i])
    return {"frozen_judged": judged, "frozen_as_constructed": len(hits), "frozen_as_constructed_names": hits[:100]}
