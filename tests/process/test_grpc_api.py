"""The gRPC API over the wire: every RPC's happy path, typed errors, health and reflection.

One real broker in this process (raftq.server.Broker on 127.0.0.1: gRPC, Raft, SQLite) for the
module; each test names its own topic and group (``stubs.topic``, ``stubs.group``). The tests
talk raw stubs, so they say what any client sees.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from raftq.assignors.partitioner import partition_for
from raftq.proto import api_pb2, api_pb2_grpc, common_pb2, errors
from raftq.proto.common_pb2 import ErrorCode
from raftq.transport import grpc_errors
from raftq.transport.grpc_server import SERVICE_NAMES, serve
from tests.cluster import InProcessCluster, make_cluster
from tests.helpers import free_port, unique_name

TIMEOUT_S = 10


class Stubs:
    """Stubs on one channel, and the names of this test's topic and group."""

    def __init__(self, channel: grpc.Channel, topic: str, group: str) -> None:
        self.producer = api_pb2_grpc.ProducerStub(channel)
        self.consumer = api_pb2_grpc.ConsumerStub(channel)
        self.log = api_pb2_grpc.LogStub(channel)
        self.admin = api_pb2_grpc.AdminStub(channel)
        self.channel = channel
        self.topic, self.group = topic, group


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    with make_cluster(tmp_path_factory.mktemp("broker")) as cluster:
        cluster.wait_ready()
        assert isinstance(cluster, InProcessCluster)
        yield cluster


@pytest.fixture
def stubs(server: InProcessCluster) -> Iterator[Stubs]:
    with grpc.insecure_channel(server.client_addr(1)) as channel:
        yield Stubs(channel, unique_name("orders"), unique_name("g"))


def typed(call: Any, request: Any) -> errors.RaftqError:
    """The typed error a call fails with (it must fail)."""
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=TIMEOUT_S)
    return grpc_errors.from_rpc_error(info.value)


def create(stubs: Stubs, name: str = "", partitions: int = 3, **config: Any) -> None:
    stubs.admin.CreateTopic(
        api_pb2.CreateTopicRequest(
            name=name or stubs.topic,
            partitions=partitions,
            config=api_pb2.TopicConfigUpdate(**config),
        ),
        timeout=TIMEOUT_S,
    )


def send(stubs: Stubs, topic: str, *values: bytes, **kw: Any) -> api_pb2.SendResponse:
    records = [common_pb2.Record(value=v) for v in values]
    response: api_pb2.SendResponse = stubs.producer.Send(
        api_pb2.SendRequest(topic=topic, records=records, **kw), timeout=TIMEOUT_S
    )
    return response


def join(stubs: Stubs) -> Any:
    return stubs.consumer.JoinGroup(
        api_pb2.JoinGroupRequest(group=stubs.group, topics=[stubs.topic]), timeout=TIMEOUT_S
    )


# --- health and reflection -------------------------------------------------------------------


def test_health_check_says_serving_for_the_server_and_each_service(stubs: Stubs) -> None:
    health = health_pb2_grpc.HealthStub(stubs.channel)
    for service in ("", *SERVICE_NAMES):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT_S)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, service


def test_reflection_lists_the_four_services_and_health(stubs: Stubs) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(stubs.channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    (reply,) = list(stub.ServerReflectionInfo(iter([request]), timeout=TIMEOUT_S))
    names = {s.name for s in reply.list_services_response.service}
    assert {
        "raftq.v1.Producer",
        "raftq.v1.Consumer",
        "raftq.v1.Log",
        "raftq.v1.Admin",
        "grpc.health.v1.Health",
    } <= names


def test_reflection_v1_answers_like_v1alpha_and_describes_a_service(stubs: Stubs) -> None:
    """grpcurl and newer tools ask grpc.reflection.v1 first: it must answer, not UNIMPLEMENTED."""
    info = stubs.channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="raftq.v1.Consumer"),
    ]
    listed, described = list(info(iter(requests), timeout=TIMEOUT_S))
    names = {s.name for s in listed.list_services_response.service}
    assert {"raftq.v1.Consumer", "grpc.reflection.v1.ServerReflection"} <= names
    assert "grpc.reflection.v1alpha.ServerReflection" in names
    files = described.file_descriptor_response.file_descriptor_proto
    assert files and not described.HasField("error_response")


# --- admin ----------------------------------------------------------------------------------


