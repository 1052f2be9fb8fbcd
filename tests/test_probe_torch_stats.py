"""The torch implementation of the statistics (for accelerator tensors) agrees with the native kernel."""

from __future__ import annotations

import numpy as np
import pytest

from debugtune import native

torch = pytest.importorskip("torch")

from test_native_stats import special_values  # noqa: E402

from debugtune.engine.capture.torch_stats import torch_stats_many, torch_update_norms  # noqa: E402


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_torch_statistics_equal_the_native_kernel(dtype):
    x = torch.from_numpy(special_values(50_000, seed=3)).to(getattr(torch, dtype))
    views = [x, x[::3], x[:49_000].reshape(70, 700).t()]
    nat = native.tensor_stats_many(views, 1e-3, large=2.5)
    values, hist = torch_stats_many(views, 1e-3, large=2.5)
    np.testing.assert_array_equal(hist, nat.hist)
    np.testing.assert_allclose(values, nat.values, rtol=1e-9, equal_nan=True)
    cheap, none = torch_stats_many(views, 1e-3, large=2.5, hist=False)
    assert none is None
    np.testing.assert_array_equal(cheap, values)


def test_torch_update_norms_equal_the_native_kernel():
    a = [torch.randn(300, 7), torch.randn(5).double()]
    b = [t + 0.01 for t in a]
    np.testing.assert_allclose(torch_update_norms(a, b), native.update_norms(a, b), rtol=1e-9)
