"""The compared optimisers, each run until a target is reached or a cap of experiments is spent.

Every arm minimises ``objective(params) -> float`` over a :class:`SearchSpace` and returns the number
of experiments after which the value first reached ``target`` (``None``: not within ``cap``).

* ``transfer``: the tuner with the historical tasks (RGPE, historical initial design);
* ``cold``: the same tuner without history (Emukit GP-EI after a random initial design);
* ``random``: the tuner's seeded random search;
* ``tpe``: Optuna's TPE sampler (when optuna is installed), no transfer.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from collections.abc import Callable, Sequence  # noqa: E402
from typing import Any  # noqa: E402

from debugtune.engine.tune import Objective, SearchSpace, StopRule, Task, TrialOutcome, Tuner  # noqa: E402
from debugtune.engine.tune.baselines import tpe_search  # noqa: E402

ARMS = ("transfer", "cold", "random", "tpe")


def run_tuner(space: SearchSpace, objective: Callable[[dict[str, Any]], float], *, name: str, seed: int, cap: int,
              target: float, history: Sequence[Task] = (), strategy: str = "bayesian") -> int | None:
    tuner = Tuner(space, [Objective(name)], history=history, seed=seed, strategy=strategy,
                  stop=StopRule(max_experiments=cap, target=target))
    result = tuner.run(lambda reqs: [TrialOutcome({name: objective(r.params)}, 0.0) for r in reqs])
    return result.experiments_to_target(target)


def run_tpe(space: SearchSpace, objective: Callable[[dict[str, Any]], float], *, seed: int, cap: int,
            target: float) -> int | None:
    return tpe_search(space, objective, seed=seed, cap=cap, target=target)


def available_arms() -> tuple[str, ...]:
    try:
        import optuna  # noqa: F401
    except ImportError:
        return ARMS[:3]
    return ARMS


def run_arm(arm: str, space: SearchSpace, objective: Callable[[dict[str, Any]], float], *, seed: int, cap: int,
            target: float, history: Sequence[Task]) -> int | None:
    if arm == "tpe":
        return run_tpe(space, objective, seed=seed, cap=cap, target=target)
    return run_tuner(space, objective, name="objective", seed=seed, cap=cap, target=target,
                     history=history if arm == "transfer" else (),
                     strategy="random" if arm == "random" else "bayesian")
