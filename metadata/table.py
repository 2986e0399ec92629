"""The table: the metadata group's materialised cluster state, as immutable values.

A :class:`Table` is what the metadata state machine has applied up to ``applied_index``:
registered brokers, topics (id, config, partitions and their ordered replicas), consumer groups
(members, subscriptions, session timeouts, generation and sticky assignment; the topics they
hold delivery state on; since when they are empty) and the Spark writers' committed-batch
watermarks. The frontend plans against it; the backend reconciles local partition replicas
toward it.

Every value here is frozen and every mapping read-only. The machine never mutates a table: each
applied command builds a new one (copy on write) and swaps it in with one assignment. The group
store is a persistent map (``immutables.Map``, a HAMT): a command that changes one group copies
O(log n) nodes and that group, never the whole map, so JoinGroup costs the same at 1k and 100k
groups (``python -m bench group_join``). A reader
on another thread therefore takes ``machine.table`` once and reads a consistent snapshot without
a lock. Topic configs are kept as deterministic protobuf bytes (``config`` parses a fresh copy),
so no shared mutable message hides inside.

Dict order is insertion order and differs between a table built by applying commands and one
restored from a snapshot. Nothing that apply decides may depend on it: iterate ``sorted(...)``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import immutables

from raftq.assignors.placement import Broker as PlacementBroker
from raftq.proto import common_pb2, metadata_pb2

TopicPartition = tuple[str, int]

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


def _empty() -> Mapping[Any, Any]:
    return _EMPTY


def _no_groups() -> immutables.Map[str, GroupInfo]:
    return immutables.Map()


def frozen_map(items: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """A read-only copy of ``items``."""
    return MappingProxyType(dict(items))


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    client_addr: str
    raft_addr: str
    rack: str = ""
    registered_ms: int = 0

    def to_proto(self) -> metadata_pb2.BrokerState:
        return metadata_pb2.BrokerState(
            broker_id=self.broker_id,
            client_addr=self.client_addr,
            raft_addr=self.raft_addr,
            rack=self.rack,
            registered_ms=self.registered_ms,
        )

    @classmethod
    def from_proto(cls, msg: metadata_pb2.BrokerState) -> BrokerInfo:
        return cls(msg.broker_id, msg.client_addr, msg.raft_addr, msg.rack, msg.registered_ms)


@dataclass(frozen=True)
class PartitionInfo:
    replicas: tuple[int, ...]  # ordered, preferred leader first
    revision: int = 0  # the Raft index that last set the replicas
    created_index: int = 0  # the AddPartitions that added it; 0 = created with its topic


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: int
    config_bytes: bytes  # a TopicConfig, serialized deterministically
    partitions: tuple[PartitionInfo, ...]
    created_ms: int = 0
    revision: int = 0  # the Raft index that last changed the topic
    created_index: int = 0  # the Raft index that created it (0: unknown)

    @property
    def config(self) -> common_pb2.TopicConfig:
        """A fresh copy of the topic's config (mutating it changes nothing here)."""
        return common_pb2.TopicConfig.FromString(self.config_bytes)

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    @property
    def replication_factor(self) -> int:
        """The largest replica count of its partitions (reassignments may change it)."""
        return max((len(p.replicas) for p in self.partitions), default=0)

    def placement(self) -> list[list[int]]:
        return [list(p.replicas) for p in self.partitions]

    def moved(self, partition: int) -> bool:
        """Whether ``partition``'s replicas changed after it was created (with the topic or
        by AddPartitions)."""
        info = self.partitions[partition]
        return 0 < (info.created_index or self.created_index) < info.revision

    def to_proto(self) -> metadata_pb2.TopicState:
        return metadata_pb2.TopicState(
            name=self.name,
            topic_id=self.topic_id,
            config=self.config,
            partitions=[
                metadata_pb2.PartitionState(
                    replicas=p.replicas, revision=p.revision, created_index=p.created_index
                )
                for p in self.partitions
            ],
            created_ms=self.created_ms,
            revision=self.revision,
            created_index=self.created_index,
        )

    @classmethod
    def from_proto(cls, msg: metadata_pb2.TopicState) -> TopicInfo:
        return cls(
            msg.name,
            msg.topic_id,
            config_to_bytes(msg.config),
            tuple(
                PartitionInfo(tuple(p.replicas), p.revision, p.created_index)
                for p in msg.partitions
            ),
            msg.created_ms,
            msg.revision,
            msg.created_index,
        )


@dataclass(frozen=True)
class MemberInfo:
    member_id: str
    topics: tuple[str, ...]  # sorted, unique; may name topics that do not exist (yet)
    session_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    joined_ms: int = 0
    assignment: tuple[TopicPartition, ...] = ()  # sorted
    start_from: int = 0  # partition.StartFrom for partitions the group never leased from
    principal: str = ""  # who joined: only it may act as this member ("" = no auth)

    def to_proto(self) -> metadata_pb2.MemberState:
        return metadata_pb2.MemberState(
            member_id=self.member_id,
            topics=self.topics,
            session_timeout_ms=self.session_timeout_ms,
            client_id=self.client_id,
            client_host=self.client_host,
            joined_ms=self.joined_ms,
            assignment=tp_refs(self.assignment),
            start_from=self.start_from,
            principal=self.principal,
        )

    @classmethod
    def from_proto(cls, msg: metadata_pb2.MemberState) -> MemberInfo:
        return cls(
            msg.member_id,
            tuple(msg.topics),
            msg.session_timeout_ms,
            msg.client_id,
            msg.client_host,
            msg.joined_ms,
            tuple((ref.topic, ref.partition) for ref in msg.assignment),
            msg.start_from,
            msg.principal,
        )


