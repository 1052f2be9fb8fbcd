"""Collective kinds, element sizes and the nccl-tests bus-bandwidth factors.

busbw = algbw × f(n), algbw = S / t (NVIDIA/nccl-tests doc/PERFORMANCE.md): AllReduce 2(n−1)/n;
ReduceScatter, AllGather, AlltoAll (n−1)/n; Broadcast, Reduce and point-to-point 1. S is the per-rank
buffer for AllReduce/Broadcast/Reduce/AlltoAll and the total (gathered / scattered) array for
AllGather/ReduceScatter — in a Kineto trace that is max(In msg nelems, Out msg nelems) × element size.
"""

from __future__ import annotations

import re

# PyTorch dtype spellings in Kineto args ("dtype", "Input type") → bytes per element.
DTYPE_BYTES = {
    "float": 4, "float32": 4, "int": 4, "int32": 4, "uint32": 4, "long": 8, "int64": 8, "uint64": 8,
    "double": 8, "float64": 8, "bfloat16": 2, "c10::bfloat16": 2, "half": 2, "float16": 2, "c10::half": 2,
    "short": 2, "int16": 2, "uint16": 2, "bool": 1, "byte": 1, "char": 1, "int8": 1, "uint8": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "c10::float8_e4m3fn": 1,
    "complexfloat": 8, "complexdouble": 16, "c10::complex<float>": 8, "c10::complex<double>": 16,
}

_KIND_ALIASES = {
    "allreduce": "allreduce", "allreducecoalesced": "allreduce",
    "allgather": "allgather", "allgatherbase": "allgather", "allgatherintotensor": "allgather",
    "allgatherintotensorcoalesced": "allgather", "allgathercoalesced": "allgather",
    "reducescatter": "reducescatter", "reducescatterbase": "reducescatter", "reducescattertensor": "reducescatter",
    "reducescattertensorcoalesced": "reducescatter",
    "alltoall": "alltoall", "alltoallv": "alltoall", "alltoallbase": "alltoall", "alltoallsingle": "alltoall",
    "broadcast": "broadcast", "broadcastcoalesced": "broadcast", "reduce": "reduce", "send": "send",
    "recv": "recv", "sendrecv": "sendrecv", "batchsendrecv": "sendrecv", "barrier": "barrier",
    "gather": "gather", "scatter": "scatter", "receive": "recv",
}
_NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
_HCOM = re.compile(r"^hcom_([A-Za-z]+)")


def normalize_kind(name: str) -> str:
    """'all_reduce', '_allgather_base', 'AllReduce', 'gloo:all_reduce', 'nccl:all_reduce' → 'allreduce' etc."""
    text = name.split(":", 1)[1] if ":" in name and name.split(":", 1)[0] in ("gloo", "nccl", "hccl", "mpi") else name
    key = re.sub(r"[^a-z]", "", text.lower())
    return _KIND_ALIASES.get(key, key or "unknown")


def kind_from_kernel(name: str) -> str | None:
    """The collective kind of an NCCL/RCCL kernel name (old ``ncclKernel_`` and new ``ncclDevKernel_``)."""
    m = _NCCL_KERNEL.match(name)
    return normalize_kind(m.group(1)) if m else None


def kind_from_hcom(op_name: str) -> str:
    """The collective kind of an HCCL op name ('hcom_allReduce__586_0_1@1752…' → 'allreduce')."""
    m = _HCOM.match(op_name)
    return normalize_kind(m.group(1)) if m else normalize_kind(op_name.split("@", 1)[0])


def dtype_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a PyTorch dtype name, None if unknown."""
    if not dtype:
        return None
    return DTYPE_BYTES.get(str(dtype).strip().lower())


def busbw_factor(kind: str, group_size: int) -> float | None:
    """nccl-tests bus-bandwidth factor for ``kind`` over ``group_size`` ranks (None if not defined)."""
    n = int(group_size)
    if n < 1:
        return None
    if kind == "allreduce":
        return 2.0 * (n - 1) / n
    if kind in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    if kind in ("broadcast", "reduce", "send", "recv", "sendrecv"):
        return 1.0
    return None
