"""Clock skew (DESIGN.md § Time): wrong clocks neither delete early, nor grant a lease twice,
nor stamp the future.

Two tiers. The pure machine: commands stamped ahead (by up to ``clock_skew_ms``) and behind
(minutes) of a true timeline; an expired lease is granted again only ``clock_skew_ms`` after its
deadline, retention and dedup windows end that much late, time never goes backwards. The
simulated cluster (tests/sim/: three brokers, hub transport, manual clock, each broker's wall
clock offset at will): a leader days ahead deletes nothing and stamps nothing ahead, a new
leader a minute ahead does not re-grant a live lease, a clock going back minutes un-expires
nothing. Randomized tests print their seed; replay with ``RAFTQ_SEED=<seed>``.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from raftq.clock import Clock
from raftq.metadata_replica import MetadataReplica
from raftq.partitions.machine import PartitionMachine
from raftq.partitions.sqlite_store import SqliteStore
from raftq.partitions.store import MemoryStore, PartitionStore
from raftq.proto import common_pb2, metadata_pb2, partition_pb2
from raftq.proto.common_pb2 import ErrorCode
from raftq.replica import PartitionReplica
from raftq.transport.raft import RaftNode, RaftTimings
from raftq.transport.raft.clocks import QuorumClock
from raftq.transport.raft.driver import RaftDriver
from raftq.transport.raft.hub import Hub
from raftq.transport.raft.testing import RecordingTransport, transport_of
from tests.cluster import InProcessCluster
from tests.sim.cluster import STEP_S, TIMINGS, SimBroker, SimCluster, no_fsync

SKEW_MS = 2000
SECOND_MS = 1000
MINUTE_MS = 60 * SECOND_MS
DAY_MS = 24 * 60 * MINUTE_MS
T0_MS = 1_764_000_000_000  # 2025-11-24, any time will do
LEASE_MS = 30 * SECOND_MS
RETENTION_MS = 7 * DAY_MS
DEDUP_MS = 5 * MINUTE_MS


def seed_of(default: int | None = None) -> int:
    seed = int(
        os.environ.get(
            "RAFTQ_SEED",
            random.SystemRandom().randrange(2**32) if default is None else default,
        )
    )
    print(f"seed={seed} (replay: RAFTQ_SEED={seed} pytest tests/process/test_clock_skew.py)")
    return seed


def topic_config() -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        ordering=common_pb2.FIFO,
        lease_ms=LEASE_MS,
        max_deliveries=0,
        retention_ms=RETENTION_MS,
        max_record_bytes=1 << 20,
        dedup_window_ms=DEDUP_MS,
        nack_backoff_base_ms=1000,
        nack_backoff_max_ms=60_000,
    )


class Replica:
    """A PartitionMachine fed stamped commands at consecutive Raft indexes."""

    def __init__(self, store: PartitionStore) -> None:
        self.machine = PartitionMachine(store)
        self.index = 0

    def apply(
        self, now_ms: int, skew_ms: int = SKEW_MS, **op: object
    ) -> partition_pb2.CommandResult:
        self.index += 1
        command = partition_pb2.PartitionCommand(
            now_ms=now_ms,
            clock_skew_ms=skew_ms,
            **op,  # type: ignore[arg-type]
        )
        return self.machine.apply(command.SerializeToString(), self.index)

    def append(self, now_ms: int, *values: bytes, key: str = "") -> partition_pb2.CommandResult:
        records = [common_pb2.Record(value=v, idempotency_key=key) for v in values]
        return self.apply(now_ms, append=partition_pb2.Append(records=records))

    def lease(
        self, now_ms: int, member: str, lease_ms: int = 0, max_records: int = 100
    ) -> list[common_pb2.Delivery]:
        lease = partition_pb2.Lease(
            group="g", member=member, max_records=max_records, lease_ms=lease_ms
        )
        result = self.apply(now_ms, lease=lease)
        assert result.error == ErrorCode.OK, result
        return list(result.deliveries)

    def ack(self, now_ms: int, member: str, offset: int, count: int) -> partition_pb2.RefResult:
        ref = partition_pb2.DeliveryRef(offset=offset, delivery_count=count)
        result = self.apply(now_ms, ack=partition_pb2.Settle(group="g", member=member, refs=[ref]))
        assert result.error == ErrorCode.OK, result
        (outcome,) = result.refs
        return outcome

    def retain(self, now_ms: int) -> int:
        return self.apply(now_ms, retain=partition_pb2.Retain()).count


StoreMaker = Callable[[Path], PartitionStore]
STORES: dict[str, StoreMaker] = {
    "memory": lambda tmp: MemoryStore(),
    "sqlite": lambda tmp: SqliteStore(str(tmp / "p.sqlite")),
}


@pytest.fixture(params=sorted(STORES))
def replica(request: pytest.FixtureRequest, tmp_path: Path) -> Replica:
    r = Replica(STORES[request.param](tmp_path))
    assert r.apply(T0_MS, configure=partition_pb2.Configure(config=topic_config())).error == 0
    return r


# -- the quorum clock ------------------------------------------------------------------------


def test_the_quorum_clock_is_the_time_a_majority_of_voters_have_reached() -> None:
    now = {"wall": 1000.0, "mono": 50.0}
    clock = QuorumClock(lambda: now["wall"], lambda: now["mono"])
    peers = ["b", "c"]
    assert clock.quorum_ms([]) == 1_000_000  # a single voter: its own clock
    assert clock.quorum_ms(peers) is None  # 1 of 3 heard: no majority
    clock.heard("b", 1_000_000 + 8 * DAY_MS)  # b runs 8 days ahead
    assert clock.quorum_ms(peers) == 1_000_000  # {own, b}: the lower
    clock.heard("c", 1_000_000 - 5 * MINUTE_MS)  # c runs 5 minutes behind
    assert clock.quorum_ms(peers) == 1_000_000  # the median: neither moves it
    now["wall"], now["mono"] = 1010.0 + 8 * 86_400, 60.0  # 10 s on, our clock 8 days ahead
    clock.heard("b", 1_010_000)  # b put right
    # Readings now: own 8 days ahead, b true, c 5 minutes behind plus the 10 s since: b.
    assert clock.quorum_ms(peers) == 1_010_000
    now["mono"] = 61.0
    assert clock.quorum_ms(peers) == 1_011_000  # b's reading advances by monotonic time
    clock.heard("c", "not a number")  # ignored
    clock.forget("b")  # b's link closed
    assert clock.quorum_ms(peers) == 1_000_000 - 5 * MINUTE_MS + 11_000  # the lower of own, c
    assert clock.quorum_ms(["b", "c", "d", "e"]) is None  # 2 of 5 heard


def test_a_raft_node_stamps_its_clock_and_counts_voters_heard_on_live_links(
    tmp_path: Path,
) -> None:
    """Every message a RaftNode sends carries its wall clock; what peers' messages carry is
    what its quorum clock reads; a learner does not vote; a peer whose link closed no longer
    counts."""
    a, b, c = "10.0.2.1:7000", "10.0.2.2:7000", "10.0.2.3:7000"
    wall = {"s": 5000.0}
    node = RaftNode(
        a,
        [a, b, c],
        apply=lambda data, index: index,
        data_dir=tmp_path,
        name="g",
        auto_tick=False,
        transport_class=RecordingTransport,
        timings=RaftTimings.fast(),
        learners=[c],
        wall_clock=lambda: wall["s"],
    )
    try:
        transport = transport_of(node)
        transport.connect_all()
        vote = {"type": "request_vote", "term": 5, "last_log_index": 1, "last_log_term": 0}
        transport.deliver(b, {**vote, "wall_ms": 5_000_000 + 8 * DAY_MS})
        (answer,) = transport.take("response_vote", to=b)
        assert answer["wall_ms"] == 5_000_000  # its own clock, on a stock pysyncobj message
        assert node.quorum_clock_ms() == 5_000_000  # voters a and b: the lower
        transport.deliver(c, {"type": "next_node_idx", "wall_ms": 5_000_000 + 8 * DAY_MS})
        assert node.quorum_clock_ms() == 5_000_000  # c is a learner: no vote
        transport._onNodeDisconnected(transport.nodes[b])
        assert node.quorum_clock_ms() is None  # b's link closed: 1 of 2 voters heard
    finally:
        node.destroy()


# -- the pure machine -----------------------------------------------------------------------


def test_an_expired_lease_is_granted_again_only_the_skew_after_its_deadline(
    replica: Replica,
) -> None:
    replica.append(T0_MS, b"a")
    (delivery,) = replica.lease(T0_MS, "A")
    deadline = delivery.lease_deadline_ms
    assert deadline == T0_MS + LEASE_MS
    # The holder's rights end at the deadline it was given...
    assert replica.ack(deadline, "A", 0, 1).error == ErrorCode.LEASE_EXPIRED
    # ...but nobody else gets the record until the quorum clock's possible error has passed.
    assert replica.lease(deadline, "B") == []
    assert replica.lease(deadline + SKEW_MS - 1, "B") == []
    (again,) = replica.lease(deadline + SKEW_MS, "B")
    assert (again.record.offset, again.delivery_count) == (0, 2)


def test_extended_and_fresh_leases_get_the_same_grace(replica: Replica) -> None:
    replica.append(T0_MS, b"a", b"b")
    assert len(replica.lease(T0_MS, "A")) == 2
    extend = partition_pb2.ExtendLease(
        group="g",
        member="A",
        refs=[partition_pb2.DeliveryRef(offset=1, delivery_count=1)],
        lease_ms=LEASE_MS,
    )
    extended = replica.apply(T0_MS + 10 * SECOND_MS, extend_lease=extend)
    assert extended.count == 1
    # The answer names the deadline by partition time (the broker answers it as it is).
    assert extended.lease_deadline_ms == T0_MS + 10 * SECOND_MS + LEASE_MS
    at = T0_MS + LEASE_MS + SKEW_MS
    assert [d.record.offset for d in replica.lease(at, "B")] == [0]  # offset 1 still held
    assert replica.lease(T0_MS + 10 * SECOND_MS + LEASE_MS + SKEW_MS - 1, "B") == []
    assert [d.record.offset for d in replica.lease(at + 10 * SECOND_MS, "B")] == [1]


def test_retention_deletes_only_the_skew_after_the_window(replica: Replica) -> None:
    replica.append(T0_MS, b"a", b"b")
    # A record goes once it is older than retention_ms (and the skew) by the stamped clock.
    assert replica.retain(T0_MS + RETENTION_MS + SKEW_MS) == 0
    assert replica.machine.offsets().log_start == 0
    assert replica.retain(T0_MS + RETENTION_MS + SKEW_MS + 1) == 2
    assert replica.machine.offsets().log_start == 2


def test_dedup_remembers_a_key_the_skew_past_its_window(replica: Replica) -> None:
    (first,) = replica.append(T0_MS, b"a", key="k").records
    late = T0_MS + DEDUP_MS + SKEW_MS - 1
    replica.retain(late)
    (again,) = replica.append(late, b"a", key="k").records
    assert again.duplicate and again.offset == first.offset
    replica.retain(T0_MS + DEDUP_MS + SKEW_MS + 1)
    (new,) = replica.append(T0_MS + DEDUP_MS + SKEW_MS + 1, b"a", key="k").records
    assert not new.duplicate and new.offset == 1


def test_a_stamp_going_back_minutes_unexpires_nothing_and_stamps_nothing_earlier(
    replica: Replica,
) -> None:
    replica.append(T0_MS, b"a")
    (delivery,) = replica.lease(T0_MS, "A")
    expired_at = delivery.lease_deadline_ms + SKEW_MS
    assert len(replica.lease(expired_at, "B")) == 1  # A's lease ran out; B holds it now
    back = expired_at - 5 * MINUTE_MS
    # A stamp five minutes back: A's lease stays over, B's stays live, time stays put.
    assert replica.ack(back, "A", 0, 1).error == ErrorCode.LEASE_EXPIRED
    assert replica.lease(back, "C") == []
    replica.append(back, b"b")
    (b,) = replica.machine.fetch(1, 1)
    assert b.timestamp_ms == expired_at
    assert replica.machine.statistics()["clock_ms"] == expired_at
    assert replica.ack(back, "B", 0, 2).error == ErrorCode.OK


def test_a_stamped_skew_out_of_range_is_clamped(replica: Replica) -> None:
    replica.append(T0_MS, b"a")
    replica.lease(T0_MS, "A")
    after = T0_MS + LEASE_MS + 1
    assert replica.apply(
        after, skew_ms=-5, lease=partition_pb2.Lease(group="g", member="B", max_records=1)
    ).deliveries  # a negative skew counts as 0
    replica.append(after, b"b")
    replica.lease(after, "C")
    hour_ms = 60 * MINUTE_MS
    huge = partition_pb2.Lease(group="g", member="D", max_records=5)
    # An absurd skew counts as an hour.
    assert not replica.apply(after + LEASE_MS + hour_ms - 1, skew_ms=10**15, lease=huge).deliveries
    assert replica.apply(after + LEASE_MS + hour_ms, skew_ms=10**15, lease=huge).deliveries


def test_randomized_skewed_stamps_never_grant_twice_nor_delete_early(tmp_path: Path) -> None:
    """A true timeline; every command stamped anywhere from five minutes behind it to
    SKEW_MS ahead of it (what the quorum clock guarantees of a majority of sane clocks).
    Invariants, judged by the true clock: a record is granted again only after the deadline
    its last holder was given (unless acked); retention deletes a record only once its
    timestamp is RETENTION_MS old; no record is stamped more than SKEW_MS ahead."""
    seed = seed_of()
    rng = random.Random(seed)
    replica = Replica(SqliteStore(str(tmp_path / "p.sqlite")))
    config = topic_config()
    config.retention_ms = 20 * SECOND_MS
    replica.apply(T0_MS, configure=partition_pb2.Configure(config=config))
    true_ms = T0_MS
    held: dict[int, tuple[str, int, int]] = {}  # offset -> (member, delivery_count, deadline)
    stamps: dict[int, int] = {}  # offset -> timestamp_ms
    for step in range(1500):
        true_ms += rng.choice([0, 10, 100, 1000, 5000])
        ahead_ms = rng.choice([0, SKEW_MS, rng.randint(0, SKEW_MS)])
        stamp = true_ms + rng.choice([ahead_ms, ahead_ms, rng.randint(-5 * MINUTE_MS, 0)])
        roll = rng.random()
        where = f"seed={seed} step={step} true={true_ms} stamp={stamp}"
        if roll < 0.3:
            result = replica.append(stamp, *[b"v"] * rng.randint(1, 3))
            for r in result.records:
                (stored,) = replica.machine.fetch(r.offset, 1)
                assert stored.timestamp_ms <= true_ms + SKEW_MS, where
                stamps[r.offset] = stored.timestamp_ms
        elif roll < 0.7:
            member = rng.choice("ABC")
            lease_ms = rng.choice([1000, 5000, LEASE_MS])
            for d in replica.lease(stamp, member, lease_ms=lease_ms, max_records=3):
                offset = d.record.offset
                if offset in held:
                    _, _, deadline = held[offset]
                    assert true_ms >= deadline, f"{where}: offset {offset} granted twice"
                held[offset] = (member, d.delivery_count, d.lease_deadline_ms)
        elif roll < 0.9 and held:
            offset = rng.choice(sorted(held))
            member, count, _ = held[offset]
            if replica.ack(stamp, member, offset, count).error == ErrorCode.OK:
                del held[offset]
        else:
            before = replica.machine.offsets().log_start
            replica.retain(stamp)
            after = replica.machine.offsets().log_start
            for offset in range(before, after):
                assert true_ms >= stamps[offset] + config.retention_ms, (
                    f"{where}: offset {offset} deleted early"
                )
                held.pop(offset, None)


# -- the simulated cluster ------------------------------------------------------------------


class SkewedCluster:
    """Three simulated brokers (tests/sim/cluster.py), each with a wall clock offset from the
    hub's true clock at will; commands proposed on the leader and stepped to their outcome."""

    def __init__(self, root: Path, seed: int = 7) -> None:
        self.sim = SimCluster(seed, root, producers=0)
        self.granted_ms = 0

    def __enter__(self) -> SkewedCluster:
        self._contexts = [self.sim.hub.time(), no_fsync()]
        for context in self._contexts:
            context.__enter__()
        self.sim.start()
        self.sim.settle()
        config = topic_config()
        self.run(configure=partition_pb2.Configure(config=config))
        return self

    def __exit__(self, *exc: object) -> None:
        self.sim.close()
        for context in reversed(self._contexts):
            context.__exit__(None, None, None)

    def true_ms(self) -> int:
        return int(self.sim.hub.clock.now() * 1000)

    def leader(self) -> PartitionReplica:
        for _ in range(2000):
            leaders = [r for r in self.sim.live() if r.is_leader()]
            if len(leaders) == 1:
                return leaders[0]
            self.sim.step()
        raise AssertionError("no leader within 20 s of simulated time")

    def broker(self, replica: PartitionReplica) -> SimBroker:
        (broker,) = [b for b in self.sim.brokers if b.replica is replica]
        return broker

    def run(self, **op: object) -> partition_pb2.CommandResult:
        """Propose one command on the leader and step until it is applied there."""
        outcome: list[tuple[object, object]] = []
        command = partition_pb2.PartitionCommand(**op)  # type: ignore[arg-type]
        self.leader().propose_async(command, lambda result, error: outcome.append((result, error)))
        for _ in range(2000):
            if outcome:
                break
            self.sim.step()
        (result, error), *_ = outcome
        assert error is None, error
        assert isinstance(result, partition_pb2.CommandResult)
        assert result.error == ErrorCode.OK, result
        return result

    def try_run(
        self, kind: str, rng: random.Random, held: dict[int, tuple[str, int, int]]
    ) -> tuple[str, partition_pb2.CommandResult, str] | None:
        """One random command of ``kind`` (an Ack of one of ``held``: offset -> (member,
        delivery_count, deadline)) on the current leader: (kind, result, member), or None when
        it failed or its outcome is unknown (a crash or leader change meanwhile).
        ``granted_ms`` is the true time its outcome arrived."""
        leaders = [r for r in self.sim.live() if r.is_leader()]
        if len(leaders) != 1:
            return None
        member = ""
        if kind == "append":
            records = [common_pb2.Record(value=b"v") for _ in range(rng.randint(1, 3))]
            op: dict[str, Any] = {"append": partition_pb2.Append(records=records)}
        elif kind == "lease":
            member = rng.choice("ABC")
            lease_ms = rng.choice([1000, 3000])
            op = {
                "lease": partition_pb2.Lease(
                    group="g", member=member, max_records=3, lease_ms=lease_ms
                )
            }
        elif kind == "ack" and held:
            offset, (member, count, _) = rng.choice(sorted(held.items()))
            ref = partition_pb2.DeliveryRef(offset=offset, delivery_count=count)
            op = {"ack": partition_pb2.Settle(group="g", member=member, refs=[ref])}
        else:
            op = {"retain": partition_pb2.Retain()}
            kind = "retain"
        outcome: list[tuple[object, object]] = []
        leaders[0].propose_async(
            partition_pb2.PartitionCommand(**op),
            lambda result, error: outcome.append((result, error)),
        )
        for _ in range(300):
            if outcome:
                break
            self.sim.step()
        if not outcome or outcome[0][1] is not None:
            return None
        result = outcome[0][0]
        assert isinstance(result, partition_pb2.CommandResult)
        if result.error != ErrorCode.OK:
            return None
        self.granted_ms = self.true_ms()
        return kind, result, member

    def lease(self, member: str, lease_ms: int = 0) -> list[common_pb2.Delivery]:
        lease = partition_pb2.Lease(group="g", member=member, max_records=100, lease_ms=lease_ms)
        return list(self.run(lease=lease).deliveries)

    def append(self, count: int) -> list[int]:
        records = [common_pb2.Record(value=b"v%d" % i) for i in range(count)]
        result = self.run(append=partition_pb2.Append(records=records))
        return [r.offset for r in result.records]

    def stamps_ms(self) -> list[int]:
        return [r.timestamp_ms for r in self.leader().fetch(0, 100_000, 0)]

    def make_leader(self, broker: SimBroker) -> None:
        assert broker.replica is not None
        target = broker.replica
        for _ in range(50):
            if target.is_leader():
                return
            self.leader().node.transfer_leadership(broker.addr)
            for _ in range(100):
                self.sim.step()
                if target.is_leader():
                    return
        raise AssertionError(f"{broker.addr} did not become leader")


