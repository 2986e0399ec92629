"""The raftq Python client: :class:`Producer`, :class:`Consumer` and :class:`Admin` over gRPC.

``bootstrap`` is ``"host:port[,host:port...]"``: brokers' client addresses. Calls that any
broker can answer (metadata, admin, groups) try them in turn, starting with the last one that
answered; sends go straight to each partition's leader, learnt from ``DescribeTopic``.
Channels are created lazily, one per address, never at import. Clients are thread-safe.
An :class:`Admin` pickles as its bootstrap (channels are re-created where it lands); a
:class:`Producer` or :class:`Consumer` owns threads and in-flight state and refuses to be
pickled: create it inside the Spark executor (or process) that uses it.

Errors are the typed :mod:`proto.errors` (``RaftqError`` subclasses), whatever the broker or
the network did; ``err.retriable`` says whether trying again can help and ``err.kind.hint``
says what to do.

Security: every client takes ``tls_ca_file`` (TLS, verifying the brokers' certificates against
that CA; their certificates must name the bootstrap hosts), ``tls_cert_file`` and
``tls_key_file`` (mutual TLS), and ``token`` (sent as ``authorization: Bearer <token>`` on
every call). A broker refuses a missing or unknown token with Unauthenticated and a call the
token's ACL does not allow with PermissionDenied; neither is retried.

Producing
---------
``Producer.send`` returns a :class:`SendFuture` at once (``result``, ``exception``, ``done``,
``add_done_callback`` as a ``concurrent.futures.Future``; the records of a batch share its
waiting: :mod:`broker.send_future`); ``send_many`` queues many values at once. Records are
batched per partition for up to ``linger_ms`` (or until ``batch_records_max`` /
``batch_bytes_max``) and sent to the partition leader by one background thread, one batch in
flight per partition, so records of a partition are appended in ``send`` order. A batch of
bare records only (a value each: no key, headers, priority, delay or idempotency key) goes
as ``SendRequest.values``, with no ``Record`` message per record, and is answered by one
offset range; a batch with any other record goes as records. A future resolves to
:class:`RecordMetadata` once a majority of the partition's replicas committed the record, or
to the typed error.

With ``idempotent=True`` (the default) each batch carries the producer id and a
per-partition sequence; retriable failures (NOT_LEADER: refresh metadata and go to the
new leader; UNAVAILABLE, TIMEOUT: the outcome is unknown) resend the *same* batch with the
*same* sequence, which the broker answers from its dedup state if it already applied it: no
duplicates, no reordering. When the retries run out with the outcome unknown, the future
fails and the partition continues under a fresh producer id (``<id>~<n>``), so later batches
neither collide with nor wait for the lost one. Without idempotence a retry may duplicate.

Consuming: at-least-once with leases
------------------------------------
A ``Consumer`` joins its group (``JoinGroup``), and a background thread heartbeats every
``heartbeat_interval_ms``. ``poll`` leases ready records of the member's partitions: each
:class:`Message` is this member's until ``lease_deadline_ms`` and no other member of the group
gets it meanwhile. Then:

- ``msg.ack()`` ends it for the group; ``msg.nack(delay_ms)`` gives it back for redelivery
  (no delay given: the topic's exponential backoff); ``msg.extend(lease_ms)`` keeps working.
- A lease that runs out makes the record ready again: it is redelivered (to this member or
  another) with ``delivery_count + 1``, and a late ack of the old delivery fails with
  LEASE_EXPIRED. A record delivered ``max_deliveries`` times goes to the dead-letter topic.
- Rebalance (a member joins, leaves or misses its session): partitions move with the sticky
  assignor, the leases on moved partitions are released and their records redelivered to
  the new owner; this member's poll, heartbeat and acks for them fail with FENCED, after
  which the consumer rejoins on its own (same member id) and carries on with its new
  assignment. Acks for moved partitions are lost work, never lost records.

So every record is processed at least once; process idempotently (``delivery_count > 1``
marks a redelivery). ``close()`` leaves the group at once, releasing its leases.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from assignors.partitioner import partition_for
from broker.config import ClientSettings
from broker.send_future import BatchOutcome, RecordMetadata, SendFuture
from proto import api_pb2, api_pb2_grpc, common_pb2, errors, partition_pb2
from proto.common_pb2 import ErrorCode
from transport.grpc_errors import from_rpc_error
from transport.tls import ChannelSecurity, open_channel

log = logging.getLogger("raftq.client")

T = TypeVar("T")
_DEFAULTS = ClientSettings()
DEFAULT_BOOTSTRAP = "127.0.0.1:7070"
RETRY_BACKOFF_MS = 100
RETRY_BACKOFF_MAX_MS = 2_000
# Seconds a broker that did not answer (UNAVAILABLE) is avoided as a partition leader: sends
# go to another broker, which forwards them to the partition's (new) leader.
DOWN_S = 2.0
_OK = int(ErrorCode.OK)  # enum attribute lookups are slow per record
_OUT_OF_ORDER_SEQUENCE = int(ErrorCode.OUT_OF_ORDER_SEQUENCE)
POLL_WAIT_MS_MAX = 300_000  # the broker's longest long poll; poll() loops for longer waits


def parse_bootstrap(bootstrap: str | Sequence[str]) -> tuple[str, ...]:
    """``"a:1,b:2"`` (or a list) → ``("a:1", "b:2")``; InvalidArgument when empty or malformed."""
    parts = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses = tuple(p.strip() for p in parts if p.strip())
    if not addresses:
        raise errors.InvalidArgument("bootstrap names no broker: give host:port[,host:port]")
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise errors.InvalidArgument(f"bootstrap address {address!r} is not host:port")
    return addresses


class _Stubs:
    def __init__(self, channel: grpc.Channel) -> None:
        self.producer = api_pb2_grpc.ProducerStub(channel)
        self.consumer = api_pb2_grpc.ConsumerStub(channel)
        self.log = api_pb2_grpc.LogStub(channel)
        self.admin = api_pb2_grpc.AdminStub(channel)


class _Channels:
    """One channel (and set of stubs) per address, created on first use. Pickles as its
    bootstrap list only: channels never travel."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        request_timeout_ms: int,
        security: ChannelSecurity | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.request_timeout_s = request_timeout_ms / 1000
        self.security = security
        self._lock = threading.Lock()
        self._channels: dict[str, tuple[grpc.Channel, _Stubs]] = {}
        self._preferred = 0  # index into bootstrap of the last broker that answered
        self._down: dict[str, float] = {}  # address -> monotonic time it is avoided until
        self._rotation = itertools.count()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "bootstrap": self.bootstrap,
            "request_timeout_ms": self.request_timeout_s * 1000,
            "security": self.security,  # PEM bytes and token travel: executors need no files
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["bootstrap"], state["request_timeout_ms"], state.get("security")
        )

    def stubs(self, address: str) -> _Stubs:
        with self._lock:
            entry = self._channels.get(address)
            if entry is None:
                channel = open_channel(address, self.security)
                entry = (channel, _Stubs(channel))
                self._channels[address] = entry
            return entry[1]

    def call(self, address: str, fn: Callable[[_Stubs, float], T]) -> T:
        """``fn(stubs, timeout_s)`` against one address; grpc errors become typed errors."""
        try:
            return fn(self.stubs(address), self.request_timeout_s)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc

    def mark_down(self, address: str) -> bool:
        """Avoid ``address`` as a send target for DOWN_S; False if it already was."""
        now = time.monotonic()
        with self._lock:
            fresh = self._down.get(address, 0.0) <= now
            self._down[address] = now + DOWN_S
        return fresh

    def is_down(self, address: str) -> bool:
        with self._lock:
            return self._down.get(address, 0.0) > time.monotonic()

    def other_than(self, address: str) -> str:
        """A bootstrap broker that is neither ``address`` nor marked down (rotating), else
        ``address``."""
        with self._lock:
            now = time.monotonic()
            up = [a for a in self.bootstrap if a != address and self._down.get(a, 0.0) <= now]
        return up[next(self._rotation) % len(up)] if up else address

    def call_any(self, fn: Callable[[_Stubs, float], T]) -> T:
        """``fn`` against each bootstrap broker in turn until one is reachable: only
        UNAVAILABLE moves on (every other answer is the cluster's)."""
        count = len(self.bootstrap)
        start = self._preferred
        last: errors.RaftqError | None = None
        for i in range(count):
            index = (start + i) % count
            try:
                result = self.call(self.bootstrap[index], fn)
            except errors.Unavailable as exc:
                last = exc
                continue
            self._preferred = index
            return result
        assert last is not None
        raise last

    def close(self) -> None:
        with self._lock:
            channels, self._channels = self._channels, {}
        for channel, _ in channels.values():
            channel.close()


