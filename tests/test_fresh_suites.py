"""The fresh-program suites (bench/fresh): every fault names a cause the knowledge base knows, every program has
its faults listed."""

from __future__ import annotations

import importlib

import pytest

pytest.importorskip("torch")

from bench.fresh.__main__ import SUITES  # noqa: E402


@pytest.mark.parametrize("suite", SUITES)
def test_every_fault_names_a_known_cause_and_every_program_lists_its_faults(suite, model):
    mod = importlib.import_module(f"bench.fresh.suite_{suite}")
    assert set(mod.PROGRAMS) == set(mod.FAULTS)
    causes = {c for faults in mod.FAULTS.values() for c in faults.values()}
    assert causes <= set(model.causes), causes - set(model.causes)
    for program, balance in getattr(mod, "BALANCE", {}).items():
        assert program in mod.PROGRAMS and callable(balance)