@pytest.mark.parametrize("who", ["leader", "follower"])
def test_a_broker_eight_days_ahead_deletes_nothing_and_stamps_nothing_ahead(
    tmp_path: Path, who: str
) -> None:
    """The reported bug: a Retain stamped by a leader 8 days ahead deleted every record of a
    7-day-retention topic, and records were stamped 8 days ahead from then on."""
    with SkewedCluster(tmp_path) as c:
        c.append(10)
        leader = c.leader()
        ahead = (
            c.broker(leader)
            if who == "leader"
            else next(b for b in c.sim.brokers if b.replica is not leader)
        )
        ahead.clock_offset_s = 8 * DAY_MS / 1000
        for _ in range(20):  # its messages now carry its new clock
            c.sim.step()
        assert c.run(retain=partition_pb2.Retain()).count == 0
        assert c.leader().offsets().log_start == 0
        c.append(5)
        assert max(c.stamps_ms()) <= c.true_ms() + SKEW_MS
        ahead.clock_offset_s = 0.0  # corrected: nothing to recover from
        c.append(1)
        stamps = c.stamps_ms()
        assert stamps == sorted(stamps) and stamps[-1] <= c.true_ms() + SKEW_MS
        (delivery, *_) = c.lease("A")
        assert delivery.lease_deadline_ms <= c.true_ms() + SKEW_MS + LEASE_MS


