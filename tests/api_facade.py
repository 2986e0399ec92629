"""A single-node, in-process BrokerFacade over real components, for API, client and CLI tests.

Not a mock: every partition is a real ``PartitionMachine`` over a real ``SqliteStore`` file,
fed commands stamped with ``now_ms`` and an incrementing index (what Raft would deliver, minus
Raft); the group assignment comes from the real sticky assignor. What it leaves out: Raft and
replication, more than one broker, dead-letter forwarding (the outbox fills, nobody drains it),
retention ticks. One lock serialises everything; long polls wait on a condition outside it.

The broker's own facade (broker/service.py) replaces it; tests written against the gRPC API
and the client can be pointed at a real cluster.
"""

from __future__ import annotations

import itertools
import pathlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from raftq.assignors.partitioner import partition_for
from raftq.assignors.sticky import assign
from raftq.partitions.machine import DEFAULT_CONFIG, PartitionMachine, check_config, check_record
from raftq.partitions.reader import producer_state
from raftq.partitions.sqlite_store import SqliteStore
from raftq.proto import api_pb2, common_pb2, errors, partition_pb2
from raftq.proto.common_pb2 import ErrorCode
from raftq.transport.auth import AuthPolicy

DEFAULT_PARTITIONS = 3
SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_INTERVAL_MS = 1_000


@dataclass
class _Partition:
    machine: PartitionMachine
    index: itertools.count[int]


@dataclass
class _Topic:
    name: str
    replication_factor: int
    config: common_pb2.TopicConfig
    partitions: list[_Partition]
    spread: itertools.count[int] = field(default_factory=itertools.count)


@dataclass
class _Member:
    topics: frozenset[str]
    session_timeout_ms: int
    seen_s: float  # monotonic time of the last join or heartbeat
    seen_ms: int  # the same, as wall-clock ms for DescribeGroup
    principal: str = ""  # who joined (the auth interceptor's caller)


@dataclass
class _Group:
    generation: int = 0
    members: dict[str, _Member] = field(default_factory=dict)
    assignment: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    topics: set[str] = field(default_factory=set)  # every topic a member ever subscribed to


