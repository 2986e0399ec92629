"""PartitionReader: reads on a second connection see committed state only, from any thread."""

from __future__ import annotations

import threading
from pathlib import Path

from raftq.partition_reader import PartitionReader
from raftq.partitions.machine import PartitionMachine
from raftq.partitions.sqlite_store import SqliteStore
from raftq.proto import common_pb2, partition_pb2


def command(now_ms: int, **op: object) -> bytes:
    return partition_pb2.PartitionCommand(now_ms=now_ms, **op).SerializeToString()  # type: ignore[arg-type]


def append(n: int, start: int = 0) -> partition_pb2.Append:
    return partition_pb2.Append(
        records=[common_pb2.Record(value=b"v%d" % (start + i)) for i in range(n)]
    )


def test_reader_sees_committed_records_offsets_and_lag(tmp_path: Path) -> None:
    path = str(tmp_path / "p.db")
    machine = PartitionMachine(SqliteStore(path))
    reader = PartitionReader(SqliteStore(path))
    assert reader.offsets().end == 0
    assert not reader.might_have_ready("g", 1_000)
    machine.apply(command(1_000, append=append(5)), 1)
    assert reader.offsets().end == 5
    assert [r.offset for r in reader.fetch(0, 10).records] == [0, 1, 2, 3, 4]
    assert reader.might_have_ready("g", 1_000)
    leased = machine.apply(
        command(1_001, lease=partition_pb2.Lease(group="g", member="m", max_records=5)), 2
    )
    assert len(leased.deliveries) == 5
    lag = reader.lags(["g", "nobody"])
    assert lag["nobody"] is None
    assert lag["g"] is not None and (lag["g"].committed, lag["g"].leased) == (0, 5)
    assert not reader.might_have_ready("g", 1_002)  # everything leased
    assert reader.might_have_ready("g", 1_001 + 30_000)  # leases due at the deadline
    assert reader.applied_index() == 2


def test_reader_never_sees_a_rejected_command_in_flight(tmp_path: Path) -> None:
    path = str(tmp_path / "p.db")
    machine = PartitionMachine(SqliteStore(path))
    reader = PartitionReader(SqliteStore(path))
    machine.apply(command(1_000, append=append(3)), 1)
    seen: list[int] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.append(reader.offsets().end)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        index = 2
        for i in range(200):  # good appends interleaved with rejected ones (too many records)
            machine.apply(command(1_000 + i, append=append(1, 3 + i)), index)
            index += 1
            bad = partition_pb2.Append(producer_id="p", sequence=5)
            machine.apply(command(1_000 + i, append=bad), index)
    finally:
        stop.set()
        thread.join()
    assert seen == sorted(seen), "a reader saw the end offset go backwards"
    assert all(3 <= end <= 203 for end in seen)
    assert reader.offsets().end == 203