def channel_security(
    tls_ca_file: str | None = None,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    token: str | None = None,
) -> ChannelSecurity | None:
    """None for plaintext without a token; raises InvalidArgument for unreadable files."""
    if not (tls_ca_file or tls_cert_file or tls_key_file or token):
        return None
    return ChannelSecurity.from_files(
        tls_ca_file=tls_ca_file,
        tls_cert_file=tls_cert_file,
        tls_key_file=tls_key_file,
        token=token,
    )


def _config_update(config: Mapping[str, Any]) -> api_pb2.TopicConfigUpdate:
    """Keyword settings (``ordering="priority"``, ``lease_ms=5000``...) → TopicConfigUpdate."""
    update = api_pb2.TopicConfigUpdate()
    for name, value in config.items():
        if value is None:
            continue
        if name not in api_pb2.TopicConfigUpdate.DESCRIPTOR.fields_by_name:
            known = ", ".join(api_pb2.TopicConfigUpdate.DESCRIPTOR.fields_by_name)
            raise errors.InvalidArgument(f"no topic setting {name!r}; known: {known}")
        if name == "ordering" and isinstance(value, str):
            if value.upper() not in ("FIFO", "PRIORITY"):
                raise errors.InvalidArgument(f"ordering {value!r}: use fifo or priority")
            value = common_pb2.Ordering.Value(value.upper())
        setattr(update, name, value)
    return update


# --- Admin ----------------------------------------------------------------------------------


