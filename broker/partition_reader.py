"""Thread-safe reads of a partition's committed state, on a connection of their own.

The applier (the Raft driver thread) owns the PartitionMachine and its store connection; a read
through that connection could see a transaction in flight. A PartitionReader holds a second
store on the same SQLite file (WAL: readers see the last committed transaction and never block
the writer) and answers each read inside one read transaction, so a read is a consistent
snapshot at some applied index.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from raftq.partitions.machine import GroupLag, Offsets, fetch_from, lag_of
from raftq.partitions.reader import FetchResult, ProducerState, might_have_ready, producer_state
from raftq.partitions.rows import OutboxRow
from raftq.partitions.sqlite_store import SqliteStore
from raftq.proto import common_pb2


class PartitionReader:
    """Thread-safe reads over a store of its own (a second connection to the same file)."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self._lock = threading.Lock()

    def fetch(self, offset: int, max_records: int, max_bytes: int = 0) -> FetchResult:
        with self._lock, self._store.transaction():
            meta = self._store.load_meta()
            records = fetch_from(self._store, meta, offset, max_records, max_bytes)
            return FetchResult(records, meta.log_start, meta.next_offset)

    def offsets(self) -> Offsets:
        with self._lock, self._store.transaction():
            meta = self._store.load_meta()
            return Offsets(meta.log_start, meta.next_offset)

    def lags(self, groups: list[str]) -> dict[str, GroupLag | None]:
        with self._lock, self._store.transaction():
            meta = self._store.load_meta()
            return {g: lag_of(self._store, meta, g) for g in groups}

    def all_lags(self) -> list[GroupLag]:
        """The lag of every group the partition knows, in one read transaction."""
        with self._lock, self._store.transaction():
            meta = self._store.load_meta()
            found = [lag_of(self._store, meta, row.name) for row in self._store.groups()]
            return [lag for lag in found if lag is not None]

    def might_have_ready(self, group: str, now_ms: int, lease_grace_ms: int = 0) -> bool:
        with self._lock, self._store.transaction():
            meta = self._store.load_meta()
            return might_have_ready(self._store, meta, group, now_ms, lease_grace_ms)

    def producer_state(self, producer_id: str) -> ProducerState | None:
        with self._lock, self._store.transaction():
            return producer_state(self._store, producer_id)

    def outbox(self, limit: int) -> list[OutboxRow]:
        with self._lock, self._store.transaction():
            return self._store.outbox_list(limit)

    def schedules(self) -> list[common_pb2.Schedule]:
        with self._lock, self._store.transaction():
            return [common_pb2.Schedule.FromString(b) for _, b in self._store.schedules()]

    def applied_index(self) -> int:
        with self._lock, self._store.transaction():
            return self._store.load_meta().applied_index

    @contextlib.contextmanager
    def closed(self) -> Iterator[None]:
        """Reads wait while the block runs with this connection closed (a restore moving a
        new file into place), then go on at the file's new state."""
        with self._lock:
            self._store.close()
            try:
                yield
            finally:
                self._store.reopen()

    def close(self) -> None:
        with self._lock:
            self._store.close()
