"""In-memory state of the metadata leader: consumer sessions and broker reports.

Heartbeats are not Raft writes (DESIGN § Consuming): the metadata leader keeps each member's
session deadline here, in memory. Only membership changes — join, leave, session expiry — go
through the metadata group. A broker that becomes metadata leader starts with no sessions, so
every member of the table gets a fresh session timeout from that moment (``sessions_for``).

Brokers report their replicas to the metadata leader twice a second (``BrokerReport``): the
leader learns which brokers are alive, who leads each partition, and each replica's offsets
and applied index. DescribeTopic, DescribeCluster and placement read it.

Thread-safe; time comes from an injected monotonic clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from raftq.metadata.table import Table
from raftq.proto import internal_pb2


@dataclass
class Session:
    deadline_s: float
    timeout_ms: int
    last_heartbeat_ms: int


class SessionTable:
    """Member sessions of every group, as the metadata leader sees them."""

    def __init__(
        self,
        clock_s: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._clock_s = clock_s
        self._wall_ms = wall_ms
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], Session] = {}

    def touch(self, group: str, member: str, timeout_ms: int) -> None:
        """A heartbeat or join: the session runs ``timeout_ms`` from now."""
        with self._lock:
            self._sessions[(group, member)] = Session(
                self._clock_s() + timeout_ms / 1000, timeout_ms, self._wall_ms()
            )

    def forget(self, group: str, members: Iterable[str]) -> None:
        with self._lock:
            for member in members:
                self._sessions.pop((group, member), None)

    def reset(self) -> None:
        """Leadership was lost or gained: nothing known any more."""
        with self._lock:
            self._sessions.clear()

    def last_heartbeat_ms(self, group: str, member: str) -> int:
        with self._lock:
            session = self._sessions.get((group, member))
            return session.last_heartbeat_ms if session else 0

    def expired(self, table: Table) -> dict[str, list[str]]:
        """Members of ``table`` whose session ran out, per group. A member the leader has not
        heard from yet (new leader, or a member joined through the previous one) gets a fresh
        session now instead."""
        now = self._clock_s()
        out: dict[str, list[str]] = {}
        with self._lock:
            for name, group in table.groups.items():
                for member_id, member in group.members.items():
                    session = self._sessions.get((name, member_id))
                    if session is None:
                        self._sessions[(name, member_id)] = Session(
                            now + member.session_timeout_ms / 1000, member.session_timeout_ms, 0
                        )
                    elif session.deadline_s <= now:
                        out.setdefault(name, []).append(member_id)
            live = {(n, m) for n, g in table.groups.items() for m in g.members}
            for key in [k for k in self._sessions if k not in live]:
                del self._sessions[key]
        return {name: sorted(members) for name, members in out.items()}


@dataclass(frozen=True)
class PartitionView:
    leader: int  # broker id, 0 = none known
    log_start: int
    end: int
    applied: dict[int, int]  # broker id -> applied index of its replica


class BrokerReports:
    """The latest report of every broker, and what follows from them."""

    def __init__(self, alive_s: float = 3.0, clock_s: Callable[[], float] = time.monotonic):
        self._alive_s = alive_s
        self.alive_s = alive_s
        self._clock_s = clock_s
        self._lock = threading.Lock()
        self._reports: dict[int, tuple[float, internal_pb2.BrokerReport]] = {}

    def record(self, report: internal_pb2.BrokerReport) -> None:
        with self._lock:
            self._reports[report.broker_id] = (self._clock_s(), report)

    def alive(self) -> set[int]:
        now = self._clock_s()
        with self._lock:
            return {b for b, (at, _) in self._reports.items() if now - at <= self._alive_s}

    def latest(self) -> dict[int, internal_pb2.BrokerReport]:
        """The latest report of each live broker."""
        alive = self.alive()
        with self._lock:
            return {b: r for b, (_, r) in self._reports.items() if b in alive}

    def partitions(self, table: Table) -> dict[tuple[str, int], PartitionView]:
        """What the live brokers' reports say about each partition (current topic ids only)."""
        alive = self.alive()
        leaders: dict[tuple[str, int], tuple[int, int]] = {}  # -> (term, broker)
        offsets: dict[tuple[str, int], tuple[int, int]] = {}
        applied: dict[tuple[str, int], dict[int, int]] = {}
        with self._lock:
            reports = [r for b, (_, r) in self._reports.items() if b in alive]
        for report in reports:
            for replica in report.replicas:
                topic = table.topic(replica.topic)
                if topic is None or topic.topic_id != replica.topic_id:
                    continue
                key = (replica.topic, replica.partition)
                applied.setdefault(key, {})[report.broker_id] = replica.applied_index
                if replica.leader and replica.term >= leaders.get(key, (-1, 0))[0]:
                    leaders[key] = (replica.term, report.broker_id)
                    offsets[key] = (replica.log_start, replica.end)
                elif key not in offsets:
                    offsets[key] = (replica.log_start, replica.end)
        return {
            key: PartitionView(
                leaders.get(key, (0, 0))[1],
                offsets.get(key, (0, 0))[0],
                offsets.get(key, (0, 0))[1],
                applied.get(key, {}),
            )
            for key in set(offsets) | set(applied)
        }

    def reset(self) -> None:
        with self._lock:
            self._reports.clear()


class LiveBrokers:
    """Brokers that may take new replicas: reporting or heard on their raft link within the
    reports' liveness window, and not being removed. The links make a fresh metadata leader
    (no reports yet) and a broker whose reports are late (a starved backend thread) see every
    broker that is up; only the metadata leader's view is right for placement, so anything
    that creates topics runs there. ``draining`` is set once membership exists."""

    def __init__(
        self,
        broker_id: int,
        reports: BrokerReports,
        heard: Callable[[], set[int]] = set,
    ) -> None:
        self.broker_id = broker_id
        self._reports = reports
        self._heard = heard
        self.draining: Callable[[], set[int]] = set

    def __call__(self) -> set[int]:
        return (self._reports.alive() | self._heard() | {self.broker_id}) - self.draining()
