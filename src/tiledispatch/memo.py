"""The one memo mechanism: bounded maps from call signatures to decisions, each entry stamped with what it
depends on.

A decision (a selection, a bound launch) stays valid while the `Stamp` it was made under equals the current
one: the registry's version (kernels declared or built), the global build epoch (any kernel pointed at another
cache entry) and the tuning DB's version (`auto` reads it). Every call path (td.gemm, td.conv*,
Registry.select / run, Kernel.run) keeps its decisions in `Memo` objects and checks them the same way.
"""
from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Generic, NamedTuple, TypeVar

LIMIT = 1024   # signatures remembered per memo (oldest dropped first)

V = TypeVar("V")
_LOCK = threading.Lock()
_EPOCH = [0]


class Stamp(NamedTuple):
    """What a remembered decision depends on besides its arguments."""

    registry_version: int
    build_epoch: int
    tuning_version: int


def build_epoch() -> int:
    """Changes whenever any kernel is pointed at another cache entry (its launches and selections may
    change)."""
    return _EPOCH[0]


def bump_build_epoch() -> None:
    _EPOCH[0] += 1


class Memo(Generic[V]):
    """A bounded map (insertion order, oldest dropped beyond `limit`), safe to fill from several threads."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self._data: dict[Hashable, V] = {}
        self.get = self._data.get     # the hot path: a plain dict lookup

    def put(self, key: Hashable, value: V) -> V:
        limit = self.limit or LIMIT
        with _LOCK:
            while len(self._data) >= limit:
                self._data.pop(next(iter(self._data)))
            self._data[key] = value
        return value

    def clear(self) -> None:
        with _LOCK:
            self._data.clear()

    def values(self) -> list[V]:
        return list(self._data.values())

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data
