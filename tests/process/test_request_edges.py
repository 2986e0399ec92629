"""Each RPC family's limits over the wire, at, just past and far past: refused with the
catalogue's INVALID_ARGUMENT naming the field, and nothing changed (the state read back after).
What is at a limit passes the edge and meets the broker's own verdict (an unknown topic or
member, or an answer). A call forwarded to the metadata leader is checked there again by the
same rule (transport/request_checks.py, broker/metadata_client.py LeaderCall.check).

One real broker in this process (raftq.server.Broker on 127.0.0.1: gRPC, Raft, SQLite).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from raftq.config import DEV_CLUSTER_SECRET
from raftq.metadata.machine import SESSION_TIMEOUT_MS_MAX, SUBSCRIPTIONS_MAX
from raftq.partitions.machine import MAX_DELAY_MS, MAX_LEASE_MS, MAX_LEASE_RECORDS, MAX_REFS
from raftq.proto import api_pb2, api_pb2_grpc, common_pb2, errors
from raftq.proto.limits import BACKUP_CHUNK_BYTES_MAX
from raftq.transport import grpc_errors
from raftq.transport.internal import InternalClient
from raftq.transport.request_checks import (
    PARTITIONS_MAX,
    POLL_WAIT_MS_MAX,
    REPLICATION_FACTOR_MAX,
    SEND_RECORDS_MAX,
)
from tests.cluster import InProcessCluster, make_cluster

TIMEOUT_S = 30
TOPIC, GROUP, APP = "edges", "edges-group", "edges-app"
AT, PAST, FAR = "t" * 249, "t" * 250, "t" * 50_000  # topic and group names
ID_AT, ID_PAST, ID_FAR = "i" * 255, "i" * 256, "i" * 50_000  # ids
A = api_pb2


@dataclass
class World:
    cluster: InProcessCluster
    channel: grpc.Channel
    member: str
    generation: int

    def stub(self, service: str) -> Any:
        return getattr(api_pb2_grpc, f"{service}Stub")(self.channel)

    def call(self, rpc: str, request: Any) -> Any:
        service = next(
            s
            for s in ("Producer", "Consumer", "Log", "Admin")
            if rpc in A.DESCRIPTOR.services_by_name[s].methods_by_name
        )
        method = getattr(self.stub(service), rpc)
        if rpc == "BackupPartition":
            return list(method(request, timeout=TIMEOUT_S))
        return method(request, timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with make_cluster(tmp_path_factory.mktemp("edges")) as cluster:
        cluster.wait_ready()
        assert isinstance(cluster, InProcessCluster)
        with grpc.insecure_channel(cluster.client_addr(1)) as channel:
            admin = api_pb2_grpc.AdminStub(channel)
            admin.CreateTopic(A.CreateTopicRequest(name=TOPIC, partitions=1), timeout=TIMEOUT_S)
            producer = api_pb2_grpc.ProducerStub(channel)
            values = [b"a", b"b", b"c"]
            producer.Send(A.SendRequest(topic=TOPIC, values=values), timeout=TIMEOUT_S)
            joined = api_pb2_grpc.ConsumerStub(channel).JoinGroup(
                A.JoinGroupRequest(group=GROUP, topics=[TOPIC]), timeout=TIMEOUT_S
            )
            admin.CommitTxn(A.CommitTxnRequest(app_id=APP, version=3), timeout=TIMEOUT_S)
            yield World(cluster, channel, joined.member_id, joined.generation)


def state(world: World) -> dict[str, Any]:
    """Everything a refused request might have touched, read back."""
    admin = world.stub("Admin")
    topics = admin.ListTopics(A.ListTopicsRequest(), timeout=TIMEOUT_S)
    described = admin.DescribeTopic(A.DescribeTopicRequest(name=TOPIC), timeout=TIMEOUT_S)
    groups = admin.ListGroups(A.ListGroupsRequest(), timeout=TIMEOUT_S)
    group = admin.DescribeGroup(A.DescribeGroupRequest(group=GROUP), timeout=TIMEOUT_S)
    offsets = world.stub("Log").ListOffsets(A.ListOffsetsRequest(topic=TOPIC), timeout=TIMEOUT_S)
    txn = admin.GetTxn(A.GetTxnRequest(app_id=APP), timeout=TIMEOUT_S)
    schedules = admin.ListSchedules(A.ListSchedulesRequest(topic=TOPIC), timeout=TIMEOUT_S)
    return {
        "topics": [(t.name, t.partitions) for t in topics.topics],
        "config": described.config.SerializeToString(deterministic=True),
        "partitions": [list(p.replicas) for p in described.partitions],
        "groups": [(g.group, g.generation, g.members, g.deleting) for g in groups.groups],
        "members": sorted(m.member_id for m in group.members),
        "offsets": [(p.log_start, p.end) for p in offsets.partitions],
        "txn": (txn.known, txn.version),
        "schedules": [s.name for s in schedules.schedules],
    }


def verdict(world: World, rpc: str, request: Any) -> errors.RaftqError | None:
    try:
        world.call(rpc, request)
    except grpc.RpcError as exc:
        return grpc_errors.from_rpc_error(exc)
    return None


# (rpc, request, the field a refusal names; None: at the limit, the edge lets it through)
Case = tuple[str, Callable[[World], Any], str | None]


def _member(world: World, **kw: Any) -> dict[str, Any]:
    return {"group": GROUP, "member_id": world.member, "generation": world.generation, **kw}


def _refs(n: int) -> list[api_pb2.RecordRef]:
    return [A.RecordRef(topic=TOPIC, partition=0, offset=i, delivery_count=1) for i in range(n)]


PRODUCER: list[Case] = [
    ("Send", lambda w: A.SendRequest(topic=AT, values=[b"x"]), None),
    ("Send", lambda w: A.SendRequest(topic=PAST, values=[b"x"]), "topic"),
    ("Send", lambda w: A.SendRequest(topic=FAR, values=[b"x"]), "topic"),
    ("Send", lambda w: A.SendRequest(topic=AT, values=[b""] * SEND_RECORDS_MAX), None),
    (
        "Send",
        lambda w: A.SendRequest(topic=TOPIC, values=[b""] * (SEND_RECORDS_MAX + 1)),
        "number of records",
    ),
    ("Send", lambda w: A.SendRequest(topic=TOPIC), "number of records"),
    (
        "Send",
        lambda w: A.SendRequest(
            topic=TOPIC, values=[b"x"], producer_id=ID_PAST, partition=0, sequence=0
        ),
        "producer_id",
    ),
    (
        "Send",
        lambda w: A.SendRequest(
            topic=TOPIC, values=[b"x"], producer_id="p", partition=0, sequence=-1
        ),
        "sequence",
    ),
    ("Send", lambda w: A.SendRequest(topic=TOPIC, values=[b"x"], partition=-1), "partition"),
]
CONSUMER: list[Case] = [
    ("JoinGroup", lambda w: A.JoinGroupRequest(group=PAST, topics=[TOPIC]), "group"),
    ("JoinGroup", lambda w: A.JoinGroupRequest(group=FAR, topics=[TOPIC]), "group"),
    (
        "JoinGroup",
        lambda w: A.JoinGroupRequest(
            group=GROUP, topics=[f"t{i}" for i in range(SUBSCRIPTIONS_MAX + 1)]
        ),
        "number of topics",
    ),
    (
        "JoinGroup",
        lambda w: A.JoinGroupRequest(
            group=GROUP, topics=[TOPIC], session_timeout_ms=SESSION_TIMEOUT_MS_MAX + 1
        ),
        "session_timeout_ms",
    ),
    (
        "JoinGroup",
        lambda w: A.JoinGroupRequest(group=GROUP, topics=[TOPIC], start_from=2),  # type: ignore[arg-type]
        "start_from",
    ),
    (
        "JoinGroup",
        lambda w: A.JoinGroupRequest(group=GROUP, topics=[TOPIC], member_id=ID_PAST),
        "member_id",
    ),
    ("Heartbeat", lambda w: A.HeartbeatRequest(**_member(w, member_id=ID_FAR)), "member_id"),
    ("Heartbeat", lambda w: A.HeartbeatRequest(**_member(w, generation=-1)), "generation"),
    ("LeaveGroup", lambda w: A.LeaveGroupRequest(group=PAST, member_id=w.member), "group"),
    (
        "Poll",
        lambda w: A.PollRequest(**_member(w, member_id=ID_AT, max_records=MAX_LEASE_RECORDS)),
        None,
    ),
    (
        "Poll",
        lambda w: A.PollRequest(**_member(w, max_records=MAX_LEASE_RECORDS + 1)),
        "max_records",
    ),
    ("Poll", lambda w: A.PollRequest(**_member(w, max_records=0)), "max_records"),
    (
        "Poll",
        lambda w: A.PollRequest(**_member(w, max_records=1, max_wait_ms=POLL_WAIT_MS_MAX + 1)),
        "max_wait_ms",
    ),
    (
        "Poll",
        lambda w: A.PollRequest(**_member(w, max_records=1, lease_ms=MAX_LEASE_MS + 1)),
        "lease_ms",
    ),
    ("Poll", lambda w: A.PollRequest(**_member(w, max_records=1, lease_ms=2**62)), "lease_ms"),
    ("Ack", lambda w: A.AckRequest(**_member(w, member_id=ID_AT, refs=_refs(MAX_REFS))), None),
    ("Ack", lambda w: A.AckRequest(**_member(w, refs=_refs(MAX_REFS + 1))), "number of refs"),
    ("Ack", lambda w: A.AckRequest(**_member(w)), "number of refs"),
    (
        "Nack",
        lambda w: A.NackRequest(**_member(w, refs=_refs(1), delay_ms=MAX_DELAY_MS + 1)),
        "delay_ms",
    ),
    (
        "ExtendLease",
        lambda w: A.ExtendLeaseRequest(**_member(w, refs=_refs(1), lease_ms=MAX_LEASE_MS + 1)),
        "lease_ms",
    ),
    ("ExtendLease", lambda w: A.ExtendLeaseRequest(**_member(w, refs=_refs(1))), "lease_ms"),
]
LOG: list[Case] = [
    ("Fetch", lambda w: A.FetchRequest(topic=TOPIC, max_records=MAX_LEASE_RECORDS), None),
    (
        "Fetch",
        lambda w: A.FetchRequest(topic=TOPIC, max_records=MAX_LEASE_RECORDS + 1),
        "max_records",
    ),
    ("Fetch", lambda w: A.FetchRequest(topic=TOPIC, max_records=1, offset=-1), "offset"),
    ("Fetch", lambda w: A.FetchRequest(topic=TOPIC, max_records=1, max_bytes=-1), "max_bytes"),
    ("ListOffsets", lambda w: A.ListOffsetsRequest(topic=PAST), "topic"),
    (
        "ProducerState",
        lambda w: A.ProducerStateRequest(
            topic=AT, producer_id="p", partitions=range(PARTITIONS_MAX)
        ),
        None,
    ),
    (
        "ProducerState",
        lambda w: A.ProducerStateRequest(
            topic=TOPIC, producer_id="p", partitions=range(PARTITIONS_MAX + 1)
        ),
        "number of partitions",
    ),
    (
        "ProducerState",
        lambda w: A.ProducerStateRequest(topic=TOPIC, producer_id=ID_PAST),
        "producer_id",
    ),
]
ADMIN: list[Case] = [
    ("DescribeTopic", lambda w: A.DescribeTopicRequest(name=AT), None),
    ("DescribeTopic", lambda w: A.DescribeTopicRequest(name=PAST), "name"),
    ("CreateTopic", lambda w: A.CreateTopicRequest(name=PAST), "name"),
    ("CreateTopic", lambda w: A.CreateTopicRequest(name=".."), "name"),
    (
        "CreateTopic",
        lambda w: A.CreateTopicRequest(name="edges-new", partitions=PARTITIONS_MAX + 1),
        "partitions",
    ),
    (
        "CreateTopic",
        lambda w: A.CreateTopicRequest(
            name="edges-new", replication_factor=REPLICATION_FACTOR_MAX + 1
        ),
        "replication_factor",
    ),
    (
        "AlterTopicConfig",
        lambda w: A.AlterTopicConfigRequest(
            name=TOPIC, config=A.TopicConfigUpdate(lease_ms=MAX_LEASE_MS + 1)
        ),
        "config.lease_ms",
    ),
    ("AlterTopicConfig", lambda w: A.AlterTopicConfigRequest(name=TOPIC), "config sets no field"),
    (
        "AddPartitions",
        lambda w: A.AddPartitionsRequest(name=TOPIC, partitions=PARTITIONS_MAX + 1),
        "partitions",
    ),
    ("DeleteTopic", lambda w: A.DeleteTopicRequest(name=FAR), "name"),
    ("PurgeTopic", lambda w: A.PurgeTopicRequest(topic=TOPIC, partition=-1), "partition"),
    ("UpdateRecord", lambda w: A.UpdateRecordRequest(topic=TOPIC, offset=0), "priority"),
    ("CancelRecord", lambda w: A.CancelRecordRequest(topic=TOPIC, offset=-1), "offset"),
    ("DescribeGroup", lambda w: A.DescribeGroupRequest(group=AT), None),
    ("DescribeGroup", lambda w: A.DescribeGroupRequest(group=PAST), "group"),
    ("DeleteGroup", lambda w: A.DeleteGroupRequest(group="a b"), "group"),
    (
        "SeekGroup",
        lambda w: A.SeekGroupRequest(group=GROUP, topic=TOPIC, to=99),  # type: ignore[arg-type]
        "SeekTo",
    ),
    ("SeekGroup", lambda w: A.SeekGroupRequest(group=GROUP, topic=TOPIC, offset=-1), "offset"),
    (
        "CreateSchedule",
        lambda w: A.CreateScheduleRequest(
            topic=TOPIC, schedule=common_pb2.Schedule(name=ID_PAST, interval_ms=60_000)
        ),
        "schedule.name",
    ),
    (
        "CreateSchedule",
        lambda w: A.CreateScheduleRequest(
            topic=TOPIC, schedule=common_pb2.Schedule(name="s", cron="61 * * * *")
        ),
        "cron",
    ),
    (
        "CreateSchedule",
        lambda w: A.CreateScheduleRequest(
            topic=TOPIC, schedule=common_pb2.Schedule(name="s", interval_ms=1)
        ),
        "interval_ms",
    ),
    ("PauseSchedule", lambda w: A.PauseScheduleRequest(topic=TOPIC), "name"),
    ("DeleteSchedule", lambda w: A.DeleteScheduleRequest(topic=TOPIC, name=ID_FAR), "name"),
    ("RemoveBroker", lambda w: A.RemoveBrokerRequest(broker_id=-1), "broker_id"),
    (
        "MovePartition",
        lambda w: A.MovePartitionRequest(
            topic=TOPIC, replicas=range(1, REPLICATION_FACTOR_MAX + 2)
        ),
        "replicas",
    ),
    (
        "BackupPartition",
        lambda w: A.BackupPartitionRequest(topic=TOPIC, chunk_bytes=BACKUP_CHUNK_BYTES_MAX + 4096),
        "chunk_bytes",
    ),
    (
        "BackupPartition",
        lambda w: A.BackupPartitionRequest(topic=TOPIC, chunk_bytes=2**31 - 1),
        "chunk_bytes",
    ),
    ("BackupPartition", lambda w: A.BackupPartitionRequest(topic=TOPIC, have=[b"x"]), "have"),
    ("CommitTxn", lambda w: A.CommitTxnRequest(app_id=APP, version=-1), "version"),
    ("CommitTxn", lambda w: A.CommitTxnRequest(app_id=APP, version=9, scope=PAST), "scope"),
    ("CommitTxn", lambda w: A.CommitTxnRequest(app_id=ID_PAST, version=9), "app_id"),
    ("GetTxn", lambda w: A.GetTxnRequest(app_id=ID_AT), None),
    ("GetTxn", lambda w: A.GetTxnRequest(app_id=ID_FAR), "app_id"),
    ("GetTxn", lambda w: A.GetTxnRequest(app_id=APP, scope="a b"), "scope"),
]


@pytest.mark.parametrize(
    "cases", [PRODUCER, CONSUMER, LOG, ADMIN], ids=["producer", "consumer", "log", "admin"]
)
def test_each_familys_limits_are_refused_typed_and_change_nothing(
    world: World, cases: list[Case]
) -> None:
    before = state(world)
    for rpc, build, refused in cases:
        request = build(world)
        error = verdict(world, rpc, request)
        if refused is None:  # at the limit: past the edge, the broker's own verdict
            assert not isinstance(error, errors.InvalidArgument), (rpc, error)
            continue
        assert isinstance(error, errors.InvalidArgument), (rpc, refused, error)
        assert refused in error.message, (rpc, error.message)
    assert state(world) == before


FORWARDED: list[tuple[str, Any, str]] = [
    ("heartbeat", A.HeartbeatRequest(group=GROUP, member_id="", generation=1), "member_id"),
    ("heartbeat", A.HeartbeatRequest(group=PAST, member_id="m", generation=1), "group"),
    ("describe_group", A.DescribeGroupRequest(group="a b"), "group"),
    ("delete_group", A.DeleteGroupRequest(group=FAR), "group"),
    ("leave_group", A.LeaveGroupRequest(group=GROUP, member_id=""), "member_id"),
    ("delete_topic", A.DeleteTopicRequest(name=".."), "name"),
    ("get_txn", A.GetTxnRequest(app_id=APP, scope="a b"), "scope"),
    ("commit_txn", A.CommitTxnRequest(app_id=APP, version=-1), "version"),
]


def test_a_call_forwarded_to_the_metadata_leader_is_checked_there_by_the_same_rule(
    world: World,
) -> None:
    """A broker forwards leader-only calls as bytes (Internal.Forward); the leader checks them
    again with the edge's own check, so a peer (of an older version, say) cannot hand its
    handlers a request they only assert on: the answer is the typed refusal a client gets."""
    before = state(world)
    client = InternalClient(DEV_CLUSTER_SECRET, broker_id=9)
    try:
        for method, request, refused in FORWARDED:
            with pytest.raises(errors.InvalidArgument) as info:
                client.forward(
                    world.cluster.client_addr(1), method, request.SerializeToString(), TIMEOUT_S
                )
            assert refused in info.value.message, (method, info.value.message)
    finally:
        client.close()
    assert state(world) == before
