"""BrokerService: the real implementation of every client RPC (transport/grpc_server.py's
BrokerFacade).

Where each call runs:
- partition work (Send, Poll's leases, Ack/Nack/ExtendLease, Fetch, ListOffsets, Update/Cancel)
  runs on the partition's leader: the local replica, or forwarded over the Internal service
  (broker/router.py);
- metadata work (topics, group membership, heartbeats, and descriptions that need the
  leader's in-memory view) runs on the metadata leader: other brokers forward the call once
  over ``Internal.Forward``, which never forwards again;
- ListTopics and ListGroups answer from this broker's copy of the table.

Fencing: Poll, Ack, Nack and ExtendLease name (group, member, generation). A member unknown to
the group is UNKNOWN_MEMBER (join again); a generation other than the group's is FENCED; an
ack for a partition not assigned to the member in this generation is FENCED per ref. A broker
whose copy of the table is behind waits briefly for it to catch up before deciding.

Revocation: when a rebalance moves a partition away from a member, or a member leaves or its
session expires, its leases on those partitions are released at once (Release command) so the
new owner gets the records without waiting for lease expiry; the member's late acks then get
LEASE_EXPIRED. (Kept-until-expiry would let a slow old owner finish, but would stall the new
owner for up to lease_ms; Kafka's share groups release on revocation too.) A poll that passed
the generation check just before a rebalance can have its Lease applied after that Release, so
every Lease carries the poll's generation and every revoking Release the group's new
generation: the partition machine raises the group's fence to it and refuses FENCED a Lease from
an older generation, so a late Lease can never hold records of a revoked partition. (A poll still
re-checks ownership after each lease, and the coordinator releases revoked partitions a second
time RELEASE_AGAIN_S later in case the first Release failed.)
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from raftq import admin_ops, backup_source
from raftq.assignors.partitioner import partition_for
from raftq.config import ClientSettings, RaftSettings, message_bytes_max
from raftq.coordinator import BrokerReports, SessionTable
from raftq.metadata.frontend import MetadataFrontend, TopicSpec
from raftq.metadata.machine import check_name
from raftq.metadata.table import GroupInfo, MemberInfo, Table, TopicInfo
from raftq.partitions.machine import check_record, check_values
from raftq.proto import api_pb2, common_pb2, errors, internal_pb2, metadata_pb2, partition_pb2
from raftq.proto.common_pb2 import ErrorCode
from raftq.router import Router, client_addr_of_raft, propose_on, read_on
from raftq.transport.internal import InternalClient

if TYPE_CHECKING:
    from raftq.membership import Membership
    from raftq.metadata_replica import MetadataReplica
    from raftq.replica import PartitionReplica

logger = logging.getLogger("raftq.broker.service")

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
TABLE_CATCH_UP_S = 2.0
LEADER_WAIT_S = 10.0
POLL_SLICE_S = 0.1
# A Lease whose wait times out may still apply, leaving its records leased to a member that never
# got them until lease_ms runs out. So a poll waits up to this long for a proposed lease's
# outcome, even past its own max_wait_ms (within the call's deadline).
LEASE_OUTCOME_WAIT_S = 5.0
# A revoked partition is released at once and once more this much later: a Lease proposed by a
# poll that passed the generation check just before the rebalance may apply after the first
# Release (see _release_revoked).
RELEASE_AGAIN_S = 1.0

_CLIENT = ClientSettings()

# Facade methods that must run on the metadata leader, with their request types.
LEADER_ONLY: dict[str, type[Any]] = {
    "create_topic": api_pb2.CreateTopicRequest,
    "delete_topic": api_pb2.DeleteTopicRequest,
    "alter_topic_config": api_pb2.AlterTopicConfigRequest,
    "describe_topic": api_pb2.DescribeTopicRequest,
    "describe_cluster": api_pb2.DescribeClusterRequest,
    "describe_group": api_pb2.DescribeGroupRequest,
    "join_group": api_pb2.JoinGroupRequest,
    "heartbeat": api_pb2.HeartbeatRequest,
    "leave_group": api_pb2.LeaveGroupRequest,
    "delete_group": api_pb2.DeleteGroupRequest,
    "seek_group": api_pb2.SeekGroupRequest,
    "remove_broker": api_pb2.RemoveBrokerRequest,
    "commit_txn": api_pb2.CommitTxnRequest,
    "get_txn": api_pb2.GetTxnRequest,
    "create_dead_letter_topic": api_pb2.DescribeTopicRequest,  # the source topic's name
    "add_partitions": api_pb2.AddPartitionsRequest,
    "rebalance_leaders": api_pb2.RebalanceLeadersRequest,
    "backup_metadata": api_pb2.BackupMetadataRequest,
    "move_partition": api_pb2.MovePartitionRequest,
}
# Facade methods the metadata leader runs on a given broker (never forwarded again).
ON_BROKER: dict[str, type[Any]] = {
    "lead_preferred_here": api_pb2.RebalanceLeadersRequest,
}
AS_PRINCIPAL = frozenset({"join_group"})  # leader-only calls that act as the caller
# A retried Nack's answers that describe a state the first attempt may have made itself.
NACK_AMBIGUOUS = frozenset(
    {ErrorCode.LEASE_EXPIRED, ErrorCode.NOT_LEASED, ErrorCode.RECORD_NOT_FOUND}
)
OUTCOME_UNKNOWN_HINT = errors.OutcomeUnknown.kind.hint
RESPONSES: dict[str, type[Any]] = {
    "create_topic": api_pb2.TopicDescription,
    "delete_topic": api_pb2.DeleteTopicResponse,
    "alter_topic_config": api_pb2.TopicDescription,
    "describe_topic": api_pb2.TopicDescription,
    "describe_cluster": api_pb2.ClusterDescription,
    "describe_group": api_pb2.GroupDescription,
    "join_group": api_pb2.JoinGroupResponse,
    "heartbeat": api_pb2.HeartbeatResponse,
    "leave_group": api_pb2.LeaveGroupResponse,
    "delete_group": api_pb2.DeleteGroupResponse,
    "seek_group": api_pb2.SeekGroupResponse,
    "remove_broker": api_pb2.RemoveBrokerResponse,
    "commit_txn": api_pb2.TxnState,
    "get_txn": api_pb2.TxnState,
    "create_dead_letter_topic": api_pb2.TopicDescription,  # only its name
    "add_partitions": api_pb2.TopicDescription,
    "rebalance_leaders": api_pb2.RebalanceLeadersResponse,
    "lead_preferred_here": api_pb2.RebalanceLeadersResponse,
    "backup_metadata": api_pb2.BackupMetadataResponse,
    "move_partition": api_pb2.MovePartitionResponse,
}


def _poll_response(
    leased: Sequence[tuple[str, int, partition_pb2.CommandResult]], *, compact: bool
) -> api_pb2.PollResponse:
    """A compact poll's batches carry the leaders' deliveries or columns as they are (one
    C-level copy per partition); otherwise one LeasedRecord per delivery."""
    response = api_pb2.PollResponse()
    for topic, partition, result in leased:
        if compact:
            if result.HasField("columns"):
                response.batches.add(topic=topic, partition=partition, columns=result.columns)
            else:
                response.batches.add(topic=topic, partition=partition, deliveries=result.deliveries)
            continue
        for delivery in result.deliveries:
            stored = delivery.record
            response.records.add(
                topic=topic,
                partition=partition,
                offset=stored.offset,
                delivery_count=delivery.delivery_count,
                lease_deadline_ms=delivery.lease_deadline_ms,
                timestamp_ms=stored.timestamp_ms,
                record=stored.record,
            )
    return response


def _timeout(timeout_s: float | None) -> float:
    return DEFAULT_TIMEOUT_S if timeout_s is None else max(0.0, timeout_s)


def _values_answer(
    request: api_pb2.SendRequest,
    partition: int,
    outcome: partition_pb2.CommandResult | None,
    error: errors.RaftqError | None,
    leader_hint: str = "",
) -> api_pb2.SendResponse:
    """The one SendResult of a values request: its range (with ``leader_hint`` when this
    broker forwarded it), or the error that stopped it."""
    count = len(request.values)
    result = api_pb2.SendResult(partition=partition, count=count)
    if error is None and outcome is not None and outcome.range.count != count:
        error = errors.OutOfOrderSequence(
            f"producer {request.producer_id!r} sequence {request.sequence} was used "
            f"for a batch of {outcome.range.count or len(outcome.records)} records, "
            f"not {count}: restart with a new producer id"
        )
    if error is not None or outcome is None:
        error = error or errors.Internal("no outcome")
        result.error, result.message = error.code, error.message  # type: ignore[assignment]
        result.leader_hint = error.leader_hint
    else:
        result.offset, result.duplicate = outcome.range.first_offset, outcome.range.duplicate
        result.leader_hint = leader_hint
    return api_pb2.SendResponse(results=[result], request_id=request.request_id)


def _assignment(member: MemberInfo) -> list[api_pb2.TopicPartitions]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in member.assignment:
        by_topic[topic].append(partition)
    return [
        api_pb2.TopicPartitions(topic=t, partitions=sorted(ps))
        for t, ps in sorted(by_topic.items())
    ]


def _config_changes(update: api_pb2.TopicConfigUpdate) -> dict[str, int | str]:
    return {field.name: value for field, value in update.ListFields()}


class BrokerService:
    """See the module docstring. Thread-safe: gRPC calls it from many threads."""

    def __init__(
        self,
        *,
        broker_id: int,
        client_addr: str,
        meta: MetadataReplica,
        frontend: MetadataFrontend,
        replicas: Callable[[tuple[str, int]], PartitionReplica | None],
        internal: InternalClient,
        sessions: SessionTable,
        reports: BrokerReports,
        heartbeat_interval_ms: int,
        clock: Callable[[], float] = time.time,
        heard_brokers: Callable[[], set[int]] = set,
        hung: Callable[[str], bool] = lambda _client_addr: False,
        fetch_bytes_max: int = _CLIENT.fetch_bytes_max,
        message_bytes_max: int = message_bytes_max(
            RaftSettings().max_entry_bytes, _CLIENT.fetch_bytes_max
        ),
    ) -> None:
        self.broker_id = broker_id
        # brokers this one hears on their raft links now (liveness that needs no report)
        self.heard_brokers = heard_brokers
        # The record-byte budget of a Poll/Fetch answer (client.fetch_bytes_max: the default
        # and the cap of a request's max_bytes) and the gRPC message limit it must fit.
        self.fetch_bytes_max = fetch_bytes_max
        self.message_bytes_max = message_bytes_max
        self.client_addr = client_addr
        self.meta = meta
        self.frontend = frontend
        self.replicas = replicas
        self.internal = internal
        self.sessions = sessions
        self.reports = reports
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self._clock = clock
        self._counter = 0
        self._counter_lock = threading.Lock()
        self.data_arrived = threading.Condition()
        self.router = Router(
            broker_id=broker_id,
            client_addr=client_addr,
            table=lambda: self.meta.table,
            replicas=replicas,
            internal=internal,
            topic=self._known_topic,
            hung=hung,
        )
        self._background = ThreadPoolExecutor(max_workers=4, thread_name_prefix="raftq-release")
        self.membership: Membership | None = None  # set by the broker (broker/membership.py)
        # Hands a led replica to its preferred leader; True when a transfer started (set by
        # the broker: broker/backend.py Backend.prefer_leader).
        self.prefer_leader: Callable[[PartitionReplica, Table], bool] = lambda r, t: False
        self.backup_dir = Path("backup-tmp")  # copies of partitions being backed up (the broker's)

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def notify_records(self) -> None:
        """A local replica applied new records: wake long polls. Never blocks for long."""
        with self.data_arrived:
            self.data_arrived.notify_all()

    def close(self) -> None:
        self._background.shutdown(wait=False, cancel_futures=True)

    def background(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the service's small background pool (lease releases, group
        deletions). Raises RuntimeError once the service is closed."""
        self._background.submit(fn)

    # ============================================================================ routing

    def meta_leader_addr(self) -> str:
        return client_addr_of_raft(self.meta.table, self.meta.leader())

    def _on_meta_leader(
        self,
        timeout_s: float,
        local: Callable[[float], T],
        remote: Callable[[str, float], T],
        retry: tuple[type[errors.RaftqError], ...],
    ) -> T:
        """``local(left_s)`` if this broker leads the metadata group, else ``remote(address,
        left_s)`` at the leader; ``retry`` errors (leadership moved, leader died) look again
        until the deadline while the survivors elect a new metadata leader."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if self.meta.is_leader():
                return local(max(left, 0.001))
            target = self.meta_leader_addr()
            if target and target != self.client_addr:
                try:
                    return remote(target, max(left, 0.001))
                except retry:
                    pass
            if left <= 0:
                raise errors.Unavailable("no metadata leader: the cluster has no quorum")
            time.sleep(min(0.05, max(left, 0.0)))

    def _leader_only(
        self, method: str, request: Any, timeout_s: float | None, principal: str = ""
    ) -> Any:
        """Run ``method`` here if this broker leads the metadata group, else forward it once
        (on behalf of ``principal``, the caller the auth interceptor authenticated)."""

        def remote(target: str, left: float) -> Any:
            raw = self.internal.forward(
                target, method, request.SerializeToString(), left, principal=principal
            )
            return RESPONSES[method].FromString(raw)

        return self._on_meta_leader(
            _timeout(timeout_s),
            lambda left: self._run_leader_only(method, request, left, principal),
            remote,
            (errors.NotLeader, errors.Unavailable),
        )

    def _run_leader_only(self, method: str, request: Any, timeout_s: float, principal: str) -> Any:
        run = getattr(self, "_" + method)
        if method in AS_PRINCIPAL:
            return run(request, timeout_s, principal)
        return run(request, timeout_s)

    def forward_local(
        self, method: str, request: bytes, *, timeout_s: float, principal: str = ""
    ) -> bytes:
        """Internal.Forward: run a leader-only call here or refuse (never forward again)."""
        if method in ON_BROKER:
            response = getattr(self, method)(ON_BROKER[method].FromString(request), timeout_s)
            return bytes(response.SerializeToString())
        if method not in LEADER_ONLY:
            raise errors.InvalidArgument(f"{method!r} cannot be forwarded")
        if not self.meta.is_leader():
            raise errors.NotLeader("not the metadata leader", leader_hint=self.meta_leader_addr())
        parsed = LEADER_ONLY[method].FromString(request)
        response = self._run_leader_only(method, parsed, timeout_s, principal)
        return bytes(response.SerializeToString())

    def meta_propose(self, command_bytes: bytes, timeout_s: float) -> metadata_pb2.MetaResult:
        """Propose planned MetaCommand bytes on the metadata leader (here or forwarded)."""
        command = metadata_pb2.MetaCommand.FromString(command_bytes)
        return self._on_meta_leader(
            timeout_s,
            lambda left: self.meta.propose(command, left),
            lambda target, left: self._checked(self.internal.meta_propose(target, command, left)),
            (errors.NotLeader,),
        )

    @staticmethod
    def _checked(result: metadata_pb2.MetaResult) -> metadata_pb2.MetaResult:
        if result.error:
            raise errors.error_for(result.error, result.message)
        return result

    def meta_propose_local(
        self, command: metadata_pb2.MetaCommand, *, timeout_s: float
    ) -> metadata_pb2.MetaResult:
        """Internal.MetaPropose: the result travels back with its error code in-band."""
        if not self.meta.is_leader():
            raise errors.NotLeader("not the metadata leader", leader_hint=self.meta_leader_addr())
        try:
            return self.meta.propose(command, timeout_s)
        except errors.RaftqError as exc:
            if isinstance(exc, (errors.NotLeader, errors.Timeout, errors.Unavailable)):
                raise
            return metadata_pb2.MetaResult(error=exc.code, message=exc.message)  # type: ignore[arg-type]

    def propose_local(
        self,
        topic: str,
        partition: int,
        command: partition_pb2.PartitionCommand,
        *,
        skip_if_idle: bool,
        timeout_s: float,
    ) -> internal_pb2.ProposeResponse:
        """Internal.Propose: only the partition's leader answers; never forwarded again. A
        Lease is planned within this broker's byte budget, whatever the forwarder asked."""
        self.router.check_partition(topic, partition)
        replica = self.router.local_leader(topic, partition)
        if replica is None:
            raise self.router.not_leader(topic, partition)
        if command.WhichOneof("op") == "lease":
            command.lease.max_bytes = self.byte_budget(command.lease.max_bytes)
        return propose_on(replica, command, timeout_s, skip_if_idle=skip_if_idle)

    def undeliver_local(
        self, topic: str, partition: int, lease: partition_pb2.Lease, answer: Any
    ) -> None:
        """Internal.Propose could not send a Lease's ``answer`` (the forwarder gave up): take
        the deliveries back on this leader."""
        self._undeliver(topic, partition, lease.group, lease.member, answer.result)

    def byte_budget(self, max_bytes: int) -> int:
        """The record bytes a Poll/Fetch answer may carry: the request's ``max_bytes``, 0 =
        ``fetch_bytes_max``, never more than that (a lone larger record still goes alone)."""
        return min(max_bytes or self.fetch_bytes_max, self.fetch_bytes_max)

    def read_local(self, request: internal_pb2.ReadRequest) -> internal_pb2.ReadResponse:
        self.router.check_partition(request.topic, request.partition)
        replica = self.router.local_leader(request.topic, request.partition)
        if replica is None:
            raise self.router.not_leader(request.topic, request.partition)
        if request.WhichOneof("read") == "fetch":  # within this broker's budget too
            request.fetch.max_bytes = self.byte_budget(request.fetch.max_bytes)
        return read_on(replica, request)

    def meta_members_local(self) -> internal_pb2.MetaMembersResponse:
        """Internal.MetaMembers: the metadata voters as this broker knows them."""
        assert self.membership is not None
        return self.membership.meta_members()

    def join_cluster_local(
        self, request: internal_pb2.JoinClusterRequest, *, timeout_s: float
    ) -> internal_pb2.MetaMembersResponse:
        """Internal.JoinCluster: add a broker to the metadata group (leader only)."""
        assert self.membership is not None
        return self.membership.join_cluster(request, timeout_s)

    def report_local(self, report: internal_pb2.BrokerReport) -> internal_pb2.ReportAck:
        if not self.meta.is_leader():
            raise errors.NotLeader("not the metadata leader", leader_hint=self.meta_leader_addr())
        self.reports.record(report)
        draining = self.membership is not None and report.broker_id in self.membership.draining
        return internal_pb2.ReportAck(metadata_leader=self.broker_id, draining=draining)

    def _topic(self, name: str) -> TopicInfo:
        info = self._known_topic(name)
        if info is None:
            raise errors.UnknownTopic(f"topic {name!r} does not exist: create it first")
        return info

    def _known_topic(self, name: str) -> TopicInfo | None:
        """The topic from this broker's table copy. A copy may be behind (a restarted broker
        still replaying its metadata log): when the topic is missing here and this broker is
        not the metadata leader, the leader is asked; a topic that exists there is waited for
        (up to TABLE_CATCH_UP_S), else Unavailable (retriable), never UnknownTopic."""
        info = self.meta.table.topic(name)
        if info is not None or self.meta.is_leader():
            return info
        try:
            self.describe_topic(api_pb2.DescribeTopicRequest(name=name), timeout_s=TABLE_CATCH_UP_S)
        except errors.UnknownTopic:
            return None
        except errors.RaftqError as exc:
            raise errors.Unavailable(
                f"topic {name!r} is not in this broker's metadata and the metadata leader did "
                f"not confirm it ({exc.message}): retry"
            ) from exc
        if self.meta.wait_until(lambda table: table.topic(name) is not None, TABLE_CATCH_UP_S):
            return self.meta.table.topic(name)
        raise errors.Unavailable(
            f"topic {name!r} exists but this broker's metadata is still catching up: retry"
        )

    # ============================================================================ Producer

    def send(
        self, request: api_pb2.SendRequest, *, timeout_s: float | None
    ) -> api_pb2.SendResponse:
        timeout = _timeout(timeout_s)
        topic = self._topic(request.topic)
        config = topic.config
        if request.HasField("producer_id") and not request.HasField("partition"):
            raise errors.InvalidArgument(
                "producer_id needs partition: idempotent sequences are per partition"
            )
        if request.HasField("partition"):
            self.router.check_partition(request.topic, request.partition)
        if request.values:
            return self._send_values(request, topic, timeout)
        results = [api_pb2.SendResult() for _ in request.records]
        by_partition: dict[int, list[int]] = defaultdict(list)
        spread = self._next_counter()
        for i, record in enumerate(request.records):
            problem = check_record(record, config)
            if problem is not None:
                results[i].error, results[i].message = problem.code, problem.message  # type: ignore[assignment]
                continue
            if request.HasField("partition"):
                partition = request.partition
            elif record.HasField("key"):
                partition = partition_for(record.key, topic.partition_count, 0)
            else:  # a batch without keys goes to one partition, the next one each time
                partition = spread % topic.partition_count
            results[i].partition = partition
            by_partition[partition].append(i)
        for partition, indexes in sorted(by_partition.items()):
            append = partition_pb2.Append(
                records=[request.records[i] for i in indexes],
                producer_id=request.producer_id,
                sequence=request.sequence,
            )
            try:
                outcome = self._append(request.topic, partition, append, timeout)
                hint = self._forwarded_to(request.topic, partition)
                for i, record_result in zip(indexes, outcome.records, strict=True):
                    results[i].offset = record_result.offset
                    results[i].duplicate = record_result.duplicate
                    results[i].error = record_result.error
                    results[i].message = record_result.message
                    results[i].leader_hint = hint
            except errors.RaftqError as exc:
                for i in indexes:
                    results[i].error, results[i].message = exc.code, exc.message  # type: ignore[assignment]
                    results[i].leader_hint = exc.leader_hint
        return api_pb2.SendResponse(results=results, request_id=request.request_id)

    def _send_values(
        self, request: api_pb2.SendRequest, topic: TopicInfo, timeout: float
    ) -> api_pb2.SendResponse:
        """The bare-value fast path: one partition, one Append, one SendResult covering all."""
        partition, append = self._values_append(request, topic)
        try:
            outcome = self._append(request.topic, partition, append, timeout)
        except errors.RaftqError as exc:
            return _values_answer(request, partition, None, exc)
        hint = self._forwarded_to(request.topic, partition)
        return _values_answer(request, partition, outcome, None, hint)

    def _values_append(
        self, request: api_pb2.SendRequest, topic: TopicInfo
    ) -> tuple[int, partition_pb2.Append]:
        """Check a values request; its partition and Append. Raises for a bad request."""
        if request.records:
            raise errors.InvalidArgument("a send carries records or values, not both")
        problem = check_values(request.values, topic.config)
        if problem is not None:
            raise errors.error_for(problem.code, problem.message)
        if request.HasField("partition"):
            partition = request.partition
        else:
            partition = self._next_counter() % topic.partition_count
        append = partition_pb2.Append(
            values=request.values, producer_id=request.producer_id, sequence=request.sequence
        )
        return partition, append

    def send_async(
        self,
        request: api_pb2.SendRequest,
        on_done: Callable[[api_pb2.SendResponse], None],
    ) -> bool:
        """A send stream's fast path: a values request for a partition whose leader is on this
        broker goes straight to that replica's proposer, no thread waiting on it;
        ``on_done(response)`` runs once, here or on the Raft driver thread. False (nothing
        done) for any other request: ``send`` it. Raises like ``send`` for a bad request."""
        if not request.values or not request.HasField("partition"):
            return False
        replica = self.router.local_leader(request.topic, request.partition)
        if replica is None or not replica.configured():  # send waits for the config
            return False
        topic = self._topic(request.topic)
        self.router.check_partition(request.topic, request.partition)
        partition, append = self._values_append(request, topic)

        def done(
            outcome: partition_pb2.CommandResult | None, error: errors.RaftqError | None
        ) -> None:
            on_done(_values_answer(request, partition, outcome, error))

        replica.append_async(append, done)
        return True

    def _append(
        self, topic: str, partition: int, append: partition_pb2.Append, timeout: float
    ) -> partition_pb2.CommandResult:
        """Propose an Append on the partition's leader; a whole-command error raises."""
        command = partition_pb2.PartitionCommand(append=append)
        outcome = self.router.propose(topic, partition, command, timeout).result
        if outcome.error:
            raise errors.error_for(outcome.error, outcome.message)
        return outcome

    def _forwarded_to(self, topic: str, partition: int) -> str:
        """After a send this broker forwarded: the leader's client address, so the client sends
        there directly from now on (a broker that leads answers ""). Kafka answers such a send
        NOT_LEADER and the client refreshes its metadata; forwarding keeps the send and still
        tells the client where to go."""
        if self.router.local_leader(topic, partition) is not None:
            return ""
        hint = self.router.leader_hint(topic, partition)
        return "" if hint == self.router.client_addr else hint

    def _next_counter(self) -> int:
        with self._counter_lock:
            self._counter += 1
            return self._counter

    # ============================================================================ groups

    def join_group(
        self, request: api_pb2.JoinGroupRequest, *, timeout_s: float | None, principal: str = ""
    ) -> api_pb2.JoinGroupResponse:
        """Join as a new member (the broker issues its id, bound to ``principal``) or rejoin
        with a member id this principal was issued. Raises UnknownMember for a member id the
        group does not hold, PermissionDenied for another principal's."""
        response: api_pb2.JoinGroupResponse = self._leader_only(
            "join_group", request, timeout_s, principal
        )
        return response

    def _join_group(
        self, request: api_pb2.JoinGroupRequest, timeout_s: float, principal: str = ""
    ) -> api_pb2.JoinGroupResponse:
        before = self.meta.table.group(request.group)
        if request.HasField("member_id"):
            member_id = request.member_id
            if before is None or member_id not in before.members:
                raise errors.UnknownMember(
                    f"{member_id!r} is not in group {request.group!r}: member ids are issued by "
                    "the broker; join without one to get a new member id"
                )
        else:
            member_id = f"m-{uuid.uuid4().hex}"
        data = self.frontend.join_group(
            self.meta.table,
            request.group,
            member_id,
            list(request.topics),
            request.session_timeout_ms,
            start_from=request.start_from,
            principal=principal,
            now_ms=self.now_ms(),
        )
        result = self.meta_propose(data, timeout_s)
        group = self.meta.table.group(request.group)
        assert group is not None and member_id in group.members
        member = group.members[member_id]
        self.sessions.touch(request.group, member_id, member.session_timeout_ms)
        self._release_revoked(before, group)
        return api_pb2.JoinGroupResponse(
            member_id=member_id,
            generation=result.generation or group.generation,
            assignment=_assignment(member),
            session_timeout_ms=member.session_timeout_ms,
            heartbeat_interval_ms=min(
                self.heartbeat_interval_ms, max(1, member.session_timeout_ms // 3)
            ),
        )

    def heartbeat(
        self, request: api_pb2.HeartbeatRequest, *, timeout_s: float | None
    ) -> api_pb2.HeartbeatResponse:
        response: api_pb2.HeartbeatResponse = self._leader_only("heartbeat", request, timeout_s)
        return response

    def _heartbeat(
        self, request: api_pb2.HeartbeatRequest, timeout_s: float
    ) -> api_pb2.HeartbeatResponse:
        group = self.meta.table.group(request.group)
        if group is None or request.member_id not in group.members:
            raise errors.UnknownMember(
                f"{request.member_id!r} is not in group {request.group!r} (session expired or "
                "left): join again"
            )
        member = group.members[request.member_id]
        self.sessions.touch(request.group, request.member_id, member.session_timeout_ms)
        if request.generation != group.generation:
            raise errors.Fenced(
                f"generation {request.generation} is not the group's {group.generation}: "
                "rejoin with your member_id to get the current assignment"
            )
        return api_pb2.HeartbeatResponse(
            generation=group.generation, assignment=_assignment(member)
        )

    def leave_group(
        self, request: api_pb2.LeaveGroupRequest, *, timeout_s: float | None
    ) -> api_pb2.LeaveGroupResponse:
        response: api_pb2.LeaveGroupResponse = self._leader_only("leave_group", request, timeout_s)
        return response

    def _leave_group(
        self, request: api_pb2.LeaveGroupRequest, timeout_s: float
    ) -> api_pb2.LeaveGroupResponse:
        group = self.meta.table.group(request.group)
        if group is None or request.member_id not in group.members:
            raise errors.UnknownMember(f"{request.member_id!r} is not in group {request.group!r}")
        self.remove_members(request.group, [request.member_id], "leave", timeout_s)
        return api_pb2.LeaveGroupResponse()

    def remove_members(self, group: str, members: list[str], reason: str, timeout_s: float) -> None:
        """Leave or session expiry (metadata leader): replicate, then release their leases."""
        before = self.meta.table.group(group)
        data = self.frontend.leave_group(
            self.meta.table, group, members, reason=reason, now_ms=self.now_ms()
        )
        self.meta_propose(data, timeout_s)
        self.sessions.forget(group, members)
        logger.info("[group=%s] members %s removed (%s)", group, members, reason)
        self._release_revoked(before, self.meta.table.group(group))

    def _release_revoked(self, before: GroupInfo | None, after: GroupInfo | None) -> None:
        """Release the leases of members that lost partitions (asynchronously, best effort:
        leases also expire on their own)."""
        if before is None:
            return
        revoked: list[tuple[str, int, str]] = []
        for member_id, member in before.members.items():
            kept = after.members.get(member_id) if after is not None else None
            still = set(kept.assignment) if kept is not None else set()
            revoked += [(t, p, member_id) for t, p in member.assignment if (t, p) not in still]
        group = before.name
        generation = after.generation if after is not None else before.generation + 1
        for topic, partition, member_id in revoked:
            self._background.submit(self._release, topic, partition, group, member_id, generation)
        if revoked:
            again = threading.Timer(
                RELEASE_AGAIN_S, self._release_again, (group, revoked, generation)
            )
            again.daemon = True
            again.start()

    def _release_again(
        self, group: str, revoked: list[tuple[str, int, str]], generation: int
    ) -> None:
        """The second release of revoked partitions, skipping any the member owns again. A
        poll that checked the member's generation before the rebalance can have its Lease
        applied after the first Release; without this its records would wait for lease_ms."""
        for topic, partition, member_id in revoked:
            if (topic, partition) not in assigned_partitions(self.meta.table, group, member_id):
                try:
                    self._background.submit(
                        self._release, topic, partition, group, member_id, generation
                    )
                except RuntimeError:  # shut down
                    return

    def _release(
        self, topic: str, partition: int, group: str, member_id: str, generation: int = 0
    ) -> None:
        """End every lease ``member_id`` holds on the partition (best effort: leases also
        expire on their own); a ``generation`` also fences Leases from older generations."""
        command = partition_pb2.PartitionCommand(
            release=partition_pb2.Release(group=group, member=member_id, generation=generation)
        )
        try:
            response = self.router.propose(topic, partition, command, DEFAULT_TIMEOUT_S)
        except errors.RaftqError as exc:
            logger.warning(
                "[group=%s topic/partition=%s/%d] release for %s failed (%s): leases will expire",
                group,
                topic,
                partition,
                member_id,
                exc,
            )
            return
        if response.result.count:
            logger.info(
                "[group=%s topic/partition=%s/%d] released %d leases of %s",
                group,
                topic,
                partition,
                response.result.count,
                member_id,
            )

    def _member(
        self, group_name: str, member_id: str, generation: int
    ) -> tuple[GroupInfo, MemberInfo]:
        """The member, fenced by generation. Normal errors: UnknownMember, Fenced, Unavailable.

        The metadata leader's table is the truth. Another broker whose copy lacks the member
        (or its generation) may only be behind: it asks the leader (a forwarded Heartbeat,
        which also counts as one) instead of sleeping on a guess, so a bad member id is
        answered at once; for a member the leader knows it waits, on the table's condition,
        until its own copy has applied it (replication lag, at most TABLE_CATCH_UP_S)."""

        def current(table: Table) -> tuple[GroupInfo, MemberInfo] | None:
            group = table.group(group_name)
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None or generation != group.generation:
                return None
            return group, member

        found = current(self.meta.table)
        if found is not None:
            return found
        group = self.meta.table.group(group_name)
        member = group.members.get(member_id) if group is not None else None
        behind = group is None or member is None or generation > group.generation
        if behind and not self.meta.is_leader():
            heartbeat = api_pb2.HeartbeatRequest(
                group=group_name, member_id=member_id, generation=generation
            )
            self._leader_only("heartbeat", heartbeat, TABLE_CATCH_UP_S)  # raises the verdict
            if self.meta.wait_until(lambda table: current(table) is not None, TABLE_CATCH_UP_S):
                found = current(self.meta.table)
                if found is not None:
                    return found
            raise errors.Unavailable(
                f"this broker's copy of group {group_name!r} is behind the metadata leader's: retry"
            )
        if group is None or member is None:
            raise errors.UnknownMember(
                f"{member_id!r} is not in group {group_name!r}: join the group again"
            )
        raise errors.Fenced(
            f"generation {generation} is not group {group_name!r}'s current {group.generation}: "
            "rejoin to get the current assignment"
        )

    # ============================================================================ consuming

    def poll(
        self,
        request: api_pb2.PollRequest,
        *,
        timeout_s: float | None,
        active: Callable[[], bool] = lambda: True,
    ) -> api_pb2.PollResponse:
        """Lease ready records of the member's partitions, long-polling up to max_wait_ms.
        A wait ends early, leasing nothing more, once ``active()`` is False (the caller
        cancelled: its thread and long-poll slot go back). Normal errors: UnknownMember,
        Fenced, Unavailable."""
        _, member = self._member(request.group, request.member_id, request.generation)
        partitions = list(member.assignment)
        now = time.monotonic()
        deadline = now + min(request.max_wait_ms / 1000, _timeout(timeout_s))
        outcome_deadline = now + min(LEASE_OUTCOME_WAIT_S, max(0.5, _timeout(timeout_s) - 0.5))
        start = self._next_counter()
        while True:
            out = self._lease_round(
                request, partitions, start, max(deadline, outcome_deadline), member.start_from
            )
            if out or time.monotonic() >= deadline:
                return self._deliverable(request, out)
            with self.data_arrived:
                self.data_arrived.wait(min(POLL_SLICE_S, max(0.0, deadline - time.monotonic())))
            if not active():
                return _poll_response([], compact=request.compact)
            _, member = self._member(request.group, request.member_id, request.generation)
            partitions = list(member.assignment)

    def _lease_round(
        self,
        request: api_pb2.PollRequest,
        partitions: Sequence[tuple[str, int]],
        start: int,
        deadline: float,
        start_from: int = 0,
    ) -> list[tuple[str, int, partition_pb2.CommandResult]]:
        """Lease from the member's partitions in turn until max_records: per partition that
        gave records, (topic, partition, the Lease's result: deliveries or columns)."""
        out: list[tuple[str, int, partition_pb2.CommandResult]] = []
        got = 0
        want = request.max_records
        # Shared by the partitions in turn: the answer carries at most the budget plus the one
        # record that crossed it (each Lease answers at least one record, Kafka's rule).
        budget = self.byte_budget(request.max_bytes)
        for i in range(len(partitions)):
            if want <= 0 or budget <= 0:
                break
            topic, partition = partitions[(start + i) % len(partitions)]
            lease = partition_pb2.Lease(
                group=request.group,
                member=request.member_id,
                max_records=want,
                lease_ms=request.lease_ms if request.HasField("lease_ms") else 0,
                max_bytes=budget,
                start_from=start_from,  # type: ignore[arg-type]
                generation=request.generation,
                columns=request.compact and request.columns,
            )
            try:
                response = self.router.propose(
                    topic,
                    partition,
                    partition_pb2.PartitionCommand(lease=lease),
                    max(0.5, deadline - time.monotonic()),
                    skip_if_idle=True,
                )
            except errors.RaftqError as exc:
                logger.info("[topic/partition=%s/%d] lease skipped: %s", topic, partition, exc)
                continue
            if response.skipped_idle or response.result.error:
                continue
            result = response.result
            taken = len(result.deliveries) or len(result.columns.offsets)
            if taken and not self._still_owns(request, topic, partition):
                # A rebalance moved the partition while this lease was in flight; it may have
                # applied after the revocation's Release: give the records to the new owner.
                self._release(topic, partition, request.group, request.member_id)
                continue
            if taken:
                out.append((topic, partition, result))
                got += taken
                budget -= result.ByteSize()
            want = request.max_records - got
        return out

    def _deliverable(
        self,
        request: api_pb2.PollRequest,
        out: list[tuple[str, int, partition_pb2.CommandResult]],
    ) -> api_pb2.PollResponse:
        """The poll's answer, within the gRPC message limit: a partition's leases that would
        not fit are taken back (never the first: the budget admits it), never left leased
        to a member that cannot receive them."""
        response = _poll_response(out, compact=request.compact)
        while len(out) > 1 and response.ByteSize() > self.message_bytes_max:
            topic, partition, result = out.pop()
            self._undeliver(topic, partition, request.group, request.member_id, result)
            response = _poll_response(out, compact=request.compact)
        return response

    def undeliver_poll(self, request: api_pb2.PollRequest, response: api_pb2.PollResponse) -> None:
        """A Poll's answer did not reach the client (it was gone when the answer was ready):
        take every delivery in it back (Release.undelivered), so none of them counts toward
        max_deliveries and the records are ready again at once."""
        for batch in response.batches:
            refs = _batch_refs(batch.deliveries, batch.columns)
            self._undeliver_refs(
                batch.topic, batch.partition, request.group, request.member_id, refs
            )
        by_partition: dict[tuple[str, int], list[partition_pb2.DeliveryRef]] = defaultdict(list)
        for record in response.records:
            by_partition[(record.topic, record.partition)].append(
                partition_pb2.DeliveryRef(
                    offset=record.offset, delivery_count=record.delivery_count
                )
            )
        for (topic, partition), refs in by_partition.items():
            self._undeliver_refs(topic, partition, request.group, request.member_id, refs)

    def _undeliver(
        self,
        topic: str,
        partition: int,
        group: str,
        member_id: str,
        result: partition_pb2.CommandResult,
    ) -> None:
        refs = _batch_refs(result.deliveries, result.columns)
        self._undeliver_refs(topic, partition, group, member_id, refs)

    def _undeliver_refs(
        self,
        topic: str,
        partition: int,
        group: str,
        member_id: str,
        refs: list[partition_pb2.DeliveryRef],
    ) -> None:
        """Best effort: a Release.undelivered that fails leaves the leases to expire."""
        if not refs:
            return
        release = partition_pb2.Release(group=group, member=member_id, undelivered=refs)
        command = partition_pb2.PartitionCommand(release=release)
        try:
            response = self.router.propose(topic, partition, command, DEFAULT_TIMEOUT_S)
        except errors.RaftqError as exc:
            logger.warning(
                "[group=%s topic/partition=%s/%d] %d undelivered leases of %s not taken back "
                "(%s): they will expire",
                group,
                topic,
                partition,
                len(refs),
                member_id,
                exc,
            )
            return
        logger.info(
            "[group=%s topic/partition=%s/%d] took back %d undelivered leases of %s",
            group,
            topic,
            partition,
            response.result.count,
            member_id,
        )

    def _still_owns(self, request: api_pb2.PollRequest, topic: str, partition: int) -> bool:
        group = self.meta.table.group(request.group)
        if group is None or request.member_id not in group.members:
            return False
        if group.generation == request.generation:
            return True
        return (topic, partition) in group.members[request.member_id].assignment

    def ack(
        self, request: api_pb2.AckRequest, *, timeout_s: float | None
    ) -> api_pb2.SettleResponse:
        if request.batches:
            return self._ack_batches(request, _timeout(timeout_s))

        def command(refs: list[partition_pb2.DeliveryRef]) -> partition_pb2.PartitionCommand:
            return partition_pb2.PartitionCommand(
                ack=partition_pb2.Settle(group=request.group, member=request.member_id, refs=refs)
            )

        return self._settle(request, command, timeout_s)

    def nack(
        self, request: api_pb2.NackRequest, *, timeout_s: float | None
    ) -> api_pb2.SettleResponse:
        """A retried Nack (an attempt failed UNAVAILABLE: a leader that stopped answering may
        have applied it) answers OUTCOME_UNKNOWN where the record's state is what that nack
        would have left (not leased, lease over, dead-lettered): never a wrong definite
        error. Acks need no such care (the machine answers an acked record's retry OK), nor
        does ExtendLease (a lease it extended is still held at the retry)."""

        def command(refs: list[partition_pb2.DeliveryRef]) -> partition_pb2.PartitionCommand:
            nack = partition_pb2.Nack(group=request.group, member=request.member_id, refs=refs)
            if request.HasField("delay_ms"):
                nack.delay_ms = request.delay_ms
            return partition_pb2.PartitionCommand(nack=nack)

        return self._settle(request, command, timeout_s, ambiguous=NACK_AMBIGUOUS)

    def extend_lease(
        self, request: api_pb2.ExtendLeaseRequest, *, timeout_s: float | None
    ) -> api_pb2.SettleResponse:
        def command(refs: list[partition_pb2.DeliveryRef]) -> partition_pb2.PartitionCommand:
            extend = partition_pb2.ExtendLease(
                group=request.group, member=request.member_id, refs=refs, lease_ms=request.lease_ms
            )
            return partition_pb2.PartitionCommand(extend_lease=extend)

        # Each extended lease is answered with its partition's deadline (set by _settle).
        return self._settle(request, command, timeout_s)

    def _ack_batches(self, request: api_pb2.AckRequest, timeout: float) -> api_pb2.SettleResponse:
        """The compact Ack: one Settle per partition with the packed offsets copied as they
        are; only the refs that failed are answered."""
        _, member = self._member(request.group, request.member_id, request.generation)
        owned = set(member.assignment)
        response = api_pb2.SettleResponse()
        for batch in request.batches:
            topic, partition = batch.topic, batch.partition
            try:
                if (topic, partition) not in owned:
                    raise errors.Fenced(
                        f"{topic}/{partition} is not assigned to this member in generation "
                        f"{request.generation}: the record was released to its new owner"
                    )
                settle = partition_pb2.Settle(
                    group=request.group,
                    member=request.member_id,
                    offsets=batch.offsets,
                    delivery_counts=batch.delivery_counts,
                )
                command = partition_pb2.PartitionCommand(ack=settle)
                outcome = self.router.propose(topic, partition, command, timeout).result
                if outcome.error:
                    raise errors.error_for(outcome.error, outcome.message)
                if outcome.refs:
                    counts = dict(zip(batch.offsets, batch.delivery_counts, strict=True))
                    for r in outcome.refs:
                        ref = api_pb2.RecordRef(
                            topic=topic,
                            partition=partition,
                            offset=r.offset,
                            delivery_count=counts.get(r.offset, 0),
                        )
                        response.failed.add(ref=ref, error=r.error, message=r.message)
            except errors.RaftqError as exc:
                for offset, count in zip(batch.offsets, batch.delivery_counts, strict=True):
                    ref = api_pb2.RecordRef(
                        topic=topic, partition=partition, offset=offset, delivery_count=count
                    )
                    response.failed.add(
                        ref=ref, error=exc.code, message=exc.message, leader_hint=exc.leader_hint
                    )
        return response

    def _settle(
        self,
        request: Any,
        command: Callable[[list[partition_pb2.DeliveryRef]], partition_pb2.PartitionCommand],
        timeout_s: float | None,
        *,
        ambiguous: frozenset[int] = frozenset(),
    ) -> api_pb2.SettleResponse:
        """One settle command per partition on its leader. Per-ref answers in ``ambiguous``
        become OUTCOME_UNKNOWN when an earlier attempt's outcome was unknown (see nack)."""
        timeout = _timeout(timeout_s)
        _, member = self._member(request.group, request.member_id, request.generation)
        owned = set(member.assignment)
        results = [api_pb2.RefOutcome(ref=ref) for ref in request.refs]
        by_partition: dict[tuple[str, int], list[int]] = defaultdict(list)
        for i, ref in enumerate(request.refs):
            if (ref.topic, ref.partition) not in owned:
                results[i].error = ErrorCode.FENCED
                results[i].message = (
                    f"{ref.topic}/{ref.partition} is not assigned to this member in generation "
                    f"{request.generation}: the record was released to its new owner"
                )
                continue
            by_partition[(ref.topic, ref.partition)].append(i)
        for (topic, partition), indexes in sorted(by_partition.items()):
            refs = [
                partition_pb2.DeliveryRef(
                    offset=request.refs[i].offset, delivery_count=request.refs[i].delivery_count
                )
                for i in indexes
            ]
            unknown: list[bool] = []  # an attempt failed with its outcome unknown
            try:
                response = self.router.propose(
                    topic,
                    partition,
                    command(refs),
                    timeout,
                    on_unknown=partial(unknown.append, True),
                )
                outcome = response.result
                if outcome.error:
                    raise errors.error_for(outcome.error, outcome.message)
                for i, ref_result in zip(indexes, outcome.refs, strict=True):
                    results[i].error = ref_result.error
                    results[i].message = ref_result.message
                    results[i].dead_lettered = ref_result.dead_lettered
                    if ref_result.error == ErrorCode.OK:  # ExtendLease: partition time, 0 else
                        results[i].lease_deadline_ms = outcome.lease_deadline_ms
                    if unknown and ref_result.error in ambiguous:
                        results[i].error = ErrorCode.OUTCOME_UNKNOWN
                        results[i].message = f"{OUTCOME_UNKNOWN_HINT}; retry: {ref_result.message}"
            except errors.RaftqError as exc:
                for i in indexes:
                    results[i].error, results[i].message = exc.code, exc.message  # type: ignore[assignment]
                    results[i].leader_hint = exc.leader_hint
        return api_pb2.SettleResponse(results=results)

    # ============================================================================ Log

    def fetch(
        self, request: api_pb2.FetchRequest, *, timeout_s: float | None
    ) -> api_pb2.FetchResponse:
        read = internal_pb2.ReadRequest(
            topic=request.topic,
            partition=request.partition,
            fetch=internal_pb2.FetchRead(
                offset=request.offset,
                max_records=request.max_records,
                max_bytes=self.byte_budget(request.max_bytes),
            ),
        )
        response = self.router.read(read, _timeout(timeout_s))
        return api_pb2.FetchResponse(
            records=response.records, log_start=response.log_start, end=response.end
        )

    def list_offsets(
        self, request: api_pb2.ListOffsetsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListOffsetsResponse:
        topic = self._topic(request.topic)
        out = api_pb2.ListOffsetsResponse()
        for partition in range(topic.partition_count):
            read = internal_pb2.ReadRequest(
                topic=request.topic, partition=partition, offsets=internal_pb2.OffsetsRead()
            )
            response = self.router.read(read, _timeout(timeout_s))
            out.partitions.add(partition=partition, log_start=response.log_start, end=response.end)
        return out

    def producer_state(
        self, request: api_pb2.ProducerStateRequest, *, timeout_s: float | None
    ) -> api_pb2.ProducerStateResponse:
        """An idempotent producer's last applied batch per partition, read on each leader."""
        topic = self._topic(request.topic)
        partitions = list(request.partitions) or list(range(topic.partition_count))
        out = api_pb2.ProducerStateResponse()
        for partition in partitions:
            self.router.check_partition(request.topic, partition)
            read = internal_pb2.ReadRequest(
                topic=request.topic,
                partition=partition,
                producer=internal_pb2.ProducerRead(producer_id=request.producer_id),
            )
            response = self.router.read(read, _timeout(timeout_s))
            out.partitions.add(
                partition=partition,
                known=response.producer_known,
                last_sequence=response.producer_last_sequence,
                last_offsets=response.producer_last_offsets,
                records=response.producer_records if response.producer_known else 0,
            )
        return out

    # ============================================================================ Admin

    def create_topic(
        self, request: api_pb2.CreateTopicRequest, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription:
        response: api_pb2.TopicDescription = self._leader_only("create_topic", request, timeout_s)
        return response

    def live_brokers(self) -> set[int]:
        """Brokers that may take new replicas: reporting or heard on their raft link within
        the reports' liveness window, and not being removed. The links make a fresh metadata
        leader (no reports yet) and a broker whose reports are late (a starved backend
        thread) see every broker that is up; only the metadata leader's view is right for
        placement, so anything that creates topics runs there."""
        draining = self.membership.draining if self.membership is not None else set()
        return (self.reports.alive() | self.heard_brokers() | {self.broker_id}) - draining

    def remove_broker(
        self, request: api_pb2.RemoveBrokerRequest, *, timeout_s: float | None
    ) -> api_pb2.RemoveBrokerResponse:
        """Runs on the metadata leader in slices (a forwarded call is cut at the internal
        timeout); each slice resumes where the last one stopped (broker/membership.py)."""
        deadline = time.monotonic() + _timeout(timeout_s)
        while True:
            try:
                response: api_pb2.RemoveBrokerResponse = self._leader_only(
                    "remove_broker", request, deadline - time.monotonic()
                )
                return response
            except (errors.Timeout, errors.NotLeader):
                if time.monotonic() >= deadline - 0.1:
                    raise
                time.sleep(0.1)

    def _remove_broker(
        self, request: api_pb2.RemoveBrokerRequest, timeout_s: float
    ) -> api_pb2.RemoveBrokerResponse:
        assert self.membership is not None
        return self.membership.remove_broker(request.broker_id, timeout_s)

    def move_partition(
        self, request: api_pb2.MovePartitionRequest, *, timeout_s: float | None
    ) -> api_pb2.MovePartitionResponse:
        """On the metadata leader, in slices like remove_broker (broker/membership.py)."""
        deadline = time.monotonic() + _timeout(timeout_s)
        while True:
            try:
                response: api_pb2.MovePartitionResponse = self._leader_only(
                    "move_partition", request, deadline - time.monotonic()
                )
                return response
            except (errors.Timeout, errors.NotLeader):
                if time.monotonic() >= deadline - 0.1:
                    raise
                time.sleep(0.1)

    def _move_partition(
        self, request: api_pb2.MovePartitionRequest, timeout_s: float
    ) -> api_pb2.MovePartitionResponse:
        assert self.membership is not None
        return self.membership.move_partition(
            request.topic, request.partition, list(request.replicas), timeout_s
        )

    def add_partitions(
        self, request: api_pb2.AddPartitionsRequest, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription:
        response: api_pb2.TopicDescription = self._leader_only("add_partitions", request, timeout_s)
        return response

    def _add_partitions(
        self, request: api_pb2.AddPartitionsRequest, timeout_s: float
    ) -> api_pb2.TopicDescription:
        """Grow the topic, wait for the new partitions' leaders, describe it. Raises
        UnknownTopic, InvalidArgument (metadata/frontend.py add_partitions)."""
        data = self.frontend.add_partitions(
            self.meta.table,
            request.name,
            request.partitions,
            live_ids=self.live_brokers(),
            now_ms=self.now_ms(),
        )
        self.meta_propose(data, timeout_s)
        self.wait_for_leaders(request.name, min(timeout_s, LEADER_WAIT_S))
        return self._describe_topic(api_pb2.DescribeTopicRequest(name=request.name), timeout_s)

    def rebalance_leaders(
        self, request: api_pb2.RebalanceLeadersRequest, *, timeout_s: float | None
    ) -> api_pb2.RebalanceLeadersResponse:
        response: api_pb2.RebalanceLeadersResponse = self._leader_only(
            "rebalance_leaders", request, timeout_s
        )
        return response

    def backup_metadata(
        self, request: api_pb2.BackupMetadataRequest, *, timeout_s: float | None
    ) -> api_pb2.BackupMetadataResponse:
        response: api_pb2.BackupMetadataResponse = self._leader_only(
            "backup_metadata", request, timeout_s
        )
        return response

    def _backup_metadata(
        self, _request: api_pb2.BackupMetadataRequest, _timeout_s: float
    ) -> api_pb2.BackupMetadataResponse:
        return backup_source.metadata(self.meta.table)

    def backup_partition(
        self, request: api_pb2.BackupPartitionRequest, cancelled: threading.Event
    ) -> Iterator[api_pb2.BackupChunk]:
        """The BackupPartition stream, on the partition's leader (broker/backup_source.py)."""
        key = (request.topic, request.partition)
        return backup_source.partition_chunks(
            request,
            self.meta.table,
            self.replicas(key),
            lambda: self.router.leader_hint(*key),
            self.backup_dir,
            cancelled,
        )

    def _off_preferred(self, table: Table) -> set[tuple[str, int]]:
        """Partitions whose reported leader is not their preferred replica, a live broker."""
        live = self.live_brokers()
        return {
            key
            for key, view in self.reports.partitions(table).items()
            if view.leader
            and (replicas := table.replicas(*key))
            and replicas[0] != view.leader
            and replicas[0] in live
        }

    def _rebalance_leaders(
        self, request: api_pb2.RebalanceLeadersRequest, timeout_s: float
    ) -> api_pb2.RebalanceLeadersResponse:
        """On the metadata leader: each broker leading a partition off its preferred replica
        hands it over (``lead_preferred_here``), then the reports are awaited (within the call,
        at most LEADER_WAIT_S). Raises Timeout/Unavailable only when no broker was reached."""
        # a second of the call's time is left for the answer to travel back (forwarded calls)
        deadline = time.monotonic() + max(0.1, min(timeout_s - 1.0, LEADER_WAIT_S))
        table = self.meta.table
        before = self._off_preferred(table)
        views = self.reports.partitions(table)
        for broker_id in sorted({views[key].leader for key in before}):
            left = max(deadline - time.monotonic(), 0.001)
            try:
                if broker_id == self.broker_id:
                    self.lead_preferred_here(request, left)
                elif (info := table.broker(broker_id)) is not None:
                    self.internal.forward(
                        info.client_addr, "lead_preferred_here", request.SerializeToString(), left
                    )
            except errors.RaftqError as exc:  # that broker's partitions stay: counted remaining
                logger.info("rebalance leaders: broker %d: %s", broker_id, exc)
        remaining = before
        while remaining and time.monotonic() < deadline:
            time.sleep(0.05)
            table = self.meta.table
            views = self.reports.partitions(table)
            # moved = reported led by the preferred replica (no leader mid-transfer is not)
            remaining = {
                key
                for key in remaining
                if key not in views or views[key].leader != (table.replicas(*key) or (0,))[0]
            }
        return api_pb2.RebalanceLeadersResponse(
            moved=len(before - remaining), remaining=len(remaining)
        )

    def lead_preferred_here(
        self, request: api_pb2.RebalanceLeadersRequest, timeout_s: float
    ) -> api_pb2.RebalanceLeadersResponse:
        """Hand every partition this broker leads to its preferred replica (when connected);
        answers how many transfers started."""
        table = self.meta.table
        started = 0
        for key in table.partitions_of(self.broker_id):
            replica = self.replicas(key)
            if replica is not None and replica.is_leader() and self.prefer_leader(replica, table):
                started += 1
        return api_pb2.RebalanceLeadersResponse(moved=started)

    def _create_topic(
        self, request: api_pb2.CreateTopicRequest, timeout_s: float
    ) -> api_pb2.TopicDescription:
        spec = TopicSpec(
            name=request.name,
            partitions=request.partitions if request.HasField("partitions") else None,
            replication_factor=(
                request.replication_factor if request.HasField("replication_factor") else None
            ),
            config=_config_changes(request.config),
        )
        data = self.frontend.create_topic(
            self.meta.table, spec, live_ids=self.live_brokers(), now_ms=self.now_ms()
        )
        self.meta_propose(data, timeout_s)
        self.wait_for_leaders(request.name, min(timeout_s, LEADER_WAIT_S))
        return self._describe_topic(api_pb2.DescribeTopicRequest(name=request.name), timeout_s)

    def create_dead_letter_topic(self, source: str, timeout_s: float) -> None:
        """Create ``source``'s dead-letter topic unless it exists, on the metadata leader: its
        replication factor comes from the leader's view of live brokers (a partition leader
        elsewhere knows only itself). Raises UnknownTopic, Unavailable, Timeout (normal)."""
        request = api_pb2.DescribeTopicRequest(name=source)
        self._leader_only("create_dead_letter_topic", request, timeout_s)

    def _create_dead_letter_topic(
        self, request: api_pb2.DescribeTopicRequest, timeout_s: float
    ) -> api_pb2.TopicDescription:
        table = self.meta.table
        plan = self.frontend.dead_letter_topic(
            table, request.name, live_ids=self.live_brokers(), now_ms=self.now_ms()
        )
        if plan is not None:
            self.meta_propose(plan, timeout_s)
        source = table.topic(request.name)
        return api_pb2.TopicDescription(name=source.config.dead_letter_topic if source else "")

    def wait_for_leaders(self, topic: str, timeout_s: float) -> bool:
        """Wait (on the metadata leader) until every partition of ``topic`` reports a leader."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            info = self.meta.table.topic(topic)
            if info is None:
                return False
            views = self.reports.partitions(self.meta.table)
            if all(
                views.get((topic, p)) is not None and views[(topic, p)].leader
                for p in range(info.partition_count)
            ):
                return True
            time.sleep(0.05)
        return False

    def delete_topic(
        self, request: api_pb2.DeleteTopicRequest, *, timeout_s: float | None
    ) -> api_pb2.DeleteTopicResponse:
        response: api_pb2.DeleteTopicResponse = self._leader_only(
            "delete_topic", request, timeout_s
        )
        return response

    def _delete_topic(
        self, request: api_pb2.DeleteTopicRequest, timeout_s: float
    ) -> api_pb2.DeleteTopicResponse:
        data = self.frontend.delete_topic(self.meta.table, request.name, now_ms=self.now_ms())
        self.meta_propose(data, timeout_s)
        return api_pb2.DeleteTopicResponse()

    def alter_topic_config(
        self, request: api_pb2.AlterTopicConfigRequest, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription:
        response: api_pb2.TopicDescription = self._leader_only(
            "alter_topic_config", request, timeout_s
        )
        return response

    def _alter_topic_config(
        self, request: api_pb2.AlterTopicConfigRequest, timeout_s: float
    ) -> api_pb2.TopicDescription:
        data = self.frontend.alter_topic_config(
            self.meta.table, request.name, _config_changes(request.config), now_ms=self.now_ms()
        )
        self.meta_propose(data, timeout_s)
        return self._describe_topic(api_pb2.DescribeTopicRequest(name=request.name), timeout_s)

    def list_topics(
        self, request: api_pb2.ListTopicsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListTopicsResponse:
        table = self.meta.table
        return api_pb2.ListTopicsResponse(
            topics=[
                api_pb2.TopicSummary(
                    name=name,
                    partitions=table.topics[name].partition_count,
                    replication_factor=table.topics[name].replication_factor,
                )
                for name in sorted(table.topics)
            ]
        )

    def describe_topic(
        self, request: api_pb2.DescribeTopicRequest, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription:
        response: api_pb2.TopicDescription = self._leader_only("describe_topic", request, timeout_s)
        return response

    def _describe_topic(
        self, request: api_pb2.DescribeTopicRequest, timeout_s: float
    ) -> api_pb2.TopicDescription:
        table = self.meta.table
        info = self._topic(request.name)
        views = self.reports.partitions(table)
        out = api_pb2.TopicDescription(
            name=info.name, replication_factor=info.replication_factor, config=info.config
        )
        for index, partition in enumerate(info.partitions):
            view = views.get((info.name, index))
            described = out.partitions.add(partition=index, replicas=list(partition.replicas))
            if view is None:
                continue
            described.log_start, described.end = view.log_start, view.end
            if view.leader:
                described.leader = view.leader
                leader = table.broker(view.leader)
                described.leader_addr = leader.client_addr if leader else ""
                top = view.applied.get(view.leader, 0)
                described.in_sync.extend(
                    b for b in partition.replicas if top - view.applied.get(b, -(10**9)) <= 1000
                )
        return out

    def list_groups(
        self, request: api_pb2.ListGroupsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListGroupsResponse:
        table = self.meta.table
        return api_pb2.ListGroupsResponse(
            groups=[
                api_pb2.GroupSummary(
                    group=name,
                    generation=group.generation,
                    members=len(group.members),
                    topics=group.topics,
                    empty_since_ms=group.empty_since_ms,
                    deleting=group.deleting,
                )
                for name, group in sorted(table.groups.items())
            ]
        )

    def delete_group(
        self, request: api_pb2.DeleteGroupRequest, *, timeout_s: float | None
    ) -> api_pb2.DeleteGroupResponse:
        response: api_pb2.DeleteGroupResponse = self._leader_only(
            "delete_group", request, timeout_s
        )
        return response

    def _delete_group(
        self, request: api_pb2.DeleteGroupRequest, timeout_s: float
    ) -> api_pb2.DeleteGroupResponse:
        return self.delete_group_here(request.group, timeout_s)

    def delete_group_here(
        self, name: str, timeout_s: float, *, empty_since_ms: int = 0
    ) -> api_pb2.DeleteGroupResponse:
        """On the metadata leader: mark the group deleting (unless it already is), have every
        partition of its topics forget it, then remove it (metadata/machine.py's two steps).
        ``empty_since_ms``: a retention expiry, refused if the group was joined since.

        Raises (normal): UnknownGroup, GroupNotEmpty, Unavailable (a partition did not answer:
        call again; the group stays deleting and the backend finishes it), Timeout.
        """
        deadline = time.monotonic() + timeout_s
        check_name(name, "group")  # InvalidArgument before UnknownGroup
        group = self.meta.table.group(name)
        if group is None:
            raise errors.UnknownGroup(f"group {name!r} does not exist")
        if not group.deleting:
            data = self.frontend.delete_group(
                self.meta.table, name, now_ms=self.now_ms(), empty_since_ms=empty_since_ms
            )
            self.meta_propose(data, max(0.001, deadline - time.monotonic()))
            group = self.meta.table.group(name)
            assert group is not None and group.deleting, f"group {name!r} not marked deleting"
        out = self._forget_group(group, deadline)
        data = self.frontend.delete_group(self.meta.table, name, now_ms=self.now_ms(), finish=True)
        self.meta_propose(data, max(0.001, deadline - time.monotonic()))
        logger.info(
            "[group=%s] deleted: %d partitions forgot it (%d pending rows)",
            name,
            out.partitions,
            out.pending,
        )
        return out

    def seek_group(
        self, request: api_pb2.SeekGroupRequest, *, timeout_s: float | None
    ) -> api_pb2.SeekGroupResponse:
        response: api_pb2.SeekGroupResponse = self._leader_only("seek_group", request, timeout_s)
        return response

    def _seek_group(
        self, request: api_pb2.SeekGroupRequest, timeout_s: float
    ) -> api_pb2.SeekGroupResponse:
        return admin_ops.seek_group(self, request, timeout_s)

    def purge_topic(
        self, request: api_pb2.PurgeTopicRequest, *, timeout_s: float | None
    ) -> api_pb2.PurgeTopicResponse:
        return admin_ops.purge_topic(self, request, _timeout(timeout_s))

    def expire_txns_here(
        self, keys: list[tuple[str, str]], committed_before_ms: int, timeout_s: float
    ) -> None:
        """On the metadata leader: forget the watermarks of ``keys`` ((app id, scope)) not
        raised since ``committed_before_ms``. Raises InvalidArgument, Unavailable, Timeout."""
        data = self.frontend.expire_txns(keys, committed_before_ms, now_ms=self.now_ms())
        self.meta_propose(data, timeout_s)
        logger.info("[group=metadata] txn watermarks expired: %s", keys[:20])

    def _forget_group(self, group: GroupInfo, deadline: float) -> api_pb2.DeleteGroupResponse:
        """ForgetGroup on every partition of the group's existing topics (idempotent)."""
        out = api_pb2.DeleteGroupResponse()
        command = partition_pb2.PartitionCommand(
            forget_group=partition_pb2.ForgetGroup(group=group.name)
        )
        table = self.meta.table
        for topic in table.state_topics(group):
            info = table.topics[topic]
            for partition in range(info.partition_count):
                left = max(0.001, deadline - time.monotonic())
                try:
                    response = self.router.propose(topic, partition, command, left)
                except errors.RaftqError as exc:
                    raise errors.Unavailable(
                        f"group {group.name!r}: {topic}/{partition} did not forget it ({exc}); "
                        "the group stays deleting: delete it again"
                    ) from exc
                if response.result.error:
                    raise errors.error_for(response.result.error, response.result.message)
                out.partitions += 1
                out.pending += response.result.count
        return out

    def describe_group(
        self, request: api_pb2.DescribeGroupRequest, *, timeout_s: float | None
    ) -> api_pb2.GroupDescription:
        response: api_pb2.GroupDescription = self._leader_only("describe_group", request, timeout_s)
        return response

    def _describe_group(
        self, request: api_pb2.DescribeGroupRequest, timeout_s: float
    ) -> api_pb2.GroupDescription:
        table = self.meta.table
        group = table.group(request.group)
        if group is None:
            raise errors.UnknownGroup(f"group {request.group!r} does not exist")
        out = api_pb2.GroupDescription(
            group=group.name,
            generation=group.generation,
            empty_since_ms=group.empty_since_ms,
            deleting=group.deleting,
        )
        for member_id, member in sorted(group.members.items()):
            out.members.add(
                member_id=member_id,
                topics=list(member.topics),
                assignment=_assignment(member),
                session_timeout_ms=member.session_timeout_ms,
                last_heartbeat_ms=self.sessions.last_heartbeat_ms(group.name, member_id),
            )
        deadline = time.monotonic() + timeout_s
        for topic_name in group.topics:  # members or not: every topic it holds state on
            info = table.topic(topic_name)
            if info is None:
                continue
            for partition in range(info.partition_count):
                lag = self._partition_lag(group.name, topic_name, partition, deadline)
                lag.member_id = group.owner(topic_name, partition) or ""
                out.partitions.append(lag)
        return out

    def _partition_lag(
        self, group: str, topic: str, partition: int, deadline: float
    ) -> api_pb2.PartitionLag:
        read = internal_pb2.ReadRequest(
            topic=topic, partition=partition, lag=internal_pb2.LagRead(groups=[group])
        )
        out = api_pb2.PartitionLag(topic=topic, partition=partition)
        try:
            response = self.router.read(read, max(0.2, deadline - time.monotonic()))
        except errors.RaftqError as exc:
            logger.info("[topic/partition=%s/%d] lag unavailable: %s", topic, partition, exc)
            return out
        entry = response.lags[0]
        if entry.known:
            out.committed, out.end, out.lag = entry.committed, entry.end, entry.lag
            out.pending, out.leased = entry.pending, entry.leased
        else:  # the group has not leased here yet: everything is pending
            out.committed, out.end = response.log_start, response.end
            out.lag = out.pending = response.end - response.log_start
        return out

    def describe_cluster(
        self, request: api_pb2.DescribeClusterRequest, *, timeout_s: float | None
    ) -> api_pb2.ClusterDescription:
        response: api_pb2.ClusterDescription = self._leader_only(
            "describe_cluster", request, timeout_s
        )
        return response

    def _describe_cluster(
        self, request: api_pb2.DescribeClusterRequest, timeout_s: float
    ) -> api_pb2.ClusterDescription:
        table = self.meta.table
        alive = self.live_brokers()
        voters = set(self.meta.node.voters())
        out = api_pb2.ClusterDescription(metadata_leader=self.broker_id, topics=len(table.topics))
        for broker_id, broker in sorted(table.brokers.items()):
            out.brokers.add(
                id=broker_id,
                client_addr=broker.client_addr,
                raft_addr=broker.raft_addr,
                rack=broker.rack,
                alive=broker_id in alive,
                metadata_voter=broker.raft_addr in voters,
            )
            if broker_id not in alive:
                out.problems.append(f"broker {broker_id} ({broker.client_addr}) is not reporting")
        views = self.reports.partitions(table)
        for name, info in sorted(table.topics.items()):
            for index, partition in enumerate(info.partitions):
                out.partitions += 1
                view = views.get((name, index))
                if view is None or not view.leader:
                    out.partitions_without_leader += 1
                    out.problems.append(f"{name}/{index} has no leader")
                elif any(b not in alive or b not in view.applied for b in partition.replicas):
                    out.under_replicated_partitions += 1
        if out.partitions_without_leader:
            out.health = api_pb2.UNHEALTHY
        elif out.under_replicated_partitions or len(alive) < len(table.brokers):
            out.health = api_pb2.DEGRADED
        else:
            out.health = api_pb2.HEALTHY
        return out

    def commit_txn(
        self, request: api_pb2.CommitTxnRequest, *, timeout_s: float | None
    ) -> api_pb2.TxnState:
        response: api_pb2.TxnState = self._leader_only("commit_txn", request, timeout_s)
        return response

    def _commit_txn(self, request: api_pb2.CommitTxnRequest, timeout_s: float) -> api_pb2.TxnState:
        """Raise the app's watermark; a stale version is a no-op answering the current one."""
        data = self.frontend.commit_txn(
            self.meta.table,
            request.app_id,
            request.version,
            now_ms=self.now_ms(),
            scope=request.scope,
        )
        result = self.meta_propose(data, timeout_s)
        return api_pb2.TxnState(
            app_id=request.app_id, scope=request.scope, known=True, version=result.txn_version
        )

    def get_txn(
        self, request: api_pb2.GetTxnRequest, *, timeout_s: float | None
    ) -> api_pb2.TxnState:
        response: api_pb2.TxnState = self._leader_only("get_txn", request, timeout_s)
        return response

    def _get_txn(self, request: api_pb2.GetTxnRequest, timeout_s: float) -> api_pb2.TxnState:
        """On the metadata leader, whose table has applied every CommitTxn it answered (a
        leader elected moments ago may still lag; the Spark writer's producer ids cover that)."""
        version = self.meta.table.txn_version(request.app_id, request.scope)
        return api_pb2.TxnState(
            app_id=request.app_id,
            scope=request.scope,
            known=version is not None,
            version=version or 0,
        )

    def update_record(
        self, request: api_pb2.UpdateRecordRequest, *, timeout_s: float | None
    ) -> api_pb2.UpdateRecordResponse:
        update = partition_pb2.UpdateRecord(offset=request.offset)
        if request.HasField("priority"):
            update.priority = request.priority
        if request.HasField("deliver_at_ms"):
            update.deliver_at_ms = request.deliver_at_ms
        self._record_command(
            request.topic,
            request.partition,
            partition_pb2.PartitionCommand(update_record=update),
            timeout_s,
        )
        return api_pb2.UpdateRecordResponse()

    def cancel_record(
        self, request: api_pb2.CancelRecordRequest, *, timeout_s: float | None
    ) -> api_pb2.CancelRecordResponse:
        command = partition_pb2.PartitionCommand(
            cancel_record=partition_pb2.CancelRecord(offset=request.offset)
        )
        self._record_command(request.topic, request.partition, command, timeout_s)
        return api_pb2.CancelRecordResponse()

    def _record_command(
        self,
        topic: str,
        partition: int,
        command: partition_pb2.PartitionCommand,
        timeout_s: float | None,
    ) -> None:
        response = self.router.propose(topic, partition, command, _timeout(timeout_s))
        if response.result.error:
            raise errors.error_for(response.result.error, response.result.message)


def _batch_refs(
    deliveries: Sequence[common_pb2.Delivery], columns: common_pb2.DeliveryColumns
) -> list[partition_pb2.DeliveryRef]:
    """The (offset, delivery_count) of each delivery of one partition's lease answer."""
    if columns.offsets:
        return [
            partition_pb2.DeliveryRef(offset=o, delivery_count=c)
            for o, c in zip(columns.offsets, columns.delivery_counts, strict=True)
        ]
    return [
        partition_pb2.DeliveryRef(offset=d.record.offset, delivery_count=d.delivery_count)
        for d in deliveries
    ]


def assigned_partitions(table: Table, group: str, member_id: str) -> list[tuple[str, int]]:
    info = table.group(group)
    if info is None or member_id not in info.members:
        return []
    return list(info.members[member_id].assignment)


def dead_letter_headers(topic: str, partition: int, row: Any) -> dict[str, bytes]:
    """Headers naming a dead letter's origin and reason (DESIGN § Consuming)."""
    return {
        "raftq.dlq.topic": topic.encode(),
        "raftq.dlq.partition": str(partition).encode(),
        "raftq.dlq.offset": str(row.offset).encode(),
        "raftq.dlq.group": row.group.encode(),
        "raftq.dlq.reason": row.reason.encode(),
        "raftq.dlq.delivery_count": str(row.delivery_count).encode(),
    }


def dead_letter_record(
    topic: str, partition: int, row: Any, topic_id: int = 0
) -> common_pb2.Record:
    """The record a dead letter (an outbox row) becomes in the dead-letter topic. Its
    idempotency key names the dead letter (source topic id, partition, group, offset) in a
    fixed 36 characters, so a forward repeated by a new leader (the old one died between
    forwarding and ``DeadLetterDone``) is deduplicated by the dead-letter partition."""
    stored = common_pb2.StoredRecord.FromString(row.record)
    record = common_pb2.Record()
    record.CopyFrom(stored.record)
    record.deliver_at_ms = 0
    name = f"{topic}\0{topic_id}\0{partition}\0{row.group}\0{row.offset}".encode()
    record.idempotency_key = "dlq/" + hashlib.blake2b(name, digest_size=16).hexdigest()
    record.headers.update(dead_letter_headers(topic, partition, row))
    return record


def dead_letter_partition(record: common_pb2.Record, source_partition: int, partitions: int) -> int:
    """Where a dead letter goes, the same on every attempt (idempotency keys are kept per
    partition): by its key as a producer's record would, else the source partition's
    number modulo the dead-letter topic's partitions (never spread: a retry would land
    elsewhere and be stored twice)."""
    if record.HasField("key"):
        return partition_for(record.key, partitions, 0)
    return source_partition % partitions
