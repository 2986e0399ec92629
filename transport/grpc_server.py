"""The client-facing gRPC server: four services over one :class:`BrokerFacade`.

Each servicer method checks the *shape* of its request (names present and well formed, counts
and durations in range) and answers INVALID_ARGUMENT with a message that says what to fix;
everything else (does the topic exist, is this broker the leader, is the generation current)
is the facade's business. The facade raises typed :mod:`raftq.proto.errors`; :mod:`transport.
grpc_errors` turns them into gRPC status with ``raftq-*`` trailing metadata. Any other
exception is a bug: it is logged and answered as INTERNAL.

The two streaming RPCs are built here on the facade's unary methods, so a facade implements
one method per unary RPC and nothing else:

- ``SendStream``: each request goes to ``facade.send_async`` when the facade has it and takes
  the request (no thread waits on it), else through ``facade.send`` on a pool thread, so a
  stream has many requests in flight; each response carries its request's ``request_id`` and
  leaves as soon as it is ready (in any order); a whole-request error is put in-band and the
  stream goes on. Open streams are capped at ``max_streams`` (each holds a worker); one
  more is refused RESOURCE_EXHAUSTED at once (the Python client then sends unary).
- ``PollStream``: a reader thread adds the client's credits; the writer calls ``facade.poll``
  for at most the outstanding credit, long-polling in slices of ``POLL_STREAM_WAIT_MS``, and
  streams what it gets. A typed error ends the stream with its status.

The server also offers standard gRPC health checking (``grpc.health.v1.Health``: every service
SERVING, or as a :class:`Health` given to ``serve`` decides) and server reflection, v1 and
v1alpha (``grpcurl -plaintext HOST:PORT list``).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent import futures
from typing import Any, Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from raftq.metadata import machine
from raftq.partitions.machine import MAX_DELAY_MS, MAX_LEASE_MS, MAX_LEASE_RECORDS, MAX_REFS
from raftq.proto import api_pb2, api_pb2_grpc, errors, partition_pb2
from raftq.transport import auth
from raftq.transport.grpc_errors import abort
from raftq.transport.tls import KEEPALIVE_SERVER_OPTIONS
from raftq.transport.wire_ints import out_of_range

log = logging.getLogger("raftq.grpc")

NAME_CHARS_MAX = 255  # group, member and producer ids
SEND_RECORDS_MAX = 100_000
POLL_WAIT_MS_MAX = 300_000  # a long poll of at most five minutes
POLL_STREAM_WAIT_MS = 500
PARTITIONS_MAX = 10_000
REPLICATION_FACTOR_MAX = 7
SERVICE_NAMES = tuple(
    api_pb2.DESCRIPTOR.services_by_name[name].full_name
    for name in ("Producer", "Consumer", "Log", "Admin")
)


class BrokerFacade(Protocol):
    """What the gRPC surface needs from a broker: one method per unary RPC.

    Each takes the request protobuf (shape already checked) and ``timeout_s``, the seconds
    left before the client's deadline (None: no deadline), and returns the response protobuf.
    Expected failures raise :class:`raftq.proto.errors.RaftqError` subclasses: NotLeader (with
    ``leader_hint``), UnknownTopic, UnknownGroup, UnknownMember, Fenced, TopicExists,
    InvalidArgument, Timeout, Unavailable... Per-record (Send) and per-ref (Ack, Nack,
    ExtendLease) failures go in the response items instead. Called from many threads at once.

    Optional: ``send_async(request, on_done) -> bool`` takes a SendStream request without a
    thread waiting on it (False: not one it takes; it then goes through ``send``).
    """

    # Producer
    def send(
        self, request: api_pb2.SendRequest, *, timeout_s: float | None
    ) -> api_pb2.SendResponse: ...

    # Consumer
    def join_group(
        self, request: api_pb2.JoinGroupRequest, *, timeout_s: float | None, principal: str = ""
    ) -> api_pb2.JoinGroupResponse:
        """``principal``: the authenticated caller ("" without auth); a new member is bound to
        it, a rejoin with another principal's member id is PermissionDenied, with a member id
        the group does not hold UnknownMember (ids are issued by the broker)."""
        ...

    def heartbeat(
        self, request: api_pb2.HeartbeatRequest, *, timeout_s: float | None
    ) -> api_pb2.HeartbeatResponse: ...

    def leave_group(
        self, request: api_pb2.LeaveGroupRequest, *, timeout_s: float | None
    ) -> api_pb2.LeaveGroupResponse: ...

    def poll(
        self,
        request: api_pb2.PollRequest,
        *,
        timeout_s: float | None,
        active: Callable[[], bool] = ...,
    ) -> api_pb2.PollResponse:
        """``active()`` turns False when the caller cancelled: a waiting poll ends early."""
        ...

    def undeliver_poll(
        self, request: api_pb2.PollRequest, response: api_pb2.PollResponse
    ) -> None: ...

    def ack(
        self, request: api_pb2.AckRequest, *, timeout_s: float | None
    ) -> api_pb2.SettleResponse: ...

    def nack(
        self, request: api_pb2.NackRequest, *, timeout_s: float | None
    ) -> api_pb2.SettleResponse: ...

    def extend_lease(
        self, request: api_pb2.ExtendLeaseRequest, *, timeout_s: float | None
    ) -> api_pb2.SettleResponse: ...

    # Log
    def fetch(
        self, request: api_pb2.FetchRequest, *, timeout_s: float | None
    ) -> api_pb2.FetchResponse: ...

    def list_offsets(
        self, request: api_pb2.ListOffsetsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListOffsetsResponse: ...

    def producer_state(
        self, request: api_pb2.ProducerStateRequest, *, timeout_s: float | None
    ) -> api_pb2.ProducerStateResponse: ...

    # Admin
    def create_topic(
        self, request: api_pb2.CreateTopicRequest, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription: ...

    def delete_topic(
        self, request: api_pb2.DeleteTopicRequest, *, timeout_s: float | None
    ) -> api_pb2.DeleteTopicResponse: ...

    def list_topics(
        self, request: api_pb2.ListTopicsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListTopicsResponse: ...

    def describe_topic(
        self, request: api_pb2.DescribeTopicRequest, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription: ...

    def alter_topic_config(
        self, request: api_pb2.AlterTopicConfigRequest, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription: ...

    def list_groups(
        self, request: api_pb2.ListGroupsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListGroupsResponse: ...

    def describe_group(
        self, request: api_pb2.DescribeGroupRequest, *, timeout_s: float | None
    ) -> api_pb2.GroupDescription: ...

    def describe_cluster(
        self, request: api_pb2.DescribeClusterRequest, *, timeout_s: float | None
    ) -> api_pb2.ClusterDescription: ...

    def delete_group(
        self, request: api_pb2.DeleteGroupRequest, *, timeout_s: float | None
    ) -> api_pb2.DeleteGroupResponse: ...

    def seek_group(
        self, request: api_pb2.SeekGroupRequest, *, timeout_s: float | None
    ) -> api_pb2.SeekGroupResponse: ...

    def purge_topic(
        self, request: api_pb2.PurgeTopicRequest, *, timeout_s: float | None
    ) -> api_pb2.PurgeTopicResponse: ...

    def update_record(
        self, request: api_pb2.UpdateRecordRequest, *, timeout_s: float | None
    ) -> api_pb2.UpdateRecordResponse: ...

    def cancel_record(
        self, request: api_pb2.CancelRecordRequest, *, timeout_s: float | None
    ) -> api_pb2.CancelRecordResponse: ...

    def remove_broker(
        self, request: api_pb2.RemoveBrokerRequest, *, timeout_s: float | None
    ) -> api_pb2.RemoveBrokerResponse: ...

    def add_partitions(
        self, request: api_pb2.AddPartitionsRequest, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription: ...

    def rebalance_leaders(
        self, request: api_pb2.RebalanceLeadersRequest, *, timeout_s: float | None
    ) -> api_pb2.RebalanceLeadersResponse: ...

    def move_partition(
        self, request: api_pb2.MovePartitionRequest, *, timeout_s: float | None
    ) -> api_pb2.MovePartitionResponse: ...

    def backup_metadata(
        self, request: api_pb2.BackupMetadataRequest, *, timeout_s: float | None
    ) -> api_pb2.BackupMetadataResponse: ...

    def backup_partition(
        self, request: api_pb2.BackupPartitionRequest, cancelled: threading.Event
    ) -> Iterator[api_pb2.BackupChunk]: ...

    def commit_txn(
        self, request: api_pb2.CommitTxnRequest, *, timeout_s: float | None
    ) -> api_pb2.TxnState: ...

    def get_txn(
        self, request: api_pb2.GetTxnRequest, *, timeout_s: float | None
    ) -> api_pb2.TxnState: ...


# --- request shape checks ------------------------------------------------------------------


def _bad(message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(message)


def check_topic_name(name: str, field: str = "topic") -> None:
    """The metadata machine's name rule (topics and groups): one rule at every hop."""
    if not name:
        raise _bad(f"{field} is empty: name a topic")
    machine.check_topic_name(name, field)