def test_a_new_leader_a_minute_ahead_does_not_grant_a_live_lease_again(tmp_path: Path) -> None:
    """The reported double grant: a new leader whose clock ran 60 s ahead re-leased a record
    inside member A's 30 s lease to member B."""
    with SkewedCluster(tmp_path) as c:
        c.append(1)
        (held,) = c.lease("A", lease_ms=LEASE_MS)
        deadline = held.lease_deadline_ms
        assert deadline <= c.true_ms() + LEASE_MS + SKEW_MS
        new = next(b for b in c.sim.brokers if b.replica is not c.leader())
        new.clock_offset_s = 60.0
        c.make_leader(new)
        while not (again := c.lease("B")):
            assert c.true_ms() < deadline + 2 * SKEW_MS + 2 * SECOND_MS, "the record is stuck"
            for _ in range(10):
                c.sim.step()
        assert c.true_ms() >= deadline, "granted again inside A's lease"
        assert [(d.record.offset, d.delivery_count) for d in again] == [(0, 2)]


def test_a_clock_put_right_while_another_jumps_grants_no_live_lease_again(tmp_path: Path) -> None:
    """Broker simulation seed 777's case, replayed: follower f's clock runs an hour ahead, then
    is put right while f stalls (its links stay open, nothing comes out: the leader keeps its
    last reading), and follower g's clock jumps an hour ahead. Two of the leader's three
    readings are an hour ahead; partition time must still not pass A's lease deadline early
    (the quorum clock alone moved it an hour: the lease was granted again at once)."""
    with SkewedCluster(tmp_path) as c:
        c.append(1)
        leader = c.broker(c.leader())
        f, g = [b for b in c.sim.brokers if b is not leader]
        f.clock_offset_s = 3600.0
        for _ in range(100):  # a second: every clock heard anew, one wrong
            c.sim.step()
        (held,) = c.lease("A", lease_ms=LEASE_MS)
        assert held.lease_deadline_ms <= c.true_ms() + LEASE_MS + SKEW_MS
        stalled, f.driver = f.driver, None
        f.clock_offset_s, g.clock_offset_s = 0.0, 3600.0
        for _ in range(100):  # g heard anew; f's link open and silent (dead after 5 s)
            c.sim.step()
        quorum_ms = c.leader().node.quorum_clock_ms()
        assert quorum_ms is not None and quorum_ms > c.true_ms() + 3000 * SECOND_MS  # the hole
        assert c.leader().now_ms() <= c.true_ms() + SKEW_MS
        assert c.lease("B") == [], "granted again inside A's lease"
        c.append(1)
        stamps = c.stamps_ms()
        assert stamps == sorted(stamps) and stamps[-1] <= c.true_ms() + SKEW_MS
        (fresh,) = c.lease("B")  # the record just appended, at a deadline the pace allows
        assert (fresh.record.offset, fresh.delivery_count) == (1, 1)
        assert fresh.lease_deadline_ms <= c.true_ms() + SKEW_MS + LEASE_MS
        f.driver = stalled
        g.clock_offset_s = 0.0
        while not (again := c.lease("B")):
            assert c.true_ms() < held.lease_deadline_ms + 2 * SKEW_MS + 2 * SECOND_MS, "stuck"
            for _ in range(10):
                c.sim.step()
        assert c.true_ms() >= held.lease_deadline_ms
        assert [(d.record.offset, d.delivery_count) for d in again] == [(0, 2)]


