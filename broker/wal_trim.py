"""Idle partitions give their SQLite WAL back (issue 16, disk).

A written partition's ``-wal`` file is cut back to ``storage.wal_size_limit_bytes`` by the
first commit after a checkpoint (PRAGMA journal_size_limit, SqliteStore); a partition that
stops being written keeps the WAL it grew since its last checkpoint (up to
``storage.wal_autocheckpoint_pages``, ~4 MiB) until its next write. The backend's step calls
``WalTrimmer.step``: every ``idle_s`` it looks at each replica's count of applied entries, and
a replica that applied none since the previous look (and some since its last trim) is queued;
queued replicas are trimmed one at a time on the driver thread (PartitionReplica.trim_wal: a
checkpoint of the whole WAL, then truncated to 0 bytes), the next submitted only once the
previous finished, so a burst across thousands of partitions going idle together never holds
the driver for more than one trim in a round. A trim a reader was in the way of is tried again
at the next look.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Protocol

logger = logging.getLogger(__name__)


class Trimmable(Protocol):
    where: str  # for the log

    def entries_applied(self) -> int: ...

    def trim_wal(self) -> Future[bool] | None: ...


class WalTrimmer:
    """Not thread-safe: the backend's thread calls ``step``. ``idle_s`` <= 0: never trims."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self._seen: dict[Trimmable, int] = {}  # replica -> entries applied at the last look
        self._trimmed: dict[Trimmable, int] = {}  # replica -> entries applied when queued
        self._queue: collections.deque[Trimmable] = collections.deque()
        self._pending: tuple[Trimmable, Future[bool]] | None = None
        self._looked_at_s = -math.inf

    def step(self, replicas: Callable[[], Sequence[Trimmable]], now_s: float) -> None:
        """Look at the replicas when ``idle_s`` passed since the last look (``replicas`` is
        called only then), and submit the next queued trim when none is in flight."""
        if self.idle_s <= 0 or not self._finished():
            return
        if not self._queue and now_s - self._looked_at_s >= self.idle_s:
            self._looked_at_s = now_s
            self._look(replicas())
        while self._queue:
            replica = self._queue.popleft()
            future = replica.trim_wal()
            if future is not None:
                self._pending = (replica, future)
                return

    def busy(self) -> bool:
        """Whether a trim is queued or in flight."""
        return bool(self._queue) or self._pending is not None

    def _finished(self) -> bool:
        """Whether no trim is in flight; a finished one a reader blocked is tried again."""
        if self._pending is None:
            return True
        replica, future = self._pending
        if not future.done():
            return False
        self._pending = None
        error = future.exception()
        if error is not None:
            logger.warning("%s WAL trim failed: %r (tried again when idle)", replica.where, error)
        if error is not None or not future.result():
            self._trimmed.pop(replica, None)  # the next look queues it again
        return True

    def _look(self, replicas: Sequence[Trimmable]) -> None:
        seen: dict[Trimmable, int] = {}
        for replica in replicas:
            applied = seen[replica] = replica.entries_applied()
            idle = self._seen.get(replica) == applied
            if idle and self._trimmed.get(replica) != applied:
                self._trimmed[replica] = applied
                self._queue.append(replica)
        self._seen = seen  # a closed replica is forgotten
        self._trimmed = {r: a for r, a in self._trimmed.items() if r in seen}
