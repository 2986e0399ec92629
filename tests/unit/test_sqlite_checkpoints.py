"""WAL checkpoints of a partition's SQLite file: inside the commit that grew the WAL (SQLite's
autocheckpoint), or deferred to when the owner calls ``checkpoint()`` (the broker: after the
Raft driver's round sent its messages, transport/raft/driver.py ``defer``)."""

from __future__ import annotations

import os
from pathlib import Path

from raftq.partitions.machine import PartitionMachine
from raftq.partitions.sqlite_store import SqliteStore
from raftq.proto import partition_pb2

PAGES = 10
PAGE_BYTES = 4096


def _appends(machine: PartitionMachine, first_index: int, count: int) -> None:
    for i in range(first_index, first_index + count):
        append = partition_pb2.Append(values=[b"x" * 100])
        data = partition_pb2.PartitionCommand(append=append, now_ms=1000).SerializeToString()
        machine.apply(data, i, respond=False)


def _wal_pages(store: SqliteStore) -> float:
    return os.path.getsize(store.path + "-wal") / PAGE_BYTES


def test_sqlite_checkpoints_inside_the_commit_by_default(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "p.sqlite"), wal_autocheckpoint_pages=PAGES)
    _appends(PartitionMachine(store), 1, 200)
    assert _wal_pages(store) < 3 * PAGES  # reused from its start after each checkpoint
    assert not store.checkpoint_due
    store.close()


def test_a_deferred_checkpoint_waits_for_its_owner_and_then_the_wal_is_reused(
    tmp_path: Path,
) -> None:
    store = SqliteStore(
        str(tmp_path / "p.sqlite"), wal_autocheckpoint_pages=PAGES, deferred_checkpoints=True
    )
    machine = PartitionMachine(store)
    _appends(machine, 1, 200)
    assert store.checkpoint_due
    grown = _wal_pages(store)
    assert grown > 5 * PAGES  # nobody checkpointed: the WAL kept growing
    store.checkpoint()
    assert not store.checkpoint_due
    _appends(machine, 201, 3)
    assert _wal_pages(store) == grown  # checkpointed: the next commits reuse it from its start
    assert machine.offsets().end == 203
    store.close()