class Admin:
    """Topic, group, cluster and record administration. Answers are the API's protobufs
    (``proto/api.proto``); failures raise typed :mod:`proto.errors`."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = DEFAULT_BOOTSTRAP,
        *,
        request_timeout_ms: int = _DEFAULTS.request_timeout_ms,
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        token: str | None = None,
    ) -> None:
        security = channel_security(tls_ca_file, tls_cert_file, tls_key_file, token)
        self._channels = _Channels(bootstrap, request_timeout_ms, security)

    def _admin(self, method: str, request: Any) -> Any:
        return self._channels.call_any(lambda s, t: getattr(s.admin, method)(request, timeout=t))

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        **config: Any,
    ) -> api_pb2.TopicDescription:
        """Create a topic; absent settings take the broker's topic_defaults. TopicExists and
        InvalidArgument are normal failures."""
        request = api_pb2.CreateTopicRequest(name=name, config=_config_update(config))
        if partitions is not None:
            request.partitions = partitions
        if replication_factor is not None:
            request.replication_factor = replication_factor
        result: api_pb2.TopicDescription = self._admin("CreateTopic", request)
        return result

    def delete_topic(self, name: str) -> None:
        self._admin("DeleteTopic", api_pb2.DeleteTopicRequest(name=name))

    def list_topics(self) -> list[api_pb2.TopicSummary]:
        return list(self._admin("ListTopics", api_pb2.ListTopicsRequest()).topics)

    def describe_topic(self, name: str) -> api_pb2.TopicDescription:
        result: api_pb2.TopicDescription = self._admin(
            "DescribeTopic", api_pb2.DescribeTopicRequest(name=name)
        )
        return result

    def alter_topic_config(self, name: str, **config: Any) -> api_pb2.TopicDescription:
        request = api_pb2.AlterTopicConfigRequest(name=name, config=_config_update(config))
        result: api_pb2.TopicDescription = self._admin("AlterTopicConfig", request)
        return result

    def list_groups(self) -> list[api_pb2.GroupSummary]:
        return list(self._admin("ListGroups", api_pb2.ListGroupsRequest()).groups)

    def describe_group(self, group: str) -> api_pb2.GroupDescription:
        result: api_pb2.GroupDescription = self._admin(
            "DescribeGroup", api_pb2.DescribeGroupRequest(group=group)
        )
        return result

    def describe_cluster(self) -> api_pb2.ClusterDescription:
        result: api_pb2.ClusterDescription = self._admin(
            "DescribeCluster", api_pb2.DescribeClusterRequest()
        )
        return result

    def update_record(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        priority: int | None = None,
        deliver_at_ms: int | None = None,
    ) -> None:
        request = api_pb2.UpdateRecordRequest(topic=topic, partition=partition, offset=offset)
        if priority is not None:
            request.priority = priority
        if deliver_at_ms is not None:
            request.deliver_at_ms = deliver_at_ms
        self._admin("UpdateRecord", request)

    def cancel_record(self, topic: str, partition: int, offset: int) -> None:
        self._admin(
            "CancelRecord",
            api_pb2.CancelRecordRequest(topic=topic, partition=partition, offset=offset),
        )

    def remove_broker(self, broker_id: int, timeout_s: float = 300.0) -> int:
        """Move every replica off ``broker_id``, deregister it and take it out of the metadata
        group (Admin.RemoveBroker); returns the number of replicas moved. Blocks until done or
        ``timeout_s``; after a Timeout or Unavailable call it again (it resumes). InvalidArgument
        (not registered, no live broker can take a replica) is normal."""
        request = api_pb2.RemoveBrokerRequest(broker_id=broker_id)
        response: api_pb2.RemoveBrokerResponse = self._channels.call_any(
            lambda s, t: s.admin.RemoveBroker(request, timeout=max(t, timeout_s))
        )
        return response.moved_partitions

    def list_offsets(self, topic: str) -> list[api_pb2.PartitionOffsets]:
        request = api_pb2.ListOffsetsRequest(topic=topic)
        response = self._channels.call_any(lambda s, t: s.log.ListOffsets(request, timeout=t))
        return list(response.partitions)

    def fetch(
        self, topic: str, partition: int, offset: int, max_records: int = 500, max_bytes: int = 0
    ) -> api_pb2.FetchResponse:
        """Read the log without touching group state (replay, backfill)."""
        request = api_pb2.FetchRequest(
            topic=topic,
            partition=partition,
            offset=offset,
            max_records=max_records,
            max_bytes=max_bytes,
        )
        result: api_pb2.FetchResponse = self._channels.call_any(
            lambda s, t: s.log.Fetch(request, timeout=t)
        )
        return result

    def producer_state(
        self, topic: str, producer_id: str, partitions: Sequence[int] = ()
    ) -> dict[int, api_pb2.PartitionProducerState]:
        """An idempotent producer's last applied batch per partition (all partitions when
        none are named): ``known``, ``last_sequence``, ``last_offsets``. Forgotten after the
        topic's ``dedup_window_ms``. UnknownTopic / UnknownPartition are normal."""
        request = api_pb2.ProducerStateRequest(
            topic=topic, producer_id=producer_id, partitions=list(partitions)
        )
        response = self._channels.call_any(lambda s, t: s.log.ProducerState(request, timeout=t))
        return {p.partition: p for p in response.partitions}

    def commit_txn(self, app_id: str, version: int) -> int:
        """Raise ``app_id``'s committed-batch watermark to ``version``; returns the watermark
        after the call (a stale version changes nothing). InvalidArgument is normal."""
        state = self._admin("CommitTxn", api_pb2.CommitTxnRequest(app_id=app_id, version=version))
        return int(state.version)

    def get_txn(self, app_id: str) -> int | None:
        """``app_id``'s committed-batch watermark; None when it never committed."""
        state = self._admin("GetTxn", api_pb2.GetTxnRequest(app_id=app_id))
        return int(state.version) if state.known else None

    def close(self) -> None:
        self._channels.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- Producer -------------------------------------------------------------------------------


@dataclass
class _TopicMeta:
    partitions: int
    leaders: list[str]  # per partition, the leader's client address ("" = unknown)
    max_record_bytes: int
    stale: bool = False