class ApiFacade:
    """Implements raftq.transport.grpc_server.BrokerFacade on one node. ``client_addr`` is what
    DescribeTopic names as every partition's leader: set it once the server is bound."""

    def __init__(
        self,
        data_dir: pathlib.Path,
        *,
        client_addr: str = "",
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.data_dir = data_dir
        self.client_addr = client_addr
        self.now_ms = now_ms
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)  # notified on appends and releases
        self.topics: dict[str, _Topic] = {}
        self.groups: dict[str, _Group] = {}
        self.txns: dict[tuple[str, str], int] = {}  # Spark (app id, scope) -> watermark
        self.calls: list[str] = []  # RPC names seen, in order (tests check routing)

    # -- plumbing --------------------------------------------------------------------------

    @contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        with self.lock:
            self.calls.append(name)
            self._expire_sessions()
            yield

    def _topic(self, name: str) -> _Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise errors.UnknownTopic(f"topic {name!r} does not exist: create it first")
        return topic

    def _partition(self, topic: str, partition: int) -> _Partition:
        t = self._topic(topic)
        if not 0 <= partition < len(t.partitions):
            raise errors.UnknownPartition(
                f"topic {topic!r} has partitions 0..{len(t.partitions) - 1}, not {partition}"
            )
        return t.partitions[partition]

    def _apply(self, p: _Partition, **op: object) -> partition_pb2.CommandResult:
        command = partition_pb2.PartitionCommand(now_ms=self.now_ms(), **op)  # type: ignore[arg-type]
        result = p.machine.apply(command.SerializeToString(), next(p.index))
        assert not result.skipped, "the fixture's index went backwards"
        return result

    def _apply_checked(self, p: _Partition, **op: object) -> partition_pb2.CommandResult:
        result = self._apply(p, **op)
        if result.error != ErrorCode.OK:
            raise errors.error_for(result.error, result.message)
        return result

    # -- Producer --------------------------------------------------------------------------

    def send(
        self, request: api_pb2.SendRequest, *, timeout_s: float | None
    ) -> api_pb2.SendResponse:
        with self._locked("send"):
            topic = self._topic(request.topic)
            count = len(topic.partitions)
            if request.HasField("partition") and request.partition >= count:
                raise errors.UnknownPartition(
                    f"topic {topic.name!r} has partitions 0..{count - 1}, not {request.partition}"
                )
            if request.values:  # bare values: one partition, one result covering them all
                target = (
                    request.partition
                    if request.HasField("partition")
                    else next(topic.spread) % count
                )
                append = partition_pb2.Append(values=request.values)
                if request.HasField("producer_id"):
                    append.producer_id, append.sequence = request.producer_id, request.sequence
                result = self._apply(topic.partitions[target], append=append)
                if result.error != ErrorCode.OK:
                    raise errors.error_for(result.error, result.message)
                span = result.range
                one = api_pb2.SendResult(
                    partition=target,
                    offset=span.first_offset,
                    count=span.count,
                    duplicate=span.duplicate,
                )
                return api_pb2.SendResponse(results=[one], request_id=request.request_id)
            results = [api_pb2.SendResult() for _ in request.records]
            by_partition: dict[int, list[int]] = {}
            for i, record in enumerate(request.records):
                if request.HasField("partition"):
                    target = request.partition
                else:
                    key = record.key if record.HasField("key") else None
                    target = partition_for(key, count, next(topic.spread))
                results[i].partition = target
                problem = check_record(record, topic.config)
                if problem is not None:
                    results[i].error, results[i].message = problem.code, problem.message  # type: ignore[assignment]
                else:
                    by_partition.setdefault(target, []).append(i)
            for target, indexes in by_partition.items():
                append = partition_pb2.Append(records=[request.records[i] for i in indexes])
                if request.HasField("producer_id"):
                    append.producer_id, append.sequence = request.producer_id, request.sequence
                result = self._apply(topic.partitions[target], append=append)
                for n, i in enumerate(indexes):
                    if result.error != ErrorCode.OK:
                        results[i].error, results[i].message = result.error, result.message
                        continue
                    one = result.records[n]
                    results[i].offset, results[i].duplicate = one.offset, one.duplicate
                    results[i].error, results[i].message = one.error, one.message
            self.changed.notify_all()
            return api_pb2.SendResponse(results=results)

    # -- groups ----------------------------------------------------------------------------

    def _expire_sessions(self) -> None:
        now = time.monotonic()
        for name, group in self.groups.items():
            gone = [
                m
                for m, member in group.members.items()
                if now - member.seen_s > member.session_timeout_ms / 1000
            ]
            for member_id in gone:
                del group.members[member_id]
            if gone:
                self._rebalance(name, group)

    def _rebalance(self, name: str, group: _Group) -> None:
        """New generation and sticky assignment; release the leases of partitions that moved
        (or whose member left), so the new owner can have them at once."""
        counts = {t: len(self.topics[t].partitions) for t in self.topics}
        members = {m: set(member.topics) for m, member in group.members.items()}
        new = assign(members, counts, group.assignment)
        for member_id, owned in group.assignment.items():
            for tp in set(owned) - set(new.get(member_id, [])):
                if tp[0] in self.topics and tp[1] < counts[tp[0]]:
                    release = partition_pb2.Release(group=name, member=member_id)
                    self._apply(self.topics[tp[0]].partitions[tp[1]], release=release)
        group.assignment = new
        group.generation += 1
        self.changed.notify_all()

    def _assignment(self, group: _Group, member_id: str) -> list[api_pb2.TopicPartitions]:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in group.assignment.get(member_id, []):
            by_topic.setdefault(topic, []).append(partition)
        return [
            api_pb2.TopicPartitions(topic=t, partitions=ps) for t, ps in sorted(by_topic.items())
        ]

    def member(self, group: str, member_id: str, wait_s: float = 0.0) -> _Member | None:
        """The auth interceptor's member lookup (raftq.transport.auth.MemberLookup); one node, so
        nothing to wait for."""
        with self.lock:
            info = self.groups.get(group)
            return info.members.get(member_id) if info is not None else None

    def _member(self, group_name: str, member_id: str, generation: int | None) -> _Group:
        group = self.groups.get(group_name)
        if group is None:
            raise errors.UnknownGroup(f"group {group_name!r} has no members: join it first")
        if member_id not in group.members:
            raise errors.UnknownMember(f"member {member_id!r} is not in group {group_name!r}")
        if generation is not None and generation != group.generation:
            raise errors.Fenced(
                f"generation {generation} is stale; group {group_name!r} is at "
                f"{group.generation}: rejoin"
            )
        return group

    def join_group(
        self, request: api_pb2.JoinGroupRequest, *, timeout_s: float | None, principal: str = ""
    ) -> api_pb2.JoinGroupResponse:
        with self._locked("join_group"):
            for topic in request.topics:
                self._topic(topic)
            group = self.groups.setdefault(request.group, _Group())
            member_id = request.member_id if request.HasField("member_id") else uuid.uuid4().hex
            old = group.members.get(member_id)
            if request.HasField("member_id") and old is None:
                raise errors.UnknownMember(f"{member_id!r} is not in group {request.group!r}")
            if old is not None and old.principal != principal:
                raise errors.PermissionDenied(f"member {member_id!r} is another principal's")
            timeout_ms = request.session_timeout_ms or SESSION_TIMEOUT_MS
            topics = frozenset(request.topics)
            group.topics |= topics
            group.members[member_id] = _Member(
                topics, timeout_ms, time.monotonic(), self.now_ms(), principal
            )
            if old is None or old.topics != topics:
                self._rebalance(request.group, group)
            return api_pb2.JoinGroupResponse(
                member_id=member_id,
                generation=group.generation,
                assignment=self._assignment(group, member_id),
                session_timeout_ms=timeout_ms,
                heartbeat_interval_ms=min(HEARTBEAT_INTERVAL_MS, timeout_ms // 3),
            )

    def heartbeat(
        self, request: api_pb2.HeartbeatRequest, *, timeout_s: float | None
    ) -> api_pb2.HeartbeatResponse:
        with self._locked("heartbeat"):
            group = self._member(request.group, request.member_id, request.generation)
            member = group.members[request.member_id]
            member.seen_s, member.seen_ms = time.monotonic(), self.now_ms()
            return api_pb2.HeartbeatResponse(
                generation=group.generation,
                assignment=self._assignment(group, request.member_id),
            )

    def leave_group(
        self, request: api_pb2.LeaveGroupRequest, *, timeout_s: float | None
    ) -> api_pb2.LeaveGroupResponse:
        with self._locked("leave_group"):
            group = self._member(request.group, request.member_id, None)
            del group.members[request.member_id]
            self._rebalance(request.group, group)
            return api_pb2.LeaveGroupResponse()

    # -- leases ----------------------------------------------------------------------------

    def undeliver_poll(self, request: api_pb2.PollRequest, response: api_pb2.PollResponse) -> None:
        with self._locked("undeliver_poll"):
            for r in response.records:
                refs = [partition_pb2.DeliveryRef(offset=r.offset, delivery_count=r.delivery_count)]
                release = partition_pb2.Release(
                    group=request.group, member=request.member_id, undelivered=refs
                )
                self._apply_checked(self.topics[r.topic].partitions[r.partition], release=release)

    def _lease_once(self, request: api_pb2.PollRequest) -> list[api_pb2.LeasedRecord]:
        group = self._member(request.group, request.member_id, request.generation)
        out: list[api_pb2.LeasedRecord] = []
        for topic, partition in group.assignment.get(request.member_id, []):
            wanted = request.max_records - len(out)
            if wanted <= 0 or topic not in self.topics:
                break
            lease = partition_pb2.Lease(
                group=request.group,
                member=request.member_id,
                max_records=wanted,
                lease_ms=request.lease_ms if request.HasField("lease_ms") else 0,
                max_bytes=request.max_bytes,
            )
            result = self._apply_checked(self.topics[topic].partitions[partition], lease=lease)
            for d in result.deliveries:
                out.append(
                    api_pb2.LeasedRecord(
                        topic=topic,
                        partition=partition,
                        offset=d.record.offset,
                        delivery_count=d.delivery_count,
                        lease_deadline_ms=d.lease_deadline_ms,
                        timestamp_ms=d.record.timestamp_ms,
                        record=d.record.record,
                    )
                )
        return out

    def poll(
        self,
        request: api_pb2.PollRequest,
        *,
        timeout_s: float | None,
        active: Callable[[], bool] = lambda: True,
    ) -> api_pb2.PollResponse:
        wait_s = request.max_wait_ms / 1000
        if timeout_s is not None:
            wait_s = min(wait_s, max(0.0, timeout_s - 0.05))
        deadline = time.monotonic() + wait_s
        with self._locked("poll"):
            while True:
                records = self._lease_once(request)
                remaining = deadline - time.monotonic()
                if (records or remaining <= 0) and request.compact:
                    response = api_pb2.PollResponse()
                    for r in records:  # consecutive records of a partition: one batch
                        last = response.batches[-1] if response.batches else None
                        if last is None or (last.topic, last.partition) != (r.topic, r.partition):
                            last = response.batches.add(topic=r.topic, partition=r.partition)
                        last.deliveries.add(
                            record=common_pb2.StoredRecord(
                                offset=r.offset, timestamp_ms=r.timestamp_ms, record=r.record
                            ),
                            delivery_count=r.delivery_count,
                            lease_deadline_ms=r.lease_deadline_ms,
                        )
                    return response
                if records or remaining <= 0:
                    return api_pb2.PollResponse(records=records)
                # Delays and lease expiries are not events: look again at least every 50 ms.
                self.changed.wait(min(remaining, 0.05))
                self._expire_sessions()

    def _settle(
        self,
        name: str,
        request: api_pb2.AckRequest | api_pb2.NackRequest | api_pb2.ExtendLeaseRequest,
        make: Callable[[list[partition_pb2.DeliveryRef]], dict[str, object]],
    ) -> api_pb2.SettleResponse:
        with self._locked(name):
            group = self._member(request.group, request.member_id, request.generation)
            owned = set(group.assignment.get(request.member_id, []))
            results = [api_pb2.RefOutcome(ref=ref) for ref in request.refs]
            by_tp: dict[tuple[str, int], list[int]] = {}
            for i, ref in enumerate(request.refs):
                if (ref.topic, ref.partition) not in owned:
                    results[i].error = ErrorCode.FENCED
                    results[i].message = (
                        f"{ref.topic}/{ref.partition} is not assigned to this member: its "
                        "lease was released on rebalance"
                    )
                else:
                    by_tp.setdefault((ref.topic, ref.partition), []).append(i)
            for (topic, partition), indexes in by_tp.items():
                refs = [
                    partition_pb2.DeliveryRef(
                        offset=request.refs[i].offset, delivery_count=request.refs[i].delivery_count
                    )
                    for i in indexes
                ]
                result = self._apply(self._partition(topic, partition), **make(refs))
                for n, i in enumerate(indexes):
                    if result.error != ErrorCode.OK:
                        results[i].error, results[i].message = result.error, result.message
                        continue
                    one = result.refs[n]
                    results[i].error, results[i].message = one.error, one.message
                    results[i].dead_lettered = one.dead_lettered
                    if name == "extend_lease" and one.error == ErrorCode.OK:
                        assert isinstance(request, api_pb2.ExtendLeaseRequest)
                        results[i].lease_deadline_ms = result.lease_deadline_ms
            self.changed.notify_all()
            return api_pb2.SettleResponse(results=results)

    def ack(
        self, request: api_pb2.AckRequest, *, timeout_s: float | None
    ) -> api_pb2.SettleResponse:
        member = request.member_id
        if request.batches:  # the compact form: answered with only the refs that failed
            expanded = api_pb2.AckRequest(
                group=request.group, member_id=member, generation=request.generation
            )
            for b in request.batches:
                for offset, count in zip(b.offsets, b.delivery_counts, strict=True):
                    expanded.refs.add(
                        topic=b.topic, partition=b.partition, offset=offset, delivery_count=count
                    )
            full = self.ack(expanded, timeout_s=timeout_s)
            return api_pb2.SettleResponse(failed=[r for r in full.results if r.error])
        return self._settle(
            "ack",
            request,
            lambda refs: {
                "ack": partition_pb2.Settle(group=request.group, member=member, refs=refs)
            },
        )

    def nack(
        self, request: api_pb2.NackRequest, *, timeout_s: float | None
    ) -> api_pb2.SettleResponse:
        def make(refs: list[partition_pb2.DeliveryRef]) -> dict[str, object]:
            nack = partition_pb2.Nack(group=request.group, member=request.member_id, refs=refs)
            if request.HasField("delay_ms"):
                nack.delay_ms = request.delay_ms
            return {"nack": nack}

        return self._settle("nack", request, make)

    def extend_lease(
        self, request: api_pb2.ExtendLeaseRequest, *, timeout_s: float | None
    ) -> api_pb2.SettleResponse:
        def make(refs: list[partition_pb2.DeliveryRef]) -> dict[str, object]:
            extend = partition_pb2.ExtendLease(
                group=request.group, member=request.member_id, refs=refs, lease_ms=request.lease_ms
            )
            return {"extend_lease": extend}

        return self._settle("extend_lease", request, make)

    # -- Log -------------------------------------------------------------------------------

    def fetch(
        self, request: api_pb2.FetchRequest, *, timeout_s: float | None
    ) -> api_pb2.FetchResponse:
        with self._locked("fetch"):
            machine = self._partition(request.topic, request.partition).machine
            offsets = machine.offsets()
            return api_pb2.FetchResponse(
                records=machine.fetch(request.offset, request.max_records, request.max_bytes),
                log_start=offsets.log_start,
                end=offsets.end,
            )

    def list_offsets(
        self, request: api_pb2.ListOffsetsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListOffsetsResponse:
        with self._locked("list_offsets"):
            topic = self._topic(request.topic)
            response = api_pb2.ListOffsetsResponse()
            for i, p in enumerate(topic.partitions):
                offsets = p.machine.offsets()
                response.partitions.add(partition=i, log_start=offsets.log_start, end=offsets.end)
            return response

    # -- Admin -----------------------------------------------------------------------------

    @staticmethod
    def _merge(config: common_pb2.TopicConfig, update: api_pb2.TopicConfigUpdate) -> None:
        for descriptor, value in update.ListFields():
            setattr(config, descriptor.name, value)
        problem = check_config(config)
        if problem is not None:
            raise errors.InvalidArgument(problem.message)

    def _describe(self, topic: _Topic) -> api_pb2.TopicDescription:
        description = api_pb2.TopicDescription(
            name=topic.name, replication_factor=topic.replication_factor, config=topic.config
        )
        for i, p in enumerate(topic.partitions):
            offsets = p.machine.offsets()
            description.partitions.add(
                partition=i,
                replicas=[1],
                leader=1,
                leader_addr=self.client_addr,
                log_start=offsets.log_start,
                end=offsets.end,
                in_sync=[1],
            )
        return description

    def create_topic(
        self, request: api_pb2.CreateTopicRequest, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription:
        with self._locked("create_topic"):
            if request.name in self.topics:
                raise errors.TopicExists(f"topic {request.name!r} exists")
            rf = request.replication_factor if request.HasField("replication_factor") else 1
            if rf > 1:
                raise errors.InvalidArgument(
                    f"replication_factor {rf} is over the 1 live broker: lower it"
                )
            config = common_pb2.TopicConfig()
            config.CopyFrom(DEFAULT_CONFIG)
            config.dead_letter_topic = f"{request.name}.dlq"
            self._merge(config, request.config)
            count = request.partitions if request.HasField("partitions") else DEFAULT_PARTITIONS
            partitions = []
            for i in range(count):
                path = self.data_dir / f"{request.name}-{i}-{uuid.uuid4().hex[:8]}.sqlite"
                p = _Partition(
                    PartitionMachine(SqliteStore(str(path), synchronous="OFF")), itertools.count(1)
                )
                configure = partition_pb2.Configure(config=config, topic=request.name, partition=i)
                self._apply_checked(p, configure=configure)
                partitions.append(p)
            topic = _Topic(request.name, rf, config, partitions)
            self.topics[request.name] = topic
            return self._describe(topic)

    def delete_topic(
        self, request: api_pb2.DeleteTopicRequest, *, timeout_s: float | None
    ) -> api_pb2.DeleteTopicResponse:
        with self._locked("delete_topic"):
            self._topic(request.name)
            del self.topics[request.name]
            return api_pb2.DeleteTopicResponse()

    def list_topics(
        self, request: api_pb2.ListTopicsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListTopicsResponse:
        with self._locked("list_topics"):
            return api_pb2.ListTopicsResponse(
                topics=[
                    api_pb2.TopicSummary(
                        name=t.name,
                        partitions=len(t.partitions),
                        replication_factor=t.replication_factor,
                    )
                    for _, t in sorted(self.topics.items())
                ]
            )

    def describe_topic(
        self, request: api_pb2.DescribeTopicRequest, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription:
        with self._locked("describe_topic"):
            return self._describe(self._topic(request.name))

    def alter_topic_config(
        self, request: api_pb2.AlterTopicConfigRequest, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription:
        with self._locked("alter_topic_config"):
            topic = self._topic(request.name)
            config = common_pb2.TopicConfig()
            config.CopyFrom(topic.config)
            self._merge(config, request.config)
            for i, p in enumerate(topic.partitions):
                configure = partition_pb2.Configure(config=config, topic=topic.name, partition=i)
                self._apply_checked(p, configure=configure)
            topic.config = config
            return self._describe(topic)

    def list_groups(
        self, request: api_pb2.ListGroupsRequest, *, timeout_s: float | None
    ) -> api_pb2.ListGroupsResponse:
        with self._locked("list_groups"):
            response = api_pb2.ListGroupsResponse()
            for name, group in sorted(self.groups.items()):
                topics = sorted(group.topics)
                response.groups.add(
                    group=name,
                    generation=group.generation,
                    members=len(group.members),
                    topics=topics,
                )
            return response

    def delete_group(
        self, request: api_pb2.DeleteGroupRequest, *, timeout_s: float | None
    ) -> api_pb2.DeleteGroupResponse:
        with self._locked("delete_group"):
            group = self.groups.get(request.group)
            if group is None:
                raise errors.UnknownGroup(f"no group {request.group!r}")
            if group.members:
                raise errors.GroupNotEmpty(f"group {request.group!r} has members")
            out = api_pb2.DeleteGroupResponse()
            forget = partition_pb2.ForgetGroup(group=request.group)
            for name in sorted(group.topics & set(self.topics)):
                for p in self.topics[name].partitions:
                    out.pending += self._apply_checked(p, forget_group=forget).count
                    out.partitions += 1
            del self.groups[request.group]
            return out

    def seek_group(
        self, request: api_pb2.SeekGroupRequest, *, timeout_s: float | None
    ) -> api_pb2.SeekGroupResponse:
        with self._locked("seek_group"):
            group = self.groups.get(request.group)
            if group is None:
                raise errors.UnknownGroup(f"no group {request.group!r}")
            topic = self._topic(request.topic)
            if request.HasField("partition"):
                numbers = [request.partition]
                self._partition(request.topic, request.partition)
            else:
                numbers = list(range(len(topic.partitions)))
            if request.topic not in group.topics:
                raise errors.InvalidArgument(f"group holds no state on {request.topic!r}")
            if group.members and not request.force:
                raise errors.GroupNotEmpty(f"group {request.group!r} has members")
            seek = partition_pb2.SeekGroup(
                group=request.group,
                to=request.to,
                offset=request.offset,
                timestamp_ms=request.timestamp_ms,
            )
            out = api_pb2.SeekGroupResponse()
            for i in numbers:
                result = self._apply_checked(topic.partitions[i], seek_group=seek)
                out.partitions.add(partition=i, offset=result.offset, dropped=result.count)
            return out

    def purge_topic(
        self, request: api_pb2.PurgeTopicRequest, *, timeout_s: float | None
    ) -> api_pb2.PurgeTopicResponse:
        with self._locked("purge_topic"):
            topic = self._topic(request.topic)
            if request.HasField("partition"):
                numbers = [request.partition]
                self._partition(request.topic, request.partition)
            else:
                numbers = list(range(len(topic.partitions)))
            out = api_pb2.PurgeTopicResponse()
            for i in numbers:
                result = self._apply_checked(topic.partitions[i], purge=partition_pb2.Purge())
                out.partitions.add(partition=i, log_start=result.offset, deleted=result.count)
            return out

    def describe_group(
        self, request: api_pb2.DescribeGroupRequest, *, timeout_s: float | None
    ) -> api_pb2.GroupDescription:
        with self._locked("describe_group"):
            group = self.groups.get(request.group)
            if group is None:
                raise errors.UnknownGroup(f"no group {request.group!r}")
            description = api_pb2.GroupDescription(group=request.group, generation=group.generation)
            owner: dict[tuple[str, int], str] = {}
            for member_id, member in sorted(group.members.items()):
                description.members.add(
                    member_id=member_id,
                    topics=sorted(member.topics),
                    assignment=self._assignment(group, member_id),
                    session_timeout_ms=member.session_timeout_ms,
                    last_heartbeat_ms=member.seen_ms,
                )
                for tp in group.assignment.get(member_id, []):
                    owner[tp] = member_id
            topics = sorted(group.topics & set(self.topics))
            for name in topics:
                for i, p in enumerate(self.topics[name].partitions):
                    lag = p.machine.lag(request.group)
                    end = p.machine.offsets().end
                    description.partitions.add(
                        topic=name,
                        partition=i,
                        committed=lag.committed if lag else p.machine.offsets().log_start,
                        end=end,
                        lag=lag.lag if lag else end - p.machine.offsets().log_start,
                        pending=lag.pending if lag else 0,
                        leased=lag.leased if lag else 0,
                        member_id=owner.get((name, i), ""),
                    )
            return description

    def describe_cluster(
        self, request: api_pb2.DescribeClusterRequest, *, timeout_s: float | None
    ) -> api_pb2.ClusterDescription:
        with self._locked("describe_cluster"):
            return api_pb2.ClusterDescription(
                brokers=[
                    api_pb2.BrokerDescription(
                        id=1, client_addr=self.client_addr, alive=True, metadata_voter=True
                    )
                ],
                metadata_leader=1,
                health=api_pb2.HEALTHY,
                topics=len(self.topics),
                partitions=sum(len(t.partitions) for t in self.topics.values()),
            )

    def update_record(
        self, request: api_pb2.UpdateRecordRequest, *, timeout_s: float | None
    ) -> api_pb2.UpdateRecordResponse:
        with self._locked("update_record"):
            update = partition_pb2.UpdateRecord(offset=request.offset)
            if request.HasField("priority"):
                update.priority = request.priority
            if request.HasField("deliver_at_ms"):
                update.deliver_at_ms = request.deliver_at_ms
            self._apply_checked(
                self._partition(request.topic, request.partition), update_record=update
            )
            self.changed.notify_all()
            return api_pb2.UpdateRecordResponse()

    def cancel_record(
        self, request: api_pb2.CancelRecordRequest, *, timeout_s: float | None
    ) -> api_pb2.CancelRecordResponse:
        with self._locked("cancel_record"):
            cancel = partition_pb2.CancelRecord(offset=request.offset)
            self._apply_checked(
                self._partition(request.topic, request.partition), cancel_record=cancel
            )
            return api_pb2.CancelRecordResponse()

    def remove_broker(
        self, request: api_pb2.RemoveBrokerRequest, *, timeout_s: float | None
    ) -> api_pb2.RemoveBrokerResponse:
        raise errors.InvalidArgument(f"broker {request.broker_id}: a single node has no others")

    def add_partitions(
        self, request: api_pb2.AddPartitionsRequest, *, timeout_s: float | None
    ) -> api_pb2.TopicDescription:
        raise errors.InvalidArgument("this single-node facade keeps its partition counts")

    def rebalance_leaders(
        self, request: api_pb2.RebalanceLeadersRequest, *, timeout_s: float | None
    ) -> api_pb2.RebalanceLeadersResponse:
        return api_pb2.RebalanceLeadersResponse()  # one node: every leader is preferred

    def move_partition(
        self, request: api_pb2.MovePartitionRequest, *, timeout_s: float | None
    ) -> api_pb2.MovePartitionResponse:
        raise errors.InvalidArgument("the in-process facade has one broker: nothing to move")

    def backup_metadata(
        self, request: api_pb2.BackupMetadataRequest, *, timeout_s: float | None
    ) -> api_pb2.BackupMetadataResponse:
        raise errors.InvalidArgument("the in-process facade takes no backups")

    def backup_partition(
        self, request: api_pb2.BackupPartitionRequest, cancelled: threading.Event
    ) -> Iterator[api_pb2.BackupChunk]:
        raise errors.InvalidArgument("the in-process facade takes no backups")

    def producer_state(
        self, request: api_pb2.ProducerStateRequest, *, timeout_s: float | None
    ) -> api_pb2.ProducerStateResponse:
        with self._locked("producer_state"):
            topic = self._topic(request.topic)
            out = api_pb2.ProducerStateResponse()
            for index in list(request.partitions) or range(len(topic.partitions)):
                store = self._partition(request.topic, index).machine.store
                state = producer_state(store, request.producer_id)
                entry = out.partitions.add(partition=index, known=state is not None)
                if state is not None:
                    entry.last_sequence = state.last_sequence
                    entry.last_offsets.extend(state.last_offsets)
                    entry.records = state.records
            return out

    def commit_txn(
        self, request: api_pb2.CommitTxnRequest, *, timeout_s: float | None
    ) -> api_pb2.TxnState:
        with self._locked("commit_txn"):
            key = (request.app_id, request.scope)
            version = max(self.txns.get(key, -1), request.version)
            self.txns[key] = version
            return api_pb2.TxnState(
                app_id=request.app_id, scope=request.scope, known=True, version=version
            )

    def get_txn(
        self, request: api_pb2.GetTxnRequest, *, timeout_s: float | None
    ) -> api_pb2.TxnState:
        with self._locked("get_txn"):
            version = self.txns.get((request.app_id, request.scope))
            return api_pb2.TxnState(
                app_id=request.app_id,
                scope=request.scope,
                known=version is not None,
                version=version or 0,
            )

    def close(self) -> None:
        with self.lock:
            for topic in self.topics.values():
                for p in topic.partitions:
                    close = getattr(p.machine.store, "close", None)
                    if close is not None:
                        close()


@contextmanager
def api_server(
    data_dir: pathlib.Path,
    facade: ApiFacade | None = None,
    *,
    auth_policy: AuthPolicy | None = None,
) -> Iterator[tuple[str, ApiFacade]]:
    """A real gRPC server on 127.0.0.1 (a free port) over an ApiFacade: (address, facade).
    ``auth_policy``: tokens and ACLs required, as a broker with security.auth_required."""
    from raftq.transport.auth import AuthInterceptor
    from raftq.transport.grpc_server import serve
    from tests.helpers import free_port

    facade = facade or ApiFacade(data_dir)
    address = f"127.0.0.1:{free_port()}"
    facade.client_addr = facade.client_addr or address
    interceptors = [] if auth_policy is None else [AuthInterceptor(auth_policy, facade.member)]
    server = serve(facade, address, max_workers=32, interceptors=interceptors)
    try:
        yield address, facade
    finally:
        server.stop(grace=None).wait(5)
        facade.close()