def check_group_name(name: str, field: str = "group") -> None:
    if not name:
        raise _bad(f"{field} is empty: name a group")
    machine.check_group_name(name, field)


def check_name(value: str, field: str) -> None:
    if not value:
        raise _bad(f"{field} is empty: set it")
    if len(value) > NAME_CHARS_MAX:
        raise _bad(f"{field} is {len(value)} characters; at most {NAME_CHARS_MAX}")


def check_range(value: int, field: str, low: int, high: int | None = None) -> None:
    if value < low or (high is not None and value > high):
        allowed = f"{low}..{high}" if high is not None else f">= {low}"
        raise _bad(f"{field} is {value}; it must be {allowed}")


def _check_member(group: str, member_id: str, generation: int) -> None:
    check_name(group, "group")
    check_name(member_id, "member_id")
    check_range(generation, "generation", 0)


def _check_refs(refs: Sequence[api_pb2.RecordRef]) -> None:
    check_range(len(refs), "number of refs", 1, MAX_REFS)
    for i, ref in enumerate(refs):
        check_topic_name(ref.topic, f"refs[{i}].topic")
        check_range(ref.partition, f"refs[{i}].partition", 0)
        check_range(ref.offset, f"refs[{i}].offset", 0)
        check_range(ref.delivery_count, f"refs[{i}].delivery_count", 1)


