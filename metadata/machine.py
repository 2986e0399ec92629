"""The metadata state machine: ``apply(command_bytes, raft_index)`` over the :class:`Table`.

Pure: what apply does is a function of (table, command bytes, raft index). No clock (the leader
stamps ``now_ms``; the machine's clock is the highest ``now_ms`` applied), no randomness (topic
ids, replica placement and member ids are chosen by the frontend and carried in the command),
no configuration lookups, no I/O.

apply never raises. Each command is checked again here, whoever proposed it: a command that does
not decode is MALFORMED_COMMAND; an invalid one gets its typed error code (proto/errors.py). Either
way the table is unchanged except ``applied_index``, which moves past the entry: the entry *was*
applied, its outcome is the rejection, and a caller waiting for the machine to reach a commit
index is not left waiting for a rejected entry (the partition machine, whose applied index lives
in the same SQLite transaction as the change, leaves its index alone instead). An entry at or
below the applied index is skipped. An unexpected exception (a bug) is reported as INTERNAL,
leaves the table untouched and latches ``failed``: the replica must be rebuilt from a snapshot
and the log, never continue with a table that may differ from its peers'.

The name and shape rules (``check_topic_name``, ``check_group_name``, ``check_name``...) live
here and are the rules everywhere: the client edge (transport/request_checks.py) applies the
same functions once, before anything is planned or proposed, and the frontend runs them against
the table it plans on. Here they stay as apply's guard: an entry in the log may predate the
edge check or come from a broker of another version.

Each command builds a new table (copy on write) and swaps it in with one assignment, so a
rejection or a bug halfway through a command cannot leave part of it behind, and readers on
other threads see whole tables only (metadata/table.py).

Consumer groups. A membership change (a new member, a changed subscription, a leave or a session
expiry) bumps the group's generation and recomputes its assignment here, inside apply, with the
sticky assignor (``raftq.assignors.sticky.assign``: pure and deterministic, so every replica
computes the same), the previous assignment as input for stickiness and partition counts from
the table. A
member may subscribe to topics that do not exist: they are kept in its subscription and get
assigned when the topic is created (as Kafka does); creating or deleting a topic recomputes every
group subscribed to it and bumps the generation of those whose assignment changed. An identical
rejoin (same topics) changes nothing and keeps the generation; a changed session timeout or client
id is recorded without a rebalance. Empty groups are kept (their generation stays monotonic) until
DeleteGroup, with the topics their members subscribed to (``GroupInfo.topics``: where they may hold
delivery state) and since when they are empty (``empty_since_ms``, the emptying command's stamped
now_ms: retention expiry is judged by it, never by a clock here). DeleteGroup takes two commands:
the first marks the group ``deleting`` (GROUP_NOT_EMPTY while members live; a JoinGroup is then
UNAVAILABLE), the proposer has every partition of its topics forget the group, and the second
(``finish``) removes it. The group store is a persistent map: changing one group copies that group
and O(log n) map nodes, not the map.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import immutables
from google.protobuf.message import DecodeError

from raftq.assignors import sticky
from raftq.metadata.table import (
    BrokerInfo,
    GroupInfo,
    MemberInfo,
    PartitionInfo,
    Table,
    TopicInfo,
    config_to_bytes,
    frozen_map,
    tp_refs,
)
from raftq.partitions.machine import check_config
from raftq.proto import common_pb2, errors, metadata_pb2
from raftq.proto.common_pb2 import ErrorCode

log = logging.getLogger("raftq.metadata")

TOPIC_NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")
TOPIC_NAME_CHARS_MAX = 249
NAME_CHARS_MAX = 255  # group, member, app and client ids, rack
ADDR_CHARS_MAX = 255
PARTITIONS_MAX = 10_000  # per topic
SUBSCRIPTIONS_MAX = 1_000  # topics per member
LEAVE_MEMBERS_MAX = 10_000  # member ids per LeaveGroup
MOVES_MAX = 100_000  # reassignments per DeregisterBroker
EXPIRE_TXNS_MAX = 10_000  # app ids per ExpireTxns
SESSION_TIMEOUT_MS_MAX = 24 * 3600 * 1000  # a hard bound; brokers configure tighter ones
BROKER_ID_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

Handler = Callable[[Table, Any, int, int], tuple[Table, metadata_pb2.MetaResult]]


# -- checks shared with the frontend (each raises a typed error, normal for bad requests) -----


def check_topic_name(name: str, what: str = "topic name") -> None:
    """Raises InvalidArgument unless ``name`` is 1-249 of ``[A-Za-z0-9._-]`` and not . or .."""
    if not TOPIC_NAME_RE.fullmatch(name):
        raise errors.InvalidArgument(
            f"{what} {name[:300]!r} must be 1-{TOPIC_NAME_CHARS_MAX} characters of "
            "A-Z a-z 0-9 . _ -"
        )
    if name in (".", ".."):
        raise errors.InvalidArgument(f"{what} must not be {name!r}")


def check_group_name(name: str, what: str = "group") -> None:
    """Group names follow the topic name rule (Kafka's is looser, but a group name ends up in
    paths, metrics labels and ACL globs). Raises InvalidArgument."""
    check_topic_name(name, what)


def check_name(name: str, what: str) -> None:
    """Raises InvalidArgument unless ``name`` is 1-255 printable characters."""
    if not name or len(name) > NAME_CHARS_MAX or not name.isprintable():
        raise errors.InvalidArgument(
            f"{what} {name[:300]!r} must be 1-{NAME_CHARS_MAX} printable characters"
        )


def check_label(value: str, what: str) -> None:
    """Raises InvalidArgument unless ``value`` is 0-255 printable characters (rack, client id)."""
    if len(value) > NAME_CHARS_MAX or not value.isprintable():
        raise errors.InvalidArgument(
            f"{what} {value[:300]!r} must be at most {NAME_CHARS_MAX} printable characters"
        )


def check_addr(addr: str, what: str) -> None:
    """Raises InvalidArgument unless ``addr`` is host:port (port 1-65535)."""
    host, sep, port = addr.rpartition(":")
    if (
        not sep
        or not host
        or len(addr) > ADDR_CHARS_MAX
        or not addr.isprintable()
        or not port.isdigit()
        or not 1 <= int(port) <= 65535
    ):
        raise errors.InvalidArgument(f"{what} {addr[:300]!r} must be host:port, port 1-65535")


def check_topic_config(name: str, config: common_pb2.TopicConfig) -> None:
    """Raises InvalidArgument for a config
    ``raftq.partitions.machine.check_config`` refuses, or whose
    dead_letter_topic is not a topic name ("" = none) or is the topic itself."""
    problem = check_config(config)
    if problem is not None:
        raise errors.error_for(problem.code, f"topic {name!r}: {problem.message}")
    dlq = config.dead_letter_topic
    if dlq:
        check_topic_name(dlq, f"topic {name!r}: dead_letter_topic")
        if dlq == name:
            raise errors.InvalidArgument(
                f"topic {name!r} cannot be its own dead_letter_topic: name another topic or none"
            )


def check_replicas(table: Table, replicas: Sequence[int], where: str) -> None:
    """Raises InvalidArgument unless ``replicas`` is a non-empty list of distinct registered
    broker ids."""
    if not replicas:
        raise errors.InvalidArgument(f"{where}: a partition needs at least one replica")
    if len(set(replicas)) != len(replicas):
        raise errors.InvalidArgument(f"{where}: replicas {list(replicas)} repeat a broker")
    unknown = sorted(b for b in replicas if b not in table.brokers)
    if unknown:
        raise errors.InvalidArgument(
            f"{where}: replicas {list(replicas)} name brokers that are not registered: {unknown}"
        )


def check_session_timeout(session_timeout_ms: int, low: int = 1, high: int = 0) -> None:
    high = high or SESSION_TIMEOUT_MS_MAX
    if not low <= session_timeout_ms <= high:
        raise errors.InvalidArgument(
            f"session_timeout_ms {session_timeout_ms} must be {low}..{high}"
        )


def subscription(topics: Iterable[str]) -> tuple[str, ...]:
    """Sorted, unique topic names; raises InvalidArgument for a bad name or too many."""
    unique = tuple(sorted(set(topics)))
    if not 1 <= len(unique) <= SUBSCRIPTIONS_MAX:
        raise errors.InvalidArgument(
            f"subscribe to 1..{SUBSCRIPTIONS_MAX} topics, not {len(unique)}"
        )
    for topic in unique:
        check_topic_name(topic, "subscribed topic")
    return unique


def _stale(message: str) -> errors.Unavailable:
    return errors.Unavailable(f"{message}: the cluster changed while this was planned; retry")


# -- the machine ------------------------------------------------------------------------------


class MetadataMachine:
    """The metadata group's replicated state machine. One applier thread calls ``apply``,
    ``snapshot_bytes`` and ``restore_bytes``; other threads may read ``table`` at any time."""

    def __init__(self, table: Table | None = None) -> None:
        self.table = table or Table()
        self.failed: BaseException | None = None
        self._applied: dict[str, int] = {}
        self._rejected: dict[str, int] = {}
        self._handlers: dict[str, Handler] = {
            "register_broker": on_register_broker,
            "deregister_broker": on_deregister_broker,
            "create_topic": on_create_topic,
            "delete_topic": on_delete_topic,
            "alter_topic_config": on_alter_topic_config,
            "reassign_partition": on_reassign_partition,
            "join_group": on_join_group,
            "leave_group": on_leave_group,
            "delete_group": on_delete_group,
            "commit_txn": on_commit_txn,
            "expire_txns": on_expire_txns,
            "add_partitions": on_add_partitions,
            "restore_table": on_restore_table,
        }

    @property
    def applied_index(self) -> int:
        return self.table.applied_index

    def apply(self, data: bytes, raft_index: int) -> metadata_pb2.MetaResult:
        """Apply one committed entry. Never raises; see the module docstring.

        Normal error codes in the result: MALFORMED_COMMAND, INVALID_ARGUMENT, TOPIC_EXISTS,
        UNKNOWN_TOPIC, UNKNOWN_PARTITION, UNKNOWN_GROUP, UNKNOWN_MEMBER and UNAVAILABLE (the
        command was planned against a table that changed before it was applied: plan again).
        INTERNAL means a bug and stops this replica.
        """
        table = self.table
        if raft_index <= table.applied_index:
            return metadata_pb2.MetaResult(skipped=True)
        if self.failed is not None:
            return _error(ErrorCode.INTERNAL, f"replica failed earlier: {self.failed!r}")
        try:
            command = metadata_pb2.MetaCommand.FromString(data)
        except (DecodeError, ValueError) as exc:
            return self._reject(raft_index, "malformed", errors.MalformedCommand(f"{exc}"))
        op = command.WhichOneof("op")
        if op is None:
            return self._reject(
                raft_index, "malformed", errors.MalformedCommand("command names no operation")
            )
        now_ms = max(command.now_ms, table.clock_ms)
        try:
            new, result = self._handlers[op](table, getattr(command, op), now_ms, raft_index)
        except errors.RaftqError as exc:
            return self._reject(raft_index, op, exc)
        except Exception as exc:  # a bug: stop this replica rather than risk diverging
            self.failed = exc
            log.exception("[group=metadata] apply of %s at index %d failed", op, raft_index)
            return _error(ErrorCode.INTERNAL, f"apply failed: {exc!r}")
        # The cluster's identity: the first command applied names it (RegisterBroker of the
        # first broker: its stamped time and addresses), the same on every replica.
        cluster_id = new.cluster_id or hashlib.sha256(data).hexdigest()[:32]
        self.table = replace(new, applied_index=raft_index, clock_ms=now_ms, cluster_id=cluster_id)
        self._applied[op] = self._applied.get(op, 0) + 1
        return result

    def _reject(self, raft_index: int, op: str, exc: errors.RaftqError) -> metadata_pb2.MetaResult:
        self.table = replace(self.table, applied_index=raft_index)
        key = f"{op}:{exc.kind.name}"
        self._rejected[key] = self._rejected.get(key, 0) + 1
        return _error(exc.code, exc.message)

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot_bytes(self) -> bytes:
        """The whole table, deterministically serialized: equal tables give equal bytes."""
        return self.table.to_proto().SerializeToString(deterministic=True)

    def restore_bytes(self, data: bytes) -> None:
        """Replace the table with one from ``snapshot_bytes``; clears ``failed``.

        Raises MalformedCommand (the table is then unchanged) when the bytes do not decode.
        """
        try:
            snapshot = metadata_pb2.ClusterSnapshot.FromString(data)
        except (DecodeError, ValueError) as exc:
            raise errors.MalformedCommand(f"metadata snapshot does not decode: {exc}") from exc
        self.table = Table.from_proto(snapshot)
        self.failed = None

    def dump(self) -> dict[str, Any]:
        """Plain, sorted data: two replicas agree iff their dumps are equal."""
        return self.table.dump()

    def statistics(self) -> dict[str, Any]:
        t = self.table
        return {
            "applied_index": t.applied_index,
            "clock_ms": t.clock_ms,
            "brokers": len(t.brokers),
            "topics": len(t.topics),
            "partitions": sum(len(topic.partitions) for topic in t.topics.values()),
            "groups": len(t.groups),
            "members": sum(len(g.members) for g in t.groups.values()),
            "txn_apps": len(t.txns),
            "applied_by_op": dict(sorted(self._applied.items())),
            "rejected_by_op_and_code": dict(sorted(self._rejected.items())),
            "failed": self.failed is not None,
        }


def _error(code: int, message: str) -> metadata_pb2.MetaResult:
    return metadata_pb2.MetaResult(error=code, message=message)  # type: ignore[arg-type]


# -- brokers ----------------------------------------------------------------------------------


def on_register_broker(
    table: Table, cmd: metadata_pb2.RegisterBroker, now_ms: int, index: int
) -> tuple[Table, metadata_pb2.MetaResult]:
    if not 1 <= cmd.broker_id <= BROKER_ID_MAX:
        raise errors.InvalidArgument(f"broker_id {cmd.broker_id} must be 1..{BROKER_ID_MAX}")
    check_addr(cmd.client_addr, "client_addr")
    check_addr(cmd.raft_addr, "raft_addr")
    check_label(cmd.rack, "rack")
    for other in sorted(table.brokers):
        if other == cmd.broker_id:
            continue
        info = table.brokers[other]
        taken = {info.client_addr, info.raft_addr} & {cmd.client_addr, cmd.raft_addr}
        if taken:
            raise errors.InvalidArgument(
                f"broker {cmd.broker_id}: address {sorted(taken)[0]} belongs to broker {other}; "
                f"deregister broker {other} first or fix the address"
            )
    old = table.brokers.get(cmd.broker_id)
    broker = BrokerInfo(
        cmd.broker_id,
        cmd.client_addr,
        cmd.raft_addr,
        cmd.rack,
        old.registered_ms if old is not None else now_ms,
    )
    result = metadata_pb2.MetaResult(broker=broker.to_proto(), changed=broker != old)
    if broker == old:
        return table, result
    return replace(table, brokers=frozen_map({**table.brokers, broker.broker_id: broker})), result


def on_deregister_broker(
    table: Table, cmd: metadata_pb2.DeregisterBroker, now_ms: int, index: int
) -> tuple[Table, metadata_pb2.MetaResult]:
    broker_id = cmd.broker_id
    if broker_id not in table.brokers:
        raise errors.InvalidArgument(f"broker {broker_id} is not registered")
    if len(cmd.moves) > MOVES_MAX:
        raise errors.InvalidArgument(f"over {MOVES_MAX} moves in one command")
    topics = dict(table.topics)
    for move in cmd.moves:
        if broker_id in move.replicas:
            raise errors.InvalidArgument(
                f"move of {move.topic}/{move.partition} keeps a replica on broker {broker_id}"
            )
        topics[move.topic] = _reassigned(table, topics, move, index)
    remaining = [
        f"{name}/{p}"
        for name in sorted(topics)
        for p, info in enumerate(topics[name].partitions)
        if broker_id in info.replicas
    ]
    if remaining:
        raise _stale(
            f"broker {broker_id} still holds replicas of {', '.join(remaining[:10])}"
            + (f" and {len(remaining) - 10} more" if len(remaining) > 10 else "")
        )
    brokers = {b: info for b, info in table.brokers.items() if b != broker_id}
    new = replace(table, brokers=frozen_map(brokers), topics=frozen_map(topics))
    return new, metadata_pb2.MetaResult(changed=True)


# -- topics -----------------------------------------------------------------------------------


def on_create_topic(
    table: Table, cmd: metadata_pb2.CreateTopic, now_ms: int, index: int
) -> tuple[Table, metadata_pb2.MetaResult]:
    check_topic_name(cmd.name)
    if cmd.name in table.topics:
        raise errors.TopicExists(f"topic {cmd.name!r} exists")
    if cmd.topic_id < table.next_topic_id:
        raise _stale(f"topic id {cmd.topic_id} is taken (next free id: {table.next_topic_id})")
    if cmd.topic_id >= INT64_MAX:
        raise errors.InvalidArgument(f"topic id {cmd.topic_id} is out of range")
    check_topic_config(cmd.name, cmd.config)
    partitions = _placed_partitions(table, cmd.name, cmd.replication_factor, cmd.replicas, index)
    count = len(cmd.replicas) // cmd.replication_factor
    if not 1 <= count <= PARTITIONS_MAX:
        raise errors.InvalidArgument(
            f"topic {cmd.name!r}: partitions must be 1..{PARTITIONS_MAX}, not {count}"
        )
    topic = TopicInfo(
        cmd.name, cmd.topic_id, config_to_bytes(cmd.config), tuple(partitions), now_ms, index, index
    )
    new = replace(
        table,
        topics=frozen_map({**table.topics, cmd.name: topic}),
        next_topic_id=cmd.topic_id + 1,
    )
    new, bumped = _rebalance_subscribers(new, cmd.name)
    return new, metadata_pb2.MetaResult(
        changed=True, topic=topic.to_proto(), rebalanced_groups=bumped
    )


def on_add_partitions(
    table: Table, cmd: metadata_pb2.AddPartitions, now_ms: int, index: int
) -> tuple[Table, metadata_pb2.MetaResult]:
    """Append the planned partitions (created at ``index``) and rebalance the groups
    subscribed to the topic. INVALID_ARGUMENT when nothing is added or the total passes
    PARTITIONS_MAX; UNKNOWN_TOPIC for a topic (incarnation) that does not exist."""
    topic = _existing_topic(table.topics, cmd.name, cmd.topic_id)
    count = topic.partition_count
    rf = cmd.replication_factor
    added = _placed_partitions(table, cmd.name, rf, cmd.replicas, index, count)
    total = count + len(cmd.replicas) // rf
    if not added or total > PARTITIONS_MAX:
        raise errors.InvalidArgument(
            f"topic {cmd.name!r} has {count} partitions: it may grow to "
            f"{count + 1}..{PARTITIONS_MAX}, not {total}"
        )
    added = [replace(p, created_index=index) for p in added]
    topic = replace(topic, partitions=topic.partitions + tuple(added), revision=index)
    new = replace(table, topics=frozen_map({**table.topics, cmd.name: topic}))
    new, bumped = _rebalance_subscribers(new, cmd.name)
    return new, metadata_pb2.MetaResult(
        changed=True, topic=topic.to_proto(), rebalanced_groups=bumped
    )


def _placed_partitions(
    table: Table, name: str, rf: int, replicas: Sequence[int], index: int, first: int = 0
) -> list[PartitionInfo]:
    """Flat replica lists (``rf`` per partition, numbered from ``first``) as checked
    PartitionInfos set at ``index``; at most PARTITIONS_MAX + 1 of them are checked."""
    if rf < 1 or len(replicas) % rf:
        raise errors.InvalidArgument(
            f"topic {name!r}: {len(replicas)} replicas do not make whole partitions "
            f"of replication_factor {rf}"
        )
    partitions = []
    for p in range(min(len(replicas) // rf, PARTITIONS_MAX + 1)):
        placed = tuple(replicas[p * rf : (p + 1) * rf])
        check_replicas(table, placed, f"{name}/{first + p}")
        partitions.append(PartitionInfo(placed, index))
    return partitions


def _existing_topic(topics: Mapping[str, TopicInfo], name: str, topic_id: int) -> TopicInfo:
    topic = topics.get(name)
    if topic is None:
        raise errors.UnknownTopic(f"topic {name!r} does not exist")
    if topic_id and topic.topic_id != topic_id:
        raise errors.UnknownTopic(
            f"topic {name!r} id {topic_id} does not exist: the topic was deleted and created "
            f"again (id {topic.topic_id})"
        )
    return topic


def on_delete_topic(
    table: Table, cmd: metadata_pb2.DeleteTopic, now_ms: int, index: int
) -> tuple[Table, metadata_pb2.MetaResult]:
    topic = _existing_topic(table.topics, cmd.name, cmd.topic_id)
    topics = {name: info for name, info in table.topics.items() if name != cmd.name}
    new, bumped = _rebalance_subscribers(replace(table, topics=frozen_map(topics)), cmd.name)
    return new, metadata_pb2.MetaResult(
        changed=True, topic=topic.to_proto(), rebalanced_groups=bumped
    )


def on_alter_topic_config(
    table: Table, cmd: metadata_pb2.AlterTopicConfig, now_ms: int, index: int
) -> tuple[Table, metadata_pb2.MetaResult]:
    topic = _existing_topic(table.topics, cmd.name, cmd.topic_id)
    check_topic_config(cmd.name, cmd.config)
    config = config_to_bytes(cmd.config)
    if config == topic.config_bytes:
        return table, metadata_pb2.MetaResult(changed=False, topic=topic.to_proto())
    topic = replace(topic, config_bytes=config, revision=index)
    new = replace(table, topics=frozen_map({**table.topics, cmd.name: topic}))
    return new, metadata_pb2.MetaResult(changed=True, topic=topic.to_proto())


def _reassigned(
    table: Table,
    topics: Mapping[str, TopicInfo],
    cmd: metadata_pb2.ReassignPartition,
    index: int,
) -> TopicInfo:
    """The topic with ``cmd.partition``'s replicas set to ``cmd.replicas`` (unchanged if equal)."""
    topic = _existing_topic(topics, cmd.topic, cmd.topic_id)
    if not 0 <= cmd.partition < len(topic.partitions):
        raise errors.UnknownPartition(
            f"topic {cmd.topic!r} has partitions 0..{len(topic.partitions) - 1}, "
            f"not {cmd.partition}"
        )
    replicas = tuple(cmd.replicas)
    check_replicas(table, replicas, f"{cmd.topic}/{cmd.partition}")
    if topic.partitions[cmd.partition].replicas == replicas:
        return topic
    partitions = list(topic.partitions)
    created = topic.partitions[cmd.partition].created_index
    partitions[cmd.partition] = PartitionInfo(replicas, index, created)
    return replace(topic, partitions=tuple(partitions))


