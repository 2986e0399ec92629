"""Partition replicas: PartitionMachine + SQLite + RaftNode, three brokers in one process.

Each "broker" is a MuxEndpoint on its own loopback address (127.0.0.1/2/3, kernel-chosen port)
with a RaftDriver thread; every replica registers with its broker's driver, as in production.
Every wait polls a condition against a deadline (tests/helpers.wait_until).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftq.proposer import Proposer
from raftq.proto import common_pb2, errors, partition_pb2
from raftq.replica import PartitionReplica
from raftq.transport.raft import RaftTimings
from raftq.transport.raft.driver import RaftDriver
from raftq.transport.raft.mux import MuxConfig, MuxEndpoint
from tests.helpers import wait_until

SECRET = b"raftq-replica-test-secret-0123456789"
FAST_MUX = MuxConfig(ping_interval_s=0.1, dead_after_s=0.6, reconnect_max_s=0.2)
TIMINGS = RaftTimings.fast(compaction_min_entries=40, compaction_min_time_s=0.05)


def rec(value: str, key: str = "") -> common_pb2.Record:
    return common_pb2.Record(value=value.encode(), key=key.encode())


class Broker:
    def __init__(self, host: str) -> None:
        self.endpoint = MuxEndpoint(f"{host}:0", SECRET, config=FAST_MUX)
        self.address = self.endpoint.address
        self.driver = RaftDriver(self.endpoint, tick_interval_s=0.02, name=f"driver-{host}")
        self.driver.start()
        self.up = True

    def stop(self) -> None:
        if self.up:
            self.up = False
            self.driver.stop()
            self.endpoint.close()


class Cluster:
    """Three brokers, one partition (topic "t", partition 0), one replica on each."""

    def __init__(self, root: Path, *, timings: RaftTimings = TIMINGS, **kw: Any) -> None:
        self.root = root
        self.timings = timings
        self.kw = kw
        self.brokers = [Broker(f"127.0.0.{i}") for i in (1, 2, 3)]
        self.addrs = [b.address for b in self.brokers]
        self.replicas: dict[str, PartitionReplica] = {}
        for broker in self.brokers:
            self.start(broker)

    def start(self, broker: Broker) -> PartitionReplica:
        replica = PartitionReplica(
            "t",
            0,
            7,
            data_dir=self.root / broker.address.replace(":", "_"),
            self_addr=broker.address,
            peers=self.addrs,
            driver=broker.driver,
            timings=self.timings,
            synchronous="NORMAL",
            **self.kw,
        )
        self.replicas[broker.address] = replica
        return replica

    def live(self) -> list[PartitionReplica]:
        return [r for r in self.replicas.values() if not r._closed]

    def leader(self, timeout_s: float = 10.0) -> PartitionReplica:
        def one() -> PartitionReplica | None:
            leaders = [r for r in self.live() if r.is_leader()]
            return leaders[0] if len(leaders) == 1 else None

        found = wait_until(one, timeout_s, "exactly one leader")
        assert found is not None
        return found

    def send(self, values: list[str], producer_id: str = "", sequence: int = 0) -> list[int]:
        """Send one batch to whoever leads, retrying idempotently; the offsets."""
        last: Exception | None = None
        for _attempt in range(50):
            try:
                results = self.leader().send(
                    [rec(v) for v in values], producer_id, sequence, timeout_s=3.0
                )
                return [r.offset for r in results]
            except (errors.NotLeader, errors.Timeout, errors.Unavailable) as exc:
                last = exc
        raise AssertionError(f"could not send {values}: {last}")

    def converged(self, timeout_s: float = 10.0) -> None:
        def same() -> bool:
            live = self.live()
            applied = {r.node.applied_index for r in live}
            commits = {r.node.commit_index for r in live}
            return len(applied) == 1 and applied == commits

        wait_until(same, timeout_s, "every live replica applied the same raft index")
        dumps = [r.dump() for r in self.live()]
        assert all(d == dumps[0] for d in dumps[1:]), "replica stores differ at equal index"

    def converged_follower(self) -> tuple[PartitionReplica, PartitionReplica, Broker]:
        """Once converged: the leader, a follower, and the follower's broker."""
        self.converged()
        leader = self.leader()
        follower = next(r for r in self.live() if r is not leader)
        broker = next(b for b in self.brokers if b.address == follower.node.self_addr)
        return leader, follower, broker

    def close(self) -> None:
        for replica in self.replicas.values():
            replica.close()
        for broker in self.brokers:
            broker.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Any]:
    made: list[Cluster] = []

    def make(**kw: Any) -> Cluster:
        c = Cluster(tmp_path, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def values_in_log(replica: PartitionReplica) -> list[tuple[int, str]]:
    end = replica.offsets().end
    out = []
    offset = 0
    while offset < end:
        batch = replica.fetch(offset, 1000, 0)
        if not batch:
            break
        out += [(r.offset, r.record.value.decode()) for r in batch]
        offset = batch[-1].offset + 1
    return out


def assert_dense(replica: PartitionReplica) -> list[str]:
    log = values_in_log(replica)
    assert [o for o, _ in log] == list(range(len(log))), "offsets are not dense"
    return [v for _, v in log]


# ------------------------------------------------------------------------------ replication
def test_sends_replicate_and_every_store_ends_equal(cluster: Any) -> None:
    c = cluster()
    sent: list[str] = []
    for i in range(30):
        values = [f"r{i}-{j}" for j in range(1 + i % 3)]
        offsets = c.send(values, producer_id="p1", sequence=i)
        assert offsets == list(range(len(sent), len(sent) + len(values)))
        sent += values
    c.converged()
    for replica in c.live():
        assert assert_dense(replica) == sent
        assert replica.offsets().end == len(sent)
    stats = c.leader().statistics()
    assert stats["healthy"] and stats["records_in"] == len(sent)
    assert stats["raft_state"] == "leader" and stats["raft_leader"] == c.leader().node.self_addr


def test_follower_answers_not_leader_with_a_hint(cluster: Any) -> None:
    c = cluster()
    leader = c.leader()
    c.send(["x"])
    follower = next(r for r in c.live() if r is not leader)
    wait_until(lambda: follower.leader() == leader.node.self_addr, 5, "follower knows leader")
    with pytest.raises(errors.NotLeader) as info:
        follower.send([rec("y")])
    assert info.value.leader_hint == leader.node.self_addr
    with pytest.raises(errors.NotLeader):
        follower.propose(partition_pb2.PartitionCommand(retain=partition_pb2.Retain()))


def test_bad_records_are_refused_before_the_log(cluster: Any) -> None:
    c = cluster()
    leader = c.leader()
    before = leader.node.commit_index
    with pytest.raises(errors.RecordTooLarge):
        leader.send([rec("x" * ((1 << 20) + 1))])
    with pytest.raises(errors.InvalidArgument):
        leader.send([])
    with pytest.raises(errors.InvalidArgument):
        leader.send([common_pb2.Record(value=b"v", deliver_at_ms=-1)])
    assert leader.node.commit_index == before


def test_idempotent_retry_and_sequence_gap(cluster: Any) -> None:
    c = cluster()
    leader = c.leader()
    first = leader.send([rec("a"), rec("b")], "prod", 0)
    again = leader.send([rec("a"), rec("b")], "prod", 0)  # a retry after "outcome unknown"
    assert [r.offset for r in again] == [r.offset for r in first]
    assert all(r.duplicate for r in again)
    with pytest.raises(errors.OutOfOrderSequence):
        leader.send([rec("c")], "prod", 5)
    assert leader.offsets().end == 2


def test_propose_stamps_now_ms_from_the_injected_clock(tmp_path: Path, cluster: Any) -> None:
    """The replicas' injected clock (here about three years behind the host's) is what the
    stamps carry: the quorum clock of three replicas that share it, which runs behind it by
    the transit of the followers' last messages (milliseconds)."""

    def clock() -> float:
        return time.time() - 10**8

    c = cluster(clock=clock)
    leader = c.leader()
    before_ms = int(clock() * 1000)
    leader.send([rec("v")])
    (stored,) = leader.fetch(0, 10)
    result = leader.propose(
        partition_pb2.PartitionCommand(
            lease=partition_pb2.Lease(group="g", member="m", max_records=5)
        )
    )
    after_ms = int(clock() * 1000)
    assert before_ms - 1000 <= stored.timestamp_ms <= after_ms
    assert [d.record.offset for d in result.deliveries] == [0]
    deadline = result.deliveries[0].lease_deadline_ms
    assert stored.timestamp_ms + 30_000 <= deadline <= after_ms + 30_000
    assert leader.statistics()["records_leased"] == 1


def test_a_lease_proposed_behind_an_append_in_flight_takes_its_records(cluster: Any) -> None:
    """While an Append is in flight on the leader, a Lease is not skipped as idle
    (``might_have_ready``): it lands behind the Append in the log and leases its records, so
    a long poll woken by an earlier apply also takes the records that follow it instead of
    waiting for their apply and another round (issue 16). The followers' drivers are stopped
    so the Append stays in flight while the test looks."""
    c = cluster()
    leader = c.leader()
    followers = [b for b in c.brokers if b.address != leader.node.self_addr]
    assert not leader.might_have_ready("g")  # an empty log: a Lease would take nothing
    applied, log_len = leader.node.applied_index, leader.node.status()["log_len"]
    for broker in followers:
        broker.driver.stop()
    sent: list[Any] = []
    sender = threading.Thread(target=lambda: sent.append(leader.send([rec("x")], timeout_s=30)))
    sender.start()
    wait_until(lambda: leader.node.status()["log_len"] > log_len, 10, "the Append in the log")
    assert leader.node.applied_index == applied  # the Append is in flight, not applied
    assert leader.might_have_ready("g")  # so a long poll's Lease is proposed, not skipped
    leased: list[partition_pb2.CommandResult] = []
    lease = partition_pb2.PartitionCommand(
        lease=partition_pb2.Lease(group="g", member="m", max_records=5)
    )
    leaser = threading.Thread(target=lambda: leased.append(leader.propose(lease, 30)))
    leaser.start()
    wait_until(lambda: leader.node.status()["log_len"] >= log_len + 2, 10, "the Lease in the log")
    for broker in followers:
        broker.driver.start()
    sender.join(30)
    leaser.join(30)
    assert [r.offset for r in sent[0]] == [0]
    assert [d.record.offset for d in leased[0].deliveries] == [0]


# ------------------------------------------------------------------------------ group commit
def test_concurrent_sends_are_coalesced_into_fewer_entries(cluster: Any) -> None:
    c = cluster()
    leader = c.leader()
    results: dict[tuple[int, int], list[int]] = {}
    failures: list[BaseException] = []

    def producer(p: int) -> None:
        try:
            for s in range(15):
                out = leader.send([rec(f"p{p}-{s}-{k}") for k in range(3)], f"p{p}", s)
                results[p, s] = [r.offset for r in out]
        except BaseException as exc:  # reported below
            failures.append(exc)

    entries_before = leader.proposer.statistics()["entries"]
    threads = [threading.Thread(target=producer, args=(p,)) for p in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    stats = leader.proposer.statistics()
    sends, entries = 16 * 15, stats["entries"] - entries_before
    assert entries < sends / 2, f"{sends} sends took {entries} entries: no coalescing"
    assert stats["batched_sends"] > 0 and stats["max_sends_per_entry"] > 1
    offsets = sorted(o for out in results.values() for o in out)
    assert offsets == list(range(16 * 15 * 3))
    for p in range(16):  # one producer's batches are in sequence order in the log
        firsts = [results[p, s][0] for s in range(15)]
        assert firsts == sorted(firsts)
    c.converged()
    log = dict(values_in_log(c.live()[0]))
    for (p, s), out in results.items():
        assert [log[o] for o in out] == [f"p{p}-{s}-{k}" for k in range(3)]


# ------------------------------------------------------------------------------ failures
def test_leader_failover_then_sends_resume(cluster: Any) -> None:
    c = cluster()
    acked = []
    for i in range(10):
        c.send([f"before-{i}"], "pf", i)
        acked.append(f"before-{i}")
    old = c.leader()
    old_broker = next(b for b in c.brokers if b.address == old.node.self_addr)
    old.close()
    old_broker.stop()
    new = c.leader()
    assert new is not old
    for i in range(10, 20):
        c.send([f"after-{i}"], "pf", i)
        acked.append(f"after-{i}")
    c.converged()
    for replica in c.live():
        assert assert_dense(replica) == acked


def test_restarted_replica_catches_up_without_applying_twice(cluster: Any) -> None:
    c = cluster()
    for i in range(20):
        c.send([f"a{i}"], "pr", i)
    leader, victim, broker = c.converged_follower()
    victim.close()
    for i in range(20, 120):  # past compaction_min_entries: the leader snapshots
        c.send([f"a{i}"], "pr", i)
    restarted = c.start(broker)
    wait_until(lambda: restarted.node.applied_index >= leader.node.commit_index, 10, "catch-up")
    c.converged()
    values = assert_dense(restarted)
    assert values == [f"a{i}" for i in range(120)], "a record was lost or applied twice"
    # and once more, from its own files only (journal tail replayed, skipped by index)
    restarted.close()
    again = c.start(broker)
    c.converged()
    assert assert_dense(again) == [f"a{i}" for i in range(120)]


def test_sqlite_file_that_lost_its_last_commits_is_rebuilt_from_the_raft_journal(
    cluster: Any,
) -> None:
    """storage.synchronous=NORMAL: SQLite does not fsync each commit, so a power loss can
    take its last commits (WAL mode keeps the file consistent, only behind). The fsync'd Raft
    journal still holds those entries: a restart replays them, each exactly once."""
    c = cluster()
    for i in range(10):
        c.send([f"a{i}"], "pr", i)
    leader, victim, broker = c.converged_follower()
    db = Path(victim.store.path)
    victim.close()
    behind = db.read_bytes()  # the file as the disk kept it: 10 records applied
    again = c.start(broker)
    for i in range(10, 30):
        c.send([f"a{i}"], "pr", i)
    c.converged()
    assert again.node.applied_index > 10
    again.close()
    for stale in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        stale.unlink(missing_ok=True)
    db.write_bytes(behind)  # power loss: the commits after the copy never reached the disk
    restarted = c.start(broker)
    c.converged()
    assert assert_dense(restarted) == [f"a{i}" for i in range(30)], "lost or applied twice"
    assert restarted.producer_state("pr") == leader.producer_state("pr")


def test_failed_machine_stops_proposing_and_hands_leadership_over(cluster: Any) -> None:
    c = cluster()
    c.send(["ok"])
    leader = c.leader()
    real = leader.store.insert_records

    def broken(rows: Any) -> None:
        raise OSError("disk I/O error (injected)")

    leader.store.insert_records = broken
    with pytest.raises((errors.Unavailable, errors.NotLeader, errors.Timeout)):
        leader.send([rec("boom")], timeout_s=3)
    stats = leader.statistics()
    assert not stats["healthy"] and "injected" in stats["failed"]
    with pytest.raises((errors.Unavailable, errors.NotLeader)):
        leader.send([rec("refused")])
    wait_until(lambda: not leader.is_leader(), 10, "the failed replica to hand leadership over")
    leader.store.insert_records = real
    offsets = c.send(["after"])
    assert offsets == [2]  # "boom" was committed by the healthy majority at offset 1
    healthy = [r for r in c.live() if r is not leader]
    wait_until(lambda: all(r.offsets().end == 3 for r in healthy), 5, "healthy replicas")
    assert assert_dense(healthy[0]) == ["ok", "boom", "after"]


# ------------------------------------------------------------------------------ proposer unit
class FakeRaft:
    """A propose function that holds entries until the test applies them."""

    def __init__(self) -> None:
        self.leader = True
        self.entries: list[tuple[partition_pb2.PartitionCommand, Any]] = []

    def propose(self, data: bytes, callback: Any) -> None:
        self.entries.append((partition_pb2.PartitionCommand.FromString(data), callback))

    def apply_next(self) -> partition_pb2.PartitionCommand:
        cmd, callback = self.entries.pop(0)
        appends = [cmd.append] if cmd.HasField("append") else list(cmd.append_batch.appends)
        results = []
        for i, append in enumerate(appends):
            one = partition_pb2.CommandResult()
            if append.producer_id == "bad":
                one.error = common_pb2.OUT_OF_ORDER_SEQUENCE
            else:
                for _ in append.records:
                    one.records.add(offset=i)
            results.append(one)
        if len(results) == 1:
            callback(results[0], None)
        else:
            callback(partition_pb2.CommandResult(batch_results=results), None)
        return cmd


def stamp_42(command: partition_pb2.PartitionCommand) -> None:
    command.now_ms = 42


def make_proposer(raft: FakeRaft, **kw: Any) -> Proposer:
    return Proposer(
        raft.propose,
        stamp=stamp_42,
        clock_s=lambda: 0.0,
        is_leader=lambda: raft.leader,
        leader_hint=lambda: "10.0.0.9:1",
        **kw,
    )


def test_proposer_batches_while_entries_are_in_flight() -> None:
    raft = FakeRaft()
    p = make_proposer(raft, max_inflight_entries=1)
    got: list[Any] = []
    for i in range(5):
        p.submit(
            partition_pb2.Append(records=[rec(f"v{i}")], producer_id="bad" if i == 3 else ""),
            lambda r, e: got.append((r, e)),
        )
    assert len(raft.entries) == 1  # the first went alone; four wait for it
    first = raft.apply_next()
    assert first.now_ms == 42 and first.HasField("append")
    assert len(raft.entries) == 1
    batch = raft.apply_next()
    assert len(batch.append_batch.appends) == 4
    assert [e for _, e in got] == [None] * 5
    assert [r.error for r, _ in got] == [0, 0, 0, common_pb2.OUT_OF_ORDER_SEQUENCE, 0]
    assert p.statistics()["sends_per_entry"] == 2.5


def test_proposer_splits_at_the_entry_size_and_refuses_oversized_sends() -> None:
    raft = FakeRaft()
    p = make_proposer(raft, max_inflight_entries=1, max_entry_bytes=4096)
    got: list[Any] = []
    p.submit(partition_pb2.Append(records=[rec("x" * 5000)]), lambda r, e: got.append(e))
    assert isinstance(got[0], errors.RecordTooLarge) and not raft.entries
    for _ in range(9):
        p.submit(partition_pb2.Append(records=[rec("y" * 1000)]), lambda r, e: got.append(e))
    while raft.entries:
        assert len(raft.entries[0][0].SerializeToString()) <= 4096
        raft.apply_next()
    assert got[1:] == [None] * 9
    assert p.statistics()["entries"] >= 3


def test_proposer_bounds_the_queue_and_refuses_when_not_leader() -> None:
    raft = FakeRaft()
    p = make_proposer(raft, max_inflight_entries=1, max_queued_sends=2)
    got: list[Any] = []
    for _ in range(4):
        p.submit(partition_pb2.Append(records=[rec("v")]), lambda r, e: got.append(e))
    assert isinstance(got[-1], errors.Unavailable) and "too many in flight" in str(got[-1])
    raft.leader = False
    p.maintain()  # queued sends learn that leadership is gone
    assert sum(isinstance(e, errors.NotLeader) for e in got) == 2
    p.submit(partition_pb2.Append(records=[rec("v")]), lambda r, e: got.append(e))
    assert isinstance(got[-1], errors.NotLeader) and got[-1].leader_hint == "10.0.0.9:1"
    p.close(errors.Unavailable("closed"))
    assert isinstance(got[-1], errors.Unavailable)


def test_a_proposal_refused_at_once_while_pumping_does_not_deadlock_the_pump() -> None:
    """The raft node answers a proposal it cannot take (not leader, queue full) through the
    callback, inside the proposer's own ``propose`` call; that callback pumps again. Seen in
    a simulated schedule: the non-reentrant pump lock then hung the raft driver thread."""
    raft = FakeRaft()
    p = make_proposer(raft, max_inflight_entries=1)
    got: list[Any] = []
    for i in range(4):  # one in flight, three queued behind it
        p.submit(partition_pb2.Append(records=[rec(f"v{i}")]), lambda r, e: got.append(e))
    refusing = errors.NotLeader("leadership lost")

    def refuse(data: bytes, callback: Any) -> None:
        callback(None, refusing)  # synchronously, as RaftNode.propose does

    p._propose = refuse
    finished = threading.Thread(target=raft.apply_next, daemon=True)  # pumps the queued three
    finished.start()
    finished.join(10)
    assert not finished.is_alive(), "the pump deadlocked on its own lock"
    assert got[0] is None and got[1:] == [refusing] * 3
