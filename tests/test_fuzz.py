"""Issue 18: every reader of outside input fails cleanly on hostile input (hypothesis, seeded; bench/fuzz.py runs
thousands). A case is a seed of tests/fuzz_targets.py: a mutant of a real input (byte flips, truncation, huge and
non-finite numbers, deep nesting, bad encodings, corrupt compression). It must be read, or refused with the
project's one-line error; any other exception fails the test with the case number to replay."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz_targets import TARGETS

CASES = {"importers": 150, "lint": 150, "dsl": 300, "packages": 120, "sparql": 200}


@pytest.fixture(scope="module")
def work():
    folder = Path(tempfile.mkdtemp(prefix="fuzz-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("target", list(CASES))
def test_readers_fail_cleanly_on_hostile_input(target, work):
    (work / target).mkdir(exist_ok=True)

    @settings(max_examples=CASES[target], derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(min_value=0, max_value=2**31))
    def one(case: int) -> None:
        outcome = TARGETS[target](case, work / target)
        assert outcome.status != "unhandled", f"case {case}: {outcome.kind}\n{outcome.detail}"

    one()
