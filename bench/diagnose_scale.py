"""Scale benchmark of diagnosis: 1,024 ranks × 10,000 (and 100,000) steps, a planted straggler and oscillation, three
ways of reading the run side by side, and the cost of watching it grow.

    python bench/diagnose_scale.py [--ranks 1024] [--steps 100000] [--base-steps 10000]
                                   [--engines memory,duckdb,ray] [--memory-cap-gb 8] [--follow-steps 1000]
                                   [--data DIR] [--keep]

The run (``bench/scale_data.py``: compute, all-reduce and step time per rank, the loss of rank 0; rank ranks // 3
15% slower from 30% of the steps; a 128-step loss oscillation) is written once per size with the real writer,
then diagnosed end to end (``debugtune.diagnose``: knowledge base, detectors, rules, scoring) once per engine, each
in its own process, so that every figure is that process's own: wall time, peak RSS as the OS counts it
(``wait4``'s ``ru_maxrss``: the process, or the largest of its children) and the peak of the sum of the RSS of
its whole process tree, sampled every 0.2 s (Ray's workers and raylet are separate processes), and rows per
second. The in-memory path is stopped when its tree passes ``--memory-cap-gb`` (it grows with the run). Then
``--follow``: the run written up to ``--follow-steps`` before its end, one pass, the rest appended, and the time
of the pass that re-judges it, against the new rows and steps. Prints whether the planted faults were found, the
growth of every figure from the base size, and the load average (the machine is shared: figures are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent


def _tree_rss(pid: int) -> int:
    """Bytes of RSS of ``pid`` and all its descendants (from /proc)."""
    kids: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            kids.setdefault(int(fields[1]), []).append(int(d))
            rss[int(d)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += kids.get(p, [])
    return total


def measure(argv: list[str], cap_bytes: float | None = None) -> dict:
    """Run ``argv``; its wall time, wait4's ru_maxrss, the sampled peak RSS of its process tree, its JSON output
    (last line), and whether it was stopped at the cap."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    peak, stopped = [0], [False]

    def watch() -> None:
        while proc.poll() is None:
            now = _tree_rss(proc.pid)
            peak[0] = max(peak[0], now)
            if cap_bytes and now > cap_bytes:
                stopped[0] = True
                os.killpg(proc.pid, 9)
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, err = [], []
    readers = [threading.Thread(target=lambda s=s, b=b: b.append(s.read()), daemon=True)
               for s, b in ((proc.stdout, out), (proc.stderr, err))]
    for r in readers:
        r.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    for r in readers:
        r.join()
    watcher.join(timeout=1)
    try:
        os.killpg(proc.pid, 9)  # whatever the child left running (Ray's processes)
    except ProcessLookupError:
        pass
    lines = [ln for ln in "".join(out).splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines and proc.returncode == 0 else {}
    return {"wall_s": wall, "maxrss_mb": usage.ru_maxrss / 1024, "tree_peak_mb": peak[0] / 2**20,
            "stopped": stopped[0], "code": proc.returncode, "result": result,
            "error": "" if proc.returncode == 0 else ("".join(err).strip().splitlines() or ["?"])[-1][:200]}


def child(run_dir: str, engine: str) -> int:
    """One diagnosis, end to end, printed as one JSON line."""
    from bench import scale_data
    from debugtune.api import diagnose

    if engine == "ray":
        import ray

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    t0 = time.perf_counter()
    report = diagnose(run_dir, engine=engine, save=False)
    wall = time.perf_counter() - t0
    meta = json.loads((Path(run_dir) / "run.json").read_text())
    ranks, steps = int(meta["world_size"]), int(meta["steps"])
    slow_rank, onset = scale_data.straggler(ranks, steps)
    slow = next((f for f in report.findings if f.symptom == "SlowRank"), None)
    osc = next((f for f in report.findings if f.symptom == "LossOscillation"), None)
    print(json.dumps({
        "diagnose_s": wall, "timing": report.timing_s,
        "slow_rank": slow.entity if slow else None, "onset": slow.onset_step if slow else None,
        "planted": [f"rank:{slow_rank}", onset],
        "period": osc.evidence.get("period_steps") if osc else None,
        "top": [report.hypotheses[0].cause, report.hypotheses[0].confidence] if report.hypotheses else None,
        "findings": [[f.symptom, f.entity, f.onset_step, f.end_step, round(f.severity, 9)] for f in report.findings]}))
    return 0


def follow_child(run_dir: str, ranks: int, steps: int, tails: list[int]) -> int:
    """The run up to ``sum(tails)`` steps before its end, one pass, then each tail appended in turn and the pass
    that re-judges it."""
    from bench import scale_data
    from debugtune.engine.diagnose import Thresholds
    from debugtune.engine.diagnose.follow import Follower
    from debugtune.kg import open_store
    from debugtune.kg.knowledge import load_knowledge

    store = open_store(None)
    load_knowledge(store)
    follower = Follower(run_dir, Thresholds.from_store(store))
    passes = [follower.step().as_dict()]
    at = steps - sum(tails)
    found = None
    for tail in tails:
        scale_data.write(Path(run_dir), ranks, steps, first=at, last=at + tail)
        at += tail
        step = follower.step()
        passes.append(step.as_dict())
        found = next((f.entity for f in step.diagnosis.findings if f.symptom == "SlowRank"), None) \
            if step.diagnosis else None
    print(json.dumps({"passes": passes, "slow_rank": found}))
    return 0


def _load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--base-steps", type=int, default=10_000, help="the size growth is measured from")
    ap.add_argument("--engines", default="memory,duckdb,ray")
    ap.add_argument("--memory-cap-gb", type=float, default=8.0, help="stop a diagnosis whose tree passes this")
    ap.add_argument("--follow-steps", default="1000,4000",
                    help="steps appended before each --follow pass after the first, comma-separated ('': none)")
    ap.add_argument("--data", type=Path, help="where the runs are written (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the runs written")
    ap.add_argument("--child", nargs=2, metavar=("RUN", "ENGINE"), help=argparse.SUPPRESS)
    ap.add_argument("--follow-child", nargs=4, metavar=("RUN", "RANKS", "STEPS", "TAILS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(*args.child)
    if args.follow_child:
        run, ranks, steps, tails = args.follow_child
        return follow_child(run, int(ranks), int(steps), [int(t) for t in tails.split(",")])

    from bench import scale_data
    from debugtune.engine.telemetry import update_run_json

    engines = [e for e in args.engines.split(",") if e]
    sizes = sorted({args.base_steps, args.steps})
    root = args.data or Path(tempfile.mkdtemp(prefix="dt-scale-"))
    me = [sys.executable, str(HERE / "diagnose_scale.py")]
    rows_of = {s: 3 * args.ranks * s + 2 * s for s in sizes}
    figures: dict[tuple[str, int], dict] = {}
    try:
        for steps in sizes:
            run = root / f"run-{args.ranks}x{steps}"
            if not (run / "run.json").exists():
                t0 = time.perf_counter()
                scale_data.write(run, args.ranks, steps)
                print(f"wrote {args.ranks} ranks × {steps} steps = {rows_of[steps] / 1e6:.1f} M rows in "
                      f"{time.perf_counter() - t0:.0f} s", flush=True)
            update_run_json(run, steps=steps)
            for engine in engines:
                m = measure([*me, "--child", str(run), engine], args.memory_cap_gb * 2**30)
                figures[engine, steps] = m
                print(f"  {engine:<7} {steps:>7} steps: {_line(m, rows_of[steps])}   load {_load()}", flush=True)
        print(f"\ndiagnose_scale: {args.ranks} ranks; wall time, peak RSS (wait4 ru_maxrss / sampled process tree), "
              f"rows per second; load average now {_load()} on {os.cpu_count()} cores (shared machine: noisy)")
        print(f"  {'engine':<8}" + "".join(f"{s:>12,} steps ({rows_of[s] / 1e6:.0f} M rows)".rjust(44) for s in sizes)
              + "   growth")
        for engine in engines:
            cells = [_line(figures[engine, s], rows_of[s]) for s in sizes]
            print(f"  {engine:<8}" + "".join(c.rjust(44) for c in cells) + "   " + _growth(figures, engine, sizes))
        for (engine, steps), m in figures.items():
            r = m["result"]
            if r:
                print(f"  {engine} @ {steps}: SlowRank {r['slow_rank']} from step {r['onset']} (planted "
                      f"{r['planted'][0]} from {r['planted'][1]}); oscillation period {r['period']}; top "
                      f"{r['top']}")
        ok = all(m["result"].get("slow_rank") == m["result"].get("planted", [None])[0]
                 for (e, _), m in figures.items() if e != "memory" or m["result"])
        tails = [int(t) for t in args.follow_steps.split(",") if t]
        if tails:
            big = max(sizes)
            run = root / f"run-{args.ranks}x{big}-follow"
            shutil.rmtree(run, ignore_errors=True)
            scale_data.write(run, args.ranks, big, last=big - sum(tails))
            m = measure([*me, "--follow-child", str(run), str(args.ranks), str(big), ",".join(map(str, tails))])
            r = m["result"]
            if r:
                first, *later = r["passes"]
                print(f"\n--follow at {big} steps (peak RSS {m['maxrss_mb']:.0f} MB; load {_load()}): first pass "
                      f"{first['seconds']:.1f} s ({first['new_rows'] / 1e6:.0f} M rows)")
                for p in later:
                    print(f"  +{p['new_steps']} steps ({p['new_rows'] / 1e6:.2f} M rows): re-judged in "
                          f"{p['seconds']:.2f} s = {1e3 * p['seconds'] / p['new_steps']:.2f} ms per new step "
                          f"({p['scanned_rows'] / 1e6:.2f} M rows scanned)")
                if len(later) >= 2:  # cost = fixed + per row × new rows, from the two increments
                    (x0, y0), (x1, y1) = ((p["new_rows"], p["seconds"]) for p in later[:2])
                    slope = (y1 - y0) / (x1 - x0)
                    print(f"  cost per pass ≈ {y0 - slope * x0:.2f} s + {1e9 * slope:.0f} ns × new rows "
                          f"({1e3 * slope * (3 * args.ranks + 2):.2f} ms per new step of {args.ranks} ranks); "
                          f"SlowRank {r['slow_rank']}")
            else:
                print(f"\n--follow failed: {m['error']}")
            shutil.rmtree(run, ignore_errors=True)
    finally:
        if not args.keep and args.data is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


def _line(m: dict, rows: int) -> str:
    if m["stopped"]:
        return f"stopped at {m['tree_peak_mb'] / 1024:.1f} GB after {m['wall_s']:.0f} s"
    if m["code"] != 0:
        return f"failed ({m['error'][:40]})"
    return f"{m['wall_s']:6.1f} s {m['maxrss_mb'] / 1024:5.2f}/{m['tree_peak_mb'] / 1024:5.2f} GB " \
           f"{rows / m['wall_s'] / 1e6:5.2f} M rows/s"


def _growth(figures: dict, engine: str, sizes: list[int]) -> str:
    if len(sizes) < 2:
        return ""
    a, b = figures[engine, sizes[0]], figures[engine, sizes[-1]]
    if b["stopped"] or b["code"] or a["code"]:
        return "-"
    return f"time ×{b['wall_s'] / a['wall_s']:.1f}, RSS ×{b['maxrss_mb'] / a['maxrss_mb']:.2f} " \
           f"(tree ×{b['tree_peak_mb'] / a['tree_peak_mb']:.2f})"


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    sys.exit(main())
