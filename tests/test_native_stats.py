"""The fused statistics kernel against a float64 numpy reference: every layout, dtype and special value."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from debugtune import native
from debugtune.native import HIST_HI, HIST_LABELS, HIST_LO, STAT_FIELDS

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

EPS = 1e-3
LARGE = 2.5


def reference(values: np.ndarray, eps: float, large: float, compare_dtype=np.float32) -> dict:
    """Every statistic computed independently in float64 (eps/large rounded like the kernel compares them)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    eps_c, large_c = float(compare_dtype(eps)), float(compare_dtype(large))
    fin = np.isfinite(v)
    f = v[fin]
    a = np.abs(v)
    hist = np.zeros(len(HIST_LABELS), dtype=np.int64)
    hist[0] = int((v == 0).sum())
    nz = f[f != 0]
    exps = np.frexp(np.abs(nz))[1] - 1  # floor(log2 |x|), exact
    hist[1] = int((exps < HIST_LO).sum())
    for e in range(HIST_LO, HIST_HI + 1):
        hist[2 + e - HIST_LO] = int((exps == e).sum())
    hist[-2] = int((exps > HIST_HI).sum())
    hist[-1] = int(np.isinf(v).sum())
    return {
        "numel": v.size, "sum": float(f.sum()), "sumsq": float((f * f).sum()),
        "norm": math.sqrt(float((f * f).sum())), "abs_sum": float(np.abs(f).sum()),
        "absmax": float(np.abs(f).max()) if f.size else math.nan,
        "min": float(f.min()) if f.size else math.nan, "max": float(f.max()) if f.size else math.nan,
        "zeros": int((v == 0).sum()), "tiny": int((a < eps_c).sum()), "large": int((fin & (a >= large_c)).sum()),
        "nan": int(np.isnan(v).sum()), "inf": int(np.isinf(v).sum()), "hist": hist,
    }


def check(got: native.TensorStats, ref: dict) -> None:
    assert got.numel == ref["numel"]
    for k in ("zeros", "tiny", "large", "nan", "inf"):
        assert getattr(got, k) == ref[k], k
    np.testing.assert_array_equal(got.hist, ref["hist"])
    assert abs(got.norm - ref["norm"]) <= 1e-6 * ref["norm"] + 1e-300
    assert abs(got.sumsq - ref["sumsq"]) <= 1e-6 * ref["sumsq"] + 1e-300
    assert abs(got.sum - ref["sum"]) <= 1e-9 * ref["abs_sum"] + 1e-300
    for k in ("absmax", "min", "max"):
        if math.isnan(ref[k]):
            assert math.isnan(getattr(got, k)), k
        else:
            assert getattr(got, k) == ref[k], k


