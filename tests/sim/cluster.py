"""Partition replicas on simulated brokers: hub transport, manual clock, seeded faults.

What is real: RaftNode (hardened pysyncobj) with its DurableJournal and snapshot files in a tmp
directory, the broker's RaftDriver loop (stepped by hand with ``run_once``), PartitionReplica,
the group-commit Proposer and PartitionMachine over SqliteStore. What is simulated: the network
(``raftq.transport.raft.hub``: partitions, drops, delays), time (``ManualClock``, patched into
pysyncobj; each broker's wall clock is it plus the broker's ``clock_offset_s``, so a test can
skew and jump one broker's clock), and crashes.

Crash model. A crash closes the replica (its unsent messages are lost, ``hub.crash``) and
throws its driver away; a restart builds a new driver and replica from the same data_dir.
``os.fsync`` is a no-op inside the simulation (speed) but the journal's bookkeeping of what
was fsync'd (``durable_index``) is real: with ``power_loss`` the crash also cuts the journal
back to its last fsync'd entry, as a power cut would (the hardening promises nothing
acknowledged is lost even then). SQLite runs with ``synchronous=OFF`` and keeps everything it
committed across a crash: it models SQLite FULL on a disk that loses only the journal's
unsynced tail (a replica whose SQLite is ahead of its journal replays and skips by index).

Invariants (``check_step`` after every step, ``check_stores`` every few steps, ``check_final``
after the cluster healed and settled): at most one leader per term; replicas' stores identical
at equal applied index; no acknowledged append lost (each acked batch's records sit at the
acked offsets on every replica); offsets dense; no batch written twice.
"""

from __future__ import annotations

import contextlib
import os
import random
import resource
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftq.proto import common_pb2, errors, partition_pb2
from raftq.replica import PartitionReplica
from raftq.transport.raft import RaftTimings
from raftq.transport.raft.driver import RaftDriver
from raftq.transport.raft.hub import Hub

STEP_S = 0.01
TIMINGS = RaftTimings.fast(
    election_timeout_min_s=0.3,
    election_timeout_max_s=0.6,
    heartbeat_s=0.05,
    connection_timeout_s=0.6,
    compaction_min_entries=25,
    compaction_min_time_s=0.5,
    commit_push_s=0.04,  # as the brokers' partition groups: a commit rides on the next append
)
QUOTA = 60  # batches per producer: spread over the whole schedule by the think time
THINK_S = 0.1  # simulated pause after an ack
SEND_TIMEOUT_S = 2.0  # simulated: a send without outcome by then is "unknown", retried
QUIET_CYCLE_S = 1.0  # with quiesce=True producers send in the first half of each cycle only

_JOURNAL_MAGIC_BYTES = 8
_RECORD = struct.Struct("<IIQQ")


@contextlib.contextmanager
def no_fsync() -> Iterator[None]:
    """``os.fsync`` as a no-op (the journal still tracks what it would have made durable)."""
    saved = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = saved


@contextlib.contextmanager
def memory_cap(extra_bytes: int = 2 << 30) -> Iterator[None]:
    """Cap the address space at its current size plus ``extra_bytes`` (a runaway schedule
    raises MemoryError instead of eating a shared machine's memory)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        current = int(f.read().split()[0]) * resource.getpagesize()
    cap = current + extra_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def cut_journal(path: Path, durable_index: int) -> int:
    """Drop the journal's records after ``durable_index`` (a power cut). Returns how many."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    pos = keep = _JOURNAL_MAGIC_BYTES
    dropped = 0
    while pos + _RECORD.size <= len(data):
        length, _crc, idx, _term = _RECORD.unpack_from(data, pos)
        end = pos + 8 + length
        if idx > durable_index:
            dropped += 1
        else:
            keep = end
        pos = end
    if dropped:
        with open(path, "r+b") as f:
            f.truncate(keep)
    return dropped