@dataclass(frozen=True)
class GroupInfo:
    name: str
    generation: int = 0  # bumped by every membership or assignment change
    members: Mapping[str, MemberInfo] = field(default_factory=_empty)
    # Every topic a member subscribed to, kept after the members leave: the topics on which the
    # group may hold delivery state (describe shows their lag, delete forgets them). Sorted.
    topics: tuple[str, ...] = ()
    empty_since_ms: int = 0  # now_ms of the command that left it without members; 0 = members
    deleting: bool = False  # DeleteGroup started: partitions are forgetting it, joins refused

    @property
    def assignment(self) -> dict[str, list[TopicPartition]]:
        """member id -> its partitions, sorted; every member appears."""
        return {m: list(self.members[m].assignment) for m in sorted(self.members)}

    def subscribed_topics(self) -> set[str]:
        return {topic for member in self.members.values() for topic in member.topics}

    def owner(self, topic: str, partition: int) -> str | None:
        """The member assigned ``topic/partition`` in this generation, or None."""
        for member_id in sorted(self.members):
            if (topic, partition) in self.members[member_id].assignment:
                return member_id
        return None

    def to_proto(self) -> metadata_pb2.GroupState:
        return metadata_pb2.GroupState(
            name=self.name,
            generation=self.generation,
            members=[self.members[m].to_proto() for m in sorted(self.members)],
            topics=self.topics,
            empty_since_ms=self.empty_since_ms,
            deleting=self.deleting,
        )

    @classmethod
    def from_proto(cls, msg: metadata_pb2.GroupState, clock_ms: int = 0) -> GroupInfo:
        """``clock_ms`` (the snapshot's clock) dates an empty group from a snapshot taken before
        ``empty_since_ms`` existed, and its members' subscriptions stand in for ``topics``."""
        members = {m.member_id: MemberInfo.from_proto(m) for m in msg.members}
        topics = set(msg.topics) | {t for m in members.values() for t in m.topics}
        empty_since_ms = msg.empty_since_ms or (0 if members else clock_ms)
        return cls(
            msg.name,
            msg.generation,
            frozen_map(members),
            tuple(sorted(topics)),
            empty_since_ms,
            msg.deleting,
        )


