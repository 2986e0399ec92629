"""Per-record time to live (issue 19): the pure partition machine on both stores.

A record whose ``timestamp_ms + ttl_ms`` (its own ttl_ms, else the topic's) is at or below the
partition time less ``clock_skew_ms`` is never leased: in each group that reaches it, it is
dropped (acknowledged) or dead-lettered with reason "expired" (the topic's ttl_action), the
same on a leader (respond=True) and a follower (respond=False). A record leased before it
expired may still be acknowledged by its holder.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

import pytest

from raftq.partitions.machine import EXPIRY_ROUNDS, PartitionMachine
from raftq.partitions.store import PartitionStore
from raftq.proto import common_pb2, partition_pb2
from raftq.proto.common_pb2 import ErrorCode

T0_MS = 1_764_000_000_000
SKEW_MS = 2000
LEASE_MS = 30_000
TTL_MS = 10_000


def topic_config(**overrides: object) -> common_pb2.TopicConfig:
    config = common_pb2.TopicConfig(
        ordering=common_pb2.FIFO,
        lease_ms=LEASE_MS,
        max_deliveries=0,
        max_record_bytes=1 << 20,
        dedup_window_ms=60_000,
        nack_backoff_base_ms=1000,
        nack_backoff_max_ms=60_000,
    )
    for name, value in overrides.items():
        setattr(config, name, value)
    return config


class Pair:
    """A leader (answers) and a follower (respond=False) fed the same commands."""

    def __init__(self, new_store: Callable[[], PartitionStore], **config: object) -> None:
        self.leader = PartitionMachine(new_store())
        self.follower = PartitionMachine(new_store())
        self.index = 0
        result = self.apply(T0_MS, configure=partition_pb2.Configure(config=topic_config(**config)))
        assert result.error == ErrorCode.OK, result

    def apply(self, now_ms: int, **op: object) -> partition_pb2.CommandResult:
        self.index += 1
        data = partition_pb2.PartitionCommand(
            now_ms=now_ms,
            clock_skew_ms=SKEW_MS,
            **op,  # type: ignore[arg-type]
        ).SerializeToString()
        result = self.leader.apply(data, self.index)
        follower = self.follower.apply(data, self.index, respond=False)
        assert follower.error == result.error, (result, follower)
        assert self.leader.store.dump() == self.follower.store.dump()
        return result

    def append(self, now_ms: int, *records: common_pb2.Record) -> partition_pb2.CommandResult:
        return self.apply(now_ms, append=partition_pb2.Append(records=list(records)))

    def lease(
        self, now_ms: int, group: str = "g", member: str = "m", max_records: int = 100
    ) -> list[int]:
        lease = partition_pb2.Lease(group=group, member=member, max_records=max_records)
        result = self.apply(now_ms, lease=lease)
        assert result.error == ErrorCode.OK, result
        return [d.record.offset for d in result.deliveries]

    def ack(self, now_ms: int, offset: int, count: int = 1, member: str = "m") -> int:
        ref = partition_pb2.DeliveryRef(offset=offset, delivery_count=count)
        settle = partition_pb2.Settle(group="g", member=member, refs=[ref])
        result = self.apply(now_ms, ack=settle)
        assert result.error == ErrorCode.OK, result
        (outcome,) = result.refs
        return int(outcome.error)

    def outbox(self) -> list[tuple[str, int, str]]:
        return [(o.group, o.offset, o.reason) for o in self.leader.outbox(1000)]


def rec(value: bytes, ttl_ms: int = 0, **fields: object) -> common_pb2.Record:
    return common_pb2.Record(value=value, ttl_ms=ttl_ms, **fields)  # type: ignore[arg-type]


# An expired record is judged clock_skew_ms late: at partition time ts + ttl + skew it is gone;
# a millisecond before, it is still delivered.
EXPIRES_MS = T0_MS + TTL_MS + SKEW_MS


@pytest.mark.parametrize(
    ("lease_at_ms", "delivered"),
    [(EXPIRES_MS - 1, [0, 1]), (EXPIRES_MS, [1]), (EXPIRES_MS + 86_400_000, [1])],
    ids=["just-before", "at", "far-past"],
)
def test_record_ttl_edges(
    new_store: Callable[[], PartitionStore], lease_at_ms: int, delivered: list[int]
) -> None:
    pair = Pair(new_store)
    pair.append(T0_MS, rec(b"short", TTL_MS), rec(b"forever"))
    assert pair.lease(lease_at_ms) == delivered
    assert pair.leader.expired_total == pair.follower.expired_total == 2 - len(delivered)
    assert pair.outbox() == []  # drop is the default


def test_topic_default_and_record_override(new_store: Callable[[], PartitionStore]) -> None:
    pair = Pair(new_store, ttl_ms=TTL_MS)
    pair.append(T0_MS, rec(b"topic-ttl"), rec(b"own-longer", 5 * TTL_MS), rec(b"own-shorter", 1))
    assert pair.lease(T0_MS + 1 + SKEW_MS) == [0, 1]  # offset 2 (1 ms) expired already
    assert pair.lease(EXPIRES_MS, group="late") == [1]  # the topic's ttl ended offset 0
    pair.append(EXPIRES_MS, rec(b"later"))  # the topic default counts from its own timestamp
    assert pair.lease(EXPIRES_MS + TTL_MS + SKEW_MS - 1, group="later") == [1, 3]


def test_bare_values_take_the_topic_ttl(new_store: Callable[[], PartitionStore]) -> None:
    pair = Pair(new_store, ttl_ms=TTL_MS)
    pair.apply(T0_MS, append=partition_pb2.Append(values=[b"a", b"b", b"c"]))
    pair.apply(T0_MS + TTL_MS, append=partition_pb2.Append(values=[b"d"]))
    assert pair.lease(EXPIRES_MS) == [3]
    assert pair.leader.expired_total == 3


def test_altering_the_topic_ttl_applies_to_stored_records(
    new_store: Callable[[], PartitionStore],
) -> None:
    """Like SQS's MessageRetentionPeriod and NATS's MaxAge: the topic's ttl_ms is judged at
    lease time, so records appended before the topic (or this partition) got it expire too."""
    pair = Pair(new_store)
    pair.append(T0_MS, rec(b"a"), rec(b"b"))
    pair.apply(T0_MS + 1, append=partition_pb2.Append(values=[b"c"]))
    assert pair.lease(EXPIRES_MS, max_records=1) == [0]
    configure = partition_pb2.Configure(config=topic_config(ttl_ms=TTL_MS))
    assert pair.apply(EXPIRES_MS, configure=configure).error == ErrorCode.OK
    assert pair.lease(EXPIRES_MS) == [2]  # offset 1 (stamped T0) expired, c one ms later not
    assert pair.leader.expired_total == 1


def test_dead_letter_policy(new_store: Callable[[], PartitionStore]) -> None:
    pair = Pair(new_store, ttl_action=common_pb2.TTL_DEAD_LETTER, dead_letter_topic="t.dlq")
    pair.append(T0_MS, rec(b"a", TTL_MS), rec(b"b"), rec(b"c", TTL_MS))
    assert pair.lease(EXPIRES_MS) == [1]
    assert pair.outbox() == [("g", 0, "expired"), ("g", 2, "expired")]
    assert pair.lease(EXPIRES_MS, group="other") == [1]  # each group ends them for itself
    assert pair.outbox()[2:] == [("other", 0, "expired"), ("other", 2, "expired")]
    dead = common_pb2.StoredRecord.FromString(pair.leader.outbox(1)[0].record)
    assert (dead.offset, dead.record.value, dead.record.ttl_ms) == (0, b"a", 0)
    # once its lease runs out, only the live record comes back; the expired ones never do
    assert pair.lease(EXPIRES_MS + 10 * LEASE_MS) == [1]


def test_priority_topic(new_store: Callable[[], PartitionStore]) -> None:
    pair = Pair(new_store, ordering=common_pb2.PRIORITY)
    pair.append(
        T0_MS,
        rec(b"urgent-but-stale", TTL_MS, priority=0),
        rec(b"low", priority=9),
        rec(b"mid", TTL_MS * 100, priority=5),
    )
    assert pair.lease(EXPIRES_MS) == [2, 1]


def test_leased_before_expiry_may_still_be_acked(new_store: Callable[[], PartitionStore]) -> None:
    pair = Pair(new_store)
    pair.append(T0_MS, rec(b"a", TTL_MS), rec(b"b", TTL_MS))
    assert pair.lease(T0_MS, max_records=2) == [0, 1]
    # past the ttl, within the lease: the holder's ack stands
    assert pair.ack(T0_MS + TTL_MS + SKEW_MS + 1, 0) == ErrorCode.OK
    # offset 1's lease runs out after its ttl: it is not delivered again, it is dropped
    after_lease_ms = T0_MS + LEASE_MS + SKEW_MS
    assert pair.lease(after_lease_ms) == []
    assert pair.leader.lag("g") is not None
    lag = pair.leader.lag("g")
    assert lag is not None and lag.pending == 0 and lag.lag == 0


def test_nacked_record_expires_while_waiting(new_store: Callable[[], PartitionStore]) -> None:
    pair = Pair(new_store)
    pair.append(T0_MS, rec(b"a", TTL_MS))
    assert pair.lease(T0_MS) == [0]
    ref = partition_pb2.DeliveryRef(offset=0, delivery_count=1)
    nack = partition_pb2.Nack(group="g", member="m", refs=[ref], delay_ms=TTL_MS * 2)
    assert pair.apply(T0_MS + 1, nack=nack).error == ErrorCode.OK
    assert pair.lease(T0_MS + 3 * TTL_MS) == []
    assert pair.leader.expired_total == 1


def test_a_long_expired_backlog_drains(new_store: Callable[[], PartitionStore]) -> None:
    """More expired records than one Lease ends (EXPIRY_ROUNDS choices of max_records): each
    Lease ends some, none is ever delivered, and the live record behind them comes out."""
    pair = Pair(new_store)
    expired = 3 * EXPIRY_ROUNDS * 2
    pair.append(T0_MS, *[rec(b"old", TTL_MS) for _ in range(expired)], rec(b"live"))
    seen: list[int] = []
    for _ in range(10):
        seen += pair.lease(EXPIRES_MS, max_records=2)
        if seen:
            break
    assert seen == [expired]
    assert pair.leader.expired_total == expired


def test_retention_and_cancel_forget_expiries(new_store: Callable[[], PartitionStore]) -> None:
    pair = Pair(new_store, retention_ms=TTL_MS)
    pair.append(T0_MS, rec(b"a", TTL_MS), rec(b"b", TTL_MS), rec(b"c", TTL_MS))
    assert pair.apply(T0_MS, cancel_record=partition_pb2.CancelRecord(offset=2)).error == 0
    assert pair.apply(EXPIRES_MS + 1, retain=partition_pb2.Retain()).count == 2
    assert pair.leader.store.dump()["expiries"] == []


def test_bad_record_ttl_is_refused_and_changes_nothing(
    new_store: Callable[[], PartitionStore],
) -> None:
    pair = Pair(new_store)
    before = pair.leader.store.dump()
    result = pair.append(T0_MS, rec(b"ok"), rec(b"bad", -1))
    assert result.error == ErrorCode.INVALID_ARGUMENT
    assert "record 1: ttl_ms must be >= 0" in result.message
    after = pair.leader.store.dump()
    assert (after["records"], after["expiries"]) == (before["records"], before["expiries"])


@pytest.mark.parametrize(
    "overrides",
    [{"ttl_ms": -1}, {"ttl_action": 7}],
    ids=["negative-ttl", "unknown-action"],
)
def test_bad_topic_ttl_is_refused(
    new_store: Callable[[], PartitionStore], overrides: dict[str, int]
) -> None:
    pair = Pair(new_store)
    configure = partition_pb2.Configure(config=topic_config(**overrides))
    result = pair.apply(T0_MS, configure=configure)
    assert result.error == ErrorCode.INVALID_ARGUMENT
    assert "ttl" in result.message
    assert pair.leader.config.ttl_ms == 0


def seed_of() -> int:
    seed = int(os.environ.get("RAFTQ_SEED", random.SystemRandom().randrange(2**32)))
    print(f"seed={seed} (replay: RAFTQ_SEED={seed} pytest tests/unit/test_ttl.py -k randomized)")
    return seed


@pytest.mark.parametrize("action", [common_pb2.TTL_DROP, common_pb2.TTL_DEAD_LETTER])
def test_randomized_nothing_expired_is_delivered_nothing_is_lost(
    new_store: Callable[[], PartitionStore], action: int
) -> None:
    """Random appends (own ttl or none, records and bare values), leases, acks, nacks, topic
    ttl changes and clock steps, two groups, leader and follower. Every delivery is of a record
    not expired at that partition time; at the end every record is, in each group, either
    acknowledged after a delivery or ended as expired, exactly once."""
    rng = random.Random(seed_of())
    pair = Pair(new_store, ttl_action=action, dead_letter_topic="t.dlq", ttl_ms=TTL_MS)
    topic_ttl_ms = TTL_MS
    own_ttl: dict[int, int] = {}  # offset -> its own ttl_ms
    stamped: dict[int, int] = {}  # offset -> timestamp_ms
    acked: dict[str, set[int]] = {"g1": set(), "g2": set()}
    now = T0_MS

    def expires_at(offset: int) -> int | None:
        ttl = own_ttl.get(offset) or topic_ttl_ms
        return stamped[offset] + ttl if ttl else None

    def lease_and_settle(group: str, drain: bool = False) -> None:
        size = 100 if drain else rng.randint(1, 8)
        lease = partition_pb2.Lease(group=group, member="m", max_records=size)
        result = pair.apply(now, lease=lease)
        assert result.error == ErrorCode.OK, result
        for d in result.deliveries:
            at = expires_at(d.record.offset)
            assert at is None or at > now - SKEW_MS, (d.record.offset, at, now)
            ref = partition_pb2.DeliveryRef(offset=d.record.offset, delivery_count=d.delivery_count)
            if drain or rng.random() < 0.7:
                settle = partition_pb2.Settle(group=group, member="m", refs=[ref])
                assert pair.apply(now, ack=settle).refs[0].error == ErrorCode.OK
                acked[group].add(d.record.offset)
            else:
                nack = partition_pb2.Nack(group=group, member="m", refs=[ref], delay_ms=500)
                assert pair.apply(now, nack=nack).error == ErrorCode.OK

    for _ in range(150):
        roll = rng.random()
        if roll < 0.3:
            records = [rec(b"r", rng.choice([0, 0, 1, 700, 3 * TTL_MS])) for _ in range(3)]
            result = pair.append(now, *records)
            for r, record in zip(result.records, records, strict=True):
                stamped[r.offset], own_ttl[r.offset] = now, record.ttl_ms
        elif roll < 0.4:
            result = pair.apply(now, append=partition_pb2.Append(values=[b"v", b"w"]))
            for offset in range(result.range.first_offset, result.range.first_offset + 2):
                stamped[offset] = now
        elif roll < 0.45:
            topic_ttl_ms = rng.choice([0, 500, TTL_MS])
            configure = partition_pb2.Configure(
                config=topic_config(
                    ttl_action=action, dead_letter_topic="t.dlq", ttl_ms=topic_ttl_ms
                )
            )
            assert pair.apply(now, configure=configure).error == ErrorCode.OK
        elif roll < 0.85:
            lease_and_settle(rng.choice(["g1", "g2"]))
        else:
            now += rng.choice([1, 100, 1000, SKEW_MS, TTL_MS])
    now += 10 * TTL_MS + LEASE_MS + SKEW_MS  # every ttl and lease is long over
    ended: dict[str, list[int]] = {"g1": [], "g2": []}
    for group in ("g1", "g2"):
        for _ in range(len(stamped) + 2):  # drain: ack what is live, end what expired
            lease_and_settle(group, drain=True)
            now += 600  # past the nack delay
            lag = pair.leader.lag(group)
            if lag is None or (lag.pending == 0 and lag.lag == 0):
                break
    dropped = pair.leader.expired_total
    for row in pair.leader.outbox(100_000):
        assert row.reason == "expired"
        ended[row.group].append(row.offset)
    for group in ("g1", "g2"):
        lag = pair.leader.lag(group)
        assert lag is None or (lag.pending == 0 and lag.lag == 0), lag
        assert not acked[group] & set(ended[group])
        if action == common_pb2.TTL_DEAD_LETTER:
            assert len(set(ended[group])) == len(ended[group])
            assert acked[group] | set(ended[group]) == set(stamped)
    if action == common_pb2.TTL_DEAD_LETTER:
        assert dropped == sum(map(len, ended.values()))
    else:
        assert dropped == 2 * len(stamped) - len(acked["g1"]) - len(acked["g2"])


@pytest.mark.parametrize("topic_ttl_ms", [0, TTL_MS])
def test_byte_budgeted_lease_skips_expired_records(
    new_store: Callable[[], PartitionStore], topic_ttl_ms: int
) -> None:
    """A follower reads slim rows (offset, count, size) when the topic has no ttl_ms: the
    records' own expiries still end the same records there as on the leader."""
    pair = Pair(new_store, ttl_ms=topic_ttl_ms)
    pair.append(T0_MS, rec(b"x" * 10, TTL_MS), rec(b"y" * 10, 100 * TTL_MS), rec(b"z" * 10, 0))
    lease = partition_pb2.Lease(group="g", member="m", max_records=10, max_bytes=15)
    result = pair.apply(EXPIRES_MS, lease=lease)  # Pair compares leader and follower dumps
    assert [d.record.offset for d in result.deliveries] == [1]
    expired = 2 if topic_ttl_ms else 1  # offset 2 takes the topic's ttl
    assert pair.follower.expired_total == pair.leader.expired_total == expired
