"""Tuning: transfer Bayesian optimisation (Emukit + RGPE) seeded from the graph, trials, deterministic replay.

```python
from debugtune.engine.tune import SearchSpace, Tuner, StopRule, Objective, auto_tune, Checkpoint
from debugtune.engine.tune.replay import replay
```
Names are imported on first use, so that a spawned trial process (which imports ``tune.trials``) does
not load GPy, Emukit or torch. Deterministic replay needs torch (the ``torch`` extra). See docs/tune.md.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_MODULES = {
    "auto": ("AutoResult", "Budget", "TuneSpec", "auto_tune", "choose_remedy", "run_cost"),
    "data": ("Objective", "Task", "Trial", "TrialOutcome", "TrialRequest", "TuningResult"),
    "errors": ("CheckpointError", "SearchSpaceError", "TrialSpecError", "TuneError"),
    "history": ("History", "load_history"),
    "pareto": ("ParEGO", "hypervolume", "pareto_mask"),
    "record": ("experiment_of", "record_trial"),
    "replay": ("Checkpoint", "ReplayResult"),
    "rgpe": ("RGPEModel",),
    "run_trial": ("RUN_CHECKPOINT", "RunTrial", "find_run_trial", "save_run_checkpoint"),
    "space": ("SearchSpace",),
    "trials": ("CallableTrial", "CommandTrial", "load_callable", "make_executor"),
    "tuner": ("StopRule", "Tuner"),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
