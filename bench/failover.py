"""Failover: kill -9 (or SIGSTOP) a partition's leader process, time until a send is
acknowledged again and until a record sent after it is consumed.

Three real broker processes (tests/cluster.py ``ProcessCluster``) on 127.0.0.1 with the
broker's DEFAULT raft timings (``fast=False``: heartbeat 250 ms, elections 800-1300 ms), one
topic of 3 partitions at RF 3, fsync on. Per trial one thread sends single records to one
partition through ``raftq.client.Producer`` (``linger_ms=0``, one send in flight, each waited
for) and one ``raftq.client.Consumer`` (the group's only member) polls and acks; the bench
waits until the partition is led by its preferred leader, SIGKILLs (SIGSTOPs) that broker
process, and measures from the signal to the first acknowledgement that arrives after the
process is gone, and to the first delivery of a record acknowledged after it. Then it
restarts the broker (same data directory) and lets leadership return. Trial ``i`` uses
partition ``i % 3``, so the killed broker rotates (and is sometimes the metadata leader too).

    python -m bench failover [--failover-trials 10]
    python -m bench failover --failover-stop   (a hung leader: goal 2 s)
    python -m bench failover --quick        (2 trials)
"""

from __future__ import annotations

import argparse
import logging
import signal
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import Result
from raftq.client import Consumer, Producer
from raftq.proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

NAME = "failover"
GOAL_S = 1.5
STOP_GOAL_S = 2.0  # issue 16: a hung leader is replaced and clients follow within 2 s
log = logging.getLogger("raftq.bench.failover")


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--failover-trials", type=int, default=10, help="leader kills (median reported)"
    )
    parser.add_argument(
        "--failover-stop",
        action="store_true",
        help="SIGSTOP the leader instead of SIGKILL: its sockets stay open, so the survivors "
        "notice only by election timeout (a hung or cut-off host), then SIGKILL it",
    )
    parser.add_argument(
        "--failover-fast",
        action="store_true",
        help="the test cluster's fast raft timings instead of the broker defaults",
    )