def test_a_leader_clock_going_back_minutes_neither_unexpires_nor_holds_back_a_lease(
    tmp_path: Path,
) -> None:
    with SkewedCluster(tmp_path) as c:
        c.append(2)
        (first, second) = c.lease("A", lease_ms=5 * SECOND_MS)
        ref = partition_pb2.DeliveryRef(offset=second.record.offset, delivery_count=1)
        assert c.run(ack=partition_pb2.Settle(group="g", member="A", refs=[ref])).count == 1
        c.broker(c.leader()).clock_offset_s = -5 * 60.0
        while not (again := c.lease("B")):
            assert c.true_ms() < first.lease_deadline_ms + 2 * SKEW_MS + 2 * SECOND_MS, "stuck"
            for _ in range(10):
                c.sim.step()
        assert c.true_ms() >= first.lease_deadline_ms
        assert [(d.record.offset, d.delivery_count) for d in again] == [(0, 2)]  # 1 stays acked
        c.append(1)
        stamps = c.stamps_ms()
        assert stamps == sorted(stamps) and stamps[-1] >= c.true_ms() - SECOND_MS


def test_randomized_cluster_with_wild_clocks_never_grants_twice_nor_deletes_early(
    tmp_path: Path,
) -> None:
    """Seeded: every broker's clock within a second of true time but one (any, the leader
    too), from five minutes behind to eight days ahead, another at once now and then; leadership
    moves, brokers crash and restart, members lease, ack and retain meanwhile. Judged by the
    true clock: no record granted again before its last holder's deadline, none deleted before
    its timestamp is retention_ms old, none stamped more than SKEW_MS ahead."""
    seed = seed_of(20261125)
    rng = random.Random(seed)
    retention_ms = 10 * SECOND_MS
    held: dict[int, tuple[str, int, int]] = {}  # offset -> (member, delivery_count, deadline)
    stamps: dict[int, int] = {}
    with SkewedCluster(tmp_path, seed) as c:
        config = topic_config()
        config.retention_ms = retention_ms
        c.run(configure=partition_pb2.Configure(config=config))
        log_start = 0
        for action in range(120):
            where = f"seed={seed} action={action} true={c.true_ms()}"
            if action % 15 == 0:  # another broker's clock goes wild, the others are sane
                for broker in c.sim.brokers:
                    broker.clock_offset_s = rng.uniform(-1.0, 1.0)
                rng.choice(c.sim.brokers).clock_offset_s = rng.choice([-300.0, 60.0, 8 * 86_400.0])
                # No wait: until a leader hears a clock put right again (within a follower's ack
                # refresh of an idle group, leader_fallback_s / 4 = 0.5 s here), it and the new
                # wild one are a wrong majority to the leader; its pace holds partition time.
            roll = rng.random()
            down = [b for b in c.sim.brokers if not b.up]
            if roll < 0.08:
                if down:
                    down[0].restart()
                else:
                    rng.choice(c.sim.brokers).crash(power_loss=False)
            elif roll < 0.15 and not down:
                c.make_leader(rng.choice(c.sim.brokers))
            kinds = ["append", "lease", "lease", "ack", "retain"]
            outcome = c.try_run(rng.choice(kinds), rng, held)
            for _ in range(rng.choice([1, 10, 50, 150])):
                c.sim.step()
            if outcome is None:
                continue
            kind, result, member = outcome
            true_ms = c.true_ms()
            leader = c.leader()
            if kind == "append":
                for r in result.records:
                    (stored,) = leader.fetch(r.offset, 1, 0)
                    assert stored.timestamp_ms <= true_ms + SKEW_MS, where
                    stamps[r.offset] = stored.timestamp_ms
            elif kind == "lease":
                for d in result.deliveries:
                    offset = d.record.offset
                    if offset in held:
                        deadline = held[offset][2]
                        assert c.granted_ms >= deadline, f"{where}: offset {offset} granted twice"
                    held[offset] = (member, d.delivery_count, d.lease_deadline_ms)
            elif kind == "ack":
                for ref in result.refs:
                    if ref.error == ErrorCode.OK:
                        held.pop(ref.offset, None)
            now_start = leader.offsets().log_start
            for offset in range(log_start, now_start):
                assert true_ms >= stamps[offset] + retention_ms, f"{where}: {offset} deleted early"
                held.pop(offset, None)
            log_start = max(log_start, now_start)
        c.sim.settle()
        c.sim.check_stores()