class SimBroker:
    def __init__(self, cluster: SimCluster, addr: str) -> None:
        self.cluster = cluster
        self.addr = addr
        self.endpoint = cluster.hub.endpoint(addr)
        self.data_dir = cluster.root / addr.replace(":", "_")
        self.driver: RaftDriver | None = None
        self.replica: PartitionReplica | None = None
        self.clock_offset_s = 0.0  # this broker's wall clock = the hub's + this (any time)
        self.start()

    def wall_clock(self) -> float:
        return self.cluster.hub.clock.now() + self.clock_offset_s

    def start(self) -> None:
        hub = self.cluster.hub
        self.driver = RaftDriver(self.endpoint, tick_interval_s=0.02, clock=hub.clock)
        self.replica = PartitionReplica(
            "sim",
            0,
            1,
            data_dir=self.data_dir,
            self_addr=self.addr,
            peers=self.cluster.addrs,
            driver=self.driver,
            fsync=True,
            synchronous="OFF",
            timings=TIMINGS,
            clock=self.wall_clock,
            monotonic=hub.clock,
        )

    @property
    def up(self) -> bool:
        return self.replica is not None

    def crash(self, power_loss: bool) -> None:
        """Stop the broker. With ``power_loss`` it dies in the middle of a driver round: after
        the round's deliveries and ticks wrote the journal, before its fsync and before any
        message left; the journal then loses everything after its last fsync."""
        assert self.replica is not None and self.driver is not None
        if power_loss:
            group = self.driver._groups.get(self.replica.name)
            if group is not None:
                group.sync = None  # this round's fsync never happens
            self.endpoint.flush = lambda: None  # type: ignore[method-assign]
            try:
                self.driver.run_once(0.0)
            finally:
                del self.endpoint.flush
        durable = self.replica.node.journal.durable_index
        self.cluster.hub.crash(self.addr)
        self.replica.close()
        self.replica, self.driver = None, None
        if power_loss:
            dropped = cut_journal(self.data_dir / "p.1.0.journal", durable)
            self.cluster.trace.append(f"{self.cluster.steps} power cut lost {dropped} entries")

    def restart(self) -> None:
        self.cluster.hub.restart(self.addr)
        self.start()


