"""The raftq client for asyncio: :class:`AsyncAdmin`, :class:`AsyncConsumer`,
:class:`AsyncProducer` on ``grpc.aio``.

Same semantics and typed errors as the thread client (:mod:`raftq.client`), built from the
same pure parts: which broker to try and when to give up (:class:`~raftq.client.channels.
AnyBroker`), what each admin call sends and returns (:mod:`raftq.client.admin_calls`), the
group member's requests and how answers (and answers after a retry) are read
(:mod:`raftq.client.consumer`'s pure functions), the producer's record encoding, partitioner
and error mapping. Only the waiting differs: coroutines instead of threads.

    async with AsyncConsumer(bootstrap, "workers", ["jobs"]) as consumer:
        async for message in consumer:
            await message.ack()

Create clients inside the running event loop that uses them (a grpc.aio channel belongs to
its loop).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from raftq.client import admin_calls as calls
from raftq.client import steps, types
from raftq.client.channels import (
    _DEFAULTS,
    DEFAULT_BOOTSTRAP,
    AnyBroker,
    _Stubs,
    channel_security,
    parse_bootstrap,
)
from raftq.client.consumer import ITER_POLL_MS, _raise_first
from raftq.client.member import (
    Delivery,
    Member,
    deliveries,
    extended,
    outcome_error,
    start_from_value,
)
from raftq.client.producer import Producer
from raftq.client.send_future import RecordMetadata, SendFuture
from raftq.proto import errors
from raftq.proto.limits import CLIENT_MESSAGE_BYTES_MAX
from raftq.transport.grpc_errors import from_rpc_error
from raftq.transport.tls import ChannelSecurity, open_aio_channel

log = logging.getLogger("raftq.client")
R = TypeVar("R")


class _AsyncChannels:
    """One grpc.aio channel per broker address, created on first use; call_any with the
    thread client's policy (:class:`AnyBroker`)."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        request_timeout_ms: int,
        security: ChannelSecurity | None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.request_timeout_s = request_timeout_ms / 1000
        self.security = security
        self._channels: dict[str, tuple[grpc.aio.Channel, _Stubs]] = {}
        self._preferred = 0

    def stubs(self, address: str) -> _Stubs:
        entry = self._channels.get(address)
        if entry is None:
            channel = open_aio_channel(
                address, self.security, message_bytes_max=CLIENT_MESSAGE_BYTES_MAX
            )
            entry = (channel, _Stubs(channel))  # the generated stubs take aio channels too
            self._channels[address] = entry
        return entry[1]

    async def call(self, address: str, fn: Callable[[_Stubs, float], Any], timeout_s: float) -> Any:
        try:
            return await fn(self.stubs(address), timeout_s)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc

    def prefer(self, address: str) -> None:
        """As the thread client's ``prefer``: the next call_any starts at ``address``."""
        if address in self.bootstrap:
            self._preferred = self.bootstrap.index(address)

    async def call_any(
        self, fn: Callable[[_Stubs, float], Any], *, deadline_s: float | None = None
    ) -> Any:
        """The thread client's ``call_any`` plan (:func:`steps.any_broker`), awaited."""
        rounds = AnyBroker(len(self.bootstrap), self._preferred, self.request_timeout_s)
        plan = steps.any_broker(rounds, self.bootstrap, fn, deadline_s)
        index, answer = await steps.run_async(plan, self._perform)
        self._preferred = index
        return answer

    async def _perform(self, step: steps.Step) -> Any:
        if isinstance(step, steps.Attempt):
            return await self.call(step.address, step.fn, step.timeout_s)
        assert isinstance(step, steps.Pause), step
        await asyncio.sleep(step.seconds)
        return None

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        for channel, _ in channels.values():
            await channel.close()


def _channels(
    bootstrap: str | Sequence[str],
    request_timeout_ms: int,
    tls_ca_file: str | None,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    token: str | None,
) -> _AsyncChannels:
    security = channel_security(tls_ca_file, tls_cert_file, tls_key_file, token)
    return _AsyncChannels(bootstrap, request_timeout_ms, security)


# --- Admin ----------------------------------------------------------------------------------


