"""What the framework callbacks share: attach the probe when training begins, log the trainer's metrics under
the telemetry schema's names, close the probe at the end and (on the global rank 0, after every rank closed)
diagnose the run."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from debugtune.engine.capture.importers.names import metric_for
from debugtune.integrations.routers import Router, find_routers, named_routers

if TYPE_CHECKING:
    from debugtune.engine.capture.probe import Probe
    from debugtune.engine.infer import DiagnosisReport
    from debugtune.kg import Store

Routers = bool | Iterable[str] | Mapping[str, tuple[int, int]]


def unwrap_optimizer(optimizer: Any) -> Any:
    """The torch optimizer inside the wrappers trainers hand out (accelerate's ``AcceleratedOptimizer``,
    Lightning's ``LightningOptimizer``): step hooks must sit on the optimizer whose ``step`` really runs."""
    import torch

    seen = 0
    while seen < 8:
        inner = getattr(optimizer, "optimizer", None) or getattr(optimizer, "_optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer) or inner is optimizer:
            break
        optimizer, seen = inner, seen + 1
    return optimizer


def scalar(value: Any) -> float | None:
    """A logged value as a float (tensors of one element included); None for anything else."""
    if hasattr(value, "numel") and hasattr(value, "item"):
        if value.numel() != 1:
            return None
        value = value.detach().item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class ProbeSession:
    """One probed training run driven by a trainer's events.

    ``run_dir``: where the telemetry goes (each rank writes its own partition). ``routers``: True finds MoE
    routers by module type (:func:`~debugtune.integrations.routers.find_routers`), False watches none, a list
    of module paths (or a mapping path → (num_experts, top_k)) names them. ``diagnose``: diagnose the run when
    training ends (global rank 0 only; the report is ``self.report``). ``store``: where the diagnosis is
    asserted (default: an in-memory store). ``attach_options``: passed to ``debugtune.attach`` (``every``,
    ``detail_every``, ``activations``, ``hardware``, ...).
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, run_id: str | None = None, routers: Routers = True,
                 diagnose: bool = False, store: Store | None = None, **attach_options: Any) -> None:
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.routers = routers
        self.diagnose = diagnose
        self.store = store
        self.attach_options = attach_options
        self.probe: Probe | None = None
        self.watched: list[Router] = []
        self.report: DiagnosisReport | None = None
        self._optimizer: Any = None

    @property
    def active(self) -> bool:
        return self.probe is not None and not self.probe.closed

    def start(self, model: Any, optimizer: Any, *, rank: int, meta: Mapping[str, Any]) -> Probe:
        """Attach the probe to ``model`` and the optimizer inside ``optimizer``; watch the routers."""
        from debugtune.engine.capture.probe import attach

        if self.active:
            return self.probe  # type: ignore[return-value]
        self._optimizer = unwrap_optimizer(optimizer)
        routers = [] if self.routers is False else find_routers(model) if self.routers is True else \
            named_routers(model, self.routers)
        self.probe = attach(model, self._optimizer, self.run_dir, run_id=self.run_id, rank=rank,
                            **self.attach_options)
        for r in routers:
            self.probe.watch_router(r.module, r.num_experts, r.top_k, name=r.name)
        self.watched = routers
        self.probe.set_meta(**meta)
        return self.probe

    def log(self, metrics: Mapping[str, Any], *, step: int | None = None,
            skip: Callable[[str, str], bool] = lambda key, metric: False) -> None:
        """Record the numeric entries of ``metrics`` under the schema's names (``learning_rate`` → ``lr``,
        ``val_loss`` → ``eval_loss``, unknown names cleaned); ``skip(key, metric)`` leaves entries out."""
        if not self.active:
            return
        out: dict[str, float] = {}
        for key, raw in metrics.items():
            value = scalar(raw)
            mapped = metric_for(str(key))
            if value is None or mapped is None or skip(str(key), mapped[0]):
                continue
            out[mapped[0]] = value * mapped[1]
        if out:
            self.probe.log(step=step, **out)  # type: ignore[union-attr]

    def log_lr(self, *, step: int | None = None) -> None:
        """The learning rate of the first parameter group, as the optimizer holds it now."""
        groups = getattr(self._optimizer, "param_groups", None)
        if self.active and groups:
            self.log({"lr": groups[0].get("lr")}, step=step)

    def finish(self, *, is_zero: bool, barrier: Callable[[], None] | None = None) -> DiagnosisReport | None:
        """Close the probe; then, when asked and on the global rank 0, wait for every rank and diagnose."""
        if self.probe is not None:
            self.probe.close()
        if not self.diagnose:
            return None
        if barrier is not None:
            barrier()  # every rank has flushed its partition before rank 0 reads them
        if not is_zero:
            return None
        from debugtune.api import diagnose

        self.report = diagnose(self.run_dir, store=self.store)
        return self.report


class SessionCallback:
    """What both callbacks expose: their session, its probe and (with ``diagnose=True``) its report."""

    session: ProbeSession

    def _open_session(self, run_dir: str | os.PathLike[str], *, run_id: str | None, routers: Routers,
                      diagnose: bool, store: Store | None, attach_options: dict[str, Any]) -> None:
        self.session = ProbeSession(run_dir, run_id=run_id, routers=routers, diagnose=diagnose, store=store,
                                    **attach_options)

    @property
    def probe(self) -> Probe | None:
        return self.session.probe

    @property
    def report(self) -> DiagnosisReport | None:
        return self.session.report


def distributed_barrier() -> None:
    """``torch.distributed.barrier()`` when a process group is initialised (a no-op otherwise)."""
    import torch

    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def module_size(model: Any) -> dict[str, int]:
    """Parameter counts for run.json (``model.parameters`` / ``model.trainable_parameters``)."""
    total = trainable = 0
    for p in model.parameters():
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    return {"parameters": total, "trainable_parameters": trainable}
