"""Consumer-group test harness over real processes: consumer processes (tests/consumer_proc.py),
a steady producer, a raw group member that speaks gRPC directly, and the lease-log checker.

``check_lease_log(events, produced)`` is the proof behind "no record is ever leased to two
members at the same time": it reads every lease and ack the consumer processes logged and
returns the problems it found (an empty list is a pass) plus figures.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from raftq.client import Producer
from raftq.proto import api_pb2, api_pb2_grpc, errors
from raftq.transport.grpc_errors import from_rpc_error
from tests.helpers import read_jsonl, stop_processes, wait_until

RecordId = tuple[str, int, int]  # topic, partition, offset
GROUP_ENV = {
    "RAFTQ_GROUPS__SESSION_TIMEOUT_MIN_MS": "500",
    "RAFTQ_GROUPS__SESSION_TIMEOUT_MS": "2000",
    "RAFTQ_GROUPS__HEARTBEAT_INTERVAL_MS": "300",
}
# Errors that tell an old owner its delivery is over (release on revocation).
REVOKED_ERRORS = {"LEASE_EXPIRED", "FENCED", "NOT_LEASED", "UNKNOWN_MEMBER", "RECORD_NOT_FOUND"}


# -- consumer processes -------------------------------------------------------------------------


class ConsumerProcs:
    """Consumer processes, each logging to ``<root>/<name>.jsonl``."""

    def __init__(self, root: Path, bootstrap: str) -> None:
        self.root = root
        self.bootstrap = bootstrap
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: dict[str, int] = {}  # name -> wall ms of the SIGKILL

    def log_path(self, name: str) -> Path:
        return self.root / f"{name}.jsonl"

    def start(self, name: str, group: str, topic: str, *extra: str) -> None:
        out = (self.root / f"{name}.out").open("ab")
        self.procs[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.consumer_proc",
                "--bootstrap",
                self.bootstrap,
                "--group",
                group,
                "--topic",
                topic,
                "--log",
                str(self.log_path(name)),
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()

    def wait_joined(self, name: str, timeout_s: float = 30.0) -> str:
        """The member id, once the process logged its join."""

        def joined() -> str | None:
            for event in self.events(name):
                if event["ev"] == "join":
                    return str(event["member"])
            assert self.procs[name].poll() is None, f"{name} exited\n{self.output(name)}"
            return None

        member = wait_until(joined, timeout_s, f"{name} joined")
        assert member is not None
        return member

    def kill(self, name: str) -> int:
        """SIGKILL; returns the wall ms it was sent at."""
        at = int(time.time() * 1000)
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(timeout=10)
        self.killed[self.member_of(name)] = at
        return at

    def member_of(self, name: str) -> str:
        return next(str(e["member"]) for e in self.events(name) if e["ev"] == "join")

    def stop_all(self) -> None:
        stop_processes(self.procs.values(), 20)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        names = [name] if name is not None else sorted(self.procs)
        out: list[dict[str, Any]] = []
        for n in names:
            path = self.log_path(n)
            if path.exists():
                out += read_jsonl(path)
        return out

    def output(self, name: str) -> str:
        path = self.root / f"{name}.out"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def acked(events: Iterable[dict[str, Any]]) -> set[RecordId]:
    return {
        (e["topic"], e["partition"], e["offset"]) for e in events if e["ev"] == "ack" and e["ok"]
    }


# -- a steady producer --------------------------------------------------------------------------


class SteadyProducer:
    """Sends ``rate`` keyed records a second from a thread until stopped; ``produced()`` is
    every record the cluster acknowledged, by id."""

    def __init__(self, bootstrap: str, topic: str, rate: int, prefix: str = "r") -> None:
        self.topic = topic
        self.rate = rate
        self.prefix = prefix
        self._producer = Producer(bootstrap, linger_ms=5, request_timeout_ms=10_000)
        self._stop = threading.Event()
        self._futures: list[tuple[str, Any]] = []
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def _run(self) -> None:
        start = time.monotonic()
        i = 0
        while not self._stop.is_set():
            due = start + i / self.rate
            if time.monotonic() < due:
                self._stop.wait(due - time.monotonic())
                continue
            value = f"{self.prefix}{i}"
            self._futures.append(
                (value, self._producer.send(self.topic, value.encode(), key=value.encode()))
            )
            i += 1

    def stop(self) -> dict[RecordId, str]:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush()
        out: dict[RecordId, str] = {}
        failed = 0
        for value, future in self._futures:
            try:
                meta = future.result(timeout=30)
            except errors.RaftqError:
                failed += 1
                continue
            out[(self.topic, meta.partition, meta.offset)] = value
        self._producer.close()
        assert failed == 0, f"{failed} sends failed"
        return out


# -- a raw member: gRPC calls, no heartbeat thread ------------------------------------------------


@dataclass
class RawMember:
    """A group member driven call by call (fencing and expiry tests): no heartbeats unless
    ``heartbeat()`` is called."""

    addr: str
    group: str
    topics: list[str]
    session_timeout_ms: int = 2000
    start_from: int = 0
    member_id: str = ""
    generation: int = -1
    assignment: set[tuple[str, int]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._channel = grpc.insecure_channel(self.addr)
        self._stub = api_pb2_grpc.ConsumerStub(self._channel)

    def _call(self, method: str, request: Any, timeout_s: float = 15.0) -> Any:
        try:
            return getattr(self._stub, method)(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc

    def join(self) -> RawMember:
        request = api_pb2.JoinGroupRequest(
            group=self.group,
            topics=self.topics,
            session_timeout_ms=self.session_timeout_ms,
            start_from=self.start_from,  # type: ignore[arg-type]
        )
        if self.member_id:
            request.member_id = self.member_id
        response = self._call("JoinGroup", request)
        self.member_id, self.generation = response.member_id, response.generation
        self.assignment = {(a.topic, p) for a in response.assignment for p in a.partitions}
        return self

    def heartbeat(self) -> api_pb2.HeartbeatResponse:
        request = api_pb2.HeartbeatRequest(
            group=self.group, member_id=self.member_id, generation=self.generation
        )
        return self._call("Heartbeat", request)

    def poll(self, max_records: int = 100, max_wait_ms: int = 0, lease_ms: int = 60_000) -> Any:
        request = api_pb2.PollRequest(
            group=self.group,
            member_id=self.member_id,
            generation=self.generation,
            max_records=max_records,
            max_wait_ms=max_wait_ms,
            lease_ms=lease_ms,
        )
        return list(self._call("Poll", request).records)

    def settle(self, method: str, records: Iterable[Any], **extra: Any) -> list[Any]:
        request_type = {
            "Ack": api_pb2.AckRequest,
            "Nack": api_pb2.NackRequest,
            "ExtendLease": api_pb2.ExtendLeaseRequest,
        }[method]
        refs = [
            api_pb2.RecordRef(
                topic=r.topic,
                partition=r.partition,
                offset=r.offset,
                delivery_count=r.delivery_count,
            )
            for r in records
        ]
        request = request_type(
            group=self.group,
            member_id=self.member_id,
            generation=self.generation,
            refs=refs,
            **extra,
        )
        return list(self._call(method, request).results)

    def leave(self) -> None:
        request = api_pb2.LeaveGroupRequest(group=self.group, member_id=self.member_id)
        self._call("LeaveGroup", request)

    def close(self) -> None:
        self._channel.close()


# -- the lease-log checker ---------------------------------------------------------------------


@dataclass
class LeaseReport:
    problems: list[str]
    redelivered: int  # records leased more than once
    handovers: int  # later leases to another member while the earlier lease's deadline ran
    gaps: int  # records whose logged deliveries skip a count (a poll lost to a SIGKILL)


def check_lease_log(
    events: list[dict[str, Any]], produced: Iterable[RecordId], killed: dict[str, int]
) -> LeaseReport:
    """Every produced record acked exactly once; for each record the logged deliveries have
    distinct delivery counts that grow with the leader's time, the first being 1 (a gap is
    allowed only right after a lease by a SIGKILLed member, whose last poll may not have been
    logged);
    redeliveries carry delivery_count > 1; the one successful ack names the last delivery;
    and no record is leased to two members at the same time: when delivery k+1 starts before
    delivery k's deadline, delivery k must have been ended by the broker (its owner was killed
    or lost the partition and every later ack of it failed with a revocation error)."""
    problems: list[str] = []
    leases: dict[RecordId, list[dict[str, Any]]] = defaultdict(list)
    acks: dict[RecordId, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["ev"] in ("lease", "ack"):
            rid = (e["topic"], e["partition"], e["offset"])
            (leases if e["ev"] == "lease" else acks)[rid].append(e)
    produced = set(produced)
    # member -> wall ms of the joins (assignment changes) that exclude each partition, and closes
    dropped: dict[tuple[str, str, int], bool] = {}
    for e in events:
        if e["ev"] == "join":
            owned = {(t, p) for t, p in e["assignment"]}
            for t, p in {(r[0], r[1]) for r in leases} - owned:
                dropped[(e["member"], t, p)] = True
        elif e["ev"] == "closed":
            for t, p in {(r[0], r[1]) for r in leases}:
                dropped[(e["member"], t, p)] = True
    redelivered = handovers = gaps = 0
    for rid in sorted(produced | set(leases)):
        ok = [a for a in acks[rid] if a["ok"]]
        if rid in produced and len(ok) != 1:
            problems.append(f"{rid}: {len(ok)} successful acks (want exactly 1)")
        if rid not in produced:
            problems.append(f"{rid}: leased but never produced")
        ls = sorted(leases[rid], key=lambda e: e["delivery_count"])
        counts = [e["delivery_count"] for e in ls]
        if not ls:
            continue
        if len(set(counts)) != len(counts):
            problems.append(f"{rid}: a delivery count was leased twice: {counts}")
            continue
        # Leader-stamped time (lease_ms is the same for every poll here): a member's wall
        # clock at receipt is no order — a poll answered late (a slow broker thread) can
        # arrive after the next delivery of a record its lease lost to a rebalance.
        stamps = [e["lease_deadline_ms"] for e in ls]
        if stamps != sorted(stamps):
            problems.append(f"{rid}: delivery counts do not grow with time: {ls}")
        if len(ls) > 1:
            redelivered += 1
        if counts != list(range(counts[0], counts[0] + len(counts))) or counts[0] != 1:
            gaps += 1  # an unlogged delivery: only a SIGKILLed member's last poll may be one
            if not killed:
                problems.append(f"{rid}: deliveries {counts} skip a count (no member killed)")
        for prev, cur in itertools.pairwise(ls):
            if cur["delivery_count"] <= 1:
                problems.append(f"{rid}: a redelivery carries delivery_count {counts}")
            if cur["wall_ms"] >= prev["lease_deadline_ms"] or cur["member"] == prev["member"]:
                continue
            # delivery prev was still within its deadline: the broker must have ended it
            handovers += 1
            old = prev["member"]
            if old not in killed and not dropped.get((old, rid[0], rid[1])):
                problems.append(
                    f"{rid}: leased to {cur['member']} while {old} held delivery "
                    f"{prev['delivery_count']}, yet {old} was neither killed nor lost the partition"
                )
            late = [
                a
                for a in acks[rid]
                if a["member"] == old
                and a["delivery_count"] == prev["delivery_count"]
                and (a["ok"] or a["error"] not in REVOKED_ERRORS)
            ]
            if late:
                problems.append(
                    f"{rid}: delivery {prev['delivery_count']} to {old} was leased again to "
                    f"{cur['member']} before its deadline, yet the old owner's ack got "
                    f"{late[0]['error'] or 'OK'}"
                )
        if ok and ok[0]["delivery_count"] != counts[-1]:
            problems.append(
                f"{rid}: acked delivery {ok[0]['delivery_count']}, last leased {counts}"
            )
    return LeaseReport(problems, redelivered, handovers, gaps)
