"""Shared test fixtures: paths of the real files in ../shared/fixtures, temporary stores, CPU settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parent.parent
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """`../shared/fixtures` (real files nobody here wrote); tests skip with a reason where it is absent."""
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"shared fixtures not found at {SHARED_FIXTURES} (they are present in CI)")
    return SHARED_FIXTURES


@pytest.fixture(scope="session")
def _snapshot_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("dtcache")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch, _snapshot_cache):
    """Each test gets its own DEBUGTUNE_HOME, so no test touches ~/.debugtune or another test's store; the
    compiled knowledge-base snapshot (kg/snapshot.py) is shared by the session, as one home shares it."""
    home = tmp_path_factory.mktemp("dthome")
    monkeypatch.setenv("DEBUGTUNE_HOME", str(home))
    monkeypatch.setenv("DEBUGTUNE_CACHE", str(_snapshot_cache))
    monkeypatch.delenv("DEBUGTUNE_STORE", raising=False)
    yield


@pytest.fixture(scope="session")
def quick_bench(tmp_path_factory):
    """The fault benchmark's quick subset, trained and diagnosed once per test session (real trainings with the
    probe attached, every family of the subset): the leave-one-family-out test and the detector contract read it."""
    from bench.faults.cli import run_benchmark

    return run_benchmark(quick=True, out=tmp_path_factory.mktemp("faultbench"), jobs=2, verbose=False)


@pytest.fixture(scope="module")
def th():
    """Every threshold of the shipped knowledge base (one load per test module)."""
    from tests.diagnose_helpers import thresholds

    return thresholds()


@pytest.fixture(scope="module")
def model():
    """The inference model compiled from the shipped knowledge base (one per test module)."""
    from debugtune.engine.infer import load_model
    from tests.diagnose_helpers import knowledge_store

    return load_model(knowledge_store())
