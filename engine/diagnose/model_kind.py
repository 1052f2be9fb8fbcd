"""Whether the run's model is a mixture of experts: the symptoms only an MoE can show are worth asking for only
where it is one, or where nothing says it is not."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from debugtune.engine.capture.probe_layout import expert_of
from debugtune.engine.telemetry.schema import MOE_METRICS

_MOE_KINDS = ("Router", "Gate", "Expert", "MoE", "Moe")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def shows_experts(meta: Mapping[str, Any], metrics: Iterable[str]) -> bool | None:
    """True where the run shows experts (a metric only an MoE records, run.json's ``moe`` section, a router the
    probe watched, a layer under an ``experts.<i>`` path or of a router/expert/MoE class); False where a probe
    saw the whole model (its layer kinds) and found none of that; None where nothing says (imported logs)."""
    probe = _mapping(meta.get("probe"))
    kinds = _mapping(probe.get("layer_kinds"))
    if (set(metrics) & MOE_METRICS or meta.get("moe") or probe.get("routers")
            or any(expert_of(str(name)) for name in kinds)
            or any(k in str(kind) for kind in kinds.values() for k in _MOE_KINDS)):
        return True
    return False if kinds else None