class _Batch:
    """Records queued for one partition, in one of two modes: bare values (``items`` are
    bytes, sent as ``SendRequest.values`` and answered by one range) or records (``items`` are
    ``Record`` messages). A batch starts in its first record's mode; a bare record joins a
    records batch as a Record, and a record that is not bare turns a values batch into records
    (``to_records``), so mixing kinds never makes batches smaller. Only a batch not yet sent
    changes: a retry resends the very request the first attempt sent."""

    __slots__ = (
        "address",
        "attempts",
        "bare",
        "created_s",
        "items",
        "outcome",
        "partition",
        "producer_id",
        "request",
        "retry_at_s",
        "sequence",
        "size",
        "topic",
    )

    def __init__(self, topic: str, partition: int, created_s: float, bare: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.created_s = created_s
        self.bare = bare
        self.items: list[Any] = []  # bytes when bare, else common_pb2.Record
        self.size = 0
        self.outcome = BatchOutcome(topic, partition)  # what the batch's futures wait on
        self.producer_id: str | None = None
        self.sequence: int | None = None
        self.attempts = 0
        self.retry_at_s = 0.0
        self.address = ""  # where the last attempt went
        self.request: api_pb2.SendRequest | None = None  # built once: a retry resends it

    def to_records(self) -> None:
        """The values become Record messages, in order (a record that is not bare joins)."""
        assert self.bare and self.request is None and self.sequence is None, "batch already sent"
        self.items = [common_pb2.Record(value=v) for v in self.items]
        self.bare = False


def _record(
    value: bytes,
    key: bytes | None,
    headers: Mapping[str, bytes] | None,
    priority: int,
    deliver_at_ms: int,
    idempotency_key: str,
) -> tuple[common_pb2.Record, int]:
    """The Record message of a non-bare record and its size as max_record_bytes counts it."""
    record = common_pb2.Record(value=value)  # only the fields set: cheaper per record
    size = len(value)
    if key is not None:
        record.key = key
        size += len(key)
    if headers:
        record.headers.update(headers)
        size += sum(len(name.encode()) + len(v) for name, v in headers.items())
    if priority:
        record.priority = priority
    if deliver_at_ms:
        record.deliver_at_ms = deliver_at_ms
    if idempotency_key:
        record.idempotency_key = idempotency_key
    return record, size


class Producer:
    """Batches records per partition and sends them to partition leaders; see the module
    docstring for batching, ordering, retries and idempotence."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = DEFAULT_BOOTSTRAP,
        *,
        linger_ms: int = _DEFAULTS.linger_ms,
        batch_records_max: int = _DEFAULTS.batch_records_max,
        batch_bytes_max: int = _DEFAULTS.batch_bytes_max,
        idempotent: bool = True,
        producer_id: str | None = None,
        retries: int = 10,
        request_timeout_ms: int = _DEFAULTS.request_timeout_ms,
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        token: str | None = None,
    ) -> None:
        if linger_ms < 0 or batch_records_max < 1 or batch_bytes_max < 1 or retries < 0:
            raise errors.InvalidArgument(
                "need linger_ms >= 0, batch_records_max >= 1, batch_bytes_max >= 1, retries >= 0"
            )
        security = channel_security(tls_ca_file, tls_cert_file, tls_key_file, token)
        self._channels = _Channels(bootstrap, request_timeout_ms, security)
        self.linger_s = linger_ms / 1000
        self.batch_records_max = batch_records_max
        self.batch_bytes_max = batch_bytes_max
        self.retries = retries
        self.idempotent = idempotent
        self.producer_id = (producer_id or uuid.uuid4().hex) if idempotent else None
        self._lock = threading.Lock()  # not reentrant: nothing calls back in under it
        self._cond = threading.Condition(self._lock)
        self._queues: dict[tuple[str, int], deque[_Batch]] = {}
        self._in_flight: set[tuple[str, int]] = set()
        self._next_sequence: dict[tuple[str, int], int] = {}
        self._epoch: dict[tuple[str, int], int] = {}
        self._outstanding = 0  # records sent to send() whose future is not yet done
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._request_ids = itertools.count(1)
        self._spread = itertools.count()
        # Replaced whole under _meta_lock, never mutated but for leaders/stale: send() reads
        # it without the lock (one dict read is atomic).
        self._meta: dict[str, _TopicMeta] = {}
        self._meta_lock = threading.Lock()
        self._sender = threading.Thread(target=self._run, name="raftq-producer", daemon=True)
        self._sender.start()

    def __reduce__(self) -> Any:
        raise TypeError("a Producer owns threads and channels: create it where it is used")

    # -- the public API --------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        priority: int = 0,
        deliver_at_ms: int = 0,
        idempotency_key: str = "",
    ) -> SendFuture:
        """Queue one record; the future resolves to its RecordMetadata or a typed error
        (UnknownTopic, UnknownPartition, RecordTooLarge, InvalidArgument, or a retriable
        error once retries are spent). The first send to a topic fetches its metadata
        (blocking, up to request_timeout_ms). Raises RuntimeError after close()."""
        meta = self._meta.get(topic)  # stale is fine: see _cached_metadata
        if meta is None:
            try:
                meta = self._metadata(topic)
            except errors.RaftqError as exc:
                return SendFuture.failed(topic, exc)
        bare = key is None and not (headers or priority or deliver_at_ms or idempotency_key)
        item: bytes | common_pb2.Record
        if bare:  # the fast path: no Record message, a batch of these goes as values
            item, size = value, len(value)
            if partition is None:
                partition = next(self._spread) % meta.partitions  # partition_for(None, ...)
        else:
            item, size = _record(value, key, headers, priority, deliver_at_ms, idempotency_key)
            if partition is None:
                partition = partition_for(key, meta.partitions, next(self._spread))
        if not 0 <= partition < meta.partitions:
            return SendFuture.failed(
                topic,
                errors.UnknownPartition(
                    f"topic {topic!r} has partitions 0..{meta.partitions - 1}, not {partition}"
                ),
            )
        if size > meta.max_record_bytes:  # size: as partitions.machine.record_size counts
            return SendFuture.failed(
                topic,
                errors.RecordTooLarge(
                    f"record is {size} bytes, over topic {topic!r}'s max_record_bytes "
                    f"({meta.max_record_bytes}): split it"
                ),
            )
        tp = (topic, partition)
        with self._lock:  # the Condition's own lock: `with self._cond` costs two Python calls
            if self._closing:
                raise RuntimeError("send() after close()")
            queue = self._queues.get(tp)
            if queue is None:
                queue = self._queues[tp] = deque()
            batch = queue[-1] if queue else None
            if (
                batch is None
                or batch.sequence is not None
                or batch.attempts
                or len(batch.items) >= self.batch_records_max  # self._full(batch, size)
                or batch.size + size > self.batch_bytes_max
            ):
                batch = _Batch(topic, partition, time.monotonic(), bare)
                queue.append(batch)
                self._cond.notify_all()  # the sender has a new linger deadline to wait for
            elif batch.bare is not bare:  # mixed kinds share the batch, as records
                if bare:
                    item = common_pb2.Record(value=value)
                else:
                    batch.to_records()
            items = batch.items
            index = len(items)
            items.append(item)
            batch.size += size
            self._outstanding += 1
            if index + 1 >= self.batch_records_max or batch.size > self.batch_bytes_max:
                self._cond.notify_all()  # full: the sender need not wait for the linger
        return SendFuture(batch.outcome, index)

    def send_many(
        self, topic: str, values: Sequence[bytes], partition: int | None = None
    ) -> list[SendFuture]:
        """Queue bare records (a value each, no key: spread round-robin over the partitions
        unless ``partition`` is given) as ``send(topic, value, partition=partition)`` would
        one after another, but taking the producer's lock once per batch instead of once per
        record. Returns one future per value, in order; errors as for send."""
        values = list(values)
        if not values:
            return []
        try:
            meta = self._cached_metadata(topic)
            if partition is not None and not 0 <= partition < meta.partitions:
                raise errors.UnknownPartition(
                    f"topic {topic!r} has partitions 0..{meta.partitions - 1}, not {partition}"
                )
        except errors.RaftqError as exc:
            failed = SendFuture.failed(topic, exc)._outcome
            return [SendFuture(failed, 0) for _ in values]
        if max(map(len, values)) > meta.max_record_bytes:  # rare: let those fail one by one
            return [self.send(topic, v, partition=partition) for v in values]
        futures: list[SendFuture] = [None] * len(values)  # type: ignore[list-item]
        if partition is not None:
            futures[:] = self._queue_values(topic, partition, values)
            return futures
        first = next(self._spread)
        for j in range(min(meta.partitions, len(values))):  # value i: partition (first+i) % n
            futures[j :: meta.partitions] = self._queue_values(
                topic, (first + j) % meta.partitions, values[j :: meta.partitions]
            )
        return futures

    def _queue_values(self, topic: str, partition: int, values: list[bytes]) -> list[SendFuture]:
        """Append bare values to the partition's queue, one lock hold per batch they fill."""
        futures: list[SendFuture] = []
        ends = list(itertools.accumulate(map(len, values), initial=0))  # ends[k]: bytes of [:k]
        i, n = 0, len(values)
        while i < n:
            with self._cond:
                if self._closing:
                    raise RuntimeError("send_many() after close()")
                queue = self._queues.get((topic, partition))
                if queue is None:
                    queue = self._queues[(topic, partition)] = deque()
                batch = queue[-1] if queue else None
                fit = 0
                if batch is not None and batch.bare and batch.sequence is None:
                    fit = 0 if batch.attempts else self._fit(batch, ends, i)
                if fit == 0:
                    batch = _Batch(topic, partition, time.monotonic(), True)
                    queue.append(batch)
                    fit = max(1, self._fit(batch, ends, i))  # one value over the bytes: alone
                assert batch is not None
                index = len(batch.items)
                batch.items.extend(values[i : i + fit])
                batch.size += ends[i + fit] - ends[i]
                self._outstanding += fit
                self._cond.notify_all()
            outcome = batch.outcome
            futures.extend(
                map(SendFuture, itertools.repeat(outcome, fit), range(index, index + fit))
            )
            i += fit
        return futures

    def _fit(self, batch: _Batch, ends: list[int], i: int) -> int:
        """How many values from ``i`` on fit in the batch (``ends``: cumulative sizes)."""
        last = min(len(ends) - 1, i + self.batch_records_max - len(batch.items))
        budget = ends[i] + self.batch_bytes_max - batch.size
        return max(0, bisect.bisect_right(ends, budget, i, last + 1) - 1 - i)

    def flush(self, timeout_s: float | None = None) -> None:
        """Send everything queued now and wait until every future so far is done (with a
        result or an error). Raises Timeout if that takes longer than ``timeout_s``."""
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                if not self._cond.wait_for(lambda: self._outstanding == 0, timeout_s):
                    raise errors.Timeout(f"{self._outstanding} records still unsent")
            finally:
                self._flushing -= 1

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the sender and close the channels. Idempotent."""
        if self._closed:
            return
        try:
            self.flush(timeout_s)
        finally:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            self._sender.join(timeout_s)
            self._channels.close()
            self._closed = True

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def statistics(self) -> dict[str, int]:
        with self._cond:
            return {
                "outstanding_records": self._outstanding,
                "queued_batches": sum(len(q) for q in self._queues.values()),
                "in_flight_batches": len(self._in_flight),
            }

    # -- metadata --------------------------------------------------------------------------

    def _metadata(self, topic: str) -> _TopicMeta:
        with self._meta_lock:
            meta = self._meta.get(topic)
            if meta is not None and not meta.stale:
                return meta
        request = api_pb2.DescribeTopicRequest(name=topic)
        description = self._channels.call_any(
            lambda s, t: s.admin.DescribeTopic(request, timeout=t)
        )
        leaders = [""] * len(description.partitions)
        for p in description.partitions:
            if 0 <= p.partition < len(leaders):
                leaders[p.partition] = p.leader_addr
        fresh = _TopicMeta(len(leaders), leaders, description.config.max_record_bytes or 2**62)
        with self._meta_lock:
            self._meta[topic] = fresh
        return fresh

    def _cached_metadata(self, topic: str) -> _TopicMeta:
        """For ``send``: the cached metadata even when stale (partition counts only grow, and
        the sender thread refreshes leaders), so a send never blocks on, or fails with, a
        metadata refresh while the cluster elects new leaders. Fetched on first use."""
        with self._meta_lock:
            meta = self._meta.get(topic)
        return meta if meta is not None else self._metadata(topic)

    def _leader(self, topic: str, partition: int) -> str:
        with self._meta_lock:
            cached = self._meta.get(topic)
            leader = cached.leaders[partition] if cached and partition < cached.partitions else ""
        if leader and self._channels.is_down(leader):
            # The leader's broker did not answer (killed?): any other broker forwards the send
            # to the partition's new leader and waits out the election on the broker side, so
            # neither a metadata refresh nor a backoff stands between the election and the ack.
            return self._channels.other_than(leader)
        meta = self._metadata(topic)
        if partition < len(meta.leaders) and meta.leaders[partition]:
            return meta.leaders[partition]
        return self._channels.bootstrap[self._channels._preferred]

    def _stale(self, topic: str, partition: int, leader_hint: str) -> None:
        with self._meta_lock:
            meta = self._meta.get(topic)
            if meta is None:
                return
            if leader_hint and partition < len(meta.leaders):
                meta.leaders[partition] = leader_hint  # follow the hint at once
            else:
                meta.stale = True

    # -- the sender thread -----------------------------------------------------------------

    def _full(self, batch: _Batch, adding: int) -> bool:
        return (
            len(batch.items) >= self.batch_records_max or batch.size + adding > self.batch_bytes_max
        )

    def _ready(self, now: float) -> tuple[list[_Batch], float | None]:
        """Batches to send now (head of each idle partition's queue that is full, lingered
        long enough, being flushed or retried), and when to look again."""
        ready: list[_Batch] = []
        wake: float | None = None
        for tp, queue in self._queues.items():
            if not queue or tp in self._in_flight:
                continue
            batch = queue[0]
            due_s = batch.retry_at_s if batch.attempts else batch.created_s + self.linger_s
            urgent = self._flushing or self._closing or len(queue) > 1 or self._full(batch, 0)
            if batch.attempts == 0 and urgent:
                due_s = now
            if due_s <= now:
                ready.append(queue.popleft())
            else:
                wake = due_s if wake is None else min(wake, due_s)
        return ready, wake

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closing and not self._outstanding:
                        return
                    now = time.monotonic()
                    ready, wake = self._ready(now)
                    if ready:
                        break
                    self._cond.wait(None if wake is None else max(0.0, wake - now))
                for batch in ready:
                    tp = (batch.topic, batch.partition)
                    self._in_flight.add(tp)
                    if self.producer_id is not None and batch.sequence is None:
                        epoch = self._epoch.get(tp, 0)
                        batch.producer_id = self.producer_id + (f"~{epoch}" if epoch else "")
                        batch.sequence = self._next_sequence.get(tp, 0)
            for batch in ready:
                self._dispatch(batch)

    def _dispatch(self, batch: _Batch) -> None:
        request = batch.request
        if request is None:  # built once: a retry resends the same values and sequence
            if batch.bare:
                request = api_pb2.SendRequest(
                    topic=batch.topic, values=batch.items, partition=batch.partition
                )
            else:
                request = api_pb2.SendRequest(
                    topic=batch.topic, records=batch.items, partition=batch.partition
                )
            if batch.producer_id is not None and batch.sequence is not None:
                request.producer_id, request.sequence = batch.producer_id, batch.sequence
            batch.request = request
        request.request_id = next(self._request_ids)
        try:
            batch.address = self._leader(batch.topic, batch.partition)
            stubs = self._channels.stubs(batch.address)
            call = stubs.producer.Send.future(request, timeout=self._channels.request_timeout_s)
        except errors.RaftqError as exc:
            self._settle(batch, None, exc)
            return
        call.add_done_callback(lambda done: self._on_sent(batch, done))

    def _on_sent(self, batch: _Batch, call: Any) -> None:
        try:
            self._settle(batch, call.result(), None)
        except grpc.RpcError as exc:
            self._settle(batch, None, from_rpc_error(exc))

    @staticmethod
    def _range_error(batch: _Batch, response: api_pb2.SendResponse) -> errors.RaftqError | None:
        """A values batch's answer is one SendResult covering them all: its error, or
        Internal when it is not that (a broker that predates SendRequest.values ignores them
        and answers no result at all: nothing was written)."""
        results = response.results
        if len(results) != 1:
            return errors.Internal(
                f"broker answered {len(results)} results for a batch of {len(batch.items)} "
                "values, not one (does it predate SendRequest.values?)"
            )
        result = results[0]
        if result.error != _OK:
            return errors.error_for(result.error, result.message, leader_hint=result.leader_hint)
        if result.count != len(batch.items):
            return errors.Internal(
                f"broker answered a range of {result.count} records for {len(batch.items)} values"
            )
        return None

    def _settle(
        self, batch: _Batch, response: api_pb2.SendResponse | None, error: errors.RaftqError | None
    ) -> None:
        """Resolve the batch's futures, or queue it again (same request) to retry."""
        tp = (batch.topic, batch.partition)
        if response is not None and batch.bare:
            error = self._range_error(batch, response)
        elif response is not None:
            if len(response.results) != len(batch.items):
                error = errors.Internal(
                    f"broker answered {len(response.results)} results for "
                    f"{len(batch.items)} records"
                )
            else:
                failed = [r for r in response.results if r.error != _OK]
                if failed and len(failed) == len(response.results):
                    first = failed[0]
                    if errors.error_class(first.error).kind.retriable:
                        error = errors.error_for(
                            first.error, first.message, leader_hint=first.leader_hint
                        )
        rerouted = False
        if error is not None and error.retriable:
            self._stale(batch.topic, batch.partition, error.leader_hint)  # before any retry
            if isinstance(error, errors.Unavailable) and batch.address:
                rerouted = self._channels.mark_down(batch.address)  # retry elsewhere at once
        # Each record's outcome is built outside the lock (send() contends for it per record);
        # a values batch has one outcome, its records' metadata built when asked for.
        each: list[RecordMetadata | errors.RaftqError] = []
        applied = out_of_order = False
        if error is None and batch.bare:
            applied = True
        elif error is None:
            assert response is not None
            for r in response.results:
                code = r.error
                if code == _OK:
                    applied = True
                    each.append(
                        RecordMetadata(
                            batch.topic, r.partition, r.offset, r.timestamp_ms, r.duplicate
                        )
                    )
                else:
                    each.append(errors.error_for(code, r.message))
                    out_of_order = out_of_order or code == _OUT_OF_ORDER_SEQUENCE
        with self._cond:
            self._in_flight.discard(tp)
            self._cond.notify_all()
            if error is not None and error.retriable and batch.attempts < self.retries:
                batch.attempts += 1
                backoff_ms = min(RETRY_BACKOFF_MS * 2 ** (batch.attempts - 1), RETRY_BACKOFF_MAX_MS)
                if rerouted:
                    backoff_ms = 0
                batch.retry_at_s = time.monotonic() + backoff_ms / 1000
                self._queues.setdefault(tp, deque()).appendleft(batch)
                log.info("[topic/partition=%s/%d] retrying batch: %s", *tp, error)
                return
            if error is not None:
                if error.retriable or isinstance(error, errors.OutOfOrderSequence):
                    self._new_epoch(tp)  # outcome unknown: never reuse this sequence
            else:
                if out_of_order:
                    self._new_epoch(tp)
                if applied and batch.sequence is not None:
                    self._next_sequence[tp] = batch.sequence + 1
        outcome = batch.outcome  # resolved unlocked: it runs the users' callbacks
        if error is not None:
            outcome.fail(error)
        elif batch.bare:
            assert response is not None
            first = response.results[0]
            outcome.resolve_range(first.offset, first.timestamp_ms, first.duplicate)
        else:
            outcome.resolve_each(each)
        with self._cond:  # only now: flush() returns with every future done
            self._outstanding -= len(batch.items)
            self._cond.notify_all()

    def _new_epoch(self, tp: tuple[str, int]) -> None:
        self._epoch[tp] = self._epoch.get(tp, 0) + 1
        self._next_sequence[tp] = 0


# --- Consumer -------------------------------------------------------------------------------


@dataclass
class Message:
    """One delivery of a record to this consumer; see the module docstring for leases."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]
    priority: int
    delivery_count: int
    lease_deadline_ms: int
    timestamp_ms: int = 0
    deliver_at_ms: int = 0
    _consumer: Consumer | None = field(default=None, repr=False, compare=False)

    @property
    def ref(self) -> api_pb2.RecordRef:
        return api_pb2.RecordRef(
            topic=self.topic,
            partition=self.partition,
            offset=self.offset,
            delivery_count=self.delivery_count,
        )

    def _owner(self) -> Consumer:
        if self._consumer is None:
            raise errors.InvalidArgument("this message was not received by a Consumer")
        return self._consumer

    def ack(self) -> None:
        """End the record for the group. Raises LeaseExpired, NotLeased, Fenced... if this
        delivery is no longer ours (the record is, or will be, redelivered)."""
        _raise_first(self._owner().ack([self]))

    def nack(self, delay_ms: int | None = None) -> None:
        """Give the record back for redelivery after ``delay_ms`` (None: backoff)."""
        _raise_first(self._owner().nack([self], delay_ms=delay_ms))

    def extend(self, lease_ms: int) -> None:
        """Keep the lease for ``lease_ms`` more from now."""
        _raise_first(self._owner().extend([self], lease_ms))


def _raise_first(results: Sequence[errors.RaftqError | None]) -> None:
    for error in results:
        if error is not None:
            raise error


class Consumer:
    """A member of a consumer group; see the module docstring for delivery semantics."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = DEFAULT_BOOTSTRAP,
        group: str = "",
        topics: Iterable[str] = (),
        *,
        session_timeout_ms: int = 0,
        heartbeat_interval_ms: int = 0,
        max_poll_records: int = 500,
        lease_ms: int | None = None,
        request_timeout_ms: int = _DEFAULTS.request_timeout_ms,
        start_from: str = "earliest",
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        token: str | None = None,
    ) -> None:
        """Joins the group now (raises UnknownTopic, InvalidArgument, Unavailable...).
        ``session_timeout_ms`` 0 takes the broker's; ``heartbeat_interval_ms`` 0 takes the
        interval the broker suggests."""
        self.group = group
        self.topics = tuple(topics)
        if start_from.upper() not in ("EARLIEST", "LATEST"):
            raise errors.InvalidArgument(f"start_from {start_from!r}: use earliest or latest")
        self._start_from = partition_pb2.StartFrom.Value(start_from.upper())
        self.session_timeout_ms = session_timeout_ms
        self.max_poll_records = max_poll_records
        self.lease_ms = lease_ms
        security = channel_security(tls_ca_file, tls_cert_file, tls_key_file, token)
        self._channels = _Channels(bootstrap, request_timeout_ms, security)
        self._lock = threading.Lock()
        self.member_id = ""
        self.generation = -1
        self.assignment: list[tuple[str, int]] = []
        self._closed = threading.Event()
        self.rejoins = 0
        self._join(None)
        interval_ms = heartbeat_interval_ms or self._suggested_heartbeat_ms
        self.heartbeat_interval_s = interval_ms / 1000
        self._heartbeats = threading.Thread(
            target=self._heartbeat_loop, name=f"raftq-heartbeat-{group}", daemon=True
        )
        self._heartbeats.start()

    def __reduce__(self) -> Any:
        raise TypeError("a Consumer is a live group member: create it where it is used")

    # -- membership ------------------------------------------------------------------------

    def _join(self, member_id: str | None) -> None:
        request = api_pb2.JoinGroupRequest(
            group=self.group,
            topics=self.topics,
            session_timeout_ms=self.session_timeout_ms,
            start_from=self._start_from,
        )
        if member_id:
            request.member_id = member_id
        response = self._channels.call_any(lambda s, t: s.consumer.JoinGroup(request, timeout=t))
        with self._lock:
            self.member_id = response.member_id
            self._adopt(response.generation, response.assignment)
            self._suggested_heartbeat_ms = response.heartbeat_interval_ms or 1000

    def _adopt(self, generation: int, assignment: Iterable[api_pb2.TopicPartitions]) -> None:
        self.generation = generation
        self.assignment = sorted((a.topic, p) for a in assignment for p in a.partitions)

    def _rejoin(self, error: errors.RaftqError, seen_generation: int) -> None:
        """After FENCED keep the member id; after UNKNOWN_MEMBER/GROUP join afresh. Only once
        per stale generation, however many threads noticed."""
        with self._lock:
            if self.generation != seen_generation:
                return
            member_id = self.member_id if isinstance(error, errors.Fenced) else None
        log.info("[group=%s] rejoining after %s", self.group, error.kind.name)
        self.rejoins += 1
        self._join(member_id)

    def _heartbeat_loop(self) -> None:
        while not self._closed.wait(self.heartbeat_interval_s):
            with self._lock:
                request = api_pb2.HeartbeatRequest(
                    group=self.group, member_id=self.member_id, generation=self.generation
                )

            def call(s: _Stubs, t: float, r: api_pb2.HeartbeatRequest = request) -> Any:
                return s.consumer.Heartbeat(r, timeout=t)

            try:
                response = self._channels.call_any(call)
                with self._lock:
                    if response.generation != self.generation:
                        self._adopt(response.generation, response.assignment)
            except (errors.Fenced, errors.UnknownMember, errors.UnknownGroup) as exc:
                if self._closed.is_set():
                    return
                try:
                    self._rejoin(exc, request.generation)
                except errors.RaftqError as again:
                    log.warning("[group=%s] rejoin failed: %s", self.group, again)
            except errors.RaftqError as exc:
                log.warning("[group=%s] heartbeat failed: %s", self.group, exc)

    # -- consuming -------------------------------------------------------------------------

    def poll(self, max_records: int | None = None, timeout_ms: int = 0) -> list[Message]:
        """Lease up to ``max_records`` ready records, waiting up to ``timeout_ms`` for the
        first. Rejoins and tries again on FENCED / UNKNOWN_MEMBER (a rebalance); raises
        Unavailable when no broker answers, Fenced if rejoining keeps failing."""
        deadline = time.monotonic() + timeout_ms / 1000
        rejoins = 0
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            with self._lock:
                request = api_pb2.PollRequest(
                    group=self.group,
                    member_id=self.member_id,
                    generation=self.generation,
                    max_records=max_records or self.max_poll_records,
                    max_wait_ms=min(max(0, remaining_ms), POLL_WAIT_MS_MAX),
                    compact=True,
                )
            if self.lease_ms is not None:
                request.lease_ms = self.lease_ms

            def call(s: _Stubs, t: float, r: api_pb2.PollRequest = request) -> Any:
                return s.consumer.Poll(r, timeout=t + r.max_wait_ms / 1000)

            try:
                response = self._channels.call_any(call)
            except (errors.Fenced, errors.UnknownMember, errors.UnknownGroup) as exc:
                if rejoins >= 3:
                    raise
                rejoins += 1
                self._rejoin(exc, request.generation)
                continue
            if response.batches or response.records or time.monotonic() >= deadline:
                out = [self._message(r) for r in response.records]  # a broker without compact
                for batch in response.batches:
                    out += self._messages(batch)
                return out

    def _messages(self, batch: api_pb2.PartitionDeliveries) -> list[Message]:
        topic, partition = batch.topic, batch.partition
        out = []
        for d in batch.deliveries:
            stored = d.record
            record = stored.record
            out.append(
                Message(
                    topic,
                    partition,
                    stored.offset,
                    record.key if record.HasField("key") else None,
                    record.value,
                    dict(record.headers) if record.headers else {},
                    record.priority,
                    d.delivery_count,
                    d.lease_deadline_ms,
                    stored.timestamp_ms,
                    record.deliver_at_ms,
                    self,
                )
            )
        return out

    def _message(self, r: api_pb2.LeasedRecord) -> Message:
        record = r.record
        return Message(
            topic=r.topic,
            partition=r.partition,
            offset=r.offset,
            key=record.key if record.HasField("key") else None,
            value=record.value,
            headers=dict(record.headers),
            priority=record.priority,
            delivery_count=r.delivery_count,
            lease_deadline_ms=r.lease_deadline_ms,
            timestamp_ms=r.timestamp_ms,
            deliver_at_ms=record.deliver_at_ms,
            _consumer=self,
        )

    def _settle(
        self, method: str, messages: Sequence[Message], *, rejoins: int = 0, **extra: Any
    ) -> list[Any]:
        """One settle call. A call FENCED for its generation rejoins (same member id) and is
        sent again with the new generation (up to 3 times, like poll): the leases on partitions
        this member kept are still its own and would otherwise sit until lease_ms; refs on
        partitions it lost come back FENCED per ref (the broker released those leases to their
        new owner)."""
        if not messages:
            return []
        with self._lock:
            group, member_id, generation = self.group, self.member_id, self.generation
        request_type: Any = {
            "Ack": api_pb2.AckRequest,
            "Nack": api_pb2.NackRequest,
            "ExtendLease": api_pb2.ExtendLeaseRequest,
        }[method]
        request = request_type(group=group, member_id=member_id, generation=generation, **extra)
        compact = method == "Ack"
        if compact:  # packed offsets per partition; only failures come back
            by_partition: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
            for m in messages:
                offsets, counts = by_partition.setdefault((m.topic, m.partition), ([], []))
                offsets.append(m.offset)
                counts.append(m.delivery_count)
            for (topic, partition), (offsets, counts) in by_partition.items():
                request.batches.add(
                    topic=topic, partition=partition, offsets=offsets, delivery_counts=counts
                )
        else:
            request.refs.extend(m.ref for m in messages)
        brokers_tried = 0

        def call(s: _Stubs, t: float) -> Any:
            nonlocal brokers_tried
            brokers_tried += 1
            return getattr(s.consumer, method)(request, timeout=t)

        try:
            response = self._channels.call_any(call)
        except (errors.Fenced, errors.UnknownMember) as exc:
            # A rebalance. Rejoin; after UNKNOWN_MEMBER nothing leased is ours any more.
            try:
                self._rejoin(exc, generation)
            except errors.RaftqError:
                return [exc for _ in messages]
            if isinstance(exc, errors.Fenced) and rejoins < 3:
                return self._settle(method, messages, rejoins=rejoins + 1, **extra)
            return [exc for _ in messages]
        if compact:
            failed = {(f.ref.topic, f.ref.partition, f.ref.offset): f for f in response.failed}
            if not failed:
                return [None] * len(messages)
            outcomes: list[Any] = [failed.get((m.topic, m.partition, m.offset)) for m in messages]
            if brokers_tried > 1:  # as below
                outcomes = [
                    None if o is not None and o.error == ErrorCode.RECORD_NOT_FOUND else o
                    for o in outcomes
                ]
            return outcomes
        results = list(response.results)
        if method == "Ack" and brokers_tried > 1:
            # A broker failed under an earlier attempt (UNAVAILABLE: outcome unknown) and may
            # have applied the ack; a record it acked is no longer pending: not an error.
            for r in results:
                if r.error == ErrorCode.RECORD_NOT_FOUND:
                    r.error, r.message = _OK, ""
        return results

    def ack(self, messages: Sequence[Message]) -> list[errors.RaftqError | None]:
        """Acknowledge a batch; one entry per message: None when acked, else the typed error
        (LeaseExpired, NotLeased, RecordNotFound, Fenced...)."""
        return [self._outcome(r) for r in self._settle("Ack", messages)]

    def nack(
        self, messages: Sequence[Message], delay_ms: int | None = None
    ) -> list[errors.RaftqError | None]:
        extra = {} if delay_ms is None else {"delay_ms": delay_ms}
        return [self._outcome(r) for r in self._settle("Nack", messages, **extra)]

    def extend(self, messages: Sequence[Message], lease_ms: int) -> list[errors.RaftqError | None]:
        """Extend the leases; updates each extended message's ``lease_deadline_ms``."""
        results = self._settle("ExtendLease", messages, lease_ms=lease_ms)
        for message, r in zip(messages, results, strict=True):
            if isinstance(r, api_pb2.RefOutcome) and r.error == ErrorCode.OK:
                message.lease_deadline_ms = r.lease_deadline_ms or int(
                    time.time() * 1000 + lease_ms
                )
        return [self._outcome(r) for r in results]

    @staticmethod
    def _outcome(r: api_pb2.RefOutcome | errors.RaftqError | None) -> errors.RaftqError | None:
        if isinstance(r, errors.RaftqError):
            return r
        if r is None or r.error == ErrorCode.OK:
            return None
        return errors.error_for(r.error, r.message, leader_hint=r.leader_hint)

    def close(self) -> None:
        """Stop heartbeating and leave the group (its leases are released). Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._heartbeats.join(self.heartbeat_interval_s + self._channels.request_timeout_s)
        with self._lock:
            request = api_pb2.LeaveGroupRequest(group=self.group, member_id=self.member_id)
        try:
            self._channels.call_any(lambda s, t: s.consumer.LeaveGroup(request, timeout=t))
        except errors.RaftqError as exc:  # the session will expire instead
            log.info("[group=%s] leave failed: %s", self.group, exc)
        finally:
            self._channels.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "Admin",
    "Consumer",
    "Message",
    "Producer",
    "RecordMetadata",
    "SendFuture",
    "parse_bootstrap",
]