def check_send(r: api_pb2.SendRequest) -> None:
    check_topic_name(r.topic)
    if r.records and r.values:
        raise _bad("a send carries records or values (bare records), not both")
    check_range(len(r.records) or len(r.values), "number of records", 1, SEND_RECORDS_MAX)
    if r.HasField("partition"):
        check_range(r.partition, "partition", 0)
    if r.HasField("producer_id"):
        check_name(r.producer_id, "producer_id")
        if not r.HasField("partition") or not r.HasField("sequence"):
            raise _bad("producer_id needs partition and sequence: sequences are per partition")
        check_range(r.sequence, "sequence", 0)
    elif r.HasField("sequence"):
        raise _bad("sequence without producer_id: set both or neither")


def check_join_group(r: api_pb2.JoinGroupRequest) -> None:
    check_group_name(r.group)
    check_range(len(r.topics), "number of topics", 1, PARTITIONS_MAX)
    for i, topic in enumerate(r.topics):
        check_topic_name(topic, f"topics[{i}]")
    if r.HasField("member_id"):
        check_name(r.member_id, "member_id")
    check_range(r.session_timeout_ms, "session_timeout_ms", 0)


def check_heartbeat(r: api_pb2.HeartbeatRequest) -> None:
    _check_member(r.group, r.member_id, r.generation)


def check_leave_group(r: api_pb2.LeaveGroupRequest) -> None:
    check_name(r.group, "group")
    check_name(r.member_id, "member_id")


def _check_lease_ms(r: api_pb2.PollRequest | api_pb2.PollStart) -> None:
    if r.HasField("lease_ms"):
        check_range(r.lease_ms, "lease_ms", 1, MAX_LEASE_MS)
    check_range(r.max_bytes, "max_bytes", 0)


def check_poll(r: api_pb2.PollRequest) -> None:
    _check_member(r.group, r.member_id, r.generation)
    check_range(r.max_records, "max_records", 1, MAX_LEASE_RECORDS)
    check_range(r.max_wait_ms, "max_wait_ms", 0, POLL_WAIT_MS_MAX)
    _check_lease_ms(r)


def check_ack(r: api_pb2.AckRequest) -> None:
    _check_member(r.group, r.member_id, r.generation)
    if not r.batches:
        _check_refs(r.refs)
        return
    if r.refs:
        raise _bad("an ack names refs or batches, not both")
    check_range(sum(len(b.offsets) for b in r.batches), "number of refs", 1, MAX_REFS)
    for i, b in enumerate(r.batches):  # per batch, never per ref: packed lists checked in C
        check_topic_name(b.topic, f"batches[{i}].topic")
        check_range(b.partition, f"batches[{i}].partition", 0)
        check_range(len(b.offsets), f"batches[{i}] number of offsets", 1, MAX_REFS)
        if len(b.delivery_counts) != len(b.offsets):
            raise _bad(f"batches[{i}]: delivery_counts must be as long as offsets")
        check_range(min(b.offsets), f"batches[{i}] offsets", 0)
        check_range(min(b.delivery_counts), f"batches[{i}] delivery_counts", 1)


def check_nack(r: api_pb2.NackRequest) -> None:
    _check_member(r.group, r.member_id, r.generation)
    _check_refs(r.refs)
    if r.HasField("delay_ms"):
        check_range(r.delay_ms, "delay_ms", 0, MAX_DELAY_MS)


def check_extend_lease(r: api_pb2.ExtendLeaseRequest) -> None:
    _check_member(r.group, r.member_id, r.generation)
    _check_refs(r.refs)
    check_range(r.lease_ms, "lease_ms", 1, MAX_LEASE_MS)


