"""Process groups and point-to-point peers as the traces of a run name them → run.json ``groups`` / ``p2p``.

Kineto writes ``distributedInfo.pg_config`` (each group the rank belongs to: name, description, ranks) and, on
NCCL kernels, the group of each collective ("Process Group Name" / "Process Group Ranks"); the ``c10d::send`` /
``c10d::recv_`` operators carry the peer rank among their concrete inputs. Merged over the ranks of a run these
are what ``engine.diagnose.groups`` builds data-parallel groups and pipeline stages from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class GroupBook:
    """Groups (name → description, ranks) and p2p pairs seen so far."""

    groups: dict[tuple[str, tuple[int, ...]], str] = field(default_factory=dict)
    p2p: set[tuple[int, int]] = field(default_factory=set)

    def add_group(self, name: Any, desc: Any, ranks: Any) -> None:
        members = _ranks(ranks)
        if name is None or not members:
            return
        key = (str(name), members)
        if not self.groups.get(key) or self.groups[key] == "undefined":
            self.groups[key] = str(desc or "")

    def add_header(self, info: dict[str, Any]) -> None:
        for pg in info.get("pg_config") or []:
            if isinstance(pg, dict):
                self.add_group(pg.get("pg_name"), pg.get("pg_desc"), pg.get("ranks"))

    def add_peer(self, rank: int | None, peer: int | None) -> None:
        if rank is not None and peer is not None and rank != peer:
            self.p2p.add((min(rank, peer), max(rank, peer)))

    def merge(self, other: GroupBook) -> None:
        for (name, members), desc in other.groups.items():
            self.add_group(name, desc, list(members))
        self.p2p |= other.p2p

    def meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.groups:
            out["groups"] = [{"name": name, "desc": desc, "ranks": list(members)}
                             for (name, members), desc in sorted(self.groups.items(), key=lambda kv: kv[0])]
        if self.p2p:
            out["p2p"] = [list(p) for p in sorted(self.p2p)]
        return out


def _ranks(value: Any) -> tuple[int, ...]:
    """Ranks from a list or from Kineto's string form '[0, 1, 2]'."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return ()
    if not isinstance(value, list):
        return ()
    return tuple(sorted({int(r) for r in value if isinstance(r, int | float) and not isinstance(r, bool)}))


def peer_of(args: dict[str, Any]) -> int | None:
    """The peer rank of a ``c10d::send`` / ``c10d::recv_`` operator (its third concrete input)."""
    inputs = args.get("Concrete Inputs")
    if isinstance(inputs, list) and len(inputs) > 2:
        try:
            return int(str(inputs[2]))
        except ValueError:
            return None
    for key in ("Dst Rank", "Src Rank", "dst", "src"):
        if isinstance(args.get(key), int):
            return int(args[key])
    return None
