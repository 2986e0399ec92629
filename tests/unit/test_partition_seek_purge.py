"""SeekGroup and Purge in the partition state machine, over both stores.

A seek to X leaves the group's committed offset at X: records below count as acknowledged, records
at and above are pending again from delivery 1 (a seek backwards replays), its leases end, its
fence stays. A purge deletes every record (log start = end offset) and the pending rows below it;
later records are delivered as usual. Both stores must end with equal dumps.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from raftq.partitions.machine import DEFAULT_CONFIG, TRACKED_CUT_KEEP_MS, PartitionMachine
from raftq.partitions.reader import producer_state
from raftq.partitions.sqlite_store import SqliteStore
from raftq.partitions.store import MemoryStore
from raftq.proto import common_pb2, partition_pb2
from raftq.proto.common_pb2 import ErrorCode


class Replica:
    """A PartitionMachine fed commands at increasing indexes, each stamped with ``now_ms``."""

    def __init__(self, machine: PartitionMachine) -> None:
        self.machine = machine
        self.index = 0
        self.now_ms = 1_000

    def apply(self, **op: Any) -> partition_pb2.CommandResult:
        self.index += 1
        data = partition_pb2.PartitionCommand(now_ms=self.now_ms, **op).SerializeToString()
        return self.machine.apply(data, self.index)

    def append(self, *values: bytes) -> None:
        records = [common_pb2.Record(value=v) for v in values]
        assert not self.apply(append=partition_pb2.Append(records=records)).error

    def lease(self, group: str, generation: int = 0) -> partition_pb2.CommandResult:
        return self.apply(
            lease=partition_pb2.Lease(
                group=group, member="m", max_records=100, lease_ms=60_000, generation=generation
            )
        )

    def taken(self, group: str) -> list[tuple[int, int]]:
        result = self.lease(group)
        assert not result.error, result.message
        return [(d.record.offset, d.delivery_count) for d in result.deliveries]

    def ack(self, group: str, *refs: tuple[int, int]) -> None:
        settle = partition_pb2.Settle(
            group=group,
            member="m",
            refs=[partition_pb2.DeliveryRef(offset=o, delivery_count=c) for o, c in refs],
        )
        result = self.apply(ack=settle)
        assert not result.error and all(not r.error for r in result.refs), result

    def seek(
        self, group: str, to: partition_pb2.SeekTo, **target: int
    ) -> partition_pb2.CommandResult:
        return self.apply(seek_group=partition_pb2.SeekGroup(group=group, to=to, **target))

    def committed(self, group: str) -> int:
        lag = self.machine.lag(group)
        assert lag is not None
        return lag.committed


@pytest.fixture(params=["memory", "sqlite"])
def replica(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Replica]:
    store = MemoryStore() if request.param == "memory" else SqliteStore(str(tmp_path / "p.db"))
    yield Replica(PartitionMachine(store))
    store.close()


def test_seek_backwards_replays_acked_records_and_ends_leases(replica: Replica) -> None:
    replica.append(b"a", b"b", b"c", b"d", b"e")
    assert replica.taken("g") == [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)]
    replica.ack("g", (0, 1), (1, 1), (2, 1))
    assert replica.committed("g") == 3

    result = replica.seek("g", partition_pb2.SEEK_OFFSET, offset=1)
    assert not result.error and result.offset == 1 and result.count == 2  # 3 and 4 were leased
    lag = replica.machine.lag("g")
    assert lag is not None
    assert (lag.committed, lag.pending, lag.leased, lag.lag) == (1, 4, 0, 4)
    # 1 and 2 (acked) come back, 3 and 4 (leased) are free again: every one a first delivery.
    assert replica.taken("g") == [(1, 1), (2, 1), (3, 1), (4, 1)]
    stale = partition_pb2.Settle(
        group="g", member="m", refs=[partition_pb2.DeliveryRef(offset=0, delivery_count=1)]
    )
    answer = replica.apply(ack=stale).refs[0]  # below the seek: acknowledged already
    assert "already acknowledged" in answer.message
    assert replica.committed("g") == 1


def test_a_delivery_from_before_a_seek_cannot_be_settled_after_it(replica: Replica) -> None:
    """A forced seek under a live member: its old deliveries at or above the target are
    neither acked nor nacked away (the replay would lose them), they are delivered again."""
    replica.append(b"a", b"b", b"c")
    assert replica.taken("g") == [(0, 1), (1, 1), (2, 1)]
    assert replica.seek("g", partition_pb2.SEEK_EARLIEST).offset == 0
    ref = [partition_pb2.DeliveryRef(offset=1, delivery_count=1)]
    acked = replica.apply(ack=partition_pb2.Settle(group="g", member="m", refs=ref))
    nacked = replica.apply(nack=partition_pb2.Nack(group="g", member="m", refs=ref))
    assert [r.error for r in acked.refs] == [ErrorCode.RECORD_NOT_FOUND]
    assert [r.error for r in nacked.refs] == [ErrorCode.RECORD_NOT_FOUND]
    assert replica.taken("g") == [(0, 1), (1, 1), (2, 1)]


def test_seek_forwards_acknowledges_what_is_below(replica: Replica) -> None:
    replica.append(b"a", b"b", b"c", b"d")
    assert replica.taken("g")[:1] == [(0, 1)]
    result = replica.seek("g", partition_pb2.SEEK_OFFSET, offset=3)
    assert (result.error, result.offset, result.count) == (ErrorCode.OK, 3, 4)
    assert replica.committed("g") == 3
    assert replica.taken("g") == [(3, 1)]
    replica.append(b"e")
    assert replica.taken("g") == [(4, 1)]


def test_seek_to_earliest_latest_and_clamped_offsets(replica: Replica) -> None:
    replica.append(b"a", b"b", b"c")
    assert replica.seek("g", partition_pb2.SEEK_LATEST).offset == 3
    assert replica.committed("g") == 3 and replica.taken("g") == []
    assert replica.seek("g", partition_pb2.SEEK_EARLIEST).offset == 0
    assert replica.committed("g") == 0
    assert replica.seek("g", partition_pb2.SEEK_OFFSET, offset=3).offset == 3  # at the end
    assert replica.seek("g", partition_pb2.SEEK_OFFSET, offset=4).offset == 3  # just past it
    assert replica.seek("g", partition_pb2.SEEK_OFFSET, offset=2**62).offset == 3  # far past
    assert replica.apply(purge=partition_pb2.Purge()).offset == 3
    replica.append(b"d")
    assert replica.seek("g", partition_pb2.SEEK_OFFSET, offset=0).offset == 3  # below log start
    assert replica.seek("g", partition_pb2.SEEK_EARLIEST).offset == 3
    assert replica.taken("g") == [(3, 1)]


def test_seek_to_timestamp_finds_the_first_record_at_or_after_it(replica: Replica) -> None:
    for i, now_ms in enumerate((1_000, 2_000, 2_000, 3_000)):
        replica.now_ms = now_ms
        replica.append(b"v%d" % i)
    replica.now_ms = 4_000
    for stamp, expected in ((0, 0), (1_000, 0), (1_001, 1), (2_000, 1), (2_999, 3), (3_000, 3)):
        result = replica.seek("g", partition_pb2.SEEK_TIMESTAMP, timestamp_ms=stamp)
        assert (result.error, result.offset) == (ErrorCode.OK, expected), stamp
        assert replica.committed("g") == expected
    # No record at or after it: the end offset (Kafka's offsetsForTimes answers none: latest).
    assert replica.seek("g", partition_pb2.SEEK_TIMESTAMP, timestamp_ms=3_001).offset == 4
    assert replica.seek("g", partition_pb2.SEEK_TIMESTAMP, timestamp_ms=2**62).offset == 4


def test_seek_keeps_the_fence_and_positions_a_group_never_seen(replica: Replica) -> None:
    replica.append(b"a", b"b", b"c")
    assert replica.lease("g", generation=5).deliveries
    assert not replica.apply(release=partition_pb2.Release(group="g", generation=7)).error
    assert replica.seek("g", partition_pb2.SEEK_EARLIEST).offset == 0
    assert replica.lease("g", generation=6).error == ErrorCode.FENCED
    assert replica.seek("new", partition_pb2.SEEK_OFFSET, offset=2).offset == 2
    assert replica.committed("new") == 2
    assert replica.taken("new") == [(2, 1)]
    assert replica.taken("other") == [(0, 1), (1, 1), (2, 1)]  # other groups untouched


@pytest.mark.parametrize(
    "seek",
    [
        partition_pb2.SeekGroup(group="", to=partition_pb2.SEEK_LATEST),
        partition_pb2.SeekGroup(group="g" * 256, to=partition_pb2.SEEK_LATEST),
        partition_pb2.SeekGroup(group="g", to=partition_pb2.SEEK_OFFSET, offset=-1),
        partition_pb2.SeekGroup(group="g", to=partition_pb2.SEEK_OFFSET, offset=-(2**63)),
        partition_pb2.SeekGroup(group="g", to=partition_pb2.SEEK_TIMESTAMP, timestamp_ms=-1),
        partition_pb2.SeekGroup(group="g", to=99),  # type: ignore[arg-type]
    ],
)
def test_a_bad_seek_is_refused_and_changes_nothing(
    replica: Replica, seek: partition_pb2.SeekGroup
) -> None:
    replica.append(b"a", b"b")
    assert replica.taken("g") == [(0, 1), (1, 1)]
    before = replica.machine.store.dump()
    result = replica.apply(seek_group=seek)
    assert result.error == ErrorCode.INVALID_ARGUMENT, result
    after = replica.machine.store.dump()
    assert after == before  # the applied index too: a replay meets the same refusal


def test_purge_deletes_every_record_and_later_records_are_delivered(replica: Replica) -> None:
    replica.append(b"a", b"b", b"c", b"d")
    assert replica.taken("g")[:2] == [(0, 1), (1, 1)]
    replica.ack("g", (0, 1))
    result = replica.apply(purge=partition_pb2.Purge())
    assert (result.error, result.count, result.offset) == (ErrorCode.OK, 4, 4)
    offsets = replica.machine.offsets()
    assert (offsets.log_start, offsets.end) == (4, 4)
    assert replica.machine.fetch(0, 10) == []
    assert replica.machine.statistics()["log_bytes"] == 0
    lag = replica.machine.lag("g")
    assert lag is not None and (lag.committed, lag.pending, lag.leased, lag.lag) == (4, 0, 0, 0)
    assert replica.taken("g") == []
    again = replica.apply(purge=partition_pb2.Purge())  # nothing left: changes nothing more
    assert (again.error, again.count, again.offset) == (ErrorCode.OK, 0, 4)
    replica.append(b"e", b"f")
    assert replica.taken("g") == [(4, 1), (5, 1)]
    assert replica.taken("late") == [(4, 1), (5, 1)]  # a new group starts at the log start


def test_purge_leaves_nothing_pending_for_a_group_that_took_only_some(replica: Replica) -> None:
    replica.append(b"a", b"b", b"c", b"d")
    one = replica.apply(lease=partition_pb2.Lease(group="g", member="m", max_records=1))
    assert [d.record.offset for d in one.deliveries] == [0]
    assert replica.apply(purge=partition_pb2.Purge()).count == 4
    lag = replica.machine.lag("g")
    assert lag is not None and (lag.committed, lag.pending, lag.leased, lag.lag) == (4, 0, 0, 0)


def test_retention_leaves_nothing_pending_for_a_group_that_took_only_some(
    replica: Replica,
) -> None:
    config = common_pb2.TopicConfig()
    config.CopyFrom(DEFAULT_CONFIG)
    config.retention_ms = 1_000
    assert not replica.apply(configure=partition_pb2.Configure(config=config)).error
    replica.append(b"a", b"b", b"c", b"d")
    one = replica.apply(lease=partition_pb2.Lease(group="g", member="m", max_records=1))
    assert [d.record.offset for d in one.deliveries] == [0]
    replica.now_ms += 10_000
    assert replica.apply(retain=partition_pb2.Retain()).count == 4
    lag = replica.machine.lag("g")
    assert lag is not None and (lag.committed, lag.pending, lag.lag) == (4, 0, 0)


def test_a_spark_producers_records_purged_or_retained_away_still_count_as_written(
    replica: Replica,
) -> None:
    """A retried Spark task resumes after ``records`` rows (ProducerState): retention or a
    purge that cut the first attempt's records away must not make it write them again (on
    the code before, the count fell to what was left: the retry re-sent that many rows).
    The count is kept TRACKED_CUT_KEEP_MS (at least dedup_window_ms) after the last cut."""
    config = common_pb2.TopicConfig()
    config.CopyFrom(DEFAULT_CONFIG)
    config.retention_ms = 1_000
    assert not replica.apply(configure=partition_pb2.Configure(config=config)).error
    pid = "spark:app:1:0"
    for sequence in range(3):
        append = partition_pb2.Append(values=[b"r%d" % i for i in range(4)], producer_id=pid)
        append.sequence = sequence
        assert not replica.apply(append=append).error
    written = producer_state(replica.machine.store, pid)
    assert written is not None and (written.records, written.last_sequence) == (12, 2)
    replica.now_ms += 10_000  # every record past retention_ms
    assert replica.apply(retain=partition_pb2.Retain()).count == 12
    kept = producer_state(replica.machine.store, pid)
    assert kept is not None and (kept.records, kept.last_sequence, kept.last_offsets) == (
        12,
        2,
        [],
    )
    more = partition_pb2.Append(values=[b"x", b"y"], producer_id=pid, sequence=3)
    assert not replica.apply(append=more).error
    assert replica.apply(purge=partition_pb2.Purge()).count == 2
    purged = producer_state(replica.machine.store, pid)
    assert purged is not None and (purged.records, purged.last_sequence) == (14, 3)
    replica.now_ms += TRACKED_CUT_KEEP_MS  # a week after the purge, less the clock skew
    replica.apply(retain=partition_pb2.Retain())
    assert producer_state(replica.machine.store, pid) is not None
    replica.now_ms += 1
    replica.apply(retain=partition_pb2.Retain())
    assert producer_state(replica.machine.store, pid) is None


def test_both_stores_end_equal_after_seeks_and_purges(tmp_path: Any) -> None:
    replicas = [
        Replica(PartitionMachine(MemoryStore())),
        Replica(PartitionMachine(SqliteStore(str(tmp_path / "p.db")))),
    ]
    for r in replicas:
        r.append(b"a", b"b", b"c", b"d")
        r.taken("g")
        r.ack("g", (1, 1))
        r.seek("g", partition_pb2.SEEK_OFFSET, offset=2)
        r.taken("h")
        spark = partition_pb2.Append(values=[b"s"], producer_id="spark:a:1:0", sequence=0)
        assert not r.apply(append=spark).error
        r.apply(purge=partition_pb2.Purge())
        r.append(b"e")
        r.seek("h", partition_pb2.SEEK_EARLIEST)
        r.taken("g")
    dumps = [r.machine.store.dump() for r in replicas]
    assert dumps[0] == dumps[1] and dumps[0]["tracked_cut"] == [("spark:a:1:0", 1, 0, 1_000)]
