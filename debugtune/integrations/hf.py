"""The probe as a Hugging Face ``transformers.TrainerCallback`` (extra ``hf``; docs/integrations.md).

``Trainer(..., callbacks=[DebugtuneCallback("runs/ft-1", diagnose=True)])`` attaches the probe when training
begins (to the model and the torch optimizer inside accelerate's wrapper; MoE routers by module type or as
named), records the training loss of every optimizer step from the model's output (the Trainer itself
only logs it every ``logging_steps``), the learning rate, and whatever the Trainer logs (``grad_norm``,
``eval_loss``, ``eval_*``) under the telemetry schema's names, and closes the probe when training ends.

Steps: a metric logged when the Trainer reports ``global_step`` N belongs to the optimizer step N - 1, the
probe's step of that iteration (the probe counts completed ``optimizer.step()`` calls from 0).
"""

from __future__ import annotations

import os
from functools import partial
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from debugtune.integrations.routers import balance_setting
from debugtune.integrations.session import Routers, SessionCallback, distributed_barrier, module_size

if TYPE_CHECKING:
    from debugtune.kg import Store

__all__ = ["DebugtuneCallback"]

# The Trainer's end-of-training summary and its speed counters are not series of the run.
_SUMMARY_KEY = "train_runtime"
_ARGS = ("learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps",
         "num_train_epochs", "warmup_steps", "warmup_ratio", "lr_scheduler_type", "weight_decay", "max_grad_norm",
         "optim", "bf16", "fp16", "seed", "logging_steps")


class DebugtuneCallback(TrainerCallback, SessionCallback):
    """Attach debugtune's probe to a ``transformers.Trainer`` run; ``report`` holds the diagnosis when
    ``diagnose=True`` (global rank 0). Arguments as :class:`~debugtune.integrations.session.ProbeSession`."""

    def __init__(self, run_dir: str | os.PathLike[str], *, run_id: str | None = None, routers: Routers = True,
                 diagnose: bool = False, store: Store | None = None, **attach_options: Any) -> None:
        self._open_session(run_dir, run_id=run_id, routers=routers, diagnose=diagnose, store=store,
                           attach_options=attach_options)
        self._loss: Any = None
        self._micro = 0
        self._aux_seen = False
        self._model: Any = None
        self._per_step_loss = False
        self._handle: Any = None

    # -- events --------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       **kwargs: Any) -> None:
        if model is None or optimizer is None:
            raise RuntimeError("debugtune: the Trainer passed no model or optimizer to on_train_begin")
        import transformers

        meta = {"framework": "transformers", "framework_version": transformers.__version__,
                "world_size": int(args.world_size), "parallel": {"dp": int(args.world_size)},
                "model": {"type": type(model).__name__, **module_size(model)},
                "trainer": {k: getattr(args, k) for k in _ARGS if isinstance(getattr(args, k, None),
                                                                             int | float | str | bool)}}
        self.session.start(model, optimizer, rank=int(args.process_index), meta=meta)
        self._model = model
        self._handle = model.register_forward_hook(partial(_capture_loss, self))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step = state.global_step - 1
        if self._loss is not None and self._micro:
            self.session.log({"loss": self._loss / self._micro}, step=step)
            self._per_step_loss = True
        self._loss, self._micro = None, 0
        self.session.log_lr(step=step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        if not logs or _SUMMARY_KEY in logs:
            return
        # with the per-step loss recorded, the Trainer's mean over its logging window would be a second value
        skip_loss = self._per_step_loss
        self.session.log(logs, step=max(state.global_step - 1, 0),
                         skip=lambda key, metric: skip_loss and metric == "loss")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        if self.session.watched and self.session.active and (moe := balance_setting(self._model, self._aux_seen)):
            self.session.probe.set_meta(moe=moe)  # type: ignore[union-attr]
        self.session.finish(is_zero=bool(state.is_world_process_zero), barrier=distributed_barrier)


def _capture_loss(cb: DebugtuneCallback, module: Any, inputs: Any, output: Any) -> None:
    """Forward hook: add up the loss of each training micro-batch on the device (one host copy per step), and
    note whether the model returned a balancing term (an MoE's ``aux_loss``)."""
    if not module.training:
        return
    cb._aux_seen = cb._aux_seen or _field(output, "aux_loss") is not None
    loss = _field(output, "loss")
    if loss is None or not hasattr(loss, "detach") or loss.numel() != 1:
        return
    value = loss.detach().float()
    cb._loss = value if cb._loss is None else cb._loss + value
    cb._micro += 1


def _field(output: Any, name: str) -> Any:
    """A field of a model output (a ``ModelOutput`` is a dict; a plain object has attributes)."""
    return output.get(name) if isinstance(output, dict) else getattr(output, name, None)
