"""Where a call runs: on this broker's replica when it leads, else on the leader it forwards to.

Partition commands and reads go to the partition's leader: the local replica when it leads,
else over the Internal service to the broker the best hint names — the local replica's view of
its leader, else the partition's preferred leader — following NOT_LEADER hints and waiting out
elections until the caller's deadline. A leader whose raft link is open but silent (hung: its
sockets stay open, nothing answers) is not called: another replica is asked, whose NOT_LEADER
names the leader it knows, until the successor answers. Leader hints in errors a client sees
are *client* addresses (host:port of the broker's gRPC API), never raft addresses.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from raftq.metadata.table import Table, TopicInfo
from raftq.proto import errors, internal_pb2, partition_pb2
from raftq.transport.internal import InternalClient

if TYPE_CHECKING:
    from raftq.replica import PartitionReplica

logger = logging.getLogger("raftq.broker.router")

T = TypeVar("T")
# Pauses between attempts while no leader answers: short, so a forwarded call follows a new
# leader within 0.1 s of its election (an attempt against a dead peer fails in about a millisecond).
RETRY_PAUSE_S = (0.02, 0.05, 0.1)


def client_addr_of_raft(table: Table, raft_addr: str | None) -> str:
    """The client address of the broker whose raft address is ``raft_addr`` ("" if unknown)."""
    if not raft_addr:
        return ""
    for broker in table.brokers.values():
        if broker.raft_addr == raft_addr:
            return broker.client_addr
    return ""


class Router:
    """Routes partition work to leaders. Thread-safe."""

    def __init__(
        self,
        *,
        broker_id: int,
        client_addr: str,
        table: Callable[[], Table],
        replicas: Callable[[tuple[str, int]], PartitionReplica | None],
        internal: InternalClient,
        topic: Callable[[str], TopicInfo | None] | None = None,
        hung: Callable[[str], bool] = lambda _client_addr: False,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``monotonic`` and ``sleep``: how a call's retries wait for a partition leader."""
        self.broker_id = broker_id
        self._monotonic = monotonic
        self._sleep = sleep
        self.client_addr = client_addr
        self._table = table
        # a topic by name (None = unknown); the service's also covers a table copy still behind
        self._topic = topic or (lambda name: self._table().topic(name))
        self._replica = replicas
        self._internal = internal
        self._hung = hung  # client address -> its broker's raft link is open but silent
        self._hints: dict[tuple[str, int], str] = {}
        self._lock = threading.Lock()

    # -- where is the leader ------------------------------------------------------------------

    def local_leader(self, topic: str, partition: int) -> PartitionReplica | None:
        replica = self._replica((topic, partition))
        if replica is not None and replica.is_leader():
            return replica
        return None

    def leader_hint(self, topic: str, partition: int) -> str:
        """The client address of the broker most likely leading the partition ("" = none)."""
        table = self._table()
        replica = self._replica((topic, partition))
        if replica is not None:
            addr = client_addr_of_raft(table, replica.leader())
            if addr:
                return addr
        with self._lock:
            hint = self._hints.get((topic, partition), "")
        if hint:
            return hint
        replicas = table.replicas(topic, partition)
        if replicas:
            broker = table.broker(replicas[0])
            if broker is not None:
                return broker.client_addr
        return ""

    def not_leader(self, topic: str, partition: int) -> errors.NotLeader:
        hint = self.leader_hint(topic, partition)
        if hint == self.client_addr:
            hint = ""
        return errors.NotLeader(
            f"broker {self.broker_id} does not lead {topic}/{partition}", leader_hint=hint
        )

    def check_partition(self, topic: str, partition: int) -> None:
        """Raises UnknownTopic / UnknownPartition (normal)."""
        info = self._topic(topic)
        if info is None:
            raise errors.UnknownTopic(f"topic {topic!r} does not exist: create it first")
        if not 0 <= partition < info.partition_count:
            raise errors.UnknownPartition(
                f"topic {topic!r} has partitions 0..{info.partition_count - 1}, not {partition}"
            )

    # -- calls --------------------------------------------------------------------------------

    def _with_leader(
        self,
        topic: str,
        partition: int,
        timeout_s: float,
        local: Callable[[PartitionReplica, float], T],
        remote: Callable[[str, float], T],
        on_unknown: Callable[[], None] | None = None,
    ) -> T:
        """Run ``local`` on the leading local replica or ``remote`` at the leader's address,
        retrying NOT_LEADER / UNAVAILABLE until the deadline. ``on_unknown`` is called when an
        attempt failed UNAVAILABLE before another one: that attempt may have been applied
        (a leader that committed the command and stopped answering before its reply)."""
        deadline = self._monotonic() + timeout_s
        attempt = 0
        last: errors.RaftqError = errors.Unavailable(f"no leader known for {topic}/{partition}")
        while True:
            self.check_partition(topic, partition)
            left = deadline - self._monotonic()
            if left <= 0:
                raise last
            replica = self.local_leader(topic, partition)
            target = "" if replica is not None else self.leader_hint(topic, partition)
            if target and self._hung(target):
                # A call would wait out the hung broker's keepalive while its followers elect
                # a new leader: ask one of them instead (NOT_LEADER names the leader it knows).
                last = errors.Unavailable(f"the leader of {topic}/{partition} is not answering")
                target = self._other_replica(topic, partition, target, attempt)
            try:
                if replica is not None:
                    return local(replica, left)
                if target and target != self.client_addr:
                    return remote(target, left)
            except errors.NotLeader as exc:
                last = exc
                if exc.leader_hint:
                    with self._lock:
                        self._hints[(topic, partition)] = exc.leader_hint
            except errors.Unavailable as exc:
                last = exc
                if on_unknown is not None:
                    on_unknown()
            pause = RETRY_PAUSE_S[min(attempt, len(RETRY_PAUSE_S) - 1)]
            attempt += 1
            self._sleep(min(pause, max(0.0, deadline - self._monotonic())))

    def _other_replica(self, topic: str, partition: int, hung: str, attempt: int) -> str:
        """The client address of a replica of the partition other than ``hung`` and this
        broker, not hung itself (rotating with ``attempt``); "" when there is none."""
        table = self._table()
        others = []
        for broker_id in table.replicas(topic, partition) or ():
            broker = table.broker(broker_id)
            address = broker.client_addr if broker is not None else ""
            if address and address not in (hung, self.client_addr) and not self._hung(address):
                others.append(address)
        return others[attempt % len(others)] if others else ""

    def propose(
        self,
        topic: str,
        partition: int,
        command: partition_pb2.PartitionCommand,
        timeout_s: float,
        *,
        skip_if_idle: bool = False,
        on_unknown: Callable[[], None] | None = None,
    ) -> internal_pb2.ProposeResponse:
        """Propose ``command`` on the partition's leader; command-level errors stay in the
        result. Raises NotLeader/Unavailable/Timeout when no leader answers in time.
        ``on_unknown``: see ``_with_leader`` (the result may then answer a state the command
        itself made)."""

        def local(replica: PartitionReplica, left: float) -> internal_pb2.ProposeResponse:
            return propose_on(replica, command, left, skip_if_idle=skip_if_idle)

        def remote(address: str, left: float) -> internal_pb2.ProposeResponse:
            request = internal_pb2.ProposeRequest(
                topic=topic, partition=partition, command=command, skip_if_idle=skip_if_idle
            )
            return self._internal.propose(address, request, left)

        return self._with_leader(topic, partition, timeout_s, local, remote, on_unknown)

    def read(
        self, request: internal_pb2.ReadRequest, timeout_s: float
    ) -> internal_pb2.ReadResponse:
        """A read of committed state on the partition's leader."""

        def local(replica: PartitionReplica, left: float) -> internal_pb2.ReadResponse:
            return read_on(replica, request)

        def remote(address: str, left: float) -> internal_pb2.ReadResponse:
            return self._internal.read(address, request, left)

        return self._with_leader(request.topic, request.partition, timeout_s, local, remote)


