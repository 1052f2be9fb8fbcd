"""Probe benchmark: the fused statistics kernel against numpy and torch, and the step-time overhead of ``attach``.

Part 1 computes the same statistics (L2 norm, abs-max, min, max, zeros, tiny, large, NaN, Inf and the log2
magnitude histogram) of 1M, 16M and 64M float32 values three ways, side by side in one run:
``debugtune.native.tensor_stats`` (one pass, C++), numpy (idiomatic vectorised calls) and torch
(``engine/capture/torch_stats.py``, torch's own intra-op threads), and prints their ratios plus the
kernel's GB/s against one memory-bound numpy reduction (``np.add.reduce`` and ``np.dot(x, x)``); also the same
call without the histogram (``hist=False``: what the probe runs on every step).

Part 2 trains an MLP with more than 5M parameters (Adam, synthetic data) and compares the mean step time of
blocks with and without ``debugtune.attach`` (interleaved paired blocks, median ratio over rounds): with the
defaults (every step, detail cadence from the knowledge base, hardware sampler on), with every quantity on
every step (``detail_every=1``), and with ``every=10``. Before that, each native piece of the probe is timed
inside the same training loop (the costs the probe pays, with the caches as it finds them).

    .venv/bin/python bench/probe_bench.py [--quick]

Goals: kernel >= 3x numpy, >= 1.5x torch; attach overhead <= 5 %. Figures depend on the machine and on what
else runs on it: compare ratios from one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from debugtune import native  # noqa: E402
from debugtune.native import HIST_BINS, HIST_LO  # noqa: E402

EPS, LARGE = 1e-8, 1e3


def numpy_stats(x: np.ndarray, eps: float, large: float) -> dict[str, float]:
    """The same statistics with numpy: one vectorised call per quantity."""
    a = np.abs(x)
    nan = np.isnan(x)
    inf = np.isinf(x)
    fin = ~(nan | inf)
    xf = np.where(fin, x, np.float32(0))
    xd = xf.astype(np.float64)  # the norm accumulated in float64, as the kernel does
    finite_abs = a[fin]
    nz = finite_abs[finite_abs > 0]
    bins = np.clip(np.frexp(nz)[1] - 1 - HIST_LO + 2, 1, HIST_BINS - 2)
    hist = np.bincount(bins, minlength=HIST_BINS)
    hist[0] = np.count_nonzero(x == 0)
    hist[-1] = np.count_nonzero(inf)
    return {
        "sum": float(np.add.reduce(xf, dtype=np.float64)), "norm": math.sqrt(float(np.dot(xd, xd))),
        "absmax": float(finite_abs.max()), "min": float(np.where(fin, x, np.inf).min()),
        "max": float(np.where(fin, x, -np.inf).max()), "zeros": int(hist[0]),
        "tiny": int(np.count_nonzero(a < np.float32(eps))), "large": int(np.count_nonzero(fin & (a >= large))),
        "nan": int(np.count_nonzero(nan)), "inf": int(hist[-1]), "hist": hist,
    }


def best_of(fn, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def data(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n, dtype=np.float32) * np.float32(1e-2)
    x[rng.integers(0, n, n // 1000)] = 0.0
    x[rng.integers(0, n, 16)] = np.nan
    x[rng.integers(0, n, 16)] = np.inf
    return x


def contenders(x: np.ndarray, t: Any, threads: int) -> dict[str, Callable[[], object]]:
    from debugtune.engine.capture.torch_stats import torch_stats_many

    return {
        "native": lambda: native.tensor_stats(x, EPS, large=LARGE, threads=threads),
        "cheap": lambda: native.tensor_stats(x, EPS, large=LARGE, threads=threads, hist=False),
        "numpy": lambda: numpy_stats(x, EPS, LARGE),
        "torch": lambda: torch_stats_many([t], EPS, large=LARGE),
        "reduce": lambda: np.add.reduce(x),
        "dot": lambda: np.dot(x, x),
    }


def kernel_bench(sizes: list[int], repeat: int, threads: int) -> None:
    """One table; ``threads`` = 1 pins native and torch to one thread, 0 lets both use every core."""
    import torch

    from debugtune.engine.capture.torch_stats import torch_stats_many

    torch.set_num_threads(1 if threads == 1 else os.cpu_count() or 1)
    label = "one thread each" if threads == 1 else f"all cores: native auto (<= {native.hardware_threads()})"
    print(f"== fused statistics, float32, {label}, torch threads {torch.get_num_threads()} ==")
    head = (f"{'n':>5} | {'native ms':>9} {'GB/s':>6} | {'numpy ms':>9} {'x':>6} | {'torch ms':>9} {'x':>6} | "
            f"{'no-hist ms':>10} {'GB/s':>6} | {'add.reduce GB/s':>15} {'dot GB/s':>8} | {'native/reduce':>13} "
            f"{'no-hist/reduce':>14}")
    print(head)
    print("-" * len(head))
    for n in sizes:
        x = data(n)
        t = torch.from_numpy(x)
        got = native.tensor_stats(x, EPS, large=LARGE, threads=threads)
        ref = numpy_stats(x, EPS, LARGE)
        tv, th = torch_stats_many([t], EPS, large=LARGE)
        assert (got.zeros, got.tiny, got.large, got.nan, got.inf) == (ref["zeros"], ref["tiny"], ref["large"],
                                                                      ref["nan"], ref["inf"])
        assert np.array_equal(got.hist, ref["hist"]) and np.array_equal(got.hist, th[0])
        assert abs(got.norm - ref["norm"]) <= 1e-9 * got.norm and got.absmax == ref["absmax"], (got, ref)
        r = max(1, repeat if n <= 1 << 20 else repeat // 2)
        runs = contenders(x, t, threads)
        times = dict.fromkeys(runs, math.inf)
        for _ in range(r):  # interleaved, so drift in machine load hits every contender alike
            for name, fn in runs.items():
                times[name] = min(times[name], best_of(fn, 1))
        gbs = {k: x.nbytes / v / 1e9 for k, v in times.items()}
        print(f"{n >> 20:>4}M | {times['native'] * 1e3:9.2f} {gbs['native']:6.2f} | {times['numpy'] * 1e3:9.1f} "
              f"{times['numpy'] / times['native']:6.1f} | {times['torch'] * 1e3:9.1f} "
              f"{times['torch'] / times['native']:6.1f} | {times['cheap'] * 1e3:10.2f} {gbs['cheap']:6.2f} | "
              f"{gbs['reduce']:15.2f} {gbs['dot']:8.2f} | {gbs['native'] / gbs['reduce']:13.2f} "
              f"{gbs['cheap'] / gbs['reduce']:14.2f}")
    print("x = contender time / native time (goal: numpy >= 3, torch >= 1.5); no-hist = the same call with "
          "hist=False (the probe's every-step pass)")


def mlp_training(batch: int) -> tuple[Any, Any, Callable[[], Any]]:
    """The benchmark's MLP (6.3M parameters), its Adam optimizer and a function computing one batch's loss."""
    import torch

    torch.set_num_threads(1)  # trainings on the shared CPUs run single-threaded (house rule)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                                torch.nn.ReLU(), torch.nn.Linear(2048, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(batch, 1024)
    y = torch.randint(0, 10, (batch,))

    def loss_of() -> Any:
        return torch.nn.functional.cross_entropy(model(x), y)

    loss_of.inputs = x  # type: ignore[attr-defined]
    return model, opt, loss_of


def pieces_bench(steps: int, batch: int) -> None:
    """Each native piece of the probe timed inside the training loop, on the gradients and parameters as the
    probe finds them (caches cold after forward, backward and the optimizer step), one piece per step in turn."""
    import torch

    model, opt, loss_of = mlp_training(batch)
    params = [p.detach() for p in model.parameters()]
    copies = [torch.empty_like(p) for p in params]
    grads: list[Any] = []
    pieces: list[tuple[str, bool, Callable[[], object]]] = [  # (name, before the optimizer step?, call)
        ("pass with histogram", True, lambda: native.tensor_stats_many(grads, EPS, threads=1)),
        ("pass without histogram (every step)", True,
         lambda: native.tensor_stats_many(grads, EPS, threads=1, hist=False)),
        ("parameter snapshot (copy_into)", True, lambda: native.copy_into(copies, params)),
        ("update norms", False, lambda: native.update_norms(params, copies, threads=1)),
    ]
    times: dict[str, list[float]] = {name: [] for name, _, _ in pieces}
    for i in range(len(pieces) * steps):
        name, before, call = pieces[i % len(pieces)]
        loss = loss_of()
        opt.zero_grad()
        loss.backward()
        grads[:] = [p.grad for p in model.parameters()]
        if not before:
            opt.step()
        times[name].append(best_of(call, 1))
        if before:
            opt.step()
    n_bytes = sum(p.numel() * p.element_size() for p in params)
    print(f"== the probe's native pieces inside the training loop ({n_bytes / 1e6:.0f} MB of float32 parameters, "
          f"one thread), median of {steps} ==")
    for name, ts in times.items():
        print(f"{name:<38} {statistics.median(ts) * 1e3:7.2f} ms")
    evidence_pieces(model, opt, loss_of, steps)


def evidence_pieces(model: Any, opt: Any, loss_of: Callable[[], Any], steps: int) -> None:
    """The direct-evidence pieces (docs/probe.md) timed inside the same loop: the every-step ones (input moments,
    the gradient-cosine sample with its comparison, the stale-gradient bookkeeping) and the detail-step ones (the
    weight layers' forward signal and the model output), each called as the probe's hooks call it."""
    from debugtune.engine.capture.grad_cosine import GradCosine
    from debugtune.engine.capture.hooks_forward import ForwardEvidence
    from debugtune.engine.capture.hooks_stale import StaleTracker
    from debugtune.engine.capture.probe import knowledge_thresholds
    from debugtune.engine.capture.probe_errors import ProbeErrors
    from debugtune.engine.capture.probe_layers import weight_layers
    from debugtune.engine.capture.probe_layout import ParamLayout
    from debugtune.engine.capture.probe_measure import StepRows

    layout = ParamLayout(model, opt)
    layers = weight_layers(model)
    errors = ProbeErrors()
    detail = [False]
    forward = ForwardEvidence(model, layers, [], knowledge_thresholds(), errors, {}, lambda: (0, True, detail[0]))
    cosine, stale = GradCosine(layout), StaleTracker(layout.params, layout.trainable, errors)
    seen: list[tuple[Any, Any, Any]] = []
    handles = [m.register_forward_hook(lambda m, a, o: seen.append((m, a, o))) for _, m in layers]
    x = loss_of.inputs  # type: ignore[attr-defined]
    signals = {id(m): forward.layers[name] for name, m in layers}

    def on_detail_step(fn: Callable[[], object]) -> Callable[[], object]:
        def call() -> object:
            detail[0] = True
            try:
                return fn()
            finally:
                detail[0] = False
        return call

    def layer_signal() -> None:
        for m, a, o in seen:
            forward._on_layer(signals[id(m)], m, a, o)
        forward._on_output(model, (x,), seen[-1][2])
        forward.take(StepRows())

    pieces: list[tuple[str, Callable[[], object]]] = [
        ("input moments (every step)", lambda: forward._on_input(model, (x,), {})),
        ("input moments + feature scale (detail)", on_detail_step(lambda: forward._on_input(model, (x,), {}))),
        ("gradient cosine sample (every step)",
         lambda: cosine.measure({i: layout.params[i].grad for i in layout.trainable})),
        ("stale-gradient bookkeeping (every step)", lambda: (stale.stale(), stale.snapshot())),
        ("weight-layer signal + output (detail)", on_detail_step(layer_signal)),
    ]
    times: dict[str, list[float]] = {name: [] for name, _ in pieces}
    try:
        for i in range(len(pieces) * steps):
            name, call = pieces[i % len(pieces)]
            seen.clear()
            loss = loss_of()
            opt.zero_grad()
            loss.backward()
            times[name].append(best_of(call, 1))  # with autograd on, as in training (the hooks skip no_grad)
            opt.step()
    finally:
        for h in handles:
            h.remove()
    assert errors.total == 0, errors.report()
    print(f"== direct-evidence pieces inside the training loop ({len(layers)} weight layers), median of {steps} ==")
    for name, ts in times.items():
        print(f"{name:<38} {statistics.median(ts) * 1e3:7.2f} ms")


def overhead_bench(rounds: int, steps: int, batch: int, every: int, detail_every: int | None = None) -> None:
    """Paired blocks: in each round one block of plain steps and one of probed steps (a fresh ``attach``) of the
    same training, in alternating order (plain first in even rounds, probed first in odd ones).

    A block runs ``steps + 1`` steps and drops the first (allocations); ``steps`` is a multiple of the detail
    cadence, so every block holds its share of detail steps (histogram, snapshot, update norms). Reports the
    median over rounds of (probed / plain) of the block's mean step time, for wall time and for process CPU
    time (all threads: the work the probe adds, whatever else loads the machine).
    """
    import torch

    import debugtune
    from debugtune.engine.capture.probe import DETAIL_EVERY_KEY, knowledge_thresholds

    model, opt, loss_of = mlp_training(batch)
    n_params = sum(p.numel() for p in model.parameters())
    thresholds = knowledge_thresholds()  # loaded once, outside the timed blocks
    cadence = every * (detail_every or int(thresholds.get(DETAIL_EVERY_KEY, 1)))
    steps = max(cadence, steps // cadence * cadence)

    def block(probe_dir: str | None) -> tuple[float, float]:
        """Mean wall and CPU seconds per step over the block (its first step allocates and is dropped)."""
        probe = (debugtune.attach(model, opt, probe_dir, every=every, detail_every=detail_every,
                                  thresholds=thresholds) if probe_dir else None)
        try:
            for i in range(steps + 1):
                if i == 1:
                    t0, c0 = time.perf_counter(), time.process_time()
                loss = loss_of()
                opt.zero_grad()
                loss.backward()
                opt.step()
                value = loss.item()
                if probe is not None:
                    probe.log(loss=value)
            return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps
        finally:
            if probe is not None:
                probe.close()

    wall_ratio, cpu_ratio, base_ms = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        block(None)  # warm-up
        for r in range(rounds):
            run_dir = os.path.join(tmp, f"run{r}")
            if r % 2:
                (pw, pc), (bw, bc) = block(run_dir), block(None)
            else:
                (bw, bc), (pw, pc) = block(None), block(run_dir)
            wall_ratio.append(pw / bw)
            cpu_ratio.append(pc / bc)
            base_ms.append(bw * 1e3)
    w, c = statistics.median(wall_ratio) - 1, statistics.median(cpu_ratio) - 1
    q1, _, q3 = statistics.quantiles(wall_ratio, n=4) if len(wall_ratio) > 1 else (w + 1, 0, w + 1)
    detail = f"detail_every={detail_every}" if detail_every else f"detail_every=KB ({cadence // every})"
    print(f"== attach overhead: MLP {n_params / 1e6:.1f}M parameters, Adam, batch {batch}, every={every}, {detail}, "
          f"torch threads {torch.get_num_threads()}, {rounds} rounds x {steps}+{steps} steps ==")
    print(f"plain step {statistics.median(base_ms):7.1f} ms | overhead wall {100 * w:+5.1f} % "
          f"(quartiles {100 * (q1 - 1):+.1f} / {100 * (q3 - 1):+.1f}) | CPU (all threads) {100 * c:+5.1f} %   "
          f"(goal: wall <= 5 %)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes and fewer rounds")
    args = ap.parse_args()
    sizes = [1 << 20, 16 << 20] if args.quick else [1 << 20, 16 << 20, 64 << 20]
    for threads in (1, 0):
        kernel_bench(sizes, repeat=3 if args.quick else 6, threads=threads)
        print()
    pieces_bench(steps=4 if args.quick else 12, batch=256)
    print()
    rounds, steps = (4, 10) if args.quick else (12, 20)
    overhead_bench(rounds, steps, batch=256, every=1)  # the defaults: cadence from the knowledge base
    overhead_bench(rounds, steps, batch=256, every=1, detail_every=1)  # everything on every step
    overhead_bench(rounds, steps, batch=256, every=10, detail_every=1)
    print("\nFigures measured on a machine shared with other jobs are noisy; re-run before quoting them.")


if __name__ == "__main__":
    main()