def on_reassign_partition(
    table: Table, cmd: metadata_pb2.ReassignPartition, now_ms: int, index: int
) -> tuple[Table, metadata_pb2.MetaResult]:
    topic = _reassigned(table, table.topics, cmd, index)
    changed = topic != table.topics[cmd.topic]
    new = replace(table, topics=frozen_map({**table.topics, cmd.topic: topic}))
    return new, metadata_pb2.MetaResult(changed=changed, topic=topic.to_proto())


# -- consumer groups --------------------------------------------------------------------------


def rebalanced(
    table: Table, group: GroupInfo, members: Mapping[str, MemberInfo], *, bump: bool
) -> GroupInfo:
    """``group`` with ``members`` and their sticky assignment, computed from the previous
    assignments they carry and the table's partition counts. The generation goes up when
    ``bump`` (a membership change) or when any member's assignment changed."""
    subscriptions = {m: frozenset(info.topics) for m, info in members.items()}
    wanted: set[str] = set().union(*subscriptions.values()) if subscriptions else set()
    previous = {m: info.assignment for m, info in members.items()}
    assignment = sticky.assign(subscriptions, table.partition_counts(wanted), previous)
    new_members = {m: replace(members[m], assignment=tuple(assignment[m])) for m in sorted(members)}
    if not bump and all(new_members[m].assignment == members[m].assignment for m in members):
        return replace(group, members=frozen_map(new_members))
    return replace(group, generation=group.generation + 1, members=frozen_map(new_members))


