"""Error accounting of the live probe: hooks never raise into training, they count what went wrong."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class ProbeErrors:
    """Counts of caught exceptions by ``<where>:<exception type>`` and the first message of each kind."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.first: dict[str, str] = {}
        self.skipped: dict[str, int] = {}

    def add(self, where: str, exc: BaseException) -> None:
        kind = f"{where}:{type(exc).__name__}"
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.first.setdefault(kind, str(exc)[:500])

    def skip(self, reason: str, n: int = 1) -> None:
        """Something not measured on purpose (e.g. a sparse gradient); not an error."""
        self.skipped[reason] = self.skipped.get(reason, 0) + n

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def report(self) -> dict[str, Any]:
        return {"total": self.total, "by_kind": dict(self.counts), "first_message": dict(self.first),
                "skipped": dict(self.skipped)}

    def guard(self, where: str) -> Callable[[F], F]:
        """Decorator: run the function, count any Exception under ``where`` and return None instead."""

        def deco(fn: F) -> F:
            @wraps(fn)
            def inner(*args: Any, **kwargs: Any) -> Any:
                try:
                    return fn(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 — the probe must never raise into the training loop
                    self.add(where, exc)
                    return None

            return inner  # type: ignore[return-value]

        return deco