def check_fetch(r: api_pb2.FetchRequest) -> None:
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0)
    check_range(r.offset, "offset", 0)
    check_range(r.max_records, "max_records", 1, MAX_LEASE_RECORDS)
    check_range(r.max_bytes, "max_bytes", 0)


def check_list_offsets(r: api_pb2.ListOffsetsRequest) -> None:
    check_topic_name(r.topic)


def check_producer_state(r: api_pb2.ProducerStateRequest) -> None:
    check_topic_name(r.topic)
    check_name(r.producer_id, "producer_id")
    if len(r.partitions) > PARTITIONS_MAX:
        raise _bad(f"at most {PARTITIONS_MAX} partitions")
    for partition in r.partitions:
        check_range(partition, "partition", 0)


def check_commit_txn(r: api_pb2.CommitTxnRequest) -> None:
    check_name(r.app_id, "app_id")
    check_range(r.version, "version", 0)


def check_get_txn(r: api_pb2.GetTxnRequest) -> None:
    check_name(r.app_id, "app_id")


def check_config_update(c: api_pb2.TopicConfigUpdate) -> None:
    """Signs only; the facade checks the merged config with
    raftq.partitions.machine.check_config."""
    for field in (
        "lease_ms",
        "max_deliveries",
        "retention_ms",
        "retention_bytes",
        "dedup_window_ms",
        "nack_backoff_base_ms",
        "nack_backoff_max_ms",
        "ttl_ms",
    ):
        if c.HasField(field):
            check_range(getattr(c, field), f"config.{field}", 0)
    if c.HasField("lease_ms"):
        check_range(c.lease_ms, "config.lease_ms", 1, MAX_LEASE_MS)
    if c.HasField("max_record_bytes"):
        check_range(c.max_record_bytes, "config.max_record_bytes", 1)
    if c.HasField("dead_letter_topic") and c.dead_letter_topic:
        check_topic_name(c.dead_letter_topic, "config.dead_letter_topic")


def check_create_topic(r: api_pb2.CreateTopicRequest) -> None:
    check_topic_name(r.name, "name")
    if r.HasField("partitions"):
        check_range(r.partitions, "partitions", 1, PARTITIONS_MAX)
    if r.HasField("replication_factor"):
        check_range(r.replication_factor, "replication_factor", 1, REPLICATION_FACTOR_MAX)
    check_config_update(r.config)


def check_topic_request(
    r: api_pb2.DeleteTopicRequest | api_pb2.DescribeTopicRequest,
) -> None:
    check_topic_name(r.name, "name")


def check_alter_topic_config(r: api_pb2.AlterTopicConfigRequest) -> None:
    check_topic_name(r.name, "name")
    if not r.config.ListFields():
        raise _bad("config sets no field: name at least one setting to change")
    check_config_update(r.config)


def check_add_partitions(r: api_pb2.AddPartitionsRequest) -> None:
    check_topic_name(r.name, "name")
    check_range(r.partitions, "partitions", 2, PARTITIONS_MAX)


def check_describe_group(r: api_pb2.DescribeGroupRequest | api_pb2.DeleteGroupRequest) -> None:
    check_name(r.group, "group")


def check_update_record(r: api_pb2.UpdateRecordRequest) -> None:
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0)
    check_range(r.offset, "offset", 0)
    if not r.HasField("priority") and not r.HasField("deliver_at_ms"):
        raise _bad("set priority, deliver_at_ms or both")
    if r.HasField("deliver_at_ms"):
        check_range(r.deliver_at_ms, "deliver_at_ms", 0)


def check_cancel_record(r: api_pb2.CancelRecordRequest) -> None:
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0)
    check_range(r.offset, "offset", 0)


def check_seek_group(r: api_pb2.SeekGroupRequest) -> None:
    check_name(r.group, "group")
    check_topic_name(r.topic)
    if r.HasField("partition"):
        check_range(r.partition, "partition", 0)
    if r.to not in partition_pb2.SeekTo.values():
        raise _bad(f"to is {r.to}; name a SeekTo target (offset, timestamp, earliest, latest)")
    check_range(r.offset, "offset", 0)
    check_range(r.timestamp_ms, "timestamp_ms", 0)


def check_purge_topic(r: api_pb2.PurgeTopicRequest) -> None:
    check_topic_name(r.topic)
    if r.HasField("partition"):
        check_range(r.partition, "partition", 0)


def check_remove_broker(r: api_pb2.RemoveBrokerRequest) -> None:
    check_range(r.broker_id, "broker_id", 1)


def check_move_partition(r: api_pb2.MovePartitionRequest) -> None:
    check_topic_name(r.topic)
    check_range(r.partition, "partition", 0)
    if not r.replicas or len(r.replicas) > REPLICATION_FACTOR_MAX:
        raise _bad(f"replicas: name 1 to {REPLICATION_FACTOR_MAX} broker ids")
    for broker_id in r.replicas:
        check_range(broker_id, "replicas", 1)


