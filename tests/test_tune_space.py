"""The search space: remedies' tuning parameters ↔ points of an Emukit space (log scales, grids, categories)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from debugtune.engine.tune import SearchSpace, SearchSpaceError
from debugtune.kg.records import TuningParameter as P


def _space() -> SearchSpace:
    return SearchSpace([
        P("init_std", "continuous", 0.02, 0.002, 0.1, "log"),
        P("top_k", "integer", 1, 1, 4),
        P("micro_batch", "integer", 8, choices=("8", "16", "32", "64"), scale="log"),
        P("router_dtype", "categorical", "fp32", choices=("bf16", "fp32")),
    ])


def test_encoding_is_unit_cube_in_log_space_and_round_trips():
    space = _space()
    assert space.dim == 5  # one-hot categorical takes two columns
    x = space.encode({"init_std": 0.02, "top_k": 2, "micro_batch": 16, "router_dtype": "fp32"})
    # log scale: 0.02 sits at log(10)/log(50) of [0.002, 0.1]
    assert x[0] == pytest.approx(math.log(10) / math.log(50))
    assert x[1] == pytest.approx(1 / 3)
    assert x[2] == pytest.approx(1 / 3)  # 16 on the log grid 8..64
    assert list(x[3:]) == [0.0, 1.0]
    back = space.decode(x)
    assert back == {"init_std": pytest.approx(0.02), "top_k": 2, "micro_batch": 16, "router_dtype": "fp32"}
    assert isinstance(back["top_k"], int) and isinstance(back["micro_batch"], int)


def test_decode_snaps_to_valid_values_and_round_is_idempotent():
    space = _space()
    back = space.decode(np.array([1.2, 0.55, 0.6, 0.4, 0.3]))
    assert back == {"init_std": pytest.approx(0.1), "top_k": 3, "micro_batch": 32, "router_dtype": "bf16"}
    X = space.round(np.array([[0.3, 0.1, 0.9, 0.2, 0.7]]))
    assert np.array_equal(space.round(X), X)


def test_emukit_space_matches_the_encoding():
    space = _space()
    assert space.emukit.dimensionality == space.dim
    assert [p.name for p in space.emukit.parameters] == list(space.names)
    assert not space.is_finite
    grid = SearchSpace([P("n", "integer", 2, 1, 5), P("act", "categorical", "relu", choices=("relu", "tanh"))])
    assert grid.is_finite


def test_sampling_is_seeded_and_log_uniform():
    space = SearchSpace([P("lr", "continuous", 1e-3, 1e-5, 1e-1, "log")])
    a = space.sample(400, np.random.default_rng(7))
    b = space.sample(400, np.random.default_rng(7))
    assert np.array_equal(a, b)
    values = np.array([space.decode(x)["lr"] for x in a])
    # log-uniform over four decades: about a quarter of the draws per decade
    assert 0.15 < np.mean(values < 1e-4) < 0.35


def test_values_outside_the_space_are_refused_with_the_parameter_named():
    space = _space()
    good = {"init_std": 0.02, "top_k": 2, "micro_batch": 16, "router_dtype": "fp32"}
    with pytest.raises(SearchSpaceError, match=r"init_std=0.5 is outside \[0.002, 0.1\]"):
        space.encode({**good, "init_std": 0.5})
    with pytest.raises(SearchSpaceError, match="router_dtype='fp16' is not one of"):
        space.encode({**good, "router_dtype": "fp16"})
    with pytest.raises(SearchSpaceError, match="no value for tuning parameter 'top_k'"):
        space.encode({k: v for k, v in good.items() if k != "top_k"})
    assert space.contains(good) and not space.contains({**good, "top_k": 9})


@pytest.mark.parametrize("param, message", [
    (P("lr", "continuous", 0.1, 0.0, 1.0, "log"), "log-scale range must be positive"),
    (P("lr", "continuous", 0.1, 1.0, 0.5), "range .* is empty"),
    (P("lr", "continuous", 0.1), "needs low and high"),
    (P("act", "categorical", "relu"), "needs choices"),
    (P("lr", "gaussian", 0.1, 0.0, 1.0), "kind 'gaussian'"),
    (P("lr", "continuous", 0.1, 0.0, 1.0, "sqrt"), "scale 'sqrt'"),
    (P("bad name", "continuous", 0.1, 0.0, 1.0), "must be an identifier"),
    (P("k", "integer", 1, 1.2, 1.8), "no integer"),
])
def test_bad_parameters_name_the_parameter_and_field(param, message):
    with pytest.raises(SearchSpaceError, match=message):
        SearchSpace([param])


def test_duplicate_and_empty_spaces_are_refused():
    with pytest.raises(SearchSpaceError, match="declared twice"):
        SearchSpace([P("a", "continuous", 0.5, 0, 1), P("a", "continuous", 0.5, 0, 1)])
    with pytest.raises(SearchSpaceError, match="nothing to tune"):
        SearchSpace([])
