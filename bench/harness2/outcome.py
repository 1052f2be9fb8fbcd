"""What a harness-2 program returns: its own record of the training, judged by :mod:`.manifest` — never what the
probe wrote, so manifestation does not lean on the system under test."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Outcome:
    losses: list[float]                       # the training loss the program computed, per logged step
    learned: bool | None = None               # the program's own success test (healthy kinds), None when it has none
    extra: dict[str, float] = field(default_factory=dict)   # program-specific figures (expert load CV …)

    def final(self, share: float = 0.1) -> float:
        """Median of the last ``share`` of the losses (inf when a loss was non-finite there)."""
        import math

        tail = self.losses[-max(1, int(len(self.losses) * share)):]
        if not tail or any(not math.isfinite(v) for v in tail):
            return math.inf
        return sorted(tail)[len(tail) // 2]


def sgd_step(opt: object, step: int, zero_grad_every: int, loss_of: object, clip_params: object = None,
             clip: float = float("inf")) -> tuple[float, float | None]:
    """One optimiser step of a hand-written loop: ``zero_grad`` every ``zero_grad_every`` steps (0: never — the
    skipped-``zero_grad`` mistake), backward of ``loss_of()``, an optional ``clip_grad_norm_`` over ``clip_params``.
    Returns the loss and the gradient norm (None when nothing was clipped)."""
    import torch

    if zero_grad_every and step % zero_grad_every == 0:
        opt.zero_grad()  # type: ignore[attr-defined]
    loss = loss_of()  # type: ignore[operator]
    loss.backward()
    norm = None if clip_params is None else float(torch.nn.utils.clip_grad_norm_(clip_params, clip))
    opt.step()  # type: ignore[attr-defined]
    return float(loss.item()), norm