def _no_check(request: Any) -> None:
    return None


# --- servicers -----------------------------------------------------------------------------


NO_DEADLINE_S = 10**6  # gRPC reports "no deadline" as about 9.2e18 s left


def _time_left(context: grpc.ServicerContext) -> float | None:
    """Seconds left before the caller's deadline; None when it set none. (gRPC then reports
    about 9.2e18 s: passed on as the timeout of a forwarded call, that overflows the deadline,
    the call fails DEADLINE_EXCEEDED at once, and the router retried it until the end of time.)
    """
    remaining = context.time_remaining()
    return None if remaining is None or remaining >= NO_DEADLINE_S else remaining


def _call(
    facade: BrokerFacade,
    method: str,
    check: Callable[[Any], None],
    request: Any,
    timeout_s: float | None,
) -> Any:
    check(request)
    return getattr(facade, method)(request, timeout_s=timeout_s)


def _unary(method: str, check: Callable[[Any], None]) -> Callable[..., Any]:
    """A servicer method: check the shape, delegate to ``facade.<method>``, map errors."""

    def handler(self: _Servicer, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return _call(self.facade, method, check, request, _time_left(context))
        except errors.RaftqError as error:
            abort(context, error)
        except Exception as exc:
            log.exception("%s failed", method)
            abort(context, errors.Internal(f"{method}: {exc!r}"))

    handler.__name__ = method
    return handler


class _Servicer:
    def __init__(self, facade: BrokerFacade) -> None:
        self.facade = facade


class ProducerServicer(_Servicer, api_pb2_grpc.ProducerServicer):
    Send = _unary("send", check_send)

    def __init__(self, facade: BrokerFacade, max_streams: int = 32) -> None:
        super().__init__(facade)
        # Sends of all streams run here, so one stream has many in flight (a producer's
        # partitions on this broker), answered as each completes.
        self._sends = futures.ThreadPoolExecutor(64, thread_name_prefix="raftq-stream-send")
        self._streams = threading.BoundedSemaphore(max_streams)

    def SendStream(
        self, request_iterator: Iterator[api_pb2.SendRequest], context: grpc.ServicerContext
    ) -> Iterator[api_pb2.SendResponse]:
        """Pipelined: every request is answered as soon as its send completes, in any order
        (the client matches ``request_id``). A stream holds a server thread while open, so at
        most ``max_streams`` are open at once; beyond that a stream ends RESOURCE_EXHAUSTED
        at once and the client sends unary."""
        if not self._streams.acquire(blocking=False):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many send streams: use Send")
        try:
            yield from _pipelined(self.facade, self._sends, request_iterator, context)
        finally:
            self._streams.release()


_READ_DONE = object()


def _pipelined(
    facade: BrokerFacade,
    pool: futures.Executor,
    requests: Iterator[api_pb2.SendRequest],
    context: grpc.ServicerContext,
) -> Iterator[api_pb2.SendResponse]:
    """A facade with ``send_async`` takes what it can without a thread waiting (bare values
    for a partition it leads); everything else runs ``facade.send`` on ``pool``."""
    answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
    send_async = getattr(facade, "send_async", None)

    def answer(request: api_pb2.SendRequest, response: api_pb2.SendResponse) -> None:
        response.request_id = request.request_id
        answers.put(response)

    def failed(request: api_pb2.SendRequest, exc: Exception) -> None:
        if isinstance(exc, errors.RaftqError):
            response = api_pb2.SendResponse(
                error=exc.code,  # type: ignore[arg-type]
                message=exc.message,
                leader_hint=exc.leader_hint,
            )
        else:
            log.exception("send (stream) failed", exc_info=exc)
            response = api_pb2.SendResponse(error=errors.Internal.kind.code, message=repr(exc))  # type: ignore[arg-type]
        answer(request, response)

    def one(request: api_pb2.SendRequest) -> None:
        try:
            response = _call(facade, "send", check_send, request, _time_left(context))
        except Exception as exc:
            failed(request, exc)
            return
        answer(request, response)

    def start(request: api_pb2.SendRequest) -> bool:
        if send_async is None:
            return False
        try:
            check_send(request)
            taken: bool = send_async(request, lambda response: answer(request, response))
        except Exception as exc:
            failed(request, exc)
            return True
        return taken

    def read() -> None:
        count = 0
        try:
            for request in requests:
                count += 1
                if not start(request):
                    pool.submit(one, request)
        except Exception:  # the call ended (cancelled, deadline): the answers loop sees it
            pass
        answers.put((_READ_DONE, count))

    threading.Thread(target=read, name="raftq-stream-reader", daemon=True).start()
    answered, expected = 0, None
    while expected is None or answered < expected:
        item = answers.get()
        if isinstance(item, tuple):
            expected = item[1]
            continue
        answered += 1
        yield item


class _Credits:
    """Records the PollStream client has allowed and not yet received; fed by a reader."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.available = 0
        self.closed = False
        self.error: errors.RaftqError | None = None

    def read(self, requests: Iterator[api_pb2.PollStreamRequest]) -> None:
        try:
            for request in requests:
                with self.cond:
                    if request.WhichOneof("kind") != "credit" or request.credit.records <= 0:
                        self.error = _bad("after start, send only credit messages with records > 0")
                    else:
                        self.available += request.credit.records
                    self.cond.notify_all()
                if self.error is not None:
                    break
        except Exception:  # the call ended (cancelled, deadline); the writer sees it too
            pass
        finally:
            with self.cond:
                self.closed = True
                self.cond.notify_all()

    def take(self, limit: int, timeout_s: float) -> int:
        """Wait for credit; 0 on timeout or when the client half-closed (it is done)."""
        with self.cond:
            self.cond.wait_for(lambda: self.available > 0 or self.closed, timeout_s)
            return 0 if self.closed else min(self.available, limit)


class ConsumerServicer(_Servicer, api_pb2_grpc.ConsumerServicer):
    def JoinGroup(
        self, request: api_pb2.JoinGroupRequest, context: grpc.ServicerContext
    ) -> api_pb2.JoinGroupResponse:
        """The one call that passes the caller on: the member it creates is bound to it."""
        try:
            check_join_group(request)
            response: api_pb2.JoinGroupResponse = self.facade.join_group(
                request, timeout_s=_time_left(context), principal=auth.caller()
            )
            return response
        except errors.RaftqError as error:
            abort(context, error)
        except Exception as exc:
            log.exception("join_group failed")
            abort(context, errors.Internal(f"join_group: {exc!r}"))

    Heartbeat = _unary("heartbeat", check_heartbeat)
    LeaveGroup = _unary("leave_group", check_leave_group)
    Ack = _unary("ack", check_ack)
    Nack = _unary("nack", check_nack)
    ExtendLease = _unary("extend_lease", check_extend_lease)

    def Poll(self, request: api_pb2.PollRequest, context: grpc.ServicerContext) -> Any:
        """A unary long poll; it stops waiting when the caller cancels (transport/admission.py
        caps how many wait at once). An answer whose caller left meanwhile is taken back
        (``undeliver_poll``): nothing stays leased that was not delivered."""
        try:
            check_poll(request)
            response = self.facade.poll(
                request, timeout_s=_time_left(context), active=context.is_active
            )
        except errors.RaftqError as error:
            abort(context, error)
        except Exception as exc:
            log.exception("poll failed")
            abort(context, errors.Internal(f"poll: {exc!r}"))
        if not context.is_active():
            self.facade.undeliver_poll(request, response)
        return response

    def PollStream(
        self, request_iterator: Iterator[api_pb2.PollStreamRequest], context: grpc.ServicerContext
    ) -> Iterator[api_pb2.PollResponse]:
        try:
            first = next(request_iterator, None)
            if first is None or first.WhichOneof("kind") != "start":
                raise _bad("the first PollStream message must be start")
            start = first.start
            _check_member(start.group, start.member_id, start.generation)
            _check_lease_ms(start)
        except errors.RaftqError as error:
            abort(context, error)
        credits = _Credits()
        reader = threading.Thread(
            target=credits.read, args=(request_iterator,), name="poll-stream-credits", daemon=True
        )
        reader.start()
        while context.is_active():
            wanted = credits.take(MAX_LEASE_RECORDS, POLL_STREAM_WAIT_MS / 1000)
            if credits.error is not None:
                abort(context, credits.error)
            if wanted == 0:
                if credits.closed:
                    return
                continue
            poll = api_pb2.PollRequest(
                group=start.group,
                member_id=start.member_id,
                generation=start.generation,
                max_records=wanted,
                max_wait_ms=POLL_STREAM_WAIT_MS,
                max_bytes=start.max_bytes,
            )
            if start.HasField("lease_ms"):
                poll.lease_ms = start.lease_ms
            try:
                response = self.facade.poll(poll, timeout_s=_time_left(context))
            except errors.RaftqError as error:
                abort(context, error)
            except Exception as exc:
                log.exception("poll (stream) failed")
                abort(context, errors.Internal(f"poll: {exc!r}"))
            if not context.is_active():  # nothing leased stays undelivered
                self.facade.undeliver_poll(poll, response)
                return
            if response.records:
                with credits.cond:
                    credits.available -= len(response.records)
                yield response


class LogServicer(_Servicer, api_pb2_grpc.LogServicer):
    Fetch = _unary("fetch", check_fetch)
    ListOffsets = _unary("list_offsets", check_list_offsets)
    ProducerState = _unary("producer_state", check_producer_state)


class AdminServicer(_Servicer, api_pb2_grpc.AdminServicer):
    CreateTopic = _unary("create_topic", check_create_topic)
    DeleteTopic = _unary("delete_topic", check_topic_request)
    ListTopics = _unary("list_topics", _no_check)
    DescribeTopic = _unary("describe_topic", check_topic_request)
    AlterTopicConfig = _unary("alter_topic_config", check_alter_topic_config)
    ListGroups = _unary("list_groups", _no_check)
    DescribeGroup = _unary("describe_group", check_describe_group)
    DescribeCluster = _unary("describe_cluster", _no_check)
    UpdateRecord = _unary("update_record", check_update_record)
    CancelRecord = _unary("cancel_record", check_cancel_record)
    RemoveBroker = _unary("remove_broker", check_remove_broker)
    CommitTxn = _unary("commit_txn", check_commit_txn)
    GetTxn = _unary("get_txn", check_get_txn)
    DeleteGroup = _unary("delete_group", check_describe_group)
    SeekGroup = _unary("seek_group", check_seek_group)
    PurgeTopic = _unary("purge_topic", check_purge_topic)
    AddPartitions = _unary("add_partitions", check_add_partitions)
    RebalanceLeaders = _unary("rebalance_leaders", _no_check)
    BackupMetadata = _unary("backup_metadata", _no_check)
    MovePartition = _unary("move_partition", check_move_partition)

    def BackupPartition(
        self, request: api_pb2.BackupPartitionRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.BackupChunk]:
        """A server stream: the facade's chunks; a caller that leaves cancels the copy."""
        cancelled = threading.Event()
        context.add_callback(cancelled.set)
        try:
            check_topic_name(request.topic)
            yield from self.facade.backup_partition(request, cancelled)
        except errors.RaftqError as error:
            abort(context, error)
        except Exception as exc:
            log.exception("BackupPartition failed")
            abort(context, errors.Internal(f"BackupPartition: {exc!r}"))


class _Malformed:
    """What a request that does not parse as its protobuf type deserializes to, or one with an
    integer wider than its field (transport/wire_ints.py)."""

    def __init__(self, message: str) -> None:
        self.error = errors.InvalidArgument(message[:300])


def _tolerant(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserialize is None:
        return None
    message_class = getattr(deserialize, "__self__", None)  # SomeRequest.FromString

    def parse(data: bytes) -> Any:
        try:
            request = deserialize(data)
        except Exception as exc:  # DecodeError and whatever else the parser raises
            return _Malformed(f"the request is not a valid protobuf message of its type: {exc!r}")
        problem = out_of_range(message_class, data) if message_class is not None else None
        if problem is not None:  # the parser kept only the low bits: refuse, never truncate
            return _Malformed(f"{problem} (the field's type is narrower than the value sent)")
        return request

    return parse


class MalformedRequestInterceptor(grpc.ServerInterceptor):
    """Answers a request whose bytes do not parse with a typed INVALID_ARGUMENT (raftq-code
    trailer) instead of gRPC's own untyped INTERNAL "Exception deserializing request!"; one
    whose integers do not fit their fields (2**40 sent as an int32 partition) likewise,
    instead of the low bits the parser keeps.

    It is the outermost interceptor: the ones inside it (metrics, auth) and the servicers only
    ever see parsed requests. A malformed request is refused before authentication: it is
    answered without being read, so that reveals nothing and changes nothing."""

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        h: Any = handler
        kwargs = {
            "request_deserializer": _tolerant(h.request_deserializer),
            "response_serializer": h.response_serializer,
        }
        if h.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(_checked_unary(h.unary_unary), **kwargs)
        if h.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(_checked_unary(h.unary_stream), **kwargs)
        if h.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(_checked_stream(h.stream_unary), **kwargs)
        return grpc.stream_stream_rpc_method_handler(_checked_stream(h.stream_stream), **kwargs)


def _checked_unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
    def checked(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, _Malformed):
            abort(context, request.error)
        return behavior(request, context)

    return checked


def _checked_stream(behavior: Callable[..., Any]) -> Callable[..., Any]:
    def requests_of(iterator: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        for request in iterator:
            if isinstance(request, _Malformed):
                abort(context, request.error)  # ends the call; the servicer's loop stops
            yield request

    def checked(iterator: Iterator[Any], context: grpc.ServicerContext) -> Any:
        return behavior(requests_of(iterator, context), context)

    return checked


REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"


def enable_reflection(server: grpc.Server, service_names: Sequence[str]) -> None:
    """Server reflection under both names tools ask for: ``grpc.reflection.v1alpha`` (what
    grpcio-reflection ships) and ``grpc.reflection.v1`` (grpcurl, Postman, newer clients).
    The two protocols are the same messages under another package, byte for byte, so the v1
    method runs grpcio-reflection's servicer with the v1alpha codec."""
    names = (*service_names, reflection.SERVICE_NAME, REFLECTION_V1)
    servicer = reflection.ReflectionServicer(names)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(REFLECTION_V1, {"ServerReflectionInfo": v1}),)
    )


class Health(health.HealthServicer):
    """gRPC health of every raftq service: SERVING while ``why_not_ready()`` returns None,
    else NOT_SERVING. Re-checked on every ``Check`` and whenever ``refresh()`` is called (a
    broker's backend does, so ``Watch`` streams follow); NOT_SERVING for good after
    ``shutdown()``."""

    def __init__(self, why_not_ready: Callable[[], str | None] = lambda: None) -> None:
        super().__init__()
        self._why_not_ready = why_not_ready
        self._serving: bool | None = None
        self._down = False
        self._refresh_lock = threading.Lock()
        self.refresh()

    def refresh(self) -> str | None:
        """Re-evaluate readiness; returns why this broker does not serve (None: it does)."""
        why = "shutting down" if self._down else self._why_not_ready()
        with self._refresh_lock:
            serving = why is None
            if serving != self._serving:
                self._serving = serving
                status = health_pb2.HealthCheckResponse.SERVING
                if not serving:
                    status = health_pb2.HealthCheckResponse.NOT_SERVING
                    log.info("health: NOT_SERVING (%s)", why)
                else:
                    log.info("health: SERVING")
                for name in ("", *SERVICE_NAMES):
                    self.set(name, status)
        return why

    def shutdown(self) -> None:
        self._down = True
        self.refresh()

    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.refresh()
        return super().Check(request, context)


def serve(
    facade: BrokerFacade,
    address: str,
    *,
    max_workers: int = 64,
    max_streams: int | None = None,
    interceptors: Iterable[grpc.ServerInterceptor] = (),
    options: Sequence[tuple[str, Any]] = (),
    extra_services: Iterable[Callable[[grpc.Server], None]] = (),
    credentials: grpc.ServerCredentials | None = None,
    health_servicer: Health | None = None,
) -> grpc.Server:
    """Start serving the raftq API for ``facade`` on ``address`` (``host:port``).

    ``credentials`` (transport/tls.py ``server_credentials``) serve TLS, else plaintext.
    Adds health checking (``health_servicer``, default: every service SERVING) and
    reflection. Each streaming call holds a worker thread (PollStream two) while open: size
    ``max_workers`` for the streams expected; at most ``max_streams`` SendStreams are open at
    once (default: half the workers). A broker sizes both from its ``capacity`` settings and
    admits calls per kind (transport/admission.py).
    Raises Unavailable when the address cannot be bound. Stop it with ``server.stop(grace)``.
    """
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="raftq-grpc"),
        interceptors=(MalformedRequestInterceptor(), *interceptors),
        # gRPC sets SO_REUSEPORT by default: a second broker on the same port would then share
        # it silently, the kernel splitting connections between two clusters. Refuse instead.
        # Clients ping every second to find a hung broker fast (transport/tls.py): accept it.
        options=(("grpc.so_reuseport", 0), *KEEPALIVE_SERVER_OPTIONS, *options),
    )
    streams = max_streams if max_streams is not None else max(1, max_workers // 2)
    producer = ProducerServicer(facade, max_streams=streams)
    api_pb2_grpc.add_ProducerServicer_to_server(producer, server)
    api_pb2_grpc.add_ConsumerServicer_to_server(ConsumerServicer(facade), server)
    api_pb2_grpc.add_LogServicer_to_server(LogServicer(facade), server)
    api_pb2_grpc.add_AdminServicer_to_server(AdminServicer(facade), server)
    for add_service in extra_services:  # e.g. the broker-to-broker Internal service
        add_service(server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer or Health(), server)
    enable_reflection(server, (*SERVICE_NAMES, health.SERVICE_NAME))
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise errors.Unavailable(f"cannot listen on {address}: {exc}") from exc
    if port == 0:
        raise errors.Unavailable(f"cannot listen on {address}: is the port taken?")
    server.start()
    log.info("raftq API serving on %s (%s)", address, "TLS" if credentials else "plaintext")
    return server


__all__ = [
    "SERVICE_NAMES",
    "AdminServicer",
    "BrokerFacade",
    "ConsumerServicer",
    "Health",
    "LogServicer",
    "MalformedRequestInterceptor",
    "ProducerServicer",
    "serve",
]
