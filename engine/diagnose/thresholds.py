"""Detector and engine settings read from the knowledge base (``dt:Threshold`` individuals)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from debugtune.engine.diagnose.errors import MissingThresholdError
from debugtune.kg.knowledge import thresholds as kb_thresholds
from debugtune.kg.store import Store


class Thresholds(Mapping[str, float]):
    """Threshold key → value; a missing key raises an error that names it and where to define it."""

    def __init__(self, values: Mapping[str, float]):
        self._values = dict(values)

    @classmethod
    def from_store(cls, store: Store) -> Thresholds:
        return cls(kb_thresholds(store))

    def __getitem__(self, key: str) -> float:
        try:
            return self._values[key]
        except KeyError:
            raise MissingThresholdError(key) from None

    def get(self, key: str, default: float | None = None) -> float | None:  # type: ignore[override]
        return self._values.get(key, default)

    def int(self, key: str) -> int:
        return int(round(self[key]))

    def prefixed(self, prefix: str) -> dict[str, float]:
        """Every threshold whose key starts with ``prefix``, keyed by the rest of the key."""
        return {k[len(prefix):]: v for k, v in self._values.items() if k.startswith(prefix)}

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)
