"""Recording experiments in the graph as they finish, so the next tuning transfers from them.

Each trial becomes a ``dt:Experiment`` (an ``mls:Run`` with one ``mls:HyperParameterSetting`` per
parameter, objective values, cost, seed, status and the replay checkpoint) in the run's named graph,
written by ``kg.assertions.add_experiments`` in one update per trial: a crash loses nothing recorded.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from debugtune.engine.tune.data import Trial
from debugtune.kg.assertions import add_experiments
from debugtune.kg.records import Experiment
from debugtune.kg.store import Store


def new_session_id() -> str:
    """``tune-<UTC time>-<random>``: unique per tuning session, sortable by time."""
    return f"tune-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"


def experiment_of(trial: Trial, remedy: str, session: str, replay_ref: str | None = None) -> Experiment:
    """The graph record of a trial (id ``<session>-<n>``, n from 1)."""
    return Experiment(id=f"{session}-{trial.index + 1:03d}", remedy=remedy, parameters=dict(trial.params),
                      objectives=dict(trial.values), cost=float(trial.cost), seed=int(trial.seed),
                      status=trial.status, replay_ref=replay_ref)


def record_trial(store: Store, run_id: str, remedy: str, session: str, trial: Trial,
                 replay_ref: str | None = None) -> Experiment:
    """Assert one finished trial into the run's graph; returns the record written."""
    exp = experiment_of(trial, remedy, session, replay_ref)
    add_experiments(store, run_id, [exp])
    return exp
