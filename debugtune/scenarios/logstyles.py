"""The names under which a program logs its scalars, in the styles of the training stacks users run.

The harness measures canonical quantities (``loss``, ``lr``, ``accuracy``, ``eval_loss``, ``eval_accuracy``,
``grad_norm`` — the global norm as ``clip_grad_norm_`` returns it —, ``aux_loss``, ``z_loss``,
``dropped_tokens`` (a count) and ``dropped_frac``); a style renames them or leaves them out, as the real
stack would, so detectors cannot lean on one spelling. Names follow what each stack writes: HF Trainer
(``loss``, ``learning_rate``, ``grad_norm``, ``eval_loss``, ``eval_accuracy``), PyTorch Lightning's
``self.log`` conventions (``train_loss`` / ``val_loss``, or ``train/loss`` / ``val/loss``), Megatron-LM's
text log (``lm loss``, ``learning rate``, ``grad norm``, ``load_balancing_loss``, ``validation loss``).
"""

from __future__ import annotations

from collections.abc import Mapping

STYLES: dict[str, dict[str, str]] = {
    "plain": {"loss": "loss", "lr": "lr", "accuracy": "accuracy", "eval_loss": "eval_loss",
              "eval_accuracy": "eval_accuracy"},
    "moe": {"loss": "loss", "lr": "lr", "aux_loss": "aux_loss", "z_loss": "z_loss", "dropped_tokens": "dropped_tokens"},
    "hf": {"loss": "loss", "lr": "learning_rate", "grad_norm": "grad_norm", "eval_loss": "eval_loss",
           "eval_accuracy": "eval_accuracy"},
    "lightning": {"loss": "train_loss", "lr": "lr", "accuracy": "train_acc", "eval_loss": "val_loss",
                  "eval_accuracy": "val_acc"},
    "lightning_slash": {"loss": "train/loss", "lr": "lr-{optimizer}", "accuracy": "train/acc", "eval_loss": "val/loss",
                        "aux_loss": "train/load_balancing_loss", "dropped_frac": "moe_dropped_token_fraction"},
    "megatron": {"loss": "lm loss", "lr": "learning rate", "grad_norm": "grad norm", "eval_loss": "validation loss",
                 "aux_loss": "load_balancing_loss", "z_loss": "z_loss", "dropped_frac": "moe_dropped_token_fraction"},
}


def rename(style: str, values: Mapping[str, float | None], optimizer: str = "") -> dict[str, float]:
    """``values`` (canonical names) under the style's names (``{optimizer}``: the optimizer's class name, as
    Lightning's LearningRateMonitor writes ``lr-AdamW``); quantities the style does not log are left out."""
    try:
        names = STYLES[style]
    except KeyError:
        raise ValueError(f"unknown log style {style!r}; expected one of {', '.join(STYLES)}") from None
    return {names[k].format(optimizer=optimizer): float(v) for k, v in values.items() if v is not None and k in names}
