"""The probe as a Lightning ``Callback`` (extra ``lightning``; docs/integrations.md).

``Trainer(callbacks=[DebugtuneCallback("runs/exp", diagnose=True)])`` attaches the probe when training starts
(to the LightningModule and its first optimizer; MoE routers by module type or as named), records the loss
each training step returns, the learning rate, the metrics logged with ``self.log`` on the step, the
validation metrics after each validation run, and closes the probe when training ends.

Lightning runs forward and backward inside ``optimizer.step(closure)``, after the optimizer's step pre-hooks:
so under automatic optimisation the probe's pre-step work (gradient statistics, the parameter snapshot) runs
from the module's ``configure_gradient_clipping`` hook instead, which Lightning calls on every optimizer step
after backward and clipping and before the update (the gradients the optimizer sees, as with a plain loop).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

try:
    from lightning.pytorch import Callback
    from lightning.pytorch import __version__ as _VERSION
except ModuleNotFoundError:  # the standalone package of the same code (its types differ where both are installed)
    from pytorch_lightning import Callback  # type: ignore[assignment,no-redef,unused-ignore]
    from pytorch_lightning import __version__ as _VERSION  # type: ignore[no-redef,unused-ignore]

from debugtune.integrations.session import Routers, SessionCallback, module_size, scalar, unwrap_optimizer

if TYPE_CHECKING:
    from debugtune.kg import Store

__all__ = ["DebugtuneCallback"]

_EVAL_PREFIXES = ("val", "valid", "eval", "test")


class _DeferredPreStep:
    """The optimizer as the probe sees it under Lightning's closure: step pre-hooks are kept here and run by
    :meth:`fire` (after backward); everything else is the real optimizer's."""

    def __init__(self, optimizer: Any) -> None:
        self._real = optimizer
        self._hooks: list[Any] = []

    @property
    def param_groups(self) -> Any:
        return self._real.param_groups

    def register_step_pre_hook(self, hook: Any) -> Any:
        self._hooks.append(hook)
        hooks = self._hooks

        class _Handle:
            def remove(self) -> None:
                if hook in hooks:
                    hooks.remove(hook)
        return _Handle()

    def register_step_post_hook(self, hook: Any) -> Any:
        return self._real.register_step_post_hook(hook)

    def fire(self) -> None:
        for hook in list(self._hooks):
            hook(self._real, (), {})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class DebugtuneCallback(Callback, SessionCallback):
    """Attach debugtune's probe to a Lightning ``Trainer`` run; ``report`` holds the diagnosis when
    ``diagnose=True`` (global rank 0). Arguments as :class:`~debugtune.integrations.session.ProbeSession`."""

    def __init__(self, run_dir: str | os.PathLike[str], *, run_id: str | None = None, routers: Routers = True,
                 diagnose: bool = False, store: Store | None = None, **attach_options: Any) -> None:
        self._open_session(run_dir, run_id=run_id, routers=routers, diagnose=diagnose, store=store,
                           attach_options=attach_options)
        self._deferred: _DeferredPreStep | None = None
        self._module: Any = None

    # -- events --------------------------------------------------------------------------------
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.optimizers:
            raise RuntimeError("debugtune: the LightningModule configured no optimizer")
        optimizer = unwrap_optimizer(trainer.optimizers[0])
        if pl_module.automatic_optimization:
            self._deferred = _DeferredPreStep(optimizer)
            self._module = pl_module
            original = pl_module.configure_gradient_clipping
            deferred = self._deferred

            def configure_gradient_clipping(opt: Any, *args: Any, **kwargs: Any) -> Any:
                out = original(opt, *args, **kwargs)
                if unwrap_optimizer(opt) is deferred._real:
                    deferred.fire()
                return out

            pl_module.configure_gradient_clipping = configure_gradient_clipping
            optimizer = self._deferred
        world = int(trainer.world_size)
        meta = {"framework": "lightning", "framework_version": _VERSION, "world_size": world,
                "parallel": {"dp": world}, "model": {"type": type(pl_module).__name__, **module_size(pl_module)},
                "trainer": {"accumulate_grad_batches": trainer.accumulate_grad_batches,
                            "gradient_clip_val": trainer.gradient_clip_val, "precision": str(trainer.precision),
                            "max_steps": trainer.max_steps, "max_epochs": trainer.max_epochs}}
        self.session.start(pl_module, optimizer, rank=int(trainer.global_rank), meta=meta)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        metrics = {k: v for k, v in trainer.callback_metrics.items()
                   if not k.endswith("_epoch") and not k.lower().startswith(_EVAL_PREFIXES)}
        if scalar(loss) is not None:
            metrics["loss"] = loss
        self.session.log(metrics)
        self.session.log_lr()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking or not self.session.active:
            return
        metrics = {k: v for k, v in trainer.callback_metrics.items() if k.lower().startswith(_EVAL_PREFIXES)}
        self.session.log(metrics, step=max(int(trainer.global_step) - 1, 0))

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._restore()
        self.session.finish(is_zero=bool(trainer.is_global_zero), barrier=lambda: trainer.strategy.barrier("debugtune"))

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._restore()
        if self.session.probe is not None:
            self.session.probe.close()

    def _restore(self) -> None:
        if self._module is not None:
            del self._module.configure_gradient_clipping  # the class's own method again
            self._module = None