def _rebalance_subscribers(table: Table, topic: str) -> tuple[Table, list[str]]:
    """Recompute every group subscribed to ``topic``; returns the groups whose generation rose."""
    groups = table.groups
    bumped = []
    for name in table.groups_subscribing(topic):
        group = table.groups[name]
        new_group = rebalanced(table, group, group.members, bump=False)
        groups = groups.set(name, new_group)
        if new_group.generation != group.generation:
            bumped.append(name)
    if not bumped:
        return table, []
    return replace(table, groups=groups), bumped


def _group_result(table: Table, group: GroupInfo, bumped: bool) -> metadata_pb2.MetaResult:
    return metadata_pb2.MetaResult(
        changed=True,
        group=group.to_proto(),
        generation=group.generation,
        rebalanced_groups=[group.name] if bumped else [],
    )


def check_join_group(cmd: metadata_pb2.JoinGroup) -> tuple[str, ...]:
    """The sorted, unique subscription; raises InvalidArgument for a bad field."""
    check_group_name(cmd.group)
    check_name(cmd.member_id, "member_id")
    check_label(cmd.client_id, "client_id")
    check_label(cmd.client_host, "client_host")
    check_label(cmd.principal, "principal")
    check_session_timeout(cmd.session_timeout_ms)
    if cmd.start_from not in (0, 1):
        raise errors.InvalidArgument(f"start_from {cmd.start_from}: 0 (EARLIEST) or 1 (LATEST)")
    return subscription(cmd.topics)