class AsyncAdmin:
    """:class:`raftq.client.Admin` for asyncio: the same calls, answers (the dataclasses of
    :mod:`raftq.client.types`) and errors."""

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
        self._channels = _channels(
            bootstrap, request_timeout_ms, tls_ca_file, tls_cert_file, tls_key_file, token
        )

    async def _run(self, call: calls.Call[R]) -> R:
        def send(stubs: Any, timeout_s: float) -> Any:
            method = getattr(getattr(stubs, call.service), call.method)
            return method(call.request, timeout=max(timeout_s, call.timeout_min_s))

        return call.result(await self._channels.call_any(send))

    async def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        **config: Any,
    ) -> types.TopicInfo:
        return await self._run(calls.create_topic(name, partitions, replication_factor, config))

    async def delete_topic(self, name: str) -> None:
        await self._run(calls.delete_topic(name))

    async def list_topics(self) -> list[types.TopicListing]:
        return await self._run(calls.list_topics())

    async def describe_topic(self, name: str) -> types.TopicInfo:
        return await self._run(calls.describe_topic(name))

    async def alter_topic_config(self, name: str, **config: Any) -> types.TopicInfo:
        return await self._run(calls.alter_topic_config(name, config))

    async def add_partitions(self, name: str, partitions: int) -> types.TopicInfo:
        """As Admin.add_partitions."""
        return await self._run(calls.add_partitions(name, partitions))

    async def rebalance_leaders(self) -> types.LeaderRebalance:
        """As Admin.rebalance_leaders."""
        return await self._run(calls.rebalance_leaders())

    async def list_groups(self) -> list[types.GroupListing]:
        return await self._run(calls.list_groups())

    async def describe_group(self, group: str) -> types.GroupInfo:
        return await self._run(calls.describe_group(group))

    async def delete_group(self, group: str) -> types.GroupDeletion:
        return await self._run(calls.delete_group(group))

    async def seek_group(
        self,
        group: str,
        topic: str,
        *,
        partition: int | None = None,
        offset: int | None = None,
        timestamp_ms: int | None = None,
        earliest: bool = False,
        latest: bool = False,
        force: bool = False,
    ) -> list[types.PartitionSeek]:
        """As :meth:`raftq.client.admin.Admin.seek_group`."""
        return await self._run(
            calls.seek_group(group, topic, partition, offset, timestamp_ms, earliest, latest, force)
        )

    async def purge_topic(
        self, topic: str, partition: int | None = None
    ) -> list[types.PartitionPurge]:
        """As :meth:`raftq.client.admin.Admin.purge_topic`."""
        return await self._run(calls.purge_topic(topic, partition))

    async def create_schedule(
        self,
        topic: str,
        name: str,
        value: bytes,
        *,
        cron: str | None = None,
        time_zone: str = "",
        interval_ms: int | None = None,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        priority: int | None = None,
        ttl_ms: int | None = None,
        partition: int | None = None,
        catch_up: str = "once",
    ) -> types.Schedule:
        """As :meth:`raftq.client.admin.Admin.create_schedule`."""
        return await self._run(
            calls.create_schedule(
                topic,
                name,
                value,
                cron=cron,
                time_zone=time_zone,
                interval_ms=interval_ms,
                key=key,
                headers=headers,
                priority=priority,
                ttl_ms=ttl_ms,
                partition=partition,
                catch_up=catch_up,
            )
        )

    async def list_schedules(self, topic: str, name: str = "") -> list[types.Schedule]:
        """As :meth:`raftq.client.admin.Admin.list_schedules`."""
        return await self._run(calls.list_schedules(topic, name))

    async def pause_schedule(self, topic: str, name: str) -> types.Schedule:
        """As :meth:`raftq.client.admin.Admin.pause_schedule`."""
        return await self._run(calls.pause_schedule(topic, name, True))

    async def resume_schedule(self, topic: str, name: str) -> types.Schedule:
        """As :meth:`raftq.client.admin.Admin.resume_schedule`."""
        return await self._run(calls.pause_schedule(topic, name, False))

    async def delete_schedule(self, topic: str, name: str) -> None:
        """As :meth:`raftq.client.admin.Admin.delete_schedule`."""
        await self._run(calls.delete_schedule(topic, name))

    async def describe_cluster(self) -> types.ClusterInfo:
        return await self._run(calls.describe_cluster())

    async def list_offsets(self, topic: str) -> list[types.PartitionOffsets]:
        return await self._run(calls.list_offsets(topic))

    async def fetch(
        self, topic: str, partition: int, offset: int, max_records: int = 500, max_bytes: int = 0
    ) -> types.FetchResult:
        return await self._run(calls.fetch(topic, partition, offset, max_records, max_bytes))

    async def update_record(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        priority: int | None = None,
        deliver_at_ms: int | None = None,
    ) -> None:
        await self._run(calls.update_record(topic, partition, offset, priority, deliver_at_ms))

    async def cancel_record(self, topic: str, partition: int, offset: int) -> None:
        await self._run(calls.cancel_record(topic, partition, offset))

    async def remove_broker(self, broker_id: int, timeout_s: float = 300.0) -> int:
        """As Admin.remove_broker: the number of replicas moved off ``broker_id``."""
        return await self._run(calls.remove_broker(broker_id, timeout_s))

    async def move_partition(
        self, topic: str, partition: int, replicas: Sequence[int], timeout_s: float = 300.0
    ) -> types.PartitionMove:
        """As Admin.move_partition."""
        return await self._run(calls.move_partition(topic, partition, replicas, timeout_s))

    async def producer_state(
        self, topic: str, producer_id: str, partitions: Sequence[int] = ()
    ) -> dict[int, types.ProducerState]:
        """As Admin.producer_state."""
        return await self._run(calls.producer_state(topic, producer_id, partitions))

    async def commit_txn(self, app_id: str, version: int, scope: str = "") -> int:
        """As Admin.commit_txn."""
        return await self._run(calls.commit_txn(app_id, version, scope))

    async def get_txn(self, app_id: str, scope: str = "") -> int | None:
        """As Admin.get_txn."""
        return await self._run(calls.get_txn(app_id, scope))

    async def backup_metadata(self) -> types.MetadataBackup:
        """As Admin.backup_metadata."""
        return await self._run(calls.backup_metadata())

    async def backup_partition(
        self,
        address: str,
        topic: str,
        partition: int,
        *,
        topic_id: int = 0,
        chunk_bytes: int = 0,
        have: Sequence[bytes] = (),
        timeout_s: float = 300.0,
    ) -> AsyncIterator[types.BackupChunk]:
        """As Admin.backup_partition: the head, then the chunks, from the broker at
        ``address``."""
        request = calls.backup_partition_request(topic, partition, topic_id, chunk_bytes, have)
        stream = self._channels.stubs(address).admin.BackupPartition(request, timeout=timeout_s)
        try:
            async for chunk in stream:
                yield calls.read_backup_chunk(chunk)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc

    async def close(self) -> None:
        await self._channels.close()

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# --- Consumer -------------------------------------------------------------------------------