@dataclass
class ContinuousSender:
    """Sends single records to one partition, one at a time, and remembers every ack.

    ``acked`` maps value -> offset for acknowledged records; ``ack_times`` are monotonic
    times of the acknowledgements in order; ``failures`` counts sends that failed for good.
    """

    producer: Producer
    topic: str
    partition: int
    acked: dict[bytes, int] = field(default_factory=dict)
    ack_times: list[float] = field(default_factory=list)
    acked_at: dict[bytes, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _serial: int = 0
    _tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])  # values unique per sender

    def start(self) -> ContinuousSender:
        self._thread = threading.Thread(target=self._run, name="failover-sender", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._serial += 1
            value = f"{self.topic}-{self.partition}-{self._tag}-{self._serial}".encode()
            try:
                sent = self.producer.send(self.topic, value, partition=self.partition)
                meta = sent.result(timeout=60)
            except errors.RaftqError as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
                continue
            self.acked[value] = meta.offset
            now = time.monotonic()
            self.ack_times.append(now)
            self.acked_at[value] = now

    def acks_after(self, moment: float) -> list[float]:
        return [t for t in self.ack_times[-1000:] if t > moment]


class ContinuousConsumer:
    """Polls and acks in a thread; ``delivered`` maps each value to when it first arrived."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.delivered: dict[bytes, float] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="failover-consumer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                messages = self.consumer.poll(timeout_ms=100)
            except errors.RaftqError as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            now = time.monotonic()
            for m in messages:
                self.delivered.setdefault(m.value, now)
            self.consumer.ack(messages)  # a lease the old leader never committed may fail

    def first_delivery_of_acked_after(self, sender: ContinuousSender, moment: float) -> float:
        """When the first record acknowledged after ``moment`` was delivered (0: not yet)."""
        acked = [v for v, t in list(sender.acked_at.items())[-1000:] if t > moment]
        times = [self.delivered[v] for v in acked if v in self.delivered]
        return min(times, default=0.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def wait_preferred_leader(cluster: ProcessCluster, topic: str, partition: int) -> int:
    """Until the partition is led by its preferred leader (the backend hands leadership
    back to it once it is alive); returns that broker id."""
    admin = cluster.admin(cluster.live_bootstrap())

    def preferred() -> int:
        try:
            described = admin.describe_topic(topic).partitions[partition]
        except errors.RaftqError:
            return 0
        leader = int(described.leader)
        return leader if leader == described.replicas[0] and cluster.alive(leader) else 0

    return wait_until(preferred, 60, f"{topic}/{partition} led by its preferred leader")


@dataclass
class Gap:
    victim: int
    send_s: float  # from the signal to the first acknowledgement after it
    consume_s: float | None  # ... to the first delivery of a record acknowledged after it


def kill_leader(
    cluster: ProcessCluster,
    sender: ContinuousSender,
    timeout_s: float = 60.0,
    sig: int = signal.SIGKILL,
    reader: ContinuousConsumer | None = None,
) -> Gap:
    """SIGKILL (or SIGSTOP) the partition's (preferred) leader while ``sender`` (and
    ``reader``) run; measures how long until sends are acknowledged and records consumed
    again. A stopped victim is killed afterwards."""
    victim = wait_preferred_leader(cluster, sender.topic, sender.partition)
    before = len(sender.ack_times)
    wait_until(lambda: len(sender.ack_times) >= before + 20, 30, "sends flowing before the kill")
    killed_at = time.monotonic()
    cluster.kill(victim, sig)  # SIGKILL: waits until the process is gone
    if sig == signal.SIGSTOP:
        time.sleep(0.01)  # in-flight acks already on the wire land; none come from it after
    dead_at = time.monotonic()
    first: float = wait_until(
        lambda: min(sender.acks_after(dead_at), default=0.0),
        timeout_s,
        f"a send acknowledged after broker {victim} was killed",
    )
    consumed: float | None = None
    if reader is not None:
        consumed = wait_until(
            lambda: reader.first_delivery_of_acked_after(sender, dead_at),
            timeout_s,
            f"a record acknowledged after broker {victim} was killed consumed",
        )
    if sig == signal.SIGSTOP:
        cluster.kill(victim, signal.SIGKILL)
    return Gap(victim, first - killed_at, None if consumed is None else consumed - killed_at)


def run_trials(
    root: Path, trials: int, *, fast: bool, sig: int = signal.SIGKILL, progress: bool = True
) -> list[Gap]:
    topic = "failover"
    with ProcessCluster(root, brokers=3, fast=fast) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic(topic, partitions=3, replication_factor=3)
        cluster.wait_leaders(topic)
        gaps: list[Gap] = []
        with (
            Producer(cluster.bootstrap, linger_ms=0, request_timeout_ms=30_000) as producer,
            Consumer(cluster.bootstrap, "failover", [topic], lease_ms=5_000) as consumer,
        ):
            reader = ContinuousConsumer(consumer)
            try:
                for trial in range(trials):
                    sender = ContinuousSender(producer, topic, trial % 3).start()
                    try:
                        gap = kill_leader(cluster, sender, sig=sig, reader=reader)
                    finally:
                        sender.stop()
                    gaps.append(gap)
                    if progress:
                        print(
                            f"trial {trial + 1}/{trials}: killed broker {gap.victim} (leader "
                            f"of {topic}/{sender.partition}); writes resumed after "
                            f"{gap.send_s:.3f} s, consuming after {gap.consume_s:.3f} s",
                            flush=True,
                        )
                    cluster.start(gap.victim)
                    cluster.wait_ready()
            finally:
                reader.stop()
        return gaps


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _listed(samples: list[float]) -> str:
    return " ".join(f"{s:.2f}" for s in samples)


def run(options: argparse.Namespace) -> list[Result]:
    trials = 2 if options.quick else options.failover_trials
    fast = bool(getattr(options, "failover_fast", False))
    stop = bool(getattr(options, "failover_stop", False))
    sig = signal.SIGSTOP if stop else signal.SIGKILL
    with tempfile.TemporaryDirectory(prefix="raftq-failover-") as tmp:
        gaps = run_trials(Path(tmp), trials, fast=fast, sig=sig)
    sends = [g.send_s for g in gaps]
    consumes = [g.consume_s for g in gaps if g.consume_s is not None]
    goal = STOP_GOAL_S if stop else GOAL_S
    timing = "fast test timings" if fast else "defaults: heartbeat 250 ms, elections 800-1300 ms"
    how = "SIGSTOP (election timeout path)" if stop else "kill -9"
    note = f"{len(gaps)} x {how} of a partition leader; {timing}"
    name = "SIGSTOP" if stop else "kill -9"
    return [
        Result(
            f"failover: {name} -> first ack (median)",
            statistics.median(sends),
            "s",
            f"<= {goal}",
            statistics.median(sends) <= goal,
            note,
        ),
        Result("failover: p90", percentile(sends, 0.9), "s"),
        Result("failover: max", max(sends), "s", note=_listed(sends)),
        Result(
            f"failover: {name} -> first consumed (median)",
            statistics.median(consumes),
            "s",
            f"<= {goal}",
            statistics.median(consumes) <= goal,
            "a record acknowledged after the signal, delivered to the group's consumer",
        ),
        Result("failover: consumed max", max(consumes), "s", note=_listed(consumes)),
    ]
