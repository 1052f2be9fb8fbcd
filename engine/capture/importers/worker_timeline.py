"""Chrome / Perfetto JSON timelines whose tracks are workers (not Kineto's ProfilerStep annotations) → the
per-step telemetry of the per-operation table (``op_table``) and the run's parallel grid.

The format of ByteDance's ``timeline-*.json.gz`` (StragglerAnalysis ``to_timeline``) and of other exports of
per-operation timers: ``ph: X`` events in µs, named for the operation, on tracks named by ``thread_name`` /
``process_name`` metadata. The worker of a track comes from those names — "DP rank [d]" / "PP rank p, TP rank t,
<stream>" (the pipeline stage, data-parallel replica and tensor-parallel rank; the rank then follows Megatron's
order tp-cp-ep-dp-pp), else "rank N", else the process (``pid``) — and the streams of one worker ("compute",
"pp-comm", "dp-comm", …) are merged. An operation on a communication stream whose name names no collective counts
as communication.

The step of an operation, in this order: its ``args.step``; the named step marker it falls in on its worker
(``ProfilerStep#N``, "iteration N", "step N", "train_step"); else the worker's repeated operation sequence: the
step starts where the worker's first operation follows the one operation that precedes it at evenly sized
boundaries (for a Megatron worker: a ``forward-compute`` after the previous step's ``params-all-gather``).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.json_stream import TraceStream, args_of
from debugtune.engine.capture.importers.op_table import emit_ops, grid_meta, kind_of
from debugtune.engine.capture.importers.sink import RunSink
from debugtune.engine.capture.importers.trace_kinds import is_chrome_trace, is_worker_timeline

_DP = re.compile(r"\bDP[ _-]?rank\s*\[?\s*(\d+)", re.IGNORECASE)
_PP = re.compile(r"\b(?:PP[ _-]?rank|stage)\s*\[?\s*(\d+)", re.IGNORECASE)
_TP = re.compile(r"\bTP[ _-]?rank\s*\[?\s*(\d+)", re.IGNORECASE)
_RANK = re.compile(r"\brank\s*[#:=\[]?\s*(\d+)", re.IGNORECASE)
_MARKER = re.compile(r"^(?:ProfilerStep\s*#?|iteration|train[_ ]?step|step)\s*[#:]?\s*(\d+)?\s*$", re.IGNORECASE)
MIN_STEPS = 2


@dataclass
class _Track:
    ts: list[float] = field(default_factory=list)
    dur: list[float] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    step: list[int] = field(default_factory=list)  # -1 where the event carries none


@dataclass
class _Timeline:
    tracks: dict[tuple[Any, Any], _Track] = field(default_factory=lambda: defaultdict(_Track))
    process: dict[Any, str] = field(default_factory=dict)
    thread: dict[tuple[Any, Any], str] = field(default_factory=dict)


def _read(path: Path) -> _Timeline:
    tl = _Timeline()
    for batch in TraceStream(path):
        for ev in batch:
            if ev.ph == "X":
                try:
                    ts, dur = float(ev.ts), float(ev.dur)
                except (TypeError, ValueError):
                    continue
                if not (math.isfinite(ts) and math.isfinite(dur)) or dur < 0:
                    continue
                step = args_of(ev).get("step")
                t = tl.tracks[(ev.pid, ev.tid)]
                t.ts.append(ts)
                t.dur.append(dur)
                t.name.append(ev.name)
                t.step.append(step if isinstance(step, int) and not isinstance(step, bool) else -1)
            elif ev.ph == "M" and ev.name in ("process_name", "thread_name"):
                label = str(args_of(ev).get("name") or "")
                if ev.name == "process_name":
                    tl.process[ev.pid] = label
                else:
                    tl.thread[(ev.pid, ev.tid)] = label
    return tl


def _coordinate(pattern: re.Pattern[str], *texts: str) -> int | None:
    for text in texts:
        m = pattern.search(text)
        if m:
            return int(m.group(1))
    return None


def _worker_of(tl: _Timeline, track: tuple[Any, Any]) -> tuple[str, tuple[int, ...] | Any]:
    """('grid', (dp, pp, tp)) | ('rank', n) | ('process', pid) for one track."""
    thread, process = tl.thread.get(track, ""), tl.process.get(track[0], "")
    pp, dp, tp = _coordinate(_PP, thread, process), _coordinate(_DP, process, thread), _coordinate(_TP, thread)
    if pp is not None or dp is not None:
        return "grid", (dp or 0, pp or 0, tp or 0)
    rank = _coordinate(_RANK, thread, process)
    if rank is not None:
        return "rank", rank
    return "process", track[0]


def _is_comm_track(tl: _Timeline, track: tuple[Any, Any]) -> bool:
    return "comm" in tl.thread.get(track, "").lower()


@dataclass
class _Worker:
    ts: np.ndarray
    dur: np.ndarray
    name: np.ndarray
    step: np.ndarray
    comm_track: np.ndarray
    grid: tuple[int, int, int] | None


def _workers(tl: _Timeline) -> dict[Any, _Worker]:
    parts: dict[Any, list[tuple[tuple[Any, Any], _Track]]] = defaultdict(list)
    for track, t in tl.tracks.items():
        parts[_worker_of(tl, track)].append((track, t))
    out = {}
    for key, tracks in parts.items():
        ts = np.concatenate([np.asarray(t.ts) for _, t in tracks])
        order = np.argsort(ts, kind="stable")
        cat = [(np.asarray(t.dur), np.asarray(t.name, dtype=object), np.asarray(t.step),
                np.full(len(t.ts), _is_comm_track(tl, track))) for track, t in tracks]
        dur, name, step, comm = (np.concatenate([c[i] for c in cat])[order] for i in range(4))
        out[key] = _Worker(ts[order], dur, name.astype(str), step.astype(np.int64), comm.astype(bool),
                           key[1] if key[0] == "grid" else None)
    return out


def _marker_steps(w: _Worker) -> np.ndarray | None:
    """Steps from named markers (ProfilerStep#N, iteration N, ...) on the worker; None when it has fewer than two."""
    marks = [(i, m) for i, n in enumerate(w.name) if (m := _MARKER.match(n)) is not None]
    if len(marks) < MIN_STEPS:
        return None
    step = np.full(len(w.ts), -1, dtype=np.int64)
    for k, (i, m) in enumerate(marks):
        number = int(m.group(1)) if m.group(1) else k
        inside = (w.ts >= w.ts[i]) & (w.ts < w.ts[i] + max(w.dur[i], 1e-9))
        step[inside] = number
    step[[i for i, _ in marks]] = -1  # the marker itself is not an operation
    return step


def _sequence_steps(w: _Worker) -> tuple[np.ndarray, str] | None:
    """Steps from the repeated operation sequence: boundaries where the first operation follows the predecessor
    whose boundaries cut the sequence into the most evenly sized pieces (at least two)."""
    names = w.name
    if names.size < 2 * MIN_STEPS:
        return None
    first = names[0]
    at = np.flatnonzero(names[1:] == first) + 1
    if not at.size:
        return None
    best: tuple[float, str, np.ndarray] | None = None
    for pred, _ in Counter(names[at - 1].tolist()).items():
        cuts = at[names[at - 1] == pred]
        sizes = np.diff(np.concatenate([[0], cuts, [names.size]]))
        if sizes.size < MIN_STEPS:
            continue
        spread = float(np.std(sizes[:-1])) / max(float(np.mean(sizes[:-1])), 1.0) if sizes.size > 2 else 0.0
        # the last piece may be a step cut short by the end of the window; it must not be longer than the others
        if sizes.size > 2 and sizes[-1] > 1.5 * np.max(sizes[:-1]):
            continue
        if best is None or spread < best[0]:
            best = (spread, pred, cuts)
    if best is None or best[0] > 0.25:
        return None
    step = np.zeros(names.size, dtype=np.int64)
    step[best[2]] = 1
    return np.cumsum(step), f"the repeated operation sequence ({str(first)!r} after {str(best[1])!r})"


def _steps(w: _Worker) -> tuple[np.ndarray, str] | None:
    if (w.step >= 0).mean() >= 0.9:
        return w.step, "args.step"
    marked = _marker_steps(w)
    if marked is not None:
        return marked, "named step markers"
    return _sequence_steps(w)


def _rank_numbers(workers: dict[Any, _Worker]) -> dict[Any, int]:
    grid = [w.grid for w in workers.values() if w.grid is not None]
    if grid and len(grid) == len(workers):
        dps, tps = max(g[0] for g in grid) + 1, max(g[2] for g in grid) + 1
        return {k: (w.grid[1] * dps + w.grid[0]) * tps + w.grid[2] for k, w in workers.items() if w.grid}
    if all(k[0] == "rank" for k in workers):
        return {k: int(k[1]) for k in workers}
    return {k: i for i, k in enumerate(sorted(workers, key=lambda k: (str(k[0]), str(k[1]))))}


def timeline_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if is_worker_timeline(path) else []
    return sorted(p for p in path.glob("*") if p.is_file() and is_chrome_trace(p) and is_worker_timeline(p))


def detect(path: Path) -> bool:
    return bool(timeline_files(path))


def load(path: Path, sink: RunSink) -> None:
    files = timeline_files(path) or ([path] if path.is_file() and is_chrome_trace(path) else [])
    if not files:
        raise ImportFormatError(path, "no Chrome/Perfetto timeline with worker tracks (ph: X events) found")
    stage: dict[int, int] = {}
    replica: dict[int, int] = {}
    sizes: dict[str, set[int]] = defaultdict(set)
    how: set[str] = set()
    offset = 0
    for f in files:
        sink.source(f)
        workers = _workers(_read(f))
        if not workers:
            raise ImportFormatError(f, "no complete (ph: X) events with a duration")
        numbers = _rank_numbers(workers)
        for key, w in workers.items():
            found = _steps(w)
            if found is None:
                raise ImportFormatError(f, f"the steps of worker {key[1]} could not be recovered: its events carry "
                                           "no args.step, there is no step marker (ProfilerStep#N, iteration N) "
                                           "and its operation sequence does not repeat", field="args.step")
            step, source = found
            how.add(source)
            rank = numbers[key] + offset
            keep = step >= 0
            kinds = np.array([kind_of(n) or ("comm" if c else "") for n, c in zip(w.name, w.comm_track, strict=True)])
            emit_ops(sink, np.full(int(keep.sum()), rank), step[keep], w.name[keep], w.ts[keep] / 1e3,
                     w.dur[keep] / 1e3, kinds[keep])
            if w.grid is not None:
                dp, pp, tp = w.grid
                stage[rank], replica[rank] = pp, dp
                for k, v in (("dp", dp), ("pp", pp), ("tp", tp)):
                    sizes[k].add(v)
        offset = max(sink.ranks, default=-1) + 1
    meta = grid_meta(stage, replica, sizes)
    sink.meta.update({"framework": "worker timeline (Chrome/Perfetto JSON)", "world_size": len(sink.ranks),
                      "from_run_start": False, **meta,
                      "notes": [f"read as a timeline whose tracks are workers ({len(sink.ranks)} worker(s)"
                                + (", stage and replica from the track names" if stage else "")
                                + f"); steps from {' / '.join(sorted(how))}"]})