@dataclass
class AsyncMessage(Delivery):
    """One delivery to an :class:`AsyncConsumer`: ``await message.ack()``."""

    _consumer: AsyncConsumer | None = field(default=None, repr=False, compare=False, kw_only=True)

    def _owner(self) -> AsyncConsumer:
        if self._consumer is None:
            raise errors.InvalidArgument("this message was not received by an AsyncConsumer")
        return self._consumer

    async def ack(self) -> None:
        _raise_first(await self._owner().ack([self]))

    async def nack(self, delay_ms: int | None = None) -> None:
        _raise_first(await self._owner().nack([self], delay_ms=delay_ms))

    async def extend(self, lease_ms: int) -> None:
        _raise_first(await self._owner().extend([self], lease_ms))


class AsyncConsumer:
    """:class:`raftq.client.Consumer` for asyncio: a group member with a heartbeat task,
    running the same :class:`~raftq.client.member.Member` plans.

    ``await AsyncConsumer.create(...)`` or ``async with AsyncConsumer(...)`` joins the group;
    ``poll``, ``ack``, ``nack``, ``extend`` as the thread client; ``async for`` iterates."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = DEFAULT_BOOTSTRAP,
        group: str = "",
        topics: Iterable[str] = (),
        *,
        session_timeout_ms: int = 0,
        heartbeat_interval_ms: int = 0,
        max_poll_records: int = 500,
        max_poll_bytes: int = 0,
        lease_ms: int | None = None,
        request_timeout_ms: int = _DEFAULTS.request_timeout_ms,
        start_from: str = "earliest",
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        token: str | None = None,
    ) -> None:
        self.group = group
        self.topics = tuple(topics)
        self._member = Member(
            group,
            self.topics,
            session_timeout_ms=session_timeout_ms,
            start_from=start_from_value(start_from),
            max_poll_records=max_poll_records,
            max_poll_bytes=max_poll_bytes,
            lease_ms=lease_ms,
        )
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._channels = _channels(
            bootstrap, request_timeout_ms, tls_ca_file, tls_cert_file, tls_key_file, token
        )
        self.heartbeat_interval_s = 1.0
        self._heartbeats: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()

    @property
    def member_id(self) -> str:
        return self._member.member_id

    @property
    def generation(self) -> int:
        return self._member.generation

    @property
    def assignment(self) -> list[tuple[str, int]]:
        return self._member.assignment

    @classmethod
    async def create(cls, *args: Any, **kwargs: Any) -> AsyncConsumer:
        consumer = cls(*args, **kwargs)
        await consumer.start()
        return consumer

    async def start(self) -> None:
        """Join the group and start heartbeating (raises UnknownTopic, Unavailable...)."""
        await self._run(self._member.join(None))
        interval_ms = self._heartbeat_interval_ms or self._member.suggested_heartbeat_ms
        self.heartbeat_interval_s = interval_ms / 1000
        self._heartbeats = asyncio.create_task(self._heartbeat_loop())

    async def _run(self, plan: steps.Plan[R]) -> R:
        return await steps.run_async(plan, self._perform)

    async def _perform(self, step: steps.Step) -> Any:
        assert isinstance(step, steps.CallAny), step  # a member's plans only call any broker
        return await self._channels.call_any(step.fn, deadline_s=step.deadline_s)

    async def _heartbeat_loop(self) -> None:
        while not self._closed.is_set():
            try:
                await asyncio.wait_for(self._closed.wait(), self.heartbeat_interval_s)
                return
            except TimeoutError:
                pass
            try:
                await self._run(self._member.heartbeat(self._closed.is_set))
            except errors.RaftqError as exc:
                log.warning("[group=%s] heartbeat failed: %s", self.group, exc)

    async def poll(self, max_records: int | None = None, timeout_ms: int = 0) -> list[AsyncMessage]:
        """As :meth:`raftq.client.Consumer.poll`."""
        response = await self._run(self._member.poll(max_records, timeout_ms))
        if response.leader_hint:  # the partition's leader: poll and ack there from now on
            self._channels.prefer(response.leader_hint)
        return deliveries(response, self._message)

    def _message(self, *fields: Any) -> AsyncMessage:
        return AsyncMessage(*fields, _consumer=self)

    async def _settle(self, method: str, messages: Sequence[Delivery], **extra: int) -> list[Any]:
        return await self._run(self._member.settle(method, messages, extra))

    async def ack(self, messages: Sequence[Delivery]) -> list[errors.RaftqError | None]:
        return [outcome_error(r) for r in await self._settle("Ack", messages)]

    async def nack(
        self, messages: Sequence[Delivery], delay_ms: int | None = None
    ) -> list[errors.RaftqError | None]:
        if delay_ms is None:
            results = await self._settle("Nack", messages)
        else:
            results = await self._settle("Nack", messages, delay_ms=delay_ms)
        return [outcome_error(r) for r in results]

    async def extend(
        self, messages: Sequence[Delivery], lease_ms: int
    ) -> list[errors.RaftqError | None]:
        results = await self._settle("ExtendLease", messages, lease_ms=lease_ms)
        extended(messages, results, lease_ms)
        return [outcome_error(r) for r in results]

    async def close(self) -> None:
        """Stop heartbeating and leave the group (its leases are released). Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._heartbeats is not None:
            await self._heartbeats
        try:
            await self._run(self._member.leave())
        except errors.RaftqError as exc:
            log.info("[group=%s] leave failed: %s", self.group, exc)
        finally:
            await self._channels.close()

    async def __aiter__(self) -> AsyncIterator[AsyncMessage]:
        """``async for message in consumer``: as the thread client's iteration."""
        while not self._closed.is_set():
            try:
                messages = await self.poll(timeout_ms=ITER_POLL_MS)
            except errors.RaftqError:
                if self._closed.is_set():
                    return
                raise
            for message in messages:
                yield message

    async def __aenter__(self) -> AsyncConsumer:
        if self._heartbeats is None:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# --- Producer -------------------------------------------------------------------------------


