"""The metadata frontend: validates a request against the table and plans it into MetaCommand
bytes, raising a typed error (proto/errors.py) before anything is proposed.

Plan, then execute: everything a command needs that is not a pure function of the table is
decided here and carried in the command: the new topic's id (``table.next_topic_id``), its
replica placement (``assignors.place_replicas`` over the registered brokers that are live now),
the moves that drain a broker (``assignors.reassign_without``), complete topic configs with the
defaults filled in, and the leader's ``now_ms``. Member ids come from the caller. Nothing here
reads a clock, a random source, the network or dynaconf: live broker ids, the time and the
configured defaults are arguments. The caller (broker/) proposes the bytes through the metadata
Raft group; the state machine checks them again, because the table may have changed between
planning and applying (it then answers UNAVAILABLE: plan again and retry). The frontend runs the
machine's own checks (``machine.check_*``, or the whole handler for cheap commands) against the
table it plans on, so the two cannot disagree about what is valid.

Decisions a user sees:

- topic names are 1-249 of ``[A-Za-z0-9._-]``, not ``.`` or ``..``;
- ``dead_letter_topic`` defaults to ``<name>.dlq`` (created on demand: ``dead_letter_topic``
  plans it); "" means no dead-letter topic;
- a consumer may subscribe to topics that do not exist yet: they are assigned once created;
- the whole command must fit one Raft entry (``command_bytes_max``, the broker's
  ``raft.max_entry_bytes``): a topic costs about 2 + replication factor bytes per partition, and a
  broker drain about 20 bytes per moved partition.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

from google.protobuf.message import DecodeError

from raftq.assignors import placement
from raftq.metadata import machine
from raftq.metadata.table import Table, TopicInfo
from raftq.proto import common_pb2, errors, metadata_pb2

CONFIG_FIELDS = tuple(f.name for f in common_pb2.TopicConfig.DESCRIPTOR.fields)
DEAD_LETTER_SUFFIX = ".dlq"
COMMAND_BYTES_MAX = 2 * 1024 * 1024  # broker/config.py raft.max_entry_bytes default
# Room a dead letter needs beyond its record: the headers naming its origin (dead_letter_headers
# in broker/dead_letters.py: topic and group names, partition, offset, reason, count).
DEAD_LETTER_HEADERS_BYTES = 1_024
# The largest max_record_bytes a topic may set: raft.max_entry_bytes - COMMAND_FRAMING_BYTES -
# DEAD_LETTER_HEADERS_BYTES (BrokerConfig.record_bytes_max). A dead-letter topic gets
# DEAD_LETTER_HEADERS_BYTES more, so every dead letter fits it.
RECORD_BYTES_MAX = COMMAND_BYTES_MAX - 1_024 - DEAD_LETTER_HEADERS_BYTES

ConfigValue = int | str


@dataclass(frozen=True, kw_only=True)
class TopicDefaults:
    """A topic's settings when the request leaves them out. Field names and defaults match
    ``raftq.config.TopicDefaults`` (a test keeps them so); build one from the broker's
    settings with :meth:`from_settings` (this package must not import dynaconf)."""

    partitions: int = 3
    replication_factor: int = 3
    ordering: str = "fifo"
    lease_ms: int = 30_000
    max_deliveries: int = 5
    retention_ms: int = 604_800_000
    retention_bytes: int = 0
    max_record_bytes: int = 1024 * 1024
    dedup_window_ms: int = 300_000
    nack_backoff_base_ms: int = 1_000
    nack_backoff_max_ms: int = 60_000

    @classmethod
    def from_settings(cls, settings: object) -> TopicDefaults:
        """From any object with these attributes (``raftq.config.TopicDefaults``)."""
        return cls(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(cls)})

    def config(self) -> common_pb2.TopicConfig:
        """The default TopicConfig, without a dead-letter topic (that depends on the name)."""
        config = common_pb2.TopicConfig()
        for name in CONFIG_FIELDS:
            if name == "ordering":
                config.ordering = _ordering(self.ordering)
            elif name not in ("dead_letter_topic", "ttl_ms", "ttl_action", "fair_key"):
                # those have no cluster default
                setattr(config, name, getattr(self, name))
        return config


@dataclass(frozen=True, kw_only=True)
class GroupLimits:
    """Session timeouts a JoinGroup may ask for; names match ``raftq.config.GroupSettings``."""

    session_timeout_ms: int = 45_000  # when the request gives 0
    session_timeout_min_ms: int = 6_000
    session_timeout_max_ms: int = 1_800_000

    @classmethod
    def from_settings(cls, settings: object) -> GroupLimits:
        """From any object with these attributes (``raftq.config.GroupSettings``)."""
        return cls(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class TopicSpec:
    """A CreateTopic request. None = the default; ``config`` overrides TopicConfig fields by
    name (``ordering`` as "fifo"/"priority"/"fair"; ``dead_letter_topic`` "" = none)."""

    name: str
    partitions: int | None = None
    replication_factor: int | None = None
    config: Mapping[str, ConfigValue] = field(default_factory=dict)


class MetadataFrontend:
    """Turns requests into MetaCommand bytes. Stateless apart from its settings: every method
    takes the table to plan against, and ``now_ms`` to stamp (the leader's clock)."""

    def __init__(
        self,
        *,
        topic_defaults: TopicDefaults | None = None,
        group_limits: GroupLimits | None = None,
        partitions_max: int = machine.PARTITIONS_MAX,
        record_bytes_max: int = RECORD_BYTES_MAX,
        command_bytes_max: int = COMMAND_BYTES_MAX,
    ) -> None:
        assert 1 <= partitions_max <= machine.PARTITIONS_MAX, partitions_max
        self.topic_defaults = topic_defaults or TopicDefaults()
        self.group_limits = group_limits or GroupLimits()
        self.partitions_max = partitions_max
        self.record_bytes_max = record_bytes_max
        self.command_bytes_max = command_bytes_max

    # -- brokers --------------------------------------------------------------------------------

    def register_broker(
        self,
        table: Table,
        broker_id: int,
        client_addr: str,
        raft_addr: str,
        rack: str = "",
        *,
        now_ms: int,
    ) -> bytes:
        """Register a broker or update its addresses and rack.

        Raises InvalidArgument (normal) for a bad id or address, or an address another
        registered broker uses.
        """
        cmd = metadata_pb2.RegisterBroker(
            broker_id=broker_id, client_addr=client_addr, raft_addr=raft_addr, rack=rack
        )
        machine.on_register_broker(table, cmd, now_ms, table.applied_index + 1)
        return self._encode(now_ms, register_broker=cmd)

    def deregister_broker(
        self, table: Table, broker_id: int, *, live_ids: Collection[int], now_ms: int
    ) -> bytes:
        """Remove a broker, moving each of its replicas to another live broker in the same
        step (one move per partition, ``assignors.reassign_without``).

        Raises InvalidArgument (normal) when the broker is not registered, when some partition
        has no live broker left to take its replica, or when the moves do not fit one command.
        """
        if broker_id not in table.brokers:
            raise errors.InvalidArgument(f"broker {broker_id} is not registered")
        survivors = [b for b in table.placement_brokers(live_ids) if b.broker_id != broker_id]
        moves = placement.reassign_without(broker_id, table.placement(), survivors)
        cmd = metadata_pb2.DeregisterBroker(
            broker_id=broker_id,
            moves=[
                metadata_pb2.ReassignPartition(
                    topic=m.topic,
                    partition=m.partition,
                    replicas=m.after,
                    topic_id=table.topics[m.topic].topic_id,
                )
                for m in moves
            ],
        )
        return self._encode(now_ms, deregister_broker=cmd)

    # -- topics ---------------------------------------------------------------------------------

    def create_topic(
        self, table: Table, spec: TopicSpec, *, live_ids: Collection[int], now_ms: int
    ) -> bytes:
        """Plan a new topic: defaults filled, id assigned, replicas placed on live brokers.

        Raises (normal): TopicExists; InvalidArgument for a bad name, partition count,
        replication factor (more than the live registered brokers), config key or value, or a
        topic too big for one command.
        """
        machine.check_topic_name(spec.name)
        if spec.name in table.topics:
            raise errors.TopicExists(f"topic {spec.name!r} exists")
        defaults = self.topic_defaults
        partitions = defaults.partitions if spec.partitions is None else spec.partitions
        rf = spec.replication_factor
        if rf is None:
            rf = defaults.replication_factor
        if not 1 <= partitions <= self.partitions_max:
            raise errors.InvalidArgument(
                f"partitions is {partitions}: it must be 1..{self.partitions_max}"
            )
        if rf < 1:
            raise errors.InvalidArgument(f"replication_factor is {rf}: it must be at least 1")
        config = defaults.config()
        if "dead_letter_topic" not in spec.config:
            config.dead_letter_topic = default_dead_letter_topic(spec.name)
        config = self._configured(spec.name, config, spec.config)
        return self._create(table, spec.name, partitions, rf, config, live_ids, now_ms)

    def dead_letter_topic(
        self, table: Table, topic: str, *, live_ids: Collection[int], now_ms: int
    ) -> bytes | None:
        """Plan the creation of ``topic``'s dead-letter topic, or None when it has none or it
        exists. The backend calls this the first time it has a dead letter to forward.

        The dead-letter topic has the source's partition count and replication factor (fewer
        if fewer brokers are live), its retention, fifo ordering, no dead-letter topic of its
        own, unlimited deliveries (nothing is ever dropped from it) and the largest allowed
        max_record_bytes plus room for the headers a dead letter carries.

        Raises (normal): UnknownTopic; Unavailable when no registered broker is live.
        """
        source = table.topics.get(topic)
        if source is None:
            raise errors.UnknownTopic(f"topic {topic!r} does not exist")
        config = source.config
        name = config.dead_letter_topic
        if not name or name in table.topics:
            return None
        live = len(table.placement_brokers(live_ids))
        if live == 0:
            raise errors.Unavailable("no registered broker is live to hold a dead-letter topic")
        config.dead_letter_topic = ""
        config.max_deliveries = 0
        config.ordering = common_pb2.FIFO
        config.max_record_bytes = self.record_bytes_max + DEAD_LETTER_HEADERS_BYTES
        rf = min(source.replication_factor, live)
        return self._create(table, name, source.partition_count, rf, config, live_ids, now_ms)

    def _create(
        self,
        table: Table,
        name: str,
        partitions: int,
        rf: int,
        config: common_pb2.TopicConfig,
        live_ids: Collection[int],
        now_ms: int,
    ) -> bytes:
        brokers = table.placement_brokers(live_ids)
        if rf > len(brokers):
            raise errors.InvalidArgument(
                f"replication_factor {rf} exceeds the {len(brokers)} live brokers: lower it "
                f"to at most {len(brokers)} or start more brokers"
            )
        replicas = placement.place_replicas(brokers, partitions, rf, table.placement())
        cmd = metadata_pb2.CreateTopic(
            name=name,
            topic_id=table.next_topic_id,
            config=config,
            replication_factor=rf,
            replicas=[b for partition in replicas for b in partition],
        )
        data = self._encode(now_ms, create_topic=cmd, check_size=False)
        if len(data) > self.command_bytes_max:
            per_partition = max(1, len(data) // partitions)
            raise errors.InvalidArgument(
                f"topic {name!r} with {partitions} partitions x replication factor {rf} makes "
                f"a {len(data)}-byte metadata command, over the {self.command_bytes_max}-byte "
                f"Raft entry limit: use at most about "
                f"{self.command_bytes_max // per_partition} partitions"
            )
        return data

    def add_partitions(
        self, table: Table, name: str, partitions: int, *, live_ids: Collection[int], now_ms: int
    ) -> bytes:
        """Plan growing ``name`` to ``partitions`` partitions (Kafka's CreatePartitions): the
        new ones get the topic's replication factor, placed on live brokers balanced against
        the whole cluster (raftq.assignors.placement.place_replicas).

        Raises (normal): UnknownTopic; InvalidArgument when ``partitions`` is not above the
        current count or above the partition limit, when fewer live brokers than the
        replication factor remain, or when the plan is too big for one command.
        """
        topic = _topic(table, name)
        count = topic.partition_count
        if partitions <= count:
            raise errors.InvalidArgument(
                f"topic {name!r} has {count} partitions: partitions only grow, ask for more "
                f"than {count} (not {partitions})"
            )
        if partitions > self.partitions_max:
            raise errors.InvalidArgument(
                f"partitions is {partitions}: it must be at most {self.partitions_max}"
            )
        rf = topic.replication_factor
        brokers = table.placement_brokers(live_ids)
        if rf > len(brokers):
            raise errors.InvalidArgument(
                f"topic {name!r} has replication factor {rf} and {len(brokers)} brokers are "
                f"live: start more brokers first"
            )
        placed = placement.place_replicas(brokers, partitions - count, rf, table.placement())
        cmd = metadata_pb2.AddPartitions(
            name=name,
            topic_id=topic.topic_id,
            replication_factor=rf,
            replicas=[b for partition in placed for b in partition],
        )
        data = self._encode(now_ms, add_partitions=cmd, check_size=False)
        if len(data) > self.command_bytes_max:
            raise errors.InvalidArgument(
                f"adding {partitions - count} partitions to {name!r} makes a {len(data)}-byte "
                f"metadata command, over the {self.command_bytes_max}-byte Raft entry limit: "
                "add fewer at a time"
            )
        return data

    def delete_topic(self, table: Table, name: str, *, now_ms: int) -> bytes:
        """Delete a topic (its dead-letter topic stays). Raises UnknownTopic (normal)."""
        topic = _topic(table, name)
        return self._encode(
            now_ms, delete_topic=metadata_pb2.DeleteTopic(name=name, topic_id=topic.topic_id)
        )

    def alter_topic_config(
        self, table: Table, name: str, changes: Mapping[str, ConfigValue], *, now_ms: int
    ) -> bytes:
        """Merge ``changes`` (TopicConfig fields by name) onto the topic's config.

        Raises (normal): UnknownTopic; InvalidArgument for an unknown key or a bad value.
        """
        topic = _topic(table, name)
        config = self._configured(name, topic.config, changes)
        cmd = metadata_pb2.AlterTopicConfig(name=name, topic_id=topic.topic_id, config=config)
        return self._encode(now_ms, alter_topic_config=cmd)

    def reassign_partition(
        self,
        table: Table,
        topic: str,
        partition: int,
        replicas: Iterable[int],
        *,
        live_ids: Collection[int],
        now_ms: int,
    ) -> bytes:
        """Set a partition's ordered replicas (first = preferred leader); the backend moves
        the data. The replica count may differ from the current one.

        Raises (normal): UnknownTopic, UnknownPartition; InvalidArgument when the replicas are
        empty, repeat, or name a broker that is not registered or not live.
        """
        info = _topic(table, topic)
        replicas = list(replicas)
        cmd = metadata_pb2.ReassignPartition(
            topic=topic, partition=partition, replicas=replicas, topic_id=info.topic_id
        )
        machine.on_reassign_partition(table, cmd, now_ms, table.applied_index + 1)
        dead = sorted(set(replicas) - set(live_ids))
        if dead:
            raise errors.InvalidArgument(
                f"{topic}/{partition}: brokers {dead} are not live; choose live brokers"
            )
        return self._encode(now_ms, reassign_partition=cmd)

    # -- consumer groups --------------------------------------------------------------------------

    def join_group(
        self,
        table: Table,
        group: str,
        member_id: str,
        topics: Iterable[str],
        session_timeout_ms: int = 0,
        *,
        client_id: str = "",
        client_host: str = "",
        start_from: int = 0,
        principal: str = "",
        now_ms: int,
    ) -> bytes:
        """Join (or rejoin, or change the subscription of) ``member_id``, which the broker
        issued, for ``principal`` (only it may act as that member). ``session_timeout_ms`` 0
        takes the configured default. Topics that do not exist are accepted and assigned once
        created. ``start_from`` (partition.StartFrom) is where the group starts on a partition
        it has never leased from.

        Raises InvalidArgument (normal) for a bad name or id, no or too many topics, or a
        session timeout outside the configured bounds; PermissionDenied for a member of
        another principal.
        """
        limits = self.group_limits
        timeout = session_timeout_ms or limits.session_timeout_ms
        machine.check_session_timeout(
            timeout, limits.session_timeout_min_ms, limits.session_timeout_max_ms
        )
        cmd = metadata_pb2.JoinGroup(
            group=group,
            member_id=member_id,
            topics=list(topics),
            session_timeout_ms=timeout,
            client_id=client_id,
            client_host=client_host,
            start_from=start_from,
            principal=principal,
        )
        machine.check_join_group(cmd)
        group_info = table.group(group)
        old = group_info.members.get(member_id) if group_info is not None else None
        if old is not None and old.principal != principal:
            raise errors.PermissionDenied(
                f"member {member_id!r} of group {group!r} was issued to another principal: "
                "join without a member_id to get your own"
            )
        return self._encode(now_ms, join_group=cmd)

    def leave_group(
        self,
        table: Table,
        group: str,
        member_ids: Iterable[str],
        *,
        reason: str = "leave",
        now_ms: int,
    ) -> bytes:
        """Remove members at once: a LeaveGroup call, or the leader's session expiry (pass
        every expired member of the group and ``reason="session expired"``).

        Raises (normal): UnknownGroup; UnknownMember when none of them is a member;
        InvalidArgument for no or too many ids.
        """
        machine.check_label(reason, "reason")
        ids = sorted(set(member_ids))
        cmd = metadata_pb2.LeaveGroup(group=group, member_ids=ids, reason=reason)
        machine.check_leave_group(table, cmd)
        return self._encode(now_ms, leave_group=cmd)

    def delete_group(
        self,
        table: Table,
        group: str,
        *,
        now_ms: int,
        empty_since_ms: int = 0,
        finish: bool = False,
    ) -> bytes:
        """Start deleting an empty group (``empty_since_ms``: only if it has been empty since
        then, the retention expiry), or ``finish`` the deletion once its partitions forgot it.

        Raises (normal): UnknownGroup, GroupNotEmpty, InvalidArgument (finish of a group that
        is not being deleted), Unavailable (joined since ``empty_since_ms``).
        """
        machine.check_group_name(group)
        cmd = metadata_pb2.DeleteGroup(group=group, empty_since_ms=empty_since_ms, finish=finish)
        machine.on_delete_group(table, cmd, now_ms, table.applied_index + 1)
        return self._encode(now_ms, delete_group=cmd)

    # -- Spark writer transactions ----------------------------------------------------------------

    def commit_txn(
        self, table: Table, app_id: str, version: int, *, now_ms: int, scope: str = ""
    ) -> bytes:
        """Raise ``app_id``'s committed-batch watermark for ``scope`` to ``version`` (a lower or
        equal version is answered as a no-op by apply). Raises InvalidArgument (normal) for a
        bad id or scope or a negative version."""
        cmd = metadata_pb2.CommitTxn(app_id=app_id, version=version, scope=scope)
        machine.on_commit_txn(table, cmd, now_ms, table.applied_index + 1)
        return self._encode(now_ms, commit_txn=cmd)

    def expire_txns(
        self, keys: Iterable[tuple[str, str]], committed_before_ms: int, *, now_ms: int
    ) -> bytes:
        """Forget the watermarks of ``keys`` ((app id, scope)) not raised since
        ``committed_before_ms`` (the metadata leader's expiry). Raises InvalidArgument (normal)
        for no, too many or bad keys."""
        cmd = metadata_pb2.ExpireTxns(
            txns=[metadata_pb2.TxnRef(app_id=a, scope=s) for a, s in sorted(set(keys))],
            committed_before_ms=committed_before_ms,
        )
        machine.check_expire_txns(cmd)
        return self._encode(now_ms, expire_txns=cmd)

    # -- helpers ----------------------------------------------------------------------------------

    def _configured(
        self, name: str, base: common_pb2.TopicConfig, changes: Mapping[str, ConfigValue]
    ) -> common_pb2.TopicConfig:
        config = common_pb2.TopicConfig()
        config.CopyFrom(base)
        for key in sorted(changes):
            _set_config(config, key, changes[key])
        machine.check_topic_config(name, config)
        if config.max_record_bytes > self.record_bytes_max:
            raise errors.InvalidArgument(
                f"topic {name!r}: max_record_bytes {config.max_record_bytes} is over "
                f"{self.record_bytes_max}, the most one Raft entry carries"
            )
        return config

    def restore_table(self, table: Table, backup: bytes, backup_id: str, *, now_ms: int) -> bytes:
        """Plan building a fresh cluster's table from a backup's (``raftq restore``; see
        ``machine.on_restore_table``, which applies it and checks it again).

        Raises (normal): InvalidArgument when the table already has topics or groups, or the
        command is over the Raft entry limit; MalformedCommand when ``backup`` does not decode.
        """
        if table.topics or table.groups:
            raise errors.InvalidArgument(
                "a backup is restored into a fresh cluster only: this one has topics or groups"
            )
        try:
            metadata_pb2.ClusterSnapshot.FromString(backup)
        except (DecodeError, ValueError) as exc:
            raise errors.MalformedCommand(f"restored table does not decode: {exc}") from exc
        cmd = metadata_pb2.RestoreTable(table=backup, backup_id=backup_id)
        return self._encode(now_ms, restore_table=cmd)

    def _encode(self, now_ms: int, *, check_size: bool = True, **op: object) -> bytes:
        data = metadata_pb2.MetaCommand(now_ms=now_ms, **op).SerializeToString(  # type: ignore[arg-type]
            deterministic=True
        )
        if check_size and len(data) > self.command_bytes_max:
            raise errors.InvalidArgument(
                f"the metadata command is {len(data)} bytes, over the {self.command_bytes_max}"
                "-byte Raft entry limit"
            )
        return data


def default_dead_letter_topic(name: str) -> str:
    """``<name>.dlq``. Raises InvalidArgument (normal) when that is over 249 characters: name
    the dead-letter topic explicitly (or "" for none), or shorten the topic name."""
    dlq = name + DEAD_LETTER_SUFFIX
    if len(dlq) > machine.TOPIC_NAME_CHARS_MAX:
        raise errors.InvalidArgument(
            f"topic name {name[:40]!r}... is too long for the default dead-letter topic "
            f"<name>{DEAD_LETTER_SUFFIX}: set dead_letter_topic explicitly or shorten the name"
        )
    return dlq


def _topic(table: Table, name: str) -> TopicInfo:
    topic = table.topics.get(name)
    if topic is None:
        raise errors.UnknownTopic(f"topic {name[:300]!r} does not exist")
    return topic


def _ordering(value: ConfigValue) -> common_pb2.Ordering:
    if isinstance(value, str):
        names: dict[str, common_pb2.Ordering] = {
            "fifo": common_pb2.FIFO,
            "priority": common_pb2.PRIORITY,
            "fair": common_pb2.FAIR,
        }
        if value.lower() in names:
            return names[value.lower()]
    elif not isinstance(value, bool) and value in (
        common_pb2.FIFO,
        common_pb2.PRIORITY,
        common_pb2.FAIR,
    ):
        return cast(common_pb2.Ordering, common_pb2.Ordering.Value(common_pb2.Ordering.Name(value)))
    raise errors.InvalidArgument(f"ordering {value!r} must be fifo, priority or fair")


def _ttl_action(value: ConfigValue) -> common_pb2.TtlAction:
    names: dict[str, common_pb2.TtlAction] = {
        "drop": common_pb2.TTL_DROP,
        "dead_letter": common_pb2.TTL_DEAD_LETTER,
    }
    if isinstance(value, str) and value.lower() in names:
        return names[value.lower()]
    if not isinstance(value, bool) and value in names.values():
        return (
            common_pb2.TTL_DEAD_LETTER
            if value == common_pb2.TTL_DEAD_LETTER
            else common_pb2.TTL_DROP
        )
    raise errors.InvalidArgument(f"ttl_action {value!r} must be drop or dead_letter")


def _set_config(config: common_pb2.TopicConfig, key: str, value: ConfigValue) -> None:
    if key not in CONFIG_FIELDS:
        raise errors.InvalidArgument(
            f"unknown topic config {key!r}; known: {', '.join(CONFIG_FIELDS)}"
        )
    if key == "ordering":
        config.ordering = _ordering(value)
    elif key == "ttl_action":
        config.ttl_action = _ttl_action(value)
    elif key == "dead_letter_topic":
        if not isinstance(value, str):
            raise errors.InvalidArgument(f"dead_letter_topic {value!r} must be a topic name")
        config.dead_letter_topic = value
    elif key == "fair_key":
        if not isinstance(value, str):
            raise errors.InvalidArgument(f'fair_key {value!r} must be a header name (or "")')
        config.fair_key = value
    else:
        if isinstance(value, bool) or not isinstance(value, int):
            raise errors.InvalidArgument(f"{key} {value!r} must be an integer")
        try:
            setattr(config, key, value)
        except ValueError as exc:  # out of the field's integer range
            raise errors.InvalidArgument(f"{key} {value} is out of range: {exc}") from exc