def check_leave_group(table: Table, cmd: metadata_pb2.LeaveGroup) -> set[str]:
    """The members that leave; raises UnknownGroup, UnknownMember, InvalidArgument."""
    group = table.groups.get(cmd.group)
    if group is None:
        raise errors.UnknownGroup(f"group {cmd.group[:300]!r} does not exist")
    if not 1 <= len(cmd.member_ids) <= LEAVE_MEMBERS_MAX:
        raise errors.InvalidArgument(f"name 1..{LEAVE_MEMBERS_MAX} member ids")
    leaving = set(cmd.member_ids) & group.members.keys()
    if not leaving:
        raise errors.UnknownMember(
            f"none of {sorted(cmd.member_ids)[:10]} is a member of group {cmd.group!r}"
        )
    return leaving


def on_join_group(
    table: Table, cmd: metadata_pb2.JoinGroup, now_ms: int, index: int
) -> tuple[Table, metadata_pb2.MetaResult]:
    topics = check_join_group(cmd)
    group = table.groups.get(cmd.group) or GroupInfo(cmd.group)
    if group.deleting:
        raise errors.Unavailable(f"group {cmd.group!r} is being deleted: join when it is gone")
    group = replace(group, topics=tuple(sorted({*group.topics, *topics})), empty_since_ms=0)
    old = group.members.get(cmd.member_id)
    if old is not None and old.principal != cmd.principal:
        raise errors.PermissionDenied(
            f"member {cmd.member_id!r} of group {cmd.group!r} belongs to another principal"
        )
    member = MemberInfo(
        cmd.member_id,
        topics,
        cmd.session_timeout_ms,
        cmd.client_id,
        cmd.client_host,
        old.joined_ms if old is not None else now_ms,
        old.assignment if old is not None else (),
        cmd.start_from,
        cmd.principal,
    )
    members = {**group.members, cmd.member_id: member}
    if old is not None and old.topics == topics:  # no membership change: no rebalance
        new_group = replace(group, members=frozen_map(members))
        bumped = False
    else:
        new_group = rebalanced(table, group, members, bump=True)
        bumped = True
    new = table
    if new_group != table.groups.get(cmd.group):
        new = replace(table, groups=table.groups.set(cmd.group, new_group))
    result = _group_result(new, new_group, bumped)
    result.changed = new is not table
    result.assignment.extend(tp_refs(new_group.members[cmd.member_id].assignment))
    result.unknown_topics.extend(t for t in topics if t not in table.topics)
    return new, result