@dataclass(frozen=True)
class Table:
    """The cluster as applied up to ``applied_index``. Immutable; see the module docstring."""

    brokers: Mapping[int, BrokerInfo] = field(default_factory=_empty)
    topics: Mapping[str, TopicInfo] = field(default_factory=_empty)
    groups: immutables.Map[str, GroupInfo] = field(default_factory=_no_groups)
    # Spark (app id, scope = target topic or "") -> committed-batch watermark
    txns: Mapping[tuple[str, str], int] = field(default_factory=_empty)
    # the same keys -> now_ms of the CommitTxn that last raised the watermark (expiry)
    txn_committed_ms: Mapping[tuple[str, str], int] = field(default_factory=_empty)
    next_topic_id: int = 1
    applied_index: int = 0
    clock_ms: int = 0  # the highest now_ms applied: time here never goes backwards
    cluster_id: str = ""  # a hash of the first command applied (MetadataMachine.apply)
    restored_from: str = ""  # the backup this cluster was restored from (RestoreTable)

    # -- reads ------------------------------------------------------------------------------

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self.brokers.get(broker_id)

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def group(self, name: str) -> GroupInfo | None:
        return self.groups.get(name)

    def txn_version(self, app_id: str, scope: str = "") -> int | None:
        """The app's committed-batch watermark for ``scope``; None before its first commit."""
        return self.txns.get((app_id, scope))

    def topic_by_id(self, topic_id: int) -> TopicInfo | None:
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None

    def partitions_of(self, broker_id: int) -> list[TopicPartition]:
        """Every (topic, partition) with a replica on ``broker_id``, sorted."""
        return [
            (name, index)
            for name in sorted(self.topics)
            for index, p in enumerate(self.topics[name].partitions)
            if broker_id in p.replicas
        ]

    def replicas(self, topic: str, partition: int) -> tuple[int, ...] | None:
        info = self.topics.get(topic)
        if info is None or not 0 <= partition < len(info.partitions):
            return None
        return info.partitions[partition].replicas

    def placement(self) -> dict[str, list[list[int]]]:
        """topic -> partition -> ordered replicas: the ``existing`` the assignors take."""
        return {name: self.topics[name].placement() for name in sorted(self.topics)}

    def placement_brokers(self, live_ids: Collection[int] | None = None) -> list[PlacementBroker]:
        """Registered brokers (only the live ones, if ``live_ids`` is given) as the assignors
        want them, sorted by id."""
        live = None if live_ids is None else set(live_ids)
        return [
            PlacementBroker(b, self.brokers[b].rack)
            for b in sorted(self.brokers)
            if live is None or b in live
        ]

    def partition_counts(self, topics: set[str] | None = None) -> dict[str, int]:
        """topic -> partition count, for the existing ones among ``topics`` (default: all)."""
        names = self.topics.keys() if topics is None else topics & self.topics.keys()
        return {name: len(self.topics[name].partitions) for name in sorted(names)}

    def state_topics(self, group: GroupInfo) -> list[str]:
        """The existing topics where ``group`` may hold delivery state, sorted: the topics its
        members subscribed to, or every topic for a group without any (an empty group restored
        from a snapshot that predates ``GroupInfo.topics``: where it leased is unknown)."""
        names = group.topics or tuple(self.topics)
        return sorted(name for name in names if name in self.topics)

    def groups_subscribing(self, topic: str) -> list[str]:
        """Groups with a member subscribed to ``topic``, sorted."""
        return [
            name
            for name in sorted(self.groups)
            if any(topic in m.topics for m in self.groups[name].members.values())
        ]

    # -- snapshots --------------------------------------------------------------------------

    def to_proto(self) -> metadata_pb2.ClusterSnapshot:
        return metadata_pb2.ClusterSnapshot(
            applied_index=self.applied_index,
            clock_ms=self.clock_ms,
            next_topic_id=self.next_topic_id,
            brokers=[self.brokers[b].to_proto() for b in sorted(self.brokers)],
            topics=[self.topics[t].to_proto() for t in sorted(self.topics)],
            groups=[self.groups[g].to_proto() for g in sorted(self.groups)],
            txns=[
                metadata_pb2.TxnWatermark(
                    app_id=a,
                    scope=s,
                    version=self.txns[(a, s)],
                    committed_ms=self.txn_committed_ms.get((a, s), 0),
                )
                for a, s in sorted(self.txns)
            ],
            cluster_id=self.cluster_id,
            restored_from=self.restored_from,
        )

    @classmethod
    def from_proto(cls, msg: metadata_pb2.ClusterSnapshot) -> Table:
        return cls(
            brokers=frozen_map({b.broker_id: BrokerInfo.from_proto(b) for b in msg.brokers}),
            topics=frozen_map({t.name: TopicInfo.from_proto(t) for t in msg.topics}),
            groups=immutables.Map(
                {g.name: GroupInfo.from_proto(g, msg.clock_ms) for g in msg.groups}
            ),
            txns=frozen_map({(t.app_id, t.scope): t.version for t in msg.txns}),
            # a watermark from before committed_ms is dated by the snapshot's clock
            txn_committed_ms=frozen_map(
                {(t.app_id, t.scope): t.committed_ms or msg.clock_ms for t in msg.txns}
            ),
            next_topic_id=msg.next_topic_id,
            applied_index=msg.applied_index,
            clock_ms=msg.clock_ms,
            cluster_id=msg.cluster_id,
            restored_from=msg.restored_from,
        )

    def dump(self) -> dict[str, Any]:
        """Plain, sorted, comparable data: two replicas agree iff their dumps are equal."""
        return {
            "applied_index": self.applied_index,
            "clock_ms": self.clock_ms,
            "next_topic_id": self.next_topic_id,
            "brokers": {
                b: (i.client_addr, i.raft_addr, i.rack, i.registered_ms)
                for b, i in sorted(self.brokers.items())
            },
            "topics": {
                name: {
                    "topic_id": t.topic_id,
                    "config": str(t.config),
                    "partitions": [(p.replicas, p.revision, p.created_index) for p in t.partitions],
                    "created_ms": t.created_ms,
                    "revision": t.revision,
                    "created_index": t.created_index,
                }
                for name, t in sorted(self.topics.items())
            },
            "groups": {
                name: {
                    "generation": g.generation,
                    "members": {
                        m: (
                            i.topics,
                            i.session_timeout_ms,
                            i.client_id,
                            i.client_host,
                            i.joined_ms,
                            i.assignment,
                            i.start_from,
                        )
                        for m, i in sorted(g.members.items())
                    },
                    "topics": g.topics,
                    "empty_since_ms": g.empty_since_ms,
                    "deleting": g.deleting,
                }
                for name, g in sorted(self.groups.items())
            },
            "txns": {f"{a}[{s}]" if s else a: v for (a, s), v in sorted(self.txns.items())},
            "txn_committed_ms": {
                f"{a}[{s}]" if s else a: v for (a, s), v in sorted(self.txn_committed_ms.items())
            },
        }


def config_to_bytes(config: common_pb2.TopicConfig) -> bytes:
    return config.SerializeToString(deterministic=True)


def tp_refs(tps: Iterable[TopicPartition]) -> list[metadata_pb2.TopicPartitionRef]:
    return [metadata_pb2.TopicPartitionRef(topic=t, partition=p) for t, p in tps]