def test_topic_lifecycle_create_list_describe_alter_delete(stubs: Stubs) -> None:
    created = stubs.admin.CreateTopic(
        api_pb2.CreateTopicRequest(
            name=stubs.topic,
            partitions=2,
            config=api_pb2.TopicConfigUpdate(ordering=common_pb2.PRIORITY, lease_ms=5000),
        ),
        timeout=TIMEOUT_S,
    )
    assert [p.partition for p in created.partitions] == [0, 1]
    assert created.config.ordering == common_pb2.PRIORITY and created.config.lease_ms == 5000
    assert created.config.dead_letter_topic == f"{stubs.topic}.dlq"
    listed = stubs.admin.ListTopics(api_pb2.ListTopicsRequest(), timeout=TIMEOUT_S)
    mine = [(t.name, t.partitions) for t in listed.topics if t.name.startswith(stubs.topic)]
    assert mine == [(stubs.topic, 2)]
    altered = stubs.admin.AlterTopicConfig(
        api_pb2.AlterTopicConfigRequest(
            name=stubs.topic, config=api_pb2.TopicConfigUpdate(max_deliveries=9)
        ),
        timeout=TIMEOUT_S,
    )
    assert altered.config.max_deliveries == 9 and altered.config.lease_ms == 5000
    described = stubs.admin.DescribeTopic(
        api_pb2.DescribeTopicRequest(name=stubs.topic), timeout=TIMEOUT_S
    )
    assert described.config.max_deliveries == 9
    assert all(p.leader == 1 and p.leader_addr for p in described.partitions)
    stubs.admin.DeleteTopic(api_pb2.DeleteTopicRequest(name=stubs.topic), timeout=TIMEOUT_S)
    error = typed(stubs.admin.DescribeTopic, api_pb2.DescribeTopicRequest(name=stubs.topic))
    assert isinstance(error, errors.UnknownTopic)


def test_creating_a_topic_twice_is_topic_exists(stubs: Stubs) -> None:
    create(stubs)
    error = typed(stubs.admin.CreateTopic, api_pb2.CreateTopicRequest(name=stubs.topic))
    assert isinstance(error, errors.TopicExists)