def on_leave_group(
    table: Table, cmd: metadata_pb2.LeaveGroup, now_ms: int, index: int
) -> tuple[Table, metadata_pb2.MetaResult]:
    leaving = check_leave_group(table, cmd)
    group = table.groups[cmd.group]
    members = {m: info for m, info in group.members.items() if m not in leaving}
    new_group = rebalanced(table, group, members, bump=True)
    if not members:  # at least 1: 0 means "has members"
        new_group = replace(new_group, empty_since_ms=max(now_ms, 1))
    new = replace(table, groups=table.groups.set(cmd.group, new_group))
    return new, _group_result(new, new_group, True)


def on_delete_group(
    table: Table, cmd: metadata_pb2.DeleteGroup, now_ms: int, index: int
) -> tuple[Table, metadata_pb2.MetaResult]:
    """Marks an empty group deleting, or (``finish``) removes a deleting one; see the module
    docstring. Normal errors: UnknownGroup, GroupNotEmpty, InvalidArgument (finish of a group
    not deleting), Unavailable (an expiry whose group was joined since it was judged)."""
    group = table.groups.get(cmd.group)
    if group is None:
        raise errors.UnknownGroup(f"group {cmd.group[:300]!r} does not exist")
    if cmd.finish:
        if not group.deleting:
            raise errors.InvalidArgument(
                f"group {cmd.group!r} is not being deleted: delete it before finishing"
            )
        new = replace(table, groups=table.groups.delete(cmd.group))
        return new, metadata_pb2.MetaResult(changed=True, group=group.to_proto())
    if group.members:
        raise errors.GroupNotEmpty(
            f"group {cmd.group!r} has {len(group.members)} live members: they must leave "
            "(or their sessions expire) first"
        )
    if cmd.empty_since_ms and cmd.empty_since_ms != group.empty_since_ms:
        raise _stale(f"group {cmd.group!r} was joined after it expired")
    if group.deleting:
        return table, metadata_pb2.MetaResult(changed=False, group=group.to_proto())
    marked = replace(group, deleting=True)
    new = replace(table, groups=table.groups.set(cmd.group, marked))
    return new, metadata_pb2.MetaResult(changed=True, group=marked.to_proto())