@dataclass
class Producer:
    """An idempotent producer: one batch in flight, retried with its sequence until acked."""

    pid: str
    quota: int
    sizes: list[int]
    seq: int = 0
    attempt: int = 0
    waiting_since: float | None = None
    retry_at: float = 0.0
    acked: dict[int, list[int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def values(self, seq: int) -> list[bytes]:
        return [f"{self.pid}/{seq}/{k}".encode() for k in range(self.sizes[seq])]

    @property
    def done(self) -> bool:
        return self.seq >= self.quota


class SimCluster:
    def __init__(
        self,
        seed: int,
        root: Path,
        *,
        brokers: int = 3,
        producers: int = 3,
        quiesce: bool = False,
    ) -> None:
        self.seed = seed
        self.root = root
        # Groups quiesce only when the election timeout (0.3 s minimum) exceeds the links'
        # silent_after_s (quiescence.py); the hub's default 0.4 s keeps these schedules awake.
        self.hub = Hub(seed, ping_interval_s=0.05, silent_after_s=0.2) if quiesce else Hub(seed)
        self.quiesce = quiesce
        self.rng = random.Random(seed ^ 0x5EED)  # the workload and the fault schedule
        self.addrs = [f"10.0.0.{i + 1}:7000" for i in range(brokers)]
        self.brokers: list[SimBroker] = []
        self.producers = [
            Producer(f"p{i}", QUOTA, [self.rng.randint(1, 3) for _ in range(QUOTA)])
            for i in range(producers)
        ]
        self.leader_of_term: dict[int, str] = {}
        self.steps = 0
        self.trace: list[str] = []

    def start(self) -> None:
        """Create the brokers; inside ``hub.time()``: SyncObj reads the clock when built."""
        self.brokers = [SimBroker(self, a) for a in self.addrs]

    # -- stepping ---------------------------------------------------------------------------

    def step(self) -> None:
        self.steps += 1
        self.hub.clock.advance(STEP_S)
        for broker in self.brokers:
            if broker.driver is not None:
                broker.driver.run_once(0.0)
        for broker in self.brokers:
            if broker.replica is not None:
                broker.replica.proposer.maintain()
        self.drive_producers()
        self.check_step()
        if self.steps % 25 == 0:
            self.check_stores()

    def live(self) -> list[PartitionReplica]:
        return [b.replica for b in self.brokers if b.replica is not None]

    def drive_producers(self) -> None:
        now = self.hub.clock.now()
        if self.quiesce and now % QUIET_CYCLE_S >= QUIET_CYCLE_S / 2:
            return  # the second half of each cycle is idle: the group quiesces under faults
        for producer in self.producers:
            if producer.done:
                continue
            if producer.waiting_since is not None:
                if now - producer.waiting_since < SEND_TIMEOUT_S:
                    continue
                producer.waiting_since = None  # outcome unknown: retry the same sequence
            if now < producer.retry_at:
                continue
            leaders = [r for r in self.live() if r.is_leader()]
            if not leaders:
                producer.retry_at = now + 0.05
                continue
            target = self.rng.choice(leaders)
            producer.attempt += 1
            producer.waiting_since = now
            records = [common_pb2.Record(value=v) for v in producer.values(producer.seq)]
            target.send_async(
                records,
                self._on_send(producer, producer.seq, producer.attempt),
                producer.pid,
                producer.seq,
            )

    def _on_send(self, producer: Producer, seq: int, attempt: int) -> Any:
        def done(
            results: list[partition_pb2.RecordResult] | None, error: errors.RaftqError | None
        ) -> None:
            if attempt != producer.attempt or seq != producer.seq:
                return  # a late outcome of an attempt already given up on
            producer.waiting_since = None
            if error is None:
                assert results is not None
                producer.acked[seq] = [r.offset for r in results]
                producer.seq += 1
                producer.retry_at = self.hub.clock.now() + self.rng.uniform(0, THINK_S)
            elif error.retriable:
                producer.retry_at = self.hub.clock.now() + 0.05
            else:
                producer.errors.append(f"seq {seq}: {error!r}")
                producer.seq = producer.quota  # a bug: stop this producer, fail at the end

        return done

    # -- faults -----------------------------------------------------------------------------

    def chaos_step(self) -> None:
        """One step with a seeded chance of a fault."""
        rng = self.rng
        roll = rng.random()
        down = [b for b in self.brokers if not b.up]
        up = [b for b in self.brokers if b.up]
        if roll < 0.006 and len(down) < 2:
            victim = rng.choice(up)
            power_loss = rng.random() < 0.5
            self.trace.append(f"{self.steps} crash {victim.addr} power_loss={power_loss}")
            victim.crash(power_loss)
        elif roll < 0.0075 and not down:
            self.trace.append(f"{self.steps} power cut of every broker")
            for broker in self.brokers:
                broker.crash(power_loss=True)
        elif roll < 0.014 and down:
            back = rng.choice(down)
            self.trace.append(f"{self.steps} restart {back.addr}")
            back.restart()
        elif roll < 0.018:
            a, b = rng.sample(self.addrs, 2)
            self.trace.append(f"{self.steps} partition {a} {b}")
            self.hub.partition(a, b)
        elif roll < 0.020:
            a = rng.choice(self.addrs)
            self.trace.append(f"{self.steps} isolate {a}")
            self.hub.isolate(a)
        elif roll < 0.028:
            self.trace.append(f"{self.steps} heal")
            self.hub.heal()
        elif roll < 0.032:
            p = rng.choice([0.0, 0.0, 0.02, 0.1])
            ms, jitter = rng.choice([(0, 0), (0, 0), (5, 20), (20, 40)])
            self.trace.append(f"{self.steps} drop={p} delay={ms}+{jitter}ms")
            self.hub.drop(p)
            self.hub.delay(ms, jitter)
        self.step()

    def settle(self, max_s: float = 60.0) -> None:
        """Heal everything, restart every broker, and step until every producer is done and
        every replica applied the same index."""
        self.hub.heal()
        self.hub.drop(0.0)
        self.hub.delay(0, 0)
        for broker in self.brokers:
            if not broker.up:
                broker.restart()
        start = self.hub.clock.now()
        while not (all(p.done for p in self.producers) and self.converged()):
            if self.hub.clock.now() - start > max_s:
                raise AssertionError(
                    f"no convergence within {max_s} s of simulated time: "
                    + ", ".join(f"{p.pid} at {p.seq}/{p.quota}" for p in self.producers)
                    + " | "
                    + ", ".join(
                        f"{r.node.self_addr} {r.node.status()['state']} t{r.node.term} "
                        f"c{r.node.commit_index} a{r.node.applied_index}"
                        for r in self.live()
                    )
                )
            self.step()

    def converged(self) -> bool:
        live = self.live()
        if len(live) != len(self.brokers):
            return False
        applied = {r.node.applied_index for r in live}
        commits = {r.node.commit_index for r in live}
        return len(applied) == 1 and applied == commits and sum(r.is_leader() for r in live) == 1

    # -- invariants -------------------------------------------------------------------------

    def check_step(self) -> None:
        for replica in self.live():
            if replica.is_leader():
                term = replica.node.term
                seen = self.leader_of_term.setdefault(term, replica.node.self_addr)
                assert seen == replica.node.self_addr, (
                    f"two leaders in term {term}: {seen} and {replica.node.self_addr}"
                )

    def check_stores(self) -> None:
        by_index: dict[int, tuple[str, dict[str, Any]]] = {}
        for replica in self.live():
            index = replica.applied_index
            dump = replica.dump()
            if index in by_index:
                other, theirs = by_index[index]
                assert dump == theirs, (
                    f"stores of {other} and {replica.node.self_addr} differ at applied index "
                    f"{index}"
                )
            else:
                by_index[index] = (replica.node.self_addr, dump)

    def check_final(self) -> None:
        for producer in self.producers:
            assert not producer.errors, f"{producer.pid}: {producer.errors}"
        self.check_stores()
        expected: dict[int, bytes] = {}
        for producer in self.producers:
            for seq, offsets in producer.acked.items():
                values = producer.values(seq)
                assert len(offsets) == len(values), (producer.pid, seq, offsets)
                for offset, value in zip(offsets, values, strict=True):
                    assert expected.setdefault(offset, value) == value, (
                        f"offset {offset} acked for two records"
                    )
        for replica in self.live():
            log = replica.fetch(0, 100_000, 0)
            offsets = [r.offset for r in log]
            assert offsets == list(range(len(log))), f"{replica.node.self_addr}: offsets not dense"
            values = [r.record.value for r in log]
            assert len(values) == len(set(values)), f"{replica.node.self_addr}: a batch twice"
            by_offset = dict(zip(offsets, values, strict=True))
            lost = {o: v for o, v in expected.items() if by_offset.get(o) != v}
            assert not lost, f"{replica.node.self_addr} lost acknowledged appends: {lost}"
            assert len(log) == len(expected), "records that no producer batch explains"

    def close(self) -> None:
        for broker in self.brokers:
            if broker.replica is not None:
                broker.replica.close()
                broker.replica = None


def run_schedule(
    seed: int, root: Path, *, chaos_steps: int = 400, quiesce: bool = False
) -> list[str]:
    """One seeded schedule: chaos with a live workload, then heal, settle and check. Returns
    the fault trace plus a digest line; raises AssertionError naming the seed on a failure.
    ``quiesce``: idle groups may quiesce (links pinged every 50 ms, silent after 200 ms)."""
    root.mkdir(parents=True, exist_ok=True)
    cluster = SimCluster(seed, root, quiesce=quiesce)
    try:
        with cluster.hub.time(), no_fsync():
            try:
                cluster.start()
                for _ in range(chaos_steps):
                    cluster.chaos_step()
                cluster.settle()
                cluster.check_final()
            except (AssertionError, MemoryError) as exc:
                trace = "\n  ".join(cluster.trace[-15:])
                raise AssertionError(
                    f"simulation seed={seed} failed at step {cluster.steps}: {exc}\n"
                    f"  last faults:\n  {trace}\n  replay: RAFTQ_SEED={seed} pytest "
                    "tests/sim/test_simulation.py -k replay"
                ) from exc
            end = cluster.live()[0].offsets().end
            cluster.trace.append(f"end_offset={end} terms={len(cluster.leader_of_term)}")
            return cluster.trace
    finally:
        with cluster.hub.time(), no_fsync():
            cluster.close()
