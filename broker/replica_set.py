"""ReplicaSet: the partition replicas open on this broker, by (topic, partition).

The backend opens and closes them (on its thread: ``add``, ``remove``); request handlers, the
router and metrics look them up from any thread (``get``, ``snapshot``). A lookup sees a replica
from the moment it is added until it is removed (before it is closed).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raftq.replica import PartitionReplica

Key = tuple[str, int]


class ReplicaSet:
    """See the module docstring. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replicas: dict[Key, PartitionReplica] = {}

    def get(self, key: Key) -> PartitionReplica | None:
        return self._replicas.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._replicas

    def __len__(self) -> int:
        return len(self._replicas)

    def add(self, key: Key, replica: PartitionReplica) -> None:
        with self._lock:
            assert key not in self._replicas, f"{key} opened twice"
            self._replicas[key] = replica

    def remove(self, key: Key) -> PartitionReplica:
        with self._lock:
            return self._replicas.pop(key)

    def snapshot(self) -> list[tuple[Key, PartitionReplica]]:
        """Every open replica now (a copy: the set may change while the caller iterates)."""
        with self._lock:
            return list(self._replicas.items())

    def replicas(self) -> list[PartitionReplica]:
        with self._lock:
            return list(self._replicas.values())

    def leading(self, keys: list[Key]) -> list[PartitionReplica]:
        """The open replicas of ``keys`` that lead their partition now."""
        found = (self._replicas.get(key) for key in keys)
        return [r for r in found if r is not None and r.is_leader()]

    def close_all(self) -> None:
        """Close and forget every replica (the broker is stopping)."""
        with self._lock:
            replicas = list(self._replicas.values())
            self._replicas.clear()
        for replica in replicas:
            replica.close()