def special_values(n: int, seed: int) -> np.ndarray:
    """float32 data with every kind of value: normal, ±0, subnormal, tiny, huge, ±Inf, NaN."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * rng.choice([1e-8, 1e-3, 1.0, 50.0], size=n)).astype(np.float32)
    specials = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -3e-42, 1e-20, 3e30, -2e38, 2.5, -2.5, 1e-3],
                        dtype=np.float32)
    pos = rng.integers(0, n, size=min(n, 4 * len(specials)))
    x[pos] = np.resize(specials, len(pos))
    return x


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 2047, 2048, 2049, 65536 + 3, 200_001])
def test_float32_contiguous_matches_reference(n):
    x = special_values(n, seed=n)
    check(native.tensor_stats(x, EPS, large=LARGE), reference(x, EPS, LARGE))


def test_histogram_labels_and_sum():
    x = special_values(10_000, seed=1)
    s = native.tensor_stats(x, EPS)
    assert HIST_LABELS[0] == "zero" and HIST_LABELS[1] == "under" and HIST_LABELS[-1] == "inf"
    assert len(HIST_LABELS) == native.HIST_BINS == len(s.hist)
    assert int(s.hist.sum()) == s.numel - s.nan
    h = native.tensor_stats(np.array([1.0, 1.5, 3.0, 0.25], np.float32), 0.0).hist
    assert [int(h[HIST_LABELS.index(k)]) for k in ("0", "1", "-2")] == [2, 1, 1]


@pytest.mark.parametrize("view", [
    lambda a: a[::3],
    lambda a: a[::-1],
    lambda a: a.reshape(300, 400).T,
    lambda a: a.reshape(300, 400)[::2, 5:-7],
    lambda a: a.reshape(20, 30, 200).transpose(2, 0, 1)[:, ::-2, 1:],
])
def test_strided_views_match_reference(view):
    v = view(special_values(120_000, seed=7))
    assert not v.flags.c_contiguous
    check(native.tensor_stats(v, EPS, large=LARGE), reference(v, EPS, LARGE))


def test_float16_matches_reference():
    with np.errstate(over="ignore"):
        x = special_values(50_000, seed=3).astype(np.float16)  # overflow → Inf, subnormal fp16 values appear
    x[:5] = np.array([6e-8, -6e-5, 65504, 2 ** -24, 0.0], dtype=np.float16)
    for v in (x, x[::-5]):
        check(native.tensor_stats(v, EPS, large=LARGE), reference(v.astype(np.float32), EPS, LARGE))


def test_bfloat16_torch_and_uint16_view_match_reference():
    base = torch.from_numpy(special_values(70_000, seed=4))
    t = base.to(torch.bfloat16)
    ref = reference(t.float().numpy(), EPS, LARGE)
    check(native.tensor_stats(t, EPS, large=LARGE), ref)
    check(native.tensor_stats(t.view(torch.int16).numpy().view(np.uint16), EPS, large=LARGE, reinterpret="bfloat16"),
          ref)
    m = t[:69_000].reshape(300, 230).t()  # non-contiguous bfloat16
    check(native.tensor_stats(m, EPS, large=LARGE), reference(m.float().numpy(), EPS, LARGE))


def test_float64_and_torch_tensors_requiring_grad():
    x = special_values(10_000, seed=5).astype(np.float64)
    check(native.tensor_stats(x, EPS, large=LARGE), reference(x, EPS, LARGE, compare_dtype=np.float64))
    p = torch.nn.Parameter(torch.from_numpy(special_values(5000, seed=6)))
    check(native.tensor_stats(p, EPS, large=LARGE), reference(p.detach().numpy(), EPS, LARGE))


def test_batch_of_mixed_tensors_in_one_call():
    xs = [special_values(n, seed=n) for n in (5, 1000, 70_000)]
    xs.append(torch.from_numpy(special_values(3000, seed=9)).half().t())
    batch = native.tensor_stats_many(xs, EPS, large=LARGE)
    assert len(batch) == 4 and batch.values.shape == (4, len(STAT_FIELDS))
    for i, x in enumerate(xs):
        data = x.float().numpy() if isinstance(x, torch.Tensor) else x
        check(batch[i], reference(data, EPS, LARGE))
    np.testing.assert_array_equal(batch["numel"], [5, 1000, 70_000, 3000])


def test_threads_give_bitwise_the_same_result():
    xs = [special_values(3_000_000, seed=11), special_values(1_500_001, seed=12)[::-1], special_values(10, seed=1)]
    one = native.tensor_stats_many(xs, EPS, large=LARGE, threads=1)
    for threads in (2, 3, 8):
        many = native.tensor_stats_many(xs, EPS, large=LARGE, threads=threads)
        np.testing.assert_array_equal(one.values, many.values)
        np.testing.assert_array_equal(one.hist, many.hist)


def test_histogram_can_be_left_out_and_nothing_else_changes():
    xs = [special_values(200_001, seed=13), special_values(70_000, seed=14)[::-3], special_values(9, seed=2)]
    xs.append(torch.from_numpy(special_values(5000, seed=15)).to(torch.bfloat16))
    xs.append(special_values(3000, seed=16).astype(np.float64))
    with_hist = native.tensor_stats_many(xs, EPS, large=LARGE)
    without = native.tensor_stats_many(xs, EPS, large=LARGE, hist=False)
    assert without.hist is None and without[0].hist is None
    np.testing.assert_array_equal(without.values, with_hist.values)  # bit for bit, NaN in the same places
    for i, x in enumerate(xs):
        data = x.float().numpy() if isinstance(x, torch.Tensor) else x
        ref = reference(data, EPS, LARGE, compare_dtype=np.float64 if data.dtype == np.float64 else np.float32)
        check(native.TensorStats(**{**vars(without[i]), "hist": with_hist.hist[i]}), ref)
    job = native.tensor_stats_start(xs, EPS, large=LARGE, hist=False).result()
    assert job.hist is None and np.array_equal(job.values, without.values, equal_nan=True)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", [0, 7, 2047, 2048, 5000, 65535, 65536 + 8, 99_999])
def test_a_nonfinite_value_costs_its_block_nothing_but_the_replay(bad, where):
    """A NaN or ±Inf sends its block through the exact masked kernel: sums and sums of squares are then bit for bit
    those of the same data with a zero in its place (the masked value adds 0.0 in the same lane and order)."""
    x = special_values(100_000, seed=where)
    x = x[np.isfinite(x)][:100_000]
    x = np.concatenate([x, np.ones(100_000 - len(x), np.float32)])
    zeroed = x.copy()
    zeroed[where] = 0.0
    x[where] = bad
    got, ref = native.tensor_stats(x, EPS, hist=False), native.tensor_stats(zeroed, EPS, hist=False)
    assert (got.sum, got.sumsq) == (ref.sum, ref.sumsq)
    assert (got.nan, got.inf) == ((1, 0) if np.isnan(bad) else (0, 1))
    check(native.tensor_stats(x, EPS), reference(x, EPS, math.inf))


def test_background_jobs_equal_the_inline_call_whoever_does_the_chunks():
    """A started job's chunks are shared by its helper threads and the thread asking for the result (which takes
    the chunks not yet started): the result is bit for bit the inline one however the chunks were split."""
    xs = [special_values(700_001, seed=21), special_values(3, seed=22), torch.randn(300, 500).t()]
    inline = native.tensor_stats_many(xs, EPS, large=LARGE, threads=1)
    after = [torch.randn(400_000), torch.randn(7)]
    before = [a + 1e-3 for a in after]
    norms = native.update_norms(after, before, threads=1)
    for threads in (1, 2, 4):
        jobs = [native.tensor_stats_start(xs, EPS, large=LARGE, threads=threads) for _ in range(6)]
        ujobs = [native.update_norms_start(after, before, threads=threads) for _ in range(3)]
        for job in jobs:
            got = job.result()
            assert job.done
            np.testing.assert_array_equal(got.values, inline.values)
            np.testing.assert_array_equal(got.hist, inline.hist)
        for job in ujobs:
            np.testing.assert_array_equal(job.result(), norms)
    dropped = native.tensor_stats_start(xs, EPS, threads=1)  # never collected: finished before its tensors go
    del dropped
    job = native.tensor_stats_start(xs, EPS)
    job.result()
    with pytest.raises(ValueError, match="already taken"):
        job.result()


def test_copy_into_dense_streamed_and_strided():
    """Snapshots are exact copies: small and large (streamed, from an unaligned start) dense tensors, a transposed
    one (same strides on both sides), a strided view into a dense buffer."""
    src = [torch.randn(3, 5), torch.randn(2_000_001)[1:], torch.randn(700, 900).t(), torch.randn(50).half()[::2]]
    dst = [torch.empty_like(t) for t in src]
    assert src[1].data_ptr() % 16 and src[1].numel() * 4 >= 1 << 20
    native.copy_into(dst, src)
    for d, t in zip(dst, src, strict=True):
        assert torch.equal(d, t)
    with pytest.raises(ValueError, match="shape or dtype"):
        native.copy_into([torch.empty(3)], [torch.empty(4)])


def test_all_nonfinite_and_empty():
    s = native.tensor_stats(np.array([np.nan, np.inf, -np.inf], np.float32), EPS)
    assert (s.nan, s.inf, s.sumsq) == (1, 2, 0.0) and math.isnan(s.min) and math.isnan(s.absmax)
    e = native.tensor_stats(np.zeros(0, np.float32), EPS)
    assert e.numel == 0 and e.zero_frac == 0.0 and math.isnan(e.max)


def test_rejects_bad_input_with_a_clear_error():
    with pytest.raises(TypeError, match="int32"):
        native.tensor_stats(np.arange(5, dtype=np.int32), EPS)
    with pytest.raises(ValueError, match="eps"):
        native.tensor_stats(np.ones(3, np.float32), -1.0)
    with pytest.raises(ValueError, match="device meta"):
        native.tensor_stats(torch.empty(3, device="meta"), EPS)


def test_update_norms_match_numpy():
    rng = np.random.default_rng(2)
    after = [rng.standard_normal(n).astype(np.float32) for n in (3, 4099, 100_000)]
    before = [a + rng.standard_normal(a.shape).astype(np.float32) * 1e-3 for a in after]
    after.append(torch.randn(64, 48).t())
    before.append(after[-1].contiguous() * 0.5)
    got = native.update_norms(after, before)
    for i, (a, b) in enumerate(zip(after, before, strict=True)):
        a64 = np.asarray(a, dtype=np.float64)
        b64 = np.asarray(b, dtype=np.float64)
        np.testing.assert_allclose(got[i], [np.linalg.norm(a64 - b64), np.linalg.norm(a64)], rtol=1e-9)
    with pytest.raises(ValueError):
        native.update_norms([np.ones(3, np.float32)], [np.ones(4, np.float32)])


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=40),
                  elements=st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)),
       st.sampled_from([0.0, 1e-30, 1e-6, 0.5]), st.booleans())
def test_property_any_float32_array(x, eps, transpose):
    v = x.T if transpose else x
    check(native.tensor_stats(v, eps, large=1e20), reference(v, eps, 1e20))