class AsyncProducer:
    """:class:`raftq.client.Producer` for asyncio: ``await producer.send(...)`` returns the
    record's RecordMetadata once a majority of its partition's replicas have it, or raises the
    typed error.

    The batching, ordering, idempotence, retries and send streams are the thread Producer's
    own, not a copy: an AsyncProducer owns a Producer and awaits its futures (their outcome
    reaches the event loop through ``call_soon_threadsafe``). A send that could block (a
    topic's first metadata fetch, a full buffer) runs in a worker thread, so the event loop
    never waits on it. Takes the Producer's keyword arguments."""

    def __init__(self, bootstrap: str | Sequence[str] = DEFAULT_BOOTSTRAP, **options: Any):
        self._producer = Producer(bootstrap, **options)
        self._known_topics: set[str] = set()
        self._warming: dict[str, asyncio.Lock] = {}
        self._mailbox: _Outcomes | None = None

    def _outcomes(self) -> _Outcomes:
        if self._mailbox is None:
            self._mailbox = _Outcomes(asyncio.get_running_loop())
        return self._mailbox

    @property
    def producer_id(self) -> str | None:
        return self._producer.producer_id

    async def send(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        priority: int = 0,
        deliver_at_ms: int = 0,
        idempotency_key: str = "",
        ttl_ms: int = 0,
    ) -> RecordMetadata:
        """One record (the thread Producer's ``send`` arguments); raises its typed errors."""
        args: tuple[Any, ...] = (
            topic,
            value,
            key,
            headers,
            partition,
            priority,
            deliver_at_ms,
            idempotency_key,
        )
        if ttl_ms:
            args = (*args, None, ttl_ms)  # on_delivery, ttl_ms
        if topic not in self._known_topics:  # the first send fetches metadata: may block
            async with self._warming.setdefault(topic, asyncio.Lock()):
                if topic not in self._known_topics:
                    future = await asyncio.to_thread(self._producer.send, *args)
                    self._known_topics.add(topic)
                    return await self._outcomes().awaitable(future)
        room_needed = 2 * (len(value) + len(key or b"")) + 1024  # headers and framing: a margin
        if self._producer.buffer_room() > room_needed:
            future = self._producer.send(*args)
        else:  # waiting for buffer room blocks: not on the event loop
            future = await asyncio.to_thread(self._producer.send, *args)
        return await self._outcomes().awaitable(future)

    async def send_many(
        self, topic: str, values: Sequence[bytes], partition: int | None = None
    ) -> list[RecordMetadata]:
        """Bare values (the thread Producer's ``send_many``); each record's metadata."""
        futures = await asyncio.to_thread(self._producer.send_many, topic, values, partition)
        self._known_topics.add(topic)
        outcomes = self._outcomes()
        return list(await asyncio.gather(*(outcomes.awaitable(f) for f in futures)))

    async def flush(self, timeout_s: float | None = None) -> None:
        await asyncio.to_thread(self._producer.flush, timeout_s)

    async def close(self) -> None:
        await asyncio.to_thread(self._producer.close)

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Outcomes:
    """Send outcomes from the Producer's thread to the event loop, one wake-up per burst: the
    thread appends, and only the append that finds the box empty schedules a drain (a
    ``call_soon_threadsafe`` per record would write to the loop's wake-up pipe per record)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._box: list[tuple[asyncio.Future[RecordMetadata], SendFuture]] = []

    def awaitable(self, future: SendFuture) -> asyncio.Future[RecordMetadata]:
        settled: asyncio.Future[RecordMetadata] = self.loop.create_future()
        future.add_done_callback(lambda done: self._post(settled, done))
        return settled

    def _post(self, settled: asyncio.Future[RecordMetadata], done: SendFuture) -> None:
        with self._lock:
            self._box.append((settled, done))
            if len(self._box) > 1:
                return  # a drain is already scheduled
        self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            box, self._box = self._box, []
        for settled, done in box:
            if settled.done():
                continue
            error = done.exception(0)
            if error is not None:
                settled.set_exception(error)
            else:
                settled.set_result(done.result(0))


__all__ = ["AsyncAdmin", "AsyncConsumer", "AsyncMessage", "AsyncProducer"]
