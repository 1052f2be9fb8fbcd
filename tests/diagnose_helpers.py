"""Helpers for the diagnosis tests: write realistic synthetic telemetry with the real writer and diagnose it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path

import numpy as np

from debugtune.engine.diagnose import Diagnosis, Thresholds, diagnose_run
from debugtune.engine.telemetry import TelemetryWriter, write_run_json
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge

Row = tuple[str, str, str, np.ndarray]  # dimension, metric, entity, values (one per step)


@lru_cache(maxsize=1)
def knowledge_store():
    """One in-memory store with the ontology and knowledge base loaded (shared by the tests of a process)."""
    store = open_store(None)
    load_knowledge(store)
    return store


def thresholds() -> Thresholds:
    return Thresholds.from_store(knowledge_store())


def write_run(run_dir: Path, ranks: dict[int, Iterable[Row]], *, run_id: str = "t", meta: dict | None = None,
              steps: np.ndarray | None = None) -> Path:
    """A run directory: run.json and, per rank, the given series (all over the same steps)."""
    write_run_json(run_dir, {"run_id": run_id, "world_size": len(ranks), **(meta or {})})
    for rank, rows in ranks.items():
        with TelemetryWriter(run_dir, run_id, rank=rank) as w:
            for dim, metric, entity, values in rows:
                values = np.asarray(values, dtype=float)
                s = np.arange(values.size) if steps is None else steps[: values.size]
                w.add_columns(s, dim, metric, entity, values)
    return run_dir


def healthy_loss(n: int, rng: np.random.Generator, start: float = 2.3, floor: float = 0.2,
                 noise: float = 0.03) -> np.ndarray:
    t = np.arange(n)
    return floor + (start - floor) * np.exp(-t / (n / 8)) + noise * rng.standard_normal(n) * (0.3 + np.exp(-t / n))


def healthy_gradients(n: int, rng: np.random.Generator, layers=("body.0", "body.2", "head")) -> list[Row]:
    """Per-layer gradient, update and activation series of a sane MLP."""
    rows: list[Row] = []
    decay = np.exp(-np.arange(n) / (n / 4))
    for i, layer in enumerate(layers):
        rows.append(("gradient", "grad_norm", layer, (0.5 + i * 0.2) * (0.2 + decay) * (1 + 0.1 * rng.random(n))))
        rows.append(("gradient", "update_ratio", layer, 1e-3 * (0.5 + decay) * (1 + 0.1 * rng.random(n))))
        rows.append(("gradient", "update_norm", layer, 1e-2 * (0.5 + decay)))
        rows.append(("gradient", "grad_zero_frac", layer, 0.05 + 0.01 * rng.random(n)))
    for act in ("body.1", "body.3"):
        rows.append(("gradient", "act_zero_frac", act, 0.5 + 0.03 * rng.random(n)))
    rows.append(("gradient", "grad_nan", "", np.zeros(n)))
    return rows


def run_and_diagnose(tmp_path: Path, th: Thresholds, ranks: dict[int, Iterable[Row]], *,
                     dimensions=None, meta: dict | None = None) -> Diagnosis:
    run_dir = write_run(tmp_path / "run", ranks, meta=meta)
    return diagnose_run(run_dir, th, dimensions)


def symptoms(d: Diagnosis) -> set[str]:
    return {f.symptom for f in d.findings}


def finding(d: Diagnosis, symptom: str):
    hits = [f for f in d.findings if f.symptom == symptom]
    assert hits, f"no {symptom} finding among {[f.symptom for f in d.findings]}"
    return hits[0]


def replace_row(rows: list[Row], metric: str, entity: str, fn: Callable[[np.ndarray], np.ndarray]) -> list[Row]:
    return [(d, m, e, fn(v) if (m, e) == (metric, entity) else v) for d, m, e, v in rows]


def diagnosed_on_disk(root: Path, run_dir: Path, train: Callable[[Path], object]) -> tuple[str, str, object]:
    """Train a run into ``run_dir`` (``train(run_dir)``, one thread) and diagnose it into an on-disk store under
    ``root``: (store path, run id, report)."""
    import torch

    from debugtune.api import diagnose

    torch.set_num_threads(1)
    train(run_dir)
    store_dir = root / "store"
    st = open_store(str(store_dir))
    try:
        load_knowledge(st)
        report = diagnose(run_dir, store=st, save=False)
    finally:
        st.close()
    return str(store_dir), report.run, report


def train_attached(model, opt, run_dir: Path, steps: int, batch_loss) -> None:
    """The plain loop a user writes, with the probe attached: ``batch_loss()`` draws a batch and returns its loss."""
    import debugtune

    with debugtune.attach(model, opt, run_dir) as probe:
        for _ in range(steps):
            opt.zero_grad()
            loss = batch_loss()
            loss.backward()
            opt.step()
            probe.log(loss=loss.item())