# -- Spark writer transactions ----------------------------------------------------------------


def on_commit_txn(
    table: Table, cmd: metadata_pb2.CommitTxn, now_ms: int, index: int
) -> tuple[Table, metadata_pb2.MetaResult]:
    check_name(cmd.app_id, "app_id")
    if cmd.scope:  # a topic name (the Spark writer's target)
        check_topic_name(cmd.scope, "scope")
    if cmd.version < 0:
        raise errors.InvalidArgument(f"version {cmd.version} must be >= 0")
    key = (cmd.app_id, cmd.scope)
    current = table.txns.get(key)
    if current is not None and cmd.version <= current:
        return table, metadata_pb2.MetaResult(changed=False, txn_version=current)
    new = replace(
        table,
        txns=frozen_map({**table.txns, key: cmd.version}),
        # at least 1: 0 means "from before committed_ms" in a snapshot
        txn_committed_ms=frozen_map({**table.txn_committed_ms, key: max(now_ms, 1)}),
    )
    return new, metadata_pb2.MetaResult(changed=True, txn_version=cmd.version)


def check_expire_txns(cmd: metadata_pb2.ExpireTxns) -> set[tuple[str, str]]:
    """The (app id, scope) keys named; raises InvalidArgument for none or too many, a bad
    one, or a negative time."""
    if not 1 <= len(cmd.txns) <= EXPIRE_TXNS_MAX:
        raise errors.InvalidArgument(f"name 1..{EXPIRE_TXNS_MAX} txn watermarks")
    for ref in cmd.txns:
        check_name(ref.app_id, "app_id")
        if ref.scope:
            check_topic_name(ref.scope, "scope")
    if cmd.committed_before_ms < 0:
        raise errors.InvalidArgument(f"committed_before_ms {cmd.committed_before_ms} must be >= 0")
    return {(ref.app_id, ref.scope) for ref in cmd.txns}


