"""WAL checkpoints of a partition's SQLite file: inside the commit that grew the WAL (SQLite's
autocheckpoint), or deferred to when the owner calls ``checkpoint()`` (the broker: after the
Raft driver's round sent its messages, transport/raft/driver.py ``defer``). The ``-wal`` file
is cut back to ``wal_size_limit_bytes`` after a checkpoint, and to 0 by ``trim_wal``."""

from __future__ import annotations

import os
from pathlib import Path

from raftq.partitions.machine import PartitionMachine
from raftq.partitions.sqlite_store import WAL_SIZE_LIMIT_BYTES, SqliteStore
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
    # checkpointed: the next commits reuse it from its start, cut back to its size limit
    assert _wal_pages(store) == min(grown, WAL_SIZE_LIMIT_BYTES / PAGE_BYTES)
    assert machine.offsets().end == 203
    store.close()


def _burst(machine: PartitionMachine, first_index: int, count: int, value_bytes: int) -> None:
    """``count`` appends of 10 values of ``value_bytes`` each."""
    for i in range(first_index, first_index + count):
        append = partition_pb2.Append(values=[os.urandom(value_bytes) for _ in range(10)])
        data = partition_pb2.PartitionCommand(append=append, now_ms=1000).SerializeToString()
        machine.apply(data, i, respond=False)


LIMIT = 256 * 1024


def test_the_first_commit_after_a_checkpoint_cuts_the_wal_back_to_its_limit(
    tmp_path: Path,
) -> None:
    store = SqliteStore(
        str(tmp_path / "p.sqlite"),
        wal_autocheckpoint_pages=1000,
        wal_size_limit_bytes=LIMIT,
        deferred_checkpoints=True,
    )
    machine = PartitionMachine(store)
    _burst(machine, 1, 200, 1000)  # ~2 MB of values: far past the limit
    assert os.path.getsize(store.path + "-wal") > 4 * LIMIT
    store.checkpoint()
    _appends(machine, 201, 1)
    assert os.path.getsize(store.path + "-wal") == LIMIT
    _burst(machine, 202, 10, 1000)  # past the limit again: the WAL grows as it needs
    assert os.path.getsize(store.path + "-wal") > LIMIT
    store.close()
    reopened = SqliteStore(str(tmp_path / "p.sqlite"))
    assert PartitionMachine(reopened).offsets().end == 2101
    reopened.close()


def test_trim_wal_checkpoints_all_of_it_and_truncates_it_to_zero(tmp_path: Path) -> None:
    path = str(tmp_path / "p.sqlite")
    store = SqliteStore(path, deferred_checkpoints=True)
    machine = PartitionMachine(store)
    _burst(machine, 1, 100, 1000)  # never checkpointed: every frame is only in the WAL
    dump = store.dump()
    assert os.path.getsize(path + "-wal") > 1_000_000
    assert store.trim_wal()
    assert os.path.getsize(path + "-wal") == 0
    assert store.dump() == dump
    _appends(machine, 101, 1)  # writes go on into the emptied WAL
    assert machine.offsets().end == 1001
    store.close()
    reopened = SqliteStore(path)
    assert PartitionMachine(reopened).offsets().end == 1001
    reopened.close()


def test_trim_wal_does_not_wait_for_a_reader_and_loses_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "p.sqlite")
    store = SqliteStore(path, deferred_checkpoints=True)
    machine = PartitionMachine(store)
    _burst(machine, 1, 50, 1000)
    reader = SqliteStore(path)
    with reader._conn:  # a read transaction open on another connection (a pinned copy)
        assert reader._rows("SELECT count(*) FROM records") == [(500,)]
        assert not store.trim_wal()  # SQLITE_BUSY at once, not after the 5 s busy timeout
        assert os.path.getsize(path + "-wal") > 0
        assert reader._rows("SELECT count(*) FROM records") == [(500,)]
    assert store.trim_wal()
    assert os.path.getsize(path + "-wal") == 0
    assert reader._rows("SELECT count(*) FROM records") == [(500,)]
    reader.close()
    store.close()