def test_a_lone_broker_whose_clock_jumps_an_hour_grants_no_live_lease_again(
    tmp_path: Path,
) -> None:
    """A real broker (gRPC, raft over the TCP mux, SQLite, its backend) alone, its wall clock
    jumping an hour ahead: a single voter's quorum clock is its own clock, and partition time
    followed it at once, so an expired lease was granted again inside its deadline. The
    leader's pace holds partition time within half the skew of its monotonic clock: the lease
    runs out by the true clock first."""
    offset_s = [0.0]
    clock = Clock(wall_s=lambda: time.time() + offset_s[0])
    lease_ms = 5 * SECOND_MS

    def lease(member: str) -> list[common_pb2.Delivery]:
        command = partition_pb2.PartitionCommand(
            lease=partition_pb2.Lease(group="g", member=member, max_records=1, lease_ms=lease_ms)
        )
        return list(leader.propose(command).deliveries)

    with InProcessCluster(tmp_path, 1, clock=clock) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic("jumps", partitions=1, replication_factor=1)
        cluster.wait_leaders("jumps")
        ((_key, leader),) = [
            (key, r) for key, r in cluster.broker(1).replicas.snapshot() if key[0] == "jumps"
        ]
        leader.send([common_pb2.Record(value=b"v")])
        (held,) = lease("A")
        offset_s[0] = 3600.0
        assert leader.now_ms() <= time.time() * 1000 + SKEW_MS
        assert lease("B") == [], "granted again inside A's lease"
        give_up = time.monotonic() + 30.0
        while not (again := lease("B")):
            assert time.monotonic() < give_up, "the record is stuck"
            time.sleep(0.05)
        assert time.time() * 1000 >= held.lease_deadline_ms
        assert [(d.record.offset, d.delivery_count) for d in again] == [(0, 2)]
        assert again[0].lease_deadline_ms <= time.time() * 1000 + SKEW_MS + lease_ms


