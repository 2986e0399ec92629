"""The client-facing gRPC server: four services, each over its handler (:class:`ApiHandlers`;
a broker's are broker/handlers/, a test's one :class:`BrokerFacade`).

Each servicer method checks the *shape* of its request once (transport/request_checks.py),
answering INVALID_ARGUMENT with a message that says what to fix, and hands its handler the
checked command the check makes (``CheckedSend``, ``CheckedPoll``...); everything else (does the
topic exist, is this broker the leader, is the generation current) is the handler's business. A
handler raises typed :mod:`raftq.proto.errors`; :mod:`raftq.transport.grpc_errors` turns them
into gRPC status with ``raftq-*`` trailing metadata. Any other
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
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from raftq.partitions.machine import MAX_LEASE_RECORDS
from raftq.proto import api_pb2, api_pb2_grpc, errors
from raftq.transport import auth
from raftq.transport import request_checks as rc
from raftq.transport.grpc_errors import abort
from raftq.transport.request_checks import bad
from raftq.transport.tls import KEEPALIVE_SERVER_OPTIONS
from raftq.transport.wire_ints import out_of_range

log = logging.getLogger("raftq.grpc")

POLL_STREAM_WAIT_MS = 500
SERVICE_NAMES = tuple(
    api_pb2.DESCRIPTOR.services_by_name[name].full_name
    for name in ("Producer", "Consumer", "Log", "Admin")
)


class ProducerApi(Protocol):
    """What the gRPC surface needs from a broker, one protocol per service (ProducerApi,
    ConsumerApi, LogApi, AdminApi): one method per unary RPC.

    Each takes the checked command of its request (transport/request_checks.py: the request
    protobuf, its shape checked once, here at the edge) and ``timeout_s``, the seconds
    left before the client's deadline (None: no deadline), and returns the response protobuf.
    Expected failures raise :class:`raftq.proto.errors.RaftqError` subclasses: NotLeader (with
    ``leader_hint``), UnknownTopic, UnknownGroup, UnknownMember, Fenced, TopicExists,
    InvalidArgument, Timeout, Unavailable... Per-record (Send) and per-ref (Ack, Nack,
    ExtendLease) failures go in the response items instead. Called from many threads at once.

    Optional: ``send_async(request, on_done) -> bool`` takes a SendStream request without a
    thread waiting on it (False: not one it takes; it then goes through ``send``).
    """

    def send(self, request: rc.CheckedSend, *, timeout_s: float | None) -> api_pb2.SendResponse:
        """``request``: checked at the edge (transport/request_checks.py check_send)."""
        ...


class ConsumerApi(Protocol):
    def join_group(
        self, request: rc.CheckedJoinGroup, *, timeout_s: float | None, principal: str = ""
    ) -> api_pb2.JoinGroupResponse:
        """``principal``: the authenticated caller ("" without auth); a new member is bound to
        it, a rejoin with another principal's member id is PermissionDenied, with a member id
        the group does not hold UnknownMember (ids are issued by the broker)."""
        ...

    def heartbeat(
        self, request: rc.CheckedHeartbeat, *, timeout_s: float | None
    ) -> api_pb2.HeartbeatResponse: ...

    def leave_group(
        self, request: rc.CheckedLeaveGroup, *, timeout_s: float | None
    ) -> api_pb2.LeaveGroupResponse: ...

    def poll(
        self,
        request: rc.CheckedPoll,
        *,
        timeout_s: float | None,
        active: Callable[[], bool] = ...,
    ) -> api_pb2.PollResponse:
        """``active()`` turns False when the caller cancelled: a waiting poll ends early."""
        ...

    def undeliver_poll(self, request: rc.CheckedPoll, response: api_pb2.PollResponse) -> None: ...

    def ack(self, request: rc.CheckedAck, *, timeout_s: float | None) -> api_pb2.SettleResponse: ...

    def nack(
        self, request: rc.CheckedNack, *, timeout_s: float | None
    ) -> api_pb2.SettleResponse: ...

    def extend_lease(
        self, request: rc.CheckedExtendLease, *, timeout_s: float | None
    ) -> api_pb2.SettleResponse: ...


class LogApi(Protocol):
    def fetch(
        self, request: rc.CheckedFetch, *, timeout_s: float | None
    ) -> api_pb2.FetchResponse: ...

    def list_offsets(
        self, request: rc.CheckedListOffsets, *, timeout_s: float | None
    ) -> api_pb2.ListOffsetsResponse: ...

    def producer_state(
        self, request: rc.CheckedProducerState, *, timeout_s: float | None
    ) -> api_pb2.ProducerStateResponse: ...


class AdminApi(Protocol):
    def create_topic(
        self, request: rc.CheckedCreateTopic, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription: ...

    def delete_topic(
        self, request: rc.CheckedDeleteTopic, *, timeout_s: float | None
    ) -> api_pb2.DeleteTopicResponse: ...

    def list_topics(
        self, request: api_pb2.ListTopicsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListTopicsResponse: ...

    def describe_topic(
        self, request: rc.CheckedDescribeTopic, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription: ...

    def alter_topic_config(
        self, request: rc.CheckedAlterTopicConfig, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription: ...

    def list_groups(
        self, request: api_pb2.ListGroupsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListGroupsResponse: ...

    def describe_group(
        self, request: rc.CheckedDescribeGroup, *, timeout_s: float | None
    ) -> api_pb2.GroupDescription: ...

    def describe_cluster(
        self, request: api_pb2.DescribeClusterRequest, *, timeout_s: float | None
    ) -> api_pb2.ClusterDescription: ...

    def delete_group(
        self, request: rc.CheckedDeleteGroup, *, timeout_s: float | None
    ) -> api_pb2.DeleteGroupResponse: ...

    def seek_group(
        self, request: rc.CheckedSeekGroup, *, timeout_s: float | None
    ) -> api_pb2.SeekGroupResponse: ...

    def purge_topic(
        self, request: rc.CheckedPurgeTopic, *, timeout_s: float | None
    ) -> api_pb2.PurgeTopicResponse: ...

    def create_schedule(
        self, request: rc.CheckedCreateSchedule, *, timeout_s: float | None
    ) -> api_pb2.ScheduleResponse: ...

    def list_schedules(
        self, request: rc.CheckedListSchedules, *, timeout_s: float | None
    ) -> api_pb2.ListSchedulesResponse: ...

    def pause_schedule(
        self, request: rc.CheckedPauseSchedule, *, timeout_s: float | None
    ) -> api_pb2.ScheduleResponse: ...

    def delete_schedule(
        self, request: rc.CheckedDeleteSchedule, *, timeout_s: float | None
    ) -> api_pb2.DeleteScheduleResponse: ...

    def update_record(
        self, request: rc.CheckedUpdateRecord, *, timeout_s: float | None
    ) -> api_pb2.UpdateRecordResponse: ...

    def cancel_record(
        self, request: rc.CheckedCancelRecord, *, timeout_s: float | None
    ) -> api_pb2.CancelRecordResponse: ...

    def remove_broker(
        self, request: rc.CheckedRemoveBroker, *, timeout_s: float | None
    ) -> api_pb2.RemoveBrokerResponse: ...

    def add_partitions(
        self, request: rc.CheckedAddPartitions, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription: ...

    def rebalance_leaders(
        self, request: api_pb2.RebalanceLeadersRequest, *, timeout_s: float | None
    ) -> api_pb2.RebalanceLeadersResponse: ...

    def move_partition(
        self, request: rc.CheckedMovePartition, *, timeout_s: float | None
    ) -> api_pb2.MovePartitionResponse: ...

    def backup_metadata(
        self, request: api_pb2.BackupMetadataRequest, *, timeout_s: float | None
    ) -> api_pb2.BackupMetadataResponse: ...

    def backup_partition(
        self, request: rc.CheckedBackupPartition, cancelled: threading.Event
    ) -> Iterator[api_pb2.BackupChunk]: ...

    def commit_txn(
        self, request: rc.CheckedCommitTxn, *, timeout_s: float | None
    ) -> api_pb2.TxnState: ...

    def get_txn(
        self, request: rc.CheckedGetTxn, *, timeout_s: float | None
    ) -> api_pb2.TxnState: ...


class BrokerFacade(ProducerApi, ConsumerApi, LogApi, AdminApi, Protocol):
    """All four services on one object (tests' single-node facades)."""


@dataclass(frozen=True)
class ApiHandlers:
    """The object serving each client service (a broker's: broker/handlers/)."""

    producer: ProducerApi
    consumer: ConsumerApi
    log: LogApi
    admin: AdminApi

    @classmethod
    def of(cls, facade: BrokerFacade) -> ApiHandlers:
        return cls(facade, facade, facade, facade)


# --- servicers -----------------------------------------------------------------------------


NO_DEADLINE_S = 10**6  # gRPC reports "no deadline" as about 9.2e18 s left


def _time_left(context: grpc.ServicerContext) -> float | None:
    """Seconds left before the caller's deadline; None when it set none. (gRPC then reports
    about 9.2e18 s: passed on as the timeout of a forwarded call, that overflows the deadline,
    the call fails DEADLINE_EXCEEDED at once, and the router retried it until the end of time.)
    """
    remaining = context.time_remaining()
    return None if remaining is None or remaining >= NO_DEADLINE_S else remaining


ApiT = TypeVar("ApiT", contravariant=True)
RequestT = TypeVar("RequestT")
CheckedT = TypeVar("CheckedT", contravariant=True)
ResponseT = TypeVar("ResponseT", covariant=True)


class _Handler(Protocol[ApiT, CheckedT, ResponseT]):
    """A service protocol's unary method (e.g. ``ConsumerApi.heartbeat``): takes the checked
    command its check makes."""

    __name__: str

    def __call__(
        self, api: ApiT, request: CheckedT, /, *, timeout_s: float | None
    ) -> ResponseT: ...


def no_check(request: RequestT) -> RequestT:
    """For a request that carries no client input (ListTopics, DescribeCluster...)."""
    return request


def _unary(
    check: Callable[[RequestT], CheckedT], handler: _Handler[Any, CheckedT, ResponseT]
) -> Callable[[Any, RequestT, grpc.ServicerContext], ResponseT]:
    """A servicer method: ``check`` the request into its checked command (the one shape
    check), hand that to the facade's method named like ``handler`` (the service protocol's
    method: mypy holds its parameter to the check's result; tests/unit/test_request_checks.py
    reads ``serve.check`` and ``serve.handler``), map errors."""
    method = handler.__name__

    def serve(self: _Servicer, request: RequestT, context: grpc.ServicerContext) -> ResponseT:
        try:
            checked = check(request)
            response: ResponseT = getattr(self.facade, method)(
                checked, timeout_s=_time_left(context)
            )
            return response
        except errors.RaftqError as error:
            abort(context, error)
        except Exception as exc:
            log.exception("%s failed", method)
            abort(context, errors.Internal(f"{method}: {exc!r}"))

    serve.__name__ = method
    serve.check = check  # type: ignore[attr-defined]
    serve.handler = handler  # type: ignore[attr-defined]
    return serve


class _Servicer:
    def __init__(self, facade: Any) -> None:
        """``facade``: the service's handler (ProducerApi, ConsumerApi, LogApi, AdminApi)."""
        self.facade = facade


class ProducerServicer(_Servicer, api_pb2_grpc.ProducerServicer):
    Send = _unary(rc.check_send, ProducerApi.send)

    def __init__(self, facade: ProducerApi, max_streams: int = 32) -> None:
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
    facade: ProducerApi,
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
            response = facade.send(rc.check_send(request), timeout_s=_time_left(context))
        except Exception as exc:
            failed(request, exc)
            return
        answer(request, response)

    def start(request: api_pb2.SendRequest) -> bool:
        if send_async is None:
            return False
        try:
            checked = rc.check_send(request)
            taken: bool = send_async(checked, lambda response: answer(request, response))
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
                        self.error = bad("after start, send only credit messages with records > 0")
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
            response: api_pb2.JoinGroupResponse = self.facade.join_group(
                rc.check_join_group(request), timeout_s=_time_left(context), principal=auth.caller()
            )
            return response
        except errors.RaftqError as error:
            abort(context, error)
        except Exception as exc:
            log.exception("join_group failed")
            abort(context, errors.Internal(f"join_group: {exc!r}"))

    Heartbeat = _unary(rc.check_heartbeat, ConsumerApi.heartbeat)
    LeaveGroup = _unary(rc.check_leave_group, ConsumerApi.leave_group)
    Ack = _unary(rc.check_ack, ConsumerApi.ack)
    Nack = _unary(rc.check_nack, ConsumerApi.nack)
    ExtendLease = _unary(rc.check_extend_lease, ConsumerApi.extend_lease)

    def Poll(self, request: api_pb2.PollRequest, context: grpc.ServicerContext) -> Any:
        """A unary long poll; it stops waiting when the caller cancels (transport/admission.py
        caps how many wait at once). An answer whose caller left meanwhile is taken back
        (``undeliver_poll``): nothing stays leased that was not delivered."""
        try:
            checked = rc.check_poll(request)
            response = self.facade.poll(
                checked, timeout_s=_time_left(context), active=context.is_active
            )
        except errors.RaftqError as error:
            abort(context, error)
        except Exception as exc:
            log.exception("poll failed")
            abort(context, errors.Internal(f"poll: {exc!r}"))
        if not context.is_active():
            self.facade.undeliver_poll(checked, response)
        return response

    def PollStream(
        self, request_iterator: Iterator[api_pb2.PollStreamRequest], context: grpc.ServicerContext
    ) -> Iterator[api_pb2.PollResponse]:
        try:
            first = next(request_iterator, None)
            if first is None or first.WhichOneof("kind") != "start":
                raise bad("the first PollStream message must be start")
            start = rc.check_poll_start(first.start)
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
            poll = rc.stream_poll(start, wanted, POLL_STREAM_WAIT_MS)
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
    Fetch = _unary(rc.check_fetch, LogApi.fetch)
    ListOffsets = _unary(rc.check_list_offsets, LogApi.list_offsets)
    ProducerState = _unary(rc.check_producer_state, LogApi.producer_state)


class AdminServicer(_Servicer, api_pb2_grpc.AdminServicer):
    CreateTopic = _unary(rc.check_create_topic, AdminApi.create_topic)
    DeleteTopic = _unary(rc.check_delete_topic, AdminApi.delete_topic)
    ListTopics = _unary(no_check, AdminApi.list_topics)
    DescribeTopic = _unary(rc.check_describe_topic, AdminApi.describe_topic)
    AlterTopicConfig = _unary(rc.check_alter_topic_config, AdminApi.alter_topic_config)
    ListGroups = _unary(no_check, AdminApi.list_groups)
    DescribeGroup = _unary(rc.check_describe_group, AdminApi.describe_group)
    DescribeCluster = _unary(no_check, AdminApi.describe_cluster)
    UpdateRecord = _unary(rc.check_update_record, AdminApi.update_record)
    CancelRecord = _unary(rc.check_cancel_record, AdminApi.cancel_record)
    RemoveBroker = _unary(rc.check_remove_broker, AdminApi.remove_broker)
    CommitTxn = _unary(rc.check_commit_txn, AdminApi.commit_txn)
    GetTxn = _unary(rc.check_get_txn, AdminApi.get_txn)
    DeleteGroup = _unary(rc.check_delete_group, AdminApi.delete_group)
    SeekGroup = _unary(rc.check_seek_group, AdminApi.seek_group)
    PurgeTopic = _unary(rc.check_purge_topic, AdminApi.purge_topic)
    CreateSchedule = _unary(rc.check_create_schedule, AdminApi.create_schedule)
    ListSchedules = _unary(rc.check_list_schedules, AdminApi.list_schedules)
    PauseSchedule = _unary(rc.check_pause_schedule, AdminApi.pause_schedule)
    DeleteSchedule = _unary(rc.check_delete_schedule, AdminApi.delete_schedule)
    AddPartitions = _unary(rc.check_add_partitions, AdminApi.add_partitions)
    RebalanceLeaders = _unary(no_check, AdminApi.rebalance_leaders)
    BackupMetadata = _unary(no_check, AdminApi.backup_metadata)
    MovePartition = _unary(rc.check_move_partition, AdminApi.move_partition)

    def BackupPartition(
        self, request: api_pb2.BackupPartitionRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.BackupChunk]:
        """A server stream: the facade's chunks; a caller that leaves cancels the copy."""
        cancelled = threading.Event()
        context.add_callback(cancelled.set)
        try:
            yield from self.facade.backup_partition(rc.check_backup_partition(request), cancelled)
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
    facade: BrokerFacade | ApiHandlers,
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
    """Start serving the raftq API for ``facade`` (one object serving all four services, or
    an :class:`ApiHandlers` naming each) on ``address`` (``host:port``).

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
    api = facade if isinstance(facade, ApiHandlers) else ApiHandlers.of(facade)
    producer = ProducerServicer(api.producer, max_streams=streams)
    api_pb2_grpc.add_ProducerServicer_to_server(producer, server)
    api_pb2_grpc.add_ConsumerServicer_to_server(ConsumerServicer(api.consumer), server)
    api_pb2_grpc.add_LogServicer_to_server(LogServicer(api.log), server)
    api_pb2_grpc.add_AdminServicer_to_server(AdminServicer(api.admin), server)
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
    "AdminApi",
    "AdminServicer",
    "ApiHandlers",
    "BrokerFacade",
    "ConsumerApi",
    "ConsumerServicer",
    "Health",
    "LogApi",
    "LogServicer",
    "MalformedRequestInterceptor",
    "ProducerApi",
    "ProducerServicer",
    "serve",
]