def on_restore_table(
    table: Table, cmd: metadata_pb2.RestoreTable, now_ms: int, index: int
) -> tuple[Table, metadata_pb2.MetaResult]:
    """A fresh cluster takes a backup's topics, groups and watermarks (see RestoreTable).

    Topics keep their ids, configs and placement; their revisions become this index, so no
    partition counts as moved (its replicas start from the snapshots ``raftq restore`` seeded,
    not in standby). Groups come without members (their sessions belonged to the old cluster),
    empty since now, with their generation (partition fences only rise)."""
    if table.topics or table.groups:
        raise errors.InvalidArgument(
            "a backup is restored into a fresh cluster only: this one has topics or groups"
        )
    if not cmd.backup_id:
        raise errors.InvalidArgument("restore_table needs a backup_id")
    try:
        backup = Table.from_proto(metadata_pb2.ClusterSnapshot.FromString(cmd.table))
    except (DecodeError, ValueError) as exc:
        raise errors.MalformedCommand(f"restored table does not decode: {exc}") from exc
    topics = {}
    for name, topic in backup.topics.items():
        check_topic_name(name)
        partitions = tuple(replace(p, revision=index, created_index=0) for p in topic.partitions)
        topics[name] = replace(topic, partitions=partitions, revision=index, created_index=index)
    groups = {
        name: GroupInfo(
            name,
            group.generation,
            frozen_map({}),
            tuple(sorted(set(group.topics) | group.subscribed_topics())),
            now_ms,
            group.deleting,
        )
        for name, group in backup.groups.items()
    }
    new = replace(
        table,
        topics=frozen_map(topics),
        groups=immutables.Map(groups),
        txns=backup.txns,
        txn_committed_ms=backup.txn_committed_ms,
        next_topic_id=max(table.next_topic_id, backup.next_topic_id),
        restored_from=cmd.backup_id,
    )
    return new, metadata_pb2.MetaResult(changed=True)


def on_expire_txns(
    table: Table, cmd: metadata_pb2.ExpireTxns, now_ms: int, index: int
) -> tuple[Table, metadata_pb2.MetaResult]:
    """Forget the named watermarks last raised at or before ``committed_before_ms`` (the
    leader's judgement, carried in the command); unknown or since-raised ones are kept."""
    gone = {
        key
        for key in check_expire_txns(cmd)
        if key in table.txns and table.txn_committed_ms.get(key, 0) <= cmd.committed_before_ms
    }
    if not gone:
        return table, metadata_pb2.MetaResult(changed=False)
    new = replace(
        table,
        txns=frozen_map({k: v for k, v in table.txns.items() if k not in gone}),
        txn_committed_ms=frozen_map(
            {k: t for k, t in table.txn_committed_ms.items() if k not in gone}
        ),
    )
    return new, metadata_pb2.MetaResult(changed=True)