def propose_on(
    replica: PartitionReplica,
    command: partition_pb2.PartitionCommand,
    timeout_s: float,
    *,
    skip_if_idle: bool,
) -> internal_pb2.ProposeResponse:
    """Run a partition command on a local (leader) replica. Appends take the group-commit path;
    an idle lease is answered without a Raft round trip. Raises Unavailable (retriable) while
    the partition has not applied its topic's config: a new topic's first sends and leases
    wait for it instead of being judged by the defaults (a record within the topic's
    max_record_bytes but over the default was refused RECORD_TOO_LARGE)."""
    if not replica.configured():
        raise errors.Unavailable(f"{replica.where} has not applied its topic's config yet")
    op = command.WhichOneof("op")
    if op == "append":
        return internal_pb2.ProposeResponse(
            result=replica.append(command.append, timeout_s=timeout_s)
        )
    if op == "lease" and skip_if_idle and not replica.might_have_ready(command.lease.group):
        return internal_pb2.ProposeResponse(skipped_idle=True)
    return internal_pb2.ProposeResponse(result=replica.propose(command, timeout_s))


def read_on(
    replica: PartitionReplica, request: internal_pb2.ReadRequest
) -> internal_pb2.ReadResponse:
    """Answer a read from a local replica's committed state."""
    kind = request.WhichOneof("read")
    response = internal_pb2.ReadResponse()
    if kind == "fetch":
        fetched = replica.read_fetch(
            request.fetch.offset, request.fetch.max_records, request.fetch.max_bytes
        )
        response.records.extend(fetched.records)
        response.log_start, response.end = fetched.log_start, fetched.end
        return response
    offsets = replica.offsets()
    response.log_start, response.end = offsets.log_start, offsets.end
    if kind == "producer":
        state = replica.producer_state(request.producer.producer_id)
        if state is not None:
            response.producer_known = True
            response.producer_last_sequence = state.last_sequence
            response.producer_last_offsets.extend(state.last_offsets)
            response.producer_records = state.records
    if kind == "schedules":
        name = request.schedules.name
        response.schedules.extend(s for s in replica.schedules() if not name or s.name == name)
    if kind == "lag":
        for group in request.lag.groups:
            lag = replica.lag(group)
            entry: Any = response.lags.add(group=group, known=lag is not None)
            if lag is not None:
                entry.committed, entry.end, entry.lag = lag.committed, lag.end, lag.lag
                entry.pending, entry.leased = lag.pending, lag.leased
            else:
                entry.committed = entry.end = offsets.end
    return response