@pytest.mark.parametrize("wrong", ["leader", "two followers"])
def test_metadata_time_is_the_quorum_clock_and_expiry_waits_the_skew(
    tmp_path: Path, wrong: str
) -> None:
    """The metadata group stamps its quorum clock too, paced like a partition's: a metadata
    leader 8 days ahead, or a follower 8 days ahead put right while it stalls (the leader keeps
    its last reading) as the other jumps 8 days ahead, neither dates what it registers 8 days
    ahead nor expires empty groups early (expiry judged at the stamped time less
    max_clock_skew_ms). With the two followers the quorum clock alone read 8 days ahead."""
    hub = Hub(11)
    addrs = [f"10.0.1.{i + 1}:7000" for i in range(3)]
    offsets_s = dict.fromkeys(addrs, 0.0)
    replicas: list[MetadataReplica] = []
    drivers: list[RaftDriver] = []

    def step(n: int = 1) -> None:
        for _ in range(n):
            hub.clock.advance(STEP_S)
            for driver in drivers:
                driver.run_once(0.0)

    def true_ms() -> int:
        return int(hub.clock.now() * 1000)

    def skewed(addr: str) -> Callable[[], float]:
        return lambda: hub.clock.now() + offsets_s[addr]

    with hub.time(), no_fsync():
        try:
            for addr in addrs:
                driver = RaftDriver(hub.endpoint(addr), tick_interval_s=0.02, clock=hub.clock)
                drivers.append(driver)
                replicas.append(
                    MetadataReplica(
                        data_dir=tmp_path / addr.replace(":", "_"),
                        self_addr=addr,
                        voters=addrs,
                        driver=driver,
                        timings=TIMINGS,
                        clock=skewed(addr),
                        max_clock_skew_ms=SKEW_MS,
                    )
                )
            while not any(r.is_leader() for r in replicas):
                step()
            (leader,) = [r for r in replicas if r.is_leader()]
            ahead = (
                [leader.self_addr]
                if wrong == "leader"
                else [a for a in addrs if a != leader.self_addr]
            )
            offsets_s[ahead[0]] = 8 * 86_400.0
            step(100)  # a second: every clock heard anew
            if wrong == "two followers":
                drivers.remove(drivers[addrs.index(ahead[0])])  # it stalls, links open
                offsets_s[ahead[0]], offsets_s[ahead[1]] = 0.0, 8 * 86_400.0
                step(100)
                assert (leader.node.quorum_clock_ms() or 0) > true_ms() + DAY_MS
            assert true_ms() - SECOND_MS < leader.now_ms() <= true_ms() + SKEW_MS
            assert leader.expiry_now_ms() == leader.now_ms() - SKEW_MS
            outcome: list[object] = []
            register = metadata_pb2.MetaCommand(
                register_broker=metadata_pb2.RegisterBroker(
                    broker_id=1, client_addr="10.0.1.1:9000", raft_addr=addrs[0]
                )
            )
            worker = threading.Thread(
                target=lambda: outcome.append(leader.propose(register, timeout_s=60.0))
            )
            worker.start()
            while worker.is_alive():
                step()
            worker.join()
            assert outcome, "the proposal failed"
            registered_ms = leader.table.brokers[1].registered_ms
            assert abs(registered_ms - true_ms()) < 2 * SECOND_MS
            assert leader.table.clock_ms <= true_ms() + SKEW_MS
        finally:
            for replica in replicas:
                replica.close()
