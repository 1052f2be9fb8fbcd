"""Which ranks may be compared with which: pipeline stages and the members of each collective.

A rank is only compared with the ranks that run the same collective: the members of its process group when the
telemetry names the group (``collective_ms`` entity ``<kind>@pg:<name>``), else the ranks of its pipeline stage
(data- and tensor-parallel collectives never cross stages). Stages come, in this order, from

1. run.json ``layout.stage`` (rank → stage, from per-op tables that record it);
2. the parallel sizes (run.json ``parallel``: ``pp`` with ``tp``/``dp``…) and Megatron-LM's default rank order
   ``tp-cp-ep-dp-pp``, in which the pipeline stage is the slowest-varying coordinate:
   stage = rank // (world / pp) (megatron/core/parallel_state.py, ``RankGenerator``);
3. the process groups of the traces (``groups``) and the point-to-point peers (``p2p``): a group that holds a
   send/recv pair (or whose description names the pipeline) links stages, every other group except the world
   group lies inside one stage, so the stages are the connected components of those groups, numbered by their
   lowest rank.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Layout:
    """rank → pipeline stage for the ranks of a run (empty when not known) and where it came from."""

    stage: Mapping[int, int] = field(default_factory=dict)
    source: str = ""

    @property
    def stages(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for rank, s in sorted(self.stage.items()):
            out.setdefault(s, []).append(rank)
        return out

    def split(self, ranks: Iterable[int]) -> list[list[int]]:
        """``ranks`` cut into stages (one group when no stage is known)."""
        ranks = list(ranks)
        if not self.stage:
            return [ranks]
        by: dict[int, list[int]] = {}
        for r in ranks:
            by.setdefault(self.stage.get(r, -1), []).append(r)
        return [by[k] for k in sorted(by)]


def layout(meta: Mapping[str, Any], ranks: Iterable[int]) -> Layout:
    ranks = sorted(int(r) for r in ranks)
    given = (meta.get("layout") or {}).get("stage") if isinstance(meta.get("layout"), dict) else None
    if isinstance(given, dict) and given:
        stage = {int(r): int(s) for r, s in given.items() if int(r) in ranks}
        if len(set(stage.values())) > 1:
            return Layout(stage, "layout")
    given_parallel = meta.get("parallel")
    parallel = given_parallel if isinstance(given_parallel, dict) else {}
    pp = parallel.get("pp") or parallel.get("pipeline_model_parallel_size")
    world = int(meta.get("world_size") or (max(ranks) + 1 if ranks else 0))
    if isinstance(pp, int) and pp > 1 and world and world % pp == 0:
        per = world // pp
        return Layout({r: r // per for r in ranks}, "parallel sizes (Megatron order tp-cp-ep-dp-pp)")
    return _from_groups(meta, ranks, world)


def _from_groups(meta: Mapping[str, Any], ranks: list[int], world: int) -> Layout:
    groups = [g for g in meta.get("groups") or [] if isinstance(g, dict) and len(g.get("ranks") or []) > 1]
    pairs = {tuple(sorted(p)) for p in meta.get("p2p") or [] if isinstance(p, list | tuple) and len(p) == 2}
    if not groups or not pairs:
        return Layout()
    parent = {r: r for r in ranks}

    def find(r: int) -> int:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    for g in groups:
        members = [int(r) for r in g["ranks"] if int(r) in parent]
        desc = str(g.get("desc") or "").upper()
        linked = any((a, b) in pairs for i, a in enumerate(members) for b in members[i + 1:])
        if len(members) >= world or linked or "PIPELINE" in desc:
            continue
        for r in members[1:]:
            parent[find(r)] = find(members[0])
    roots = sorted({find(r) for r in ranks}, key=lambda x: min(r for r in ranks if find(r) == x))
    if len(roots) < 2 or any(find(a) == find(b) for a, b in pairs if a in parent and b in parent):
        return Layout()
    number = {root: i for i, root in enumerate(roots)}
    return Layout({r: number[find(r)] for r in ranks}, "process groups and point-to-point peers")


def member_groups(entity: str, labels: tuple[Any, ...], lay: Layout) -> list[np.ndarray]:
    """Index arrays into ``labels`` of the rank groups a collective's times may be compared within."""
    pos = {int(r): i for i, r in enumerate(labels)}
    if "@pg:" in entity:  # the ranks that recorded this communicator's collective are its members
        return [np.arange(len(labels))]
    return [np.array([pos[r] for r in g]) for g in lay.split(pos)]
