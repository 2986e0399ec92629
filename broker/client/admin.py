"""The raftq :class:`Admin` client: topics, groups, the cluster, records, transactions.

Each call goes to any bootstrap broker (:meth:`_Channels.call_any`) and answers frozen
dataclasses of :mod:`raftq.client.types` (read from the API's protobufs, ``proto/api.proto``);
failures raise the typed :mod:`raftq.proto.errors`. What each call
sends and how its answer is read is :mod:`raftq.client.admin_calls`, shared with the asyncio
:class:`raftq.client.aio.AsyncAdmin`. An Admin holds no threads: it pickles as its bootstrap
(and security), and channels are re-created where it lands, so a Spark driver can ship one to
its executors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

import grpc

from raftq.client import admin_calls as calls
from raftq.client import types
from raftq.client.channels import _DEFAULTS, DEFAULT_BOOTSTRAP, _Channels, channel_security
from raftq.transport.grpc_errors import from_rpc_error

R = TypeVar("R")


class Admin:
    """Topic, group, cluster and record administration. Answers are frozen dataclasses of
    :mod:`raftq.client.types` (``print`` shows their fields); failures raise typed
    :mod:`raftq.proto.errors`."""

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

    def _run(self, call: calls.Call[R]) -> R:
        def send(stubs: Any, timeout_s: float) -> Any:
            method = getattr(getattr(stubs, call.service), call.method)
            return method(call.request, timeout=max(timeout_s, call.timeout_min_s))

        return call.result(self._channels.call_any(send))

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        **config: Any,
    ) -> types.TopicInfo:
        """Create a topic; absent settings take the broker's topic_defaults. TopicExists and
        InvalidArgument are normal failures."""
        return self._run(calls.create_topic(name, partitions, replication_factor, config))

    def delete_topic(self, name: str) -> None:
        self._run(calls.delete_topic(name))

    def list_topics(self) -> list[types.TopicListing]:
        return self._run(calls.list_topics())

    def describe_topic(self, name: str) -> types.TopicInfo:
        return self._run(calls.describe_topic(name))

    def alter_topic_config(self, name: str, **config: Any) -> types.TopicInfo:
        return self._run(calls.alter_topic_config(name, config))

    def add_partitions(self, name: str, partitions: int) -> types.TopicInfo:
        """Grow ``name`` to ``partitions`` partitions (Kafka's CreatePartitions); returns the
        topic with the new partitions' leaders. Keyed records go to murmur2(key) mod the new
        count from then on; subscribed groups rebalance onto the new partitions.

        Raises (normal): UnknownTopic; InvalidArgument (not above the current count, above
        the partition limit, fewer live brokers than the replication factor)."""
        return self._run(calls.add_partitions(name, partitions))

    def rebalance_leaders(self) -> types.LeaderRebalance:
        """Move every partition's leadership to its preferred replica where that broker is
        live (Kafka's preferred leader election); answers how many moved and how many remain
        elsewhere (call again for those). Raises Unavailable (no metadata leader: retry)."""
        return self._run(calls.rebalance_leaders())

    def list_groups(self) -> list[types.GroupListing]:
        return self._run(calls.list_groups())

    def describe_group(self, group: str) -> types.GroupInfo:
        return self._run(calls.describe_group(group))

    def delete_group(self, group: str) -> types.GroupDeletion:
        """Delete an empty group and its delivery state on every partition.

        Raises (normal): UnknownGroup, GroupNotEmpty (members live), Unavailable (retry)."""
        return self._run(calls.delete_group(group))

    def seek_group(
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
        """Move ``group``'s committed offset on ``topic`` (one partition, or all) to exactly one
        target: ``offset`` (clamped to the log), the first record at or after ``timestamp_ms``
        (none: the end), ``earliest`` or ``latest``. Records below count as acknowledged, those
        at and above are delivered again; returns each partition's new committed offset.

        Raises (normal): InvalidArgument, UnknownGroup, UnknownTopic, UnknownPartition,
        GroupNotEmpty (members live and not ``force``), Unavailable (call again)."""
        return self._run(
            calls.seek_group(group, topic, partition, offset, timestamp_ms, earliest, latest, force)
        )

    def purge_topic(self, topic: str, partition: int | None = None) -> list[types.PartitionPurge]:
        """Delete every record now in ``topic`` (or one partition): each log start moves to
        its end offset. Returns each partition's new log start and records deleted.

        Raises (normal): InvalidArgument, UnknownTopic, UnknownPartition, Unavailable."""
        return self._run(calls.purge_topic(topic, partition))

    def create_schedule(
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
        """Fire a record (``value``, ``key``, ``headers``, ``priority``, ``ttl_ms``) into
        ``topic`` at every slot of ``cron`` (5 fields or ``@hourly``...; in the IANA
        ``time_zone``, default UTC) or every ``interval_ms`` (≥ 1000) from now: exactly one
        record per slot, never early. Slots an outage missed by over a minute fire one record
        together (``catch_up="once"``) or none (``"skip"``). Lands in ``partition``, else the
        key's partition, else the name's. Returns the schedule with its next slot.

        Raises (normal): InvalidArgument, ScheduleExists, UnknownTopic, UnknownPartition,
        RecordTooLarge, Unavailable."""
        return self._run(
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

    def list_schedules(self, topic: str, name: str = "") -> list[types.Schedule]:
        """``topic``'s schedules (or the one named), by name, each with ``next_slot_ms``.

        Raises (normal): UnknownTopic, Unavailable."""
        return self._run(calls.list_schedules(topic, name))

    def pause_schedule(self, topic: str, name: str) -> types.Schedule:
        """Stop firing ``name`` until resumed. Raises (normal): UnknownSchedule, UnknownTopic."""
        return self._run(calls.pause_schedule(topic, name, True))

    def resume_schedule(self, topic: str, name: str) -> types.Schedule:
        """Fire ``name`` again from its first slot after now (the paused time is not caught
        up). Raises (normal): UnknownSchedule, UnknownTopic."""
        return self._run(calls.pause_schedule(topic, name, False))

    def delete_schedule(self, topic: str, name: str) -> None:
        """Delete ``name`` (the records it fired stay). Raises (normal): UnknownSchedule,
        UnknownTopic."""
        self._run(calls.delete_schedule(topic, name))

    def describe_cluster(self) -> types.ClusterInfo:
        return self._run(calls.describe_cluster())

    def update_record(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        priority: int | None = None,
        deliver_at_ms: int | None = None,
    ) -> None:
        self._run(calls.update_record(topic, partition, offset, priority, deliver_at_ms))

    def cancel_record(self, topic: str, partition: int, offset: int) -> None:
        self._run(calls.cancel_record(topic, partition, offset))

    def remove_broker(self, broker_id: int, timeout_s: float = 300.0) -> int:
        """Move every replica off ``broker_id``, deregister it and take it out of the metadata
        group (Admin.RemoveBroker); returns the number of replicas moved. Blocks until done or
        ``timeout_s``; after a Timeout or Unavailable call it again (it resumes). InvalidArgument
        (not registered, no live broker can take a replica) is normal."""
        return self._run(calls.remove_broker(broker_id, timeout_s))

    def list_offsets(self, topic: str) -> list[types.PartitionOffsets]:
        return self._run(calls.list_offsets(topic))

    def fetch(
        self, topic: str, partition: int, offset: int, max_records: int = 500, max_bytes: int = 0
    ) -> types.FetchResult:
        """Read the log without touching group state (replay, backfill): up to ``max_records``
        records and ``max_bytes`` record bytes (0: the broker's ``client.fetch_bytes_max``);
        at least one record when any exists at ``offset``, however large."""
        return self._run(calls.fetch(topic, partition, offset, max_records, max_bytes))

    def producer_state(
        self, topic: str, producer_id: str, partitions: Sequence[int] = ()
    ) -> dict[int, types.ProducerState]:
        """An idempotent producer's last applied batch per partition (all partitions when
        none are named): ``known``, ``last_sequence``, ``last_offsets``. Forgotten after the
        topic's ``dedup_window_ms``. UnknownTopic / UnknownPartition are normal."""
        return self._run(calls.producer_state(topic, producer_id, partitions))

    def commit_txn(self, app_id: str, version: int, scope: str = "") -> int:
        """Raise ``app_id``'s committed-batch watermark for ``scope`` (the Spark writer's: its
        target topic) to ``version``; returns the watermark after the call (a stale version
        changes nothing). InvalidArgument is normal."""
        return self._run(calls.commit_txn(app_id, version, scope))

    def get_txn(self, app_id: str, scope: str = "") -> int | None:
        """``app_id``'s committed-batch watermark for ``scope``; None when it never committed."""
        return self._run(calls.get_txn(app_id, scope))

    def move_partition(
        self, topic: str, partition: int, replicas: Sequence[int], timeout_s: float = 300.0
    ) -> types.PartitionMove:
        """Move ``topic/partition`` to ``replicas`` (broker ids, the first the preferred
        leader; Kafka's partition reassignment) and return once its Raft group is exactly that
        set; producers and consumers carry on meanwhile. Raises (normal): UnknownTopic,
        UnknownPartition, InvalidArgument (no, repeated, unknown or dead brokers), Timeout
        (still moving after ``timeout_s``: call again, it resumes)."""
        return self._run(calls.move_partition(topic, partition, replicas, timeout_s))

    def backup_metadata(self) -> types.MetadataBackup:
        """The metadata leader's table, whole, with its applied index and the cluster's id
        (``raftq backup``; broker/backup.py)."""
        return self._run(calls.backup_metadata())

    def backup_partition(
        self,
        address: str,
        topic: str,
        partition: int,
        *,
        topic_id: int = 0,
        chunk_bytes: int = 0,
        have: Sequence[bytes] = (),
        timeout_s: float = 300.0,
    ) -> Iterator[types.BackupChunk]:
        """The BackupPartition stream of the broker at ``address`` (the partition's leader):
        a head (``chunks``, ``size_bytes``, ``applied_index``) then the chunks not in ``have``
        (SHA-256 per chunk of a previous copy). ``topic_id`` names the incarnation (0: the one
        that exists); ``chunk_bytes`` 0 is 65,536. Raises (normal): NotLeader with the leader's
        hint, Unavailable, UnknownTopic, UnknownPartition, InvalidArgument; mid-stream too."""
        request = calls.backup_partition_request(topic, partition, topic_id, chunk_bytes, have)
        stream = self._channels.stubs(address).admin.BackupPartition(request, timeout=timeout_s)
        try:
            for chunk in stream:
                yield calls.read_backup_chunk(chunk)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc

    def close(self) -> None:
        self._channels.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Admin"]