@pytest.mark.parametrize(
    ("request_", "fix"),
    [
        (api_pb2.CreateTopicRequest(name=""), "name is empty"),
        (api_pb2.CreateTopicRequest(name="bad name!"), "A-Z a-z 0-9"),
        (api_pb2.CreateTopicRequest(name="x" * 250), "1-249 characters"),
        (api_pb2.CreateTopicRequest(name="ok", partitions=0), "partitions is 0"),
        (
            api_pb2.CreateTopicRequest(name="ok", config=api_pb2.TopicConfigUpdate(lease_ms=-1)),
            "config.lease_ms is -1",
        ),
    ],
)
def test_bad_create_requests_are_invalid_argument_saying_what_to_fix(
    stubs: Stubs, request_: api_pb2.CreateTopicRequest, fix: str
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stubs.admin.CreateTopic(request_, timeout=TIMEOUT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    error = grpc_errors.from_rpc_error(info.value)
    assert type(error) is errors.InvalidArgument and fix in error.message


def test_describe_cluster_and_groups(stubs: Stubs) -> None:
    create(stubs)
    cluster = stubs.admin.DescribeCluster(api_pb2.DescribeClusterRequest(), timeout=TIMEOUT_S)
    assert cluster.health == api_pb2.HEALTHY and cluster.metadata_leader == 1
    assert [b.id for b in cluster.brokers] == [1]
    listed = stubs.admin.ListTopics(api_pb2.ListTopicsRequest(), timeout=TIMEOUT_S)
    assert cluster.topics == len(listed.topics) and stubs.topic in {t.name for t in listed.topics}
    assert cluster.partitions == sum(t.partitions for t in listed.topics)
    joined = join(stubs)
    send(stubs, stubs.topic, b"a", b"b")
    groups = stubs.admin.ListGroups(api_pb2.ListGroupsRequest(), timeout=TIMEOUT_S)
    mine = [(g.group, g.members, list(g.topics)) for g in groups.groups if g.group == stubs.group]
    assert mine == [(stubs.group, 1, [stubs.topic])]
    described = stubs.admin.DescribeGroup(
        api_pb2.DescribeGroupRequest(group=stubs.group), timeout=TIMEOUT_S
    )
    assert [m.member_id for m in described.members] == [joined.member_id]
    assert sum(p.lag for p in described.partitions) == 2
    assert {p.member_id for p in described.partitions} == {joined.member_id}
    error = typed(stubs.admin.DescribeGroup, api_pb2.DescribeGroupRequest(group="nope"))
    assert isinstance(error, errors.UnknownGroup)


# --- producing and reading the log ------------------------------------------------------------


def test_send_then_fetch_and_list_offsets(stubs: Stubs) -> None:
    create(stubs, partitions=1)
    response = send(stubs, stubs.topic, b"a", b"b", b"c")
    assert [(r.partition, r.offset, r.error) for r in response.results] == [
        (0, 0, ErrorCode.OK),
        (0, 1, ErrorCode.OK),
        (0, 2, ErrorCode.OK),
    ]
    fetched = stubs.log.Fetch(
        api_pb2.FetchRequest(topic=stubs.topic, partition=0, offset=1, max_records=10),
        timeout=TIMEOUT_S,
    )
    assert [(r.offset, r.record.value) for r in fetched.records] == [(1, b"b"), (2, b"c")]
    assert (fetched.log_start, fetched.end) == (0, 3)
    offsets = stubs.log.ListOffsets(
        api_pb2.ListOffsetsRequest(topic=stubs.topic), timeout=TIMEOUT_S
    )
    assert [(p.partition, p.log_start, p.end) for p in offsets.partitions] == [(0, 0, 3)]


def test_keyed_records_go_to_the_murmur2_partition_and_unkeyed_ones_spread(stubs: Stubs) -> None:
    create(stubs, partitions=4)
    keys = [f"key-{i}".encode() for i in range(20)]
    records = [common_pb2.Record(key=k, value=b"v") for k in keys]
    response = stubs.producer.Send(
        api_pb2.SendRequest(topic=stubs.topic, records=records), timeout=TIMEOUT_S
    )
    assert [r.partition for r in response.results] == [partition_for(k, 4, 0) for k in keys]
    # Without keys, a request's records stay together (Kafka's sticky partitioner) and each
    # request goes to the next partition.
    batches = [send(stubs, stubs.topic, b"x", b"y").results for _ in range(4)]
    assert all(len({r.partition for r in results}) == 1 for results in batches)
    assert sorted(results[0].partition for results in batches) == [0, 1, 2, 3]


def test_send_to_an_unknown_topic_is_not_found_with_the_catalogue_code(stubs: Stubs) -> None:
    request = api_pb2.SendRequest(topic="nope", records=[common_pb2.Record(value=b"x")])
    with pytest.raises(grpc.RpcError) as info:
        stubs.producer.Send(request, timeout=TIMEOUT_S)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    metadata = dict(info.value.trailing_metadata())
    assert metadata["raftq-code"] == str(ErrorCode.UNKNOWN_TOPIC)
    assert metadata["raftq-retriable"] == "false"
    assert isinstance(grpc_errors.from_rpc_error(info.value), errors.UnknownTopic)


def test_a_record_over_max_record_bytes_fails_alone(stubs: Stubs) -> None:
    create(stubs, partitions=1, max_record_bytes=100)
    response = send(stubs, stubs.topic, b"small", b"x" * 101, b"fine", partition=0)
    codes = [r.error for r in response.results]
    assert codes == [ErrorCode.OK, ErrorCode.RECORD_TOO_LARGE, ErrorCode.OK]
    assert "max_record_bytes" in response.results[1].message
    assert [r.offset for r in response.results if r.error == ErrorCode.OK] == [0, 1]


@pytest.mark.parametrize(
    ("kw", "fix"),
    [
        ({"partition": -1}, "partition is -1"),
        ({"producer_id": "p"}, "producer_id needs partition and sequence"),
        ({"sequence": 3}, "sequence without producer_id"),
    ],
)
def test_bad_send_requests_are_invalid_argument(stubs: Stubs, kw: dict[str, Any], fix: str) -> None:
    create(stubs)
    request = api_pb2.SendRequest(topic=stubs.topic, records=[common_pb2.Record(value=b"x")], **kw)
    error = typed(stubs.producer.Send, request)
    assert isinstance(error, errors.InvalidArgument) and fix in error.message
    empty = typed(stubs.producer.Send, api_pb2.SendRequest(topic=stubs.topic))
    assert "number of records is 0" in empty.message


def test_idempotent_send_answers_a_retried_batch_with_its_original_offsets(stubs: Stubs) -> None:
    create(stubs, partitions=2)
    first = send(stubs, stubs.topic, b"a", b"b", partition=1, producer_id="p1", sequence=0)
    again = send(stubs, stubs.topic, b"a", b"b", partition=1, producer_id="p1", sequence=0)
    assert [r.offset for r in again.results] == [r.offset for r in first.results] == [0, 1]
    assert all(r.duplicate for r in again.results)
    gap = send(stubs, stubs.topic, b"c", partition=1, producer_id="p1", sequence=5)
    assert gap.results[0].error == ErrorCode.OUT_OF_ORDER_SEQUENCE


def test_send_stream_answers_each_request_with_its_id_and_errors_in_band(stubs: Stubs) -> None:
    create(stubs, partitions=1)
    requests = [
        api_pb2.SendRequest(
            topic=stubs.topic, records=[common_pb2.Record(value=b"a")], request_id=1
        ),
        api_pb2.SendRequest(topic="nope", records=[common_pb2.Record(value=b"b")], request_id=2),
        api_pb2.SendRequest(
            topic=stubs.topic, records=[common_pb2.Record(value=b"c")], request_id=3
        ),
    ]
    # Requests in flight together may be answered in any order: request_id correlates them.
    answers = list(stubs.producer.SendStream(iter(requests), timeout=TIMEOUT_S))
    responses = sorted(answers, key=lambda r: r.request_id)
    assert [(r.request_id, r.error) for r in responses] == [
        (1, ErrorCode.OK),
        (2, ErrorCode.UNKNOWN_TOPIC),
        (3, ErrorCode.OK),
    ]
    assert sorted(r.results[0].offset for r in (responses[0], responses[2])) == [0, 1]


def test_update_and_cancel_record(stubs: Stubs) -> None:
    create(stubs, partitions=1)
    send(stubs, stubs.topic, b"a", b"b")
    stubs.admin.UpdateRecord(
        api_pb2.UpdateRecordRequest(topic=stubs.topic, partition=0, offset=0, priority=7),
        timeout=TIMEOUT_S,
    )
    stubs.admin.CancelRecord(
        api_pb2.CancelRecordRequest(topic=stubs.topic, partition=0, offset=1), timeout=TIMEOUT_S
    )
    fetched = stubs.log.Fetch(
        api_pb2.FetchRequest(topic=stubs.topic, partition=0, offset=0, max_records=10),
        timeout=TIMEOUT_S,
    )
    assert [(r.offset, r.record.priority) for r in fetched.records] == [(0, 7)]
    missing = api_pb2.CancelRecordRequest(topic=stubs.topic, partition=0, offset=1)
    assert isinstance(typed(stubs.admin.CancelRecord, missing), errors.RecordNotFound)
    no_field = api_pb2.UpdateRecordRequest(topic=stubs.topic, partition=0, offset=0)
    assert (
        "set priority, deliver_at_ms or both" in typed(stubs.admin.UpdateRecord, no_field).message
    )
    bad_partition = api_pb2.FetchRequest(topic=stubs.topic, partition=5, offset=0, max_records=1)
    assert isinstance(typed(stubs.log.Fetch, bad_partition), errors.UnknownPartition)


# --- consuming -------------------------------------------------------------------------------


def refs(records: Any) -> list[api_pb2.RecordRef]:
    return [
        api_pb2.RecordRef(
            topic=r.topic, partition=r.partition, offset=r.offset, delivery_count=r.delivery_count
        )
        for r in records
    ]


def test_join_poll_ack_nack_extend_heartbeat_leave(stubs: Stubs) -> None:
    create(stubs, partitions=1)
    send(stubs, stubs.topic, b"a", b"b", b"c")
    joined = join(stubs)
    assert [(a.topic, list(a.partitions)) for a in joined.assignment] == [(stubs.topic, [0])]
    member = {"group": stubs.group, "member_id": joined.member_id, "generation": joined.generation}
    polled = stubs.consumer.Poll(
        api_pb2.PollRequest(max_records=3, max_wait_ms=0, lease_ms=60_000, **member),
        timeout=TIMEOUT_S,
    )
    assert [(r.offset, r.record.value, r.delivery_count) for r in polled.records] == [
        (0, b"a", 1),
        (1, b"b", 1),
        (2, b"c", 1),
    ]
    assert all(r.lease_deadline_ms > 0 for r in polled.records)
    a, b, c = refs(polled.records)
    acked = stubs.consumer.Ack(api_pb2.AckRequest(refs=[a], **member), timeout=TIMEOUT_S)
    assert [r.error for r in acked.results] == [ErrorCode.OK]
    again = stubs.consumer.Ack(api_pb2.AckRequest(refs=[a], **member), timeout=TIMEOUT_S)
    assert again.results[0].error == ErrorCode.OK  # acks are idempotent (a retried ack)
    assert "already acknowledged" in again.results[0].message
    extended = stubs.consumer.ExtendLease(
        api_pb2.ExtendLeaseRequest(refs=[c], lease_ms=120_000, **member), timeout=TIMEOUT_S
    )
    assert extended.results[0].error == ErrorCode.OK
    assert extended.results[0].lease_deadline_ms > polled.records[2].lease_deadline_ms
    nacked = stubs.consumer.Nack(
        api_pb2.NackRequest(refs=[b], delay_ms=0, **member), timeout=TIMEOUT_S
    )
    assert nacked.results[0].error == ErrorCode.OK
    redelivered = stubs.consumer.Poll(
        api_pb2.PollRequest(max_records=10, max_wait_ms=2000, **member), timeout=TIMEOUT_S
    )
    assert [(r.offset, r.delivery_count) for r in redelivered.records] == [(1, 2)]
    stale_ack = stubs.consumer.Ack(api_pb2.AckRequest(refs=[b], **member), timeout=TIMEOUT_S)
    assert stale_ack.results[0].error == ErrorCode.LEASE_EXPIRED
    beat = stubs.consumer.Heartbeat(api_pb2.HeartbeatRequest(**member), timeout=TIMEOUT_S)
    assert beat.generation == joined.generation
    stubs.consumer.LeaveGroup(
        api_pb2.LeaveGroupRequest(group=stubs.group, member_id=joined.member_id), timeout=TIMEOUT_S
    )
    gone = typed(stubs.consumer.Heartbeat, api_pb2.HeartbeatRequest(**member))
    assert isinstance(gone, errors.UnknownMember)


def test_a_compact_poll_answers_per_partition_batches(stubs: Stubs) -> None:
    create(stubs, partitions=2)
    send(stubs, stubs.topic, b"a", b"b", partition=0)
    send(stubs, stubs.topic, b"c", partition=1)
    joined = join(stubs)
    member = {"group": stubs.group, "member_id": joined.member_id, "generation": joined.generation}
    polled = stubs.consumer.Poll(
        api_pb2.PollRequest(max_records=10, max_wait_ms=0, compact=True, **member),
        timeout=TIMEOUT_S,
    )
    assert not polled.records
    got = {
        (b.topic, b.partition): [
            (d.record.offset, d.record.record.value, d.delivery_count) for d in b.deliveries
        ]
        for b in polled.batches
    }
    assert got == {(stubs.topic, 0): [(0, b"a", 1), (1, b"b", 1)], (stubs.topic, 1): [(0, b"c", 1)]}
    assert all(d.lease_deadline_ms > 0 for b in polled.batches for d in b.deliveries)


def test_a_compact_ack_answers_only_the_refs_that_failed(stubs: Stubs) -> None:
    create(stubs, partitions=1)
    send(stubs, stubs.topic, b"a", b"b", b"c")
    joined = join(stubs)
    member = {"group": stubs.group, "member_id": joined.member_id, "generation": joined.generation}
    polled = stubs.consumer.Poll(
        api_pb2.PollRequest(max_records=3, max_wait_ms=0, **member), timeout=TIMEOUT_S
    )
    assert [r.offset for r in polled.records] == [0, 1, 2]
    packed = api_pb2.PartitionRefs(
        topic=stubs.topic, partition=0, offsets=[0, 1, 2], delivery_counts=[1, 2, 1]
    )
    acked = stubs.consumer.Ack(api_pb2.AckRequest(batches=[packed], **member), timeout=TIMEOUT_S)
    assert not acked.results
    assert [(f.ref.offset, f.ref.delivery_count, f.error) for f in acked.failed] == [
        (1, 2, ErrorCode.LEASE_EXPIRED)  # delivery 2 of offset 1 never happened
    ]
    lag = stubs.admin.DescribeGroup(
        api_pb2.DescribeGroupRequest(group=stubs.group), timeout=TIMEOUT_S
    )
    assert [(p.committed, p.pending) for p in lag.partitions] == [(1, 1)]  # 0 and 2 acked
    foreign = api_pb2.PartitionRefs(
        topic=stubs.topic, partition=5, offsets=[7], delivery_counts=[1]
    )
    fenced = stubs.consumer.Ack(api_pb2.AckRequest(batches=[foreign], **member), timeout=TIMEOUT_S)
    assert [(f.ref.partition, f.ref.offset, f.error) for f in fenced.failed] == [
        (5, 7, ErrorCode.FENCED)
    ]


def test_a_stale_generation_is_fenced_and_rejoin_recovers(stubs: Stubs) -> None:
    create(stubs, partitions=2)
    first = join(stubs)
    second = join(stubs)  # a second member: rebalance, new generation
    assert second.generation == first.generation + 1
    stale = {"group": stubs.group, "member_id": first.member_id, "generation": first.generation}
    fenced = typed(stubs.consumer.Heartbeat, api_pb2.HeartbeatRequest(**stale))
    assert isinstance(fenced, errors.Fenced) and not fenced.retriable
    poll = api_pb2.PollRequest(max_records=1, **stale)
    assert isinstance(typed(stubs.consumer.Poll, poll), errors.Fenced)
    rejoined = stubs.consumer.JoinGroup(
        api_pb2.JoinGroupRequest(
            group=stubs.group, topics=[stubs.topic], member_id=first.member_id
        ),
        timeout=TIMEOUT_S,
    )
    assert rejoined.generation == second.generation  # the same member: no rebalance
    assert len(rejoined.assignment[0].partitions) == 1


def test_poll_long_polls_until_a_record_arrives(stubs: Stubs) -> None:
    create(stubs, partitions=1)
    joined = join(stubs)
    future = stubs.consumer.Poll.future(
        api_pb2.PollRequest(
            group=stubs.group,
            member_id=joined.member_id,
            generation=joined.generation,
            max_records=5,
            max_wait_ms=10_000,
        ),
        timeout=TIMEOUT_S,
    )
    send(stubs, stubs.topic, b"late")
    assert [r.record.value for r in future.result().records] == [b"late"]


def test_bad_consumer_requests_say_what_to_fix(stubs: Stubs) -> None:
    create(stubs)
    cases: list[tuple[Any, Any, str]] = [
        (
            stubs.consumer.JoinGroup,
            api_pb2.JoinGroupRequest(topics=[stubs.topic]),
            "group is empty",
        ),
        (
            stubs.consumer.JoinGroup,
            api_pb2.JoinGroupRequest(group=stubs.group),
            "number of topics is 0",
        ),
        (
            stubs.consumer.Poll,
            api_pb2.PollRequest(group=stubs.group, member_id="m", max_records=-1),
            "max_records is -1",
        ),
        (
            stubs.consumer.Ack,
            api_pb2.AckRequest(group=stubs.group, member_id="m"),
            "number of refs is 0",
        ),
        (
            stubs.consumer.ExtendLease,
            api_pb2.ExtendLeaseRequest(
                group=stubs.group,
                member_id="m",
                refs=[api_pb2.RecordRef(topic=stubs.topic, delivery_count=1)],
                lease_ms=0,
            ),
            "lease_ms is 0",
        ),
    ]

    def batch(**kw: Any) -> api_pb2.AckRequest:
        base: dict[str, Any] = {"topic": stubs.topic, "offsets": [0], "delivery_counts": [1]}
        base.update(kw)
        return api_pb2.AckRequest(
            group=stubs.group, member_id="m", batches=[api_pb2.PartitionRefs(**base)]
        )

    cases += [
        (stubs.consumer.Ack, batch(delivery_counts=[1, 1]), "as long as offsets"),
        (stubs.consumer.Ack, batch(offsets=[3, -1], delivery_counts=[1, 1]), "offsets is -1"),
        (stubs.consumer.Ack, batch(delivery_counts=[0]), "delivery_counts is 0"),
        (stubs.consumer.Ack, batch(topic=""), "topic"),
        (stubs.consumer.Ack, batch(offsets=[], delivery_counts=[]), "number of refs is 0"),
    ]
    both = batch()
    both.refs.add(topic=stubs.topic, offset=0, delivery_count=1)
    cases.append((stubs.consumer.Ack, both, "refs or batches, not both"))
    for call, request, fix in cases:
        error = typed(call, request)
        assert isinstance(error, errors.InvalidArgument) and fix in error.message, fix
    # A topic that does not exist yet may be subscribed to (Kafka does the same): nothing is
    # assigned until it is created.
    missing = unique_name("not-yet")
    joined = stubs.consumer.JoinGroup(
        api_pb2.JoinGroupRequest(group=stubs.group, topics=[missing]), timeout=TIMEOUT_S
    )
    assert joined.member_id and not [p for a in joined.assignment for p in a.partitions]


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative: two's complement in ten bytes, as protobuf sends it
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _with_varint(message: Any, number: int, value: int) -> bytes:
    """``message``'s bytes with varint field ``number`` set to ``value`` (which may be wider
    than the field: what a hand-made or foreign client can put on the wire)."""
    return bytes(message.SerializeToString()) + _varint(number << 3) + _varint(value)


def _raw_call(stubs: Stubs, path: str, payload: bytes) -> errors.RaftqError | None:
    try:
        stubs.channel.unary_unary(path)(payload, timeout=TIMEOUT_S)
    except grpc.RpcError as exc:
        return grpc_errors.from_rpc_error(exc)
    return None


def test_integers_wider_than_their_field_are_invalid_argument_and_change_nothing(
    stubs: Stubs,
) -> None:
    """2**40 as an int32 partition parsed as 0 and was written there; now every int32, uint32
    and enum field of every request is range-checked on the wire bytes."""
    create(stubs, partitions=1)
    send_path = "/raftq.v1.Producer/Send"
    values = api_pb2.SendRequest(topic=stubs.topic, values=[b"v"])
    for partition in (2**40, 2**32, 2**31, -(2**31) - 1, -(2**40)):
        error = _raw_call(stubs, send_path, _with_varint(values, 3, partition))
        assert isinstance(error, errors.InvalidArgument), (partition, error)
        assert f"partition is {partition}; it must be -2147483648..2147483647" in error.message
    body = _with_varint(common_pb2.Record(value=b"r"), 4, 2**33)  # priority: int32
    head = api_pb2.SendRequest(topic=stubs.topic, partition=0).SerializeToString()
    fine = common_pb2.Record(value=b"ok", priority=2**31 - 1).SerializeToString()
    wide_priority = bytes(head)
    for record in (fine, body, fine):  # the second of three is out of range
        wide_priority += _varint(2 << 3 | 2) + _varint(len(record)) + record
    error = _raw_call(stubs, send_path, wide_priority)
    assert isinstance(error, errors.InvalidArgument) and "records[1].priority is 8589934592" in (
        error.message
    )
    fetch = api_pb2.FetchRequest(topic=stubs.topic, max_records=10)
    error = _raw_call(stubs, "/raftq.v1.Log/Fetch", _with_varint(fetch, 2, 2**40))
    assert isinstance(error, errors.InvalidArgument) and "partition is 1099511627776" in (
        error.message
    )
    # at the limits: in range on the wire, then judged by the servicer and the facade
    assert _raw_call(stubs, send_path, _with_varint(values, 3, 0)) is None
    at_max = _raw_call(stubs, send_path, _with_varint(values, 3, 2**31 - 1))
    assert at_max is not None and "it must be -2147483648" not in at_max.message
    minus_one = _raw_call(stubs, send_path, _with_varint(values, 3, -1))
    assert isinstance(minus_one, errors.InvalidArgument) and "partition is -1" in minus_one.message
    # streams too: a PollStream credit of 2**31 is refused, not read as -2**31
    credit = _varint(2 << 3 | 2) + _varint(6) + _varint(1 << 3) + _varint(2**31)
    with pytest.raises(grpc.RpcError) as caught:
        for _ in stubs.channel.stream_stream("/raftq.v1.Consumer/PollStream")(
            iter([credit]), timeout=TIMEOUT_S
        ):
            pass
    error = grpc_errors.from_rpc_error(caught.value)
    assert isinstance(error, errors.InvalidArgument) and "credit.records is 2147483648" in (
        error.message
    )
    offsets = stubs.log.ListOffsets(
        api_pb2.ListOffsetsRequest(topic=stubs.topic), timeout=TIMEOUT_S
    )
    assert [(p.partition, p.end) for p in offsets.partitions] == [(0, 1)]  # the one at 0 only


def test_group_names_follow_the_topic_name_rule(stubs: Stubs) -> None:
    create(stubs)
    for name in ("..", ".", "g" * 250, "g" * 300, "a/b", "a b"):
        request = api_pb2.JoinGroupRequest(group=name, topics=[stubs.topic])
        error = typed(stubs.consumer.JoinGroup, request)
        assert isinstance(error, errors.InvalidArgument), name
        assert "group" in error.message
    joined = stubs.consumer.JoinGroup(
        api_pb2.JoinGroupRequest(group="g" * 249, topics=[stubs.topic]), timeout=TIMEOUT_S
    )
    assert joined.member_id
    groups = stubs.admin.ListGroups(api_pb2.ListGroupsRequest(), timeout=TIMEOUT_S)
    assert [g.group for g in groups.groups if g.group.startswith("g" * 249)] == ["g" * 249]


def test_every_call_naming_a_group_takes_the_one_group_name_rule(stubs: Stubs) -> None:
    """A name JoinGroup refuses (the metadata machine's rule) is refused InvalidArgument by
    every call naming a group, never looked up (UnknownMember, UnknownGroup); ids take the
    machine's id rule (printable)."""
    create(stubs)
    ref = api_pb2.RecordRef(topic="orders", partition=0, offset=0, delivery_count=1)
    for name in ("..", ".", "a/b", "g" * 250):
        m: dict[str, Any] = {"group": name, "member_id": "m-1", "generation": 1}
        for call, request in (
            (stubs.consumer.Heartbeat, api_pb2.HeartbeatRequest(**m)),
            (stubs.consumer.LeaveGroup, api_pb2.LeaveGroupRequest(group=name, member_id="m-1")),
            (stubs.consumer.Poll, api_pb2.PollRequest(**m, max_records=1)),
            (stubs.consumer.Ack, api_pb2.AckRequest(**m, refs=[ref])),
            (stubs.consumer.Nack, api_pb2.NackRequest(**m, refs=[ref])),
            (stubs.consumer.ExtendLease, api_pb2.ExtendLeaseRequest(**m, refs=[ref])),
            (stubs.admin.DescribeGroup, api_pb2.DescribeGroupRequest(group=name)),
            (stubs.admin.DeleteGroup, api_pb2.DeleteGroupRequest(group=name)),
            (stubs.admin.SeekGroup, api_pb2.SeekGroupRequest(group=name, topic="orders")),
        ):
            error = typed(call, request)
            assert isinstance(error, errors.InvalidArgument), (name, call, error)
            assert "group" in error.message, error.message
    heartbeat = api_pb2.HeartbeatRequest(group="g", member_id="m\x00", generation=1)
    error = typed(stubs.consumer.Heartbeat, heartbeat)
    assert isinstance(error, errors.InvalidArgument) and "member_id" in error.message


def test_poll_stream_delivers_no_more_than_the_credit_granted(stubs: Stubs) -> None:
    create(stubs, partitions=1)
    send(stubs, stubs.topic, *[f"r{i}".encode() for i in range(5)])
    joined = join(stubs)
    outgoing: queue.Queue[api_pb2.PollStreamRequest | None] = queue.Queue()
    start = api_pb2.PollStart(
        group=stubs.group, member_id=joined.member_id, generation=joined.generation
    )
    outgoing.put(api_pb2.PollStreamRequest(start=start))
    outgoing.put(api_pb2.PollStreamRequest(credit=api_pb2.Credit(records=2)))

    def requests() -> Iterator[api_pb2.PollStreamRequest]:
        while (item := outgoing.get()) is not None:
            yield item

    stream = stubs.consumer.PollStream(requests(), timeout=TIMEOUT_S)
    got = list(next(stream).records)
    while len(got) < 2:
        got += next(stream).records
    assert [r.offset for r in got] == [0, 1]  # credit 2: the other three wait
    outgoing.put(api_pb2.PollStreamRequest(credit=api_pb2.Credit(records=10)))
    while len(got) < 5:
        got += next(stream).records
    assert [r.offset for r in got] == [0, 1, 2, 3, 4]
    outgoing.put(None)  # half-close: the server ends the stream
    assert list(stream) == []


# --- the error mapping, for every catalogue entry, over the wire ----------------------------


class RaisingFacade:
    """Answers DescribeCluster with a given error (everything else is not needed here)."""

    def __init__(self) -> None:
        self.error: Exception = errors.Internal("unset")

    def describe_cluster(self, request: Any, *, timeout_s: float | None) -> Any:
        raise self.error


@pytest.fixture(scope="module")
def raising() -> Iterator[tuple[RaisingFacade, Any]]:
    facade = RaisingFacade()
    address = f"127.0.0.1:{free_port()}"
    server = serve(facade, address, max_workers=4)  # type: ignore[arg-type]
    try:
        with grpc.insecure_channel(address) as channel:
            yield facade, api_pb2_grpc.AdminStub(channel)
    finally:
        server.stop(None).wait(5)


@pytest.mark.parametrize("code", sorted(errors.CATALOGUE), ids=lambda c: errors.CATALOGUE[c].name)
def test_every_catalogue_error_round_trips_over_grpc(
    raising: tuple[RaisingFacade, Any], code: int
) -> None:
    facade, admin = raising
    facade.error = errors.error_for(code, "what happened: é", leader_hint="10.0.0.7:7070")
    with pytest.raises(grpc.RpcError) as info:
        admin.DescribeCluster(api_pb2.DescribeClusterRequest(), timeout=TIMEOUT_S)
    kind = errors.CATALOGUE[code]
    assert info.value.code() == getattr(grpc.StatusCode, kind.grpc_status)
    back = grpc_errors.from_rpc_error(info.value)
    assert type(back) is errors.error_class(code)
    assert (back.code, back.retriable, back.message) == (code, kind.retriable, "what happened: é")
    assert back.leader_hint == "10.0.0.7:7070"


def test_a_bug_in_the_facade_is_internal_and_the_server_survives(
    raising: tuple[RaisingFacade, Any],
) -> None:
    facade, admin = raising
    facade.error = ZeroDivisionError("oops")
    with pytest.raises(grpc.RpcError) as info:
        admin.DescribeCluster(api_pb2.DescribeClusterRequest(), timeout=TIMEOUT_S)
    back = grpc_errors.from_rpc_error(info.value)
    assert isinstance(back, errors.Internal) and "ZeroDivisionError" in back.message


class _FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "") -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[()]:
        return ()


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (grpc.StatusCode.UNAVAILABLE, errors.Unavailable),
        (grpc.StatusCode.DEADLINE_EXCEEDED, errors.Unavailable),
        (grpc.StatusCode.UNAUTHENTICATED, errors.Unauthenticated),
        (grpc.StatusCode.PERMISSION_DENIED, errors.PermissionDenied),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, errors.Internal),
        (grpc.StatusCode.UNKNOWN, errors.Internal),
    ],
)
def test_a_status_without_raftq_metadata_maps_by_status(
    status: grpc.StatusCode, expected: type[errors.RaftqError]
) -> None:
    error = grpc_errors.from_rpc_error(_FakeRpcError(status, "connection refused"))
    assert type(error) is expected and status.name in error.message


def test_a_dead_address_is_unavailable_and_retriable() -> None:
    with grpc.insecure_channel(f"127.0.0.1:{free_port()}") as channel:
        admin = api_pb2_grpc.AdminStub(channel)
        error = typed(admin.ListTopics, api_pb2.ListTopicsRequest())
    assert isinstance(error, errors.Unavailable) and error.retriable
