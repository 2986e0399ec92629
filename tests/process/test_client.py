"""The Python client against one real broker in this process (raftq.server.Broker on
127.0.0.1, for the module), written against the client API only. Where routing, batching or
retries are the point, tests/wiretap.py on the broker's client port says what the broker was
asked and injects the fault (an answer lost, a send stalled). Each test names its own topic and
group. The routing tests run three brokers.
"""

from __future__ import annotations

import itertools
import pickle
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from raftq.assignors.partitioner import partition_for
from raftq.client import Admin, Consumer, Message, Producer, RecordMetadata, parse_bootstrap
from raftq.proto import api_pb2, api_pb2_grpc, errors
from tests.cluster import make_cluster
from tests.helpers import free_port, unique_name, wait_until
from tests.wiretap import Wiretap

WAIT_S = 10
# Short sessions are allowed here (the heartbeat test uses 300 ms).
BROKER_ENV = {
    "RAFTQ_GROUPS__SESSION_TIMEOUT_MIN_MS": "100",
    "RAFTQ_GROUPS__HEARTBEAT_INTERVAL_MS": "50",
}


@dataclass
class Solo:
    address: str
    tap: Wiretap


@pytest.fixture(scope="module")
def solo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Solo]:
    tap = Wiretap()
    root = tmp_path_factory.mktemp("broker")
    with make_cluster(root, env=BROKER_ENV, interceptors=[tap]) as cluster:
        cluster.wait_ready()
        yield Solo(cluster.client_addr(1), tap)


@pytest.fixture
def server(solo: Solo) -> Iterator[Solo]:
    solo.tap.reset()
    yield solo
    solo.tap.reset()


@pytest.fixture
def topic() -> str:
    return unique_name("orders")


@pytest.fixture
def group() -> str:
    return unique_name("g")


@pytest.fixture
def admin(server: Solo) -> Iterator[Admin]:
    with Admin(server.address) as client:
        yield client


# --- Admin ----------------------------------------------------------------------------------


def names(admin: Admin) -> set[str]:
    return {t.name for t in admin.list_topics()}


def test_admin_topic_calls_and_log_reads(admin: Admin, server: Solo, topic: str) -> None:
    created = admin.create_topic(topic, partitions=2, ordering="priority", lease_ms=5000)
    assert len(created.partitions) == 2 and created.config.lease_ms == 5000
    assert topic in names(admin)
    assert admin.alter_topic_config(topic, max_deliveries=3).config.max_deliveries == 3
    assert admin.describe_topic(topic).config.max_deliveries == 3
    with Producer(server.address, linger_ms=0) as producer:
        producer.send(topic, b"a", partition=1).result(WAIT_S)
    assert [(p.partition, p.end) for p in admin.list_offsets(topic)] == [(0, 0), (1, 1)]
    fetched = admin.fetch(topic, 1, 0)
    assert [r.value for r in fetched.records] == [b"a"]
    admin.update_record(topic, 1, 0, priority=3)
    admin.cancel_record(topic, 1, 0)
    assert admin.fetch(topic, 1, 0).records == ()
    assert admin.describe_cluster().health == "HEALTHY"
    admin.delete_topic(topic)
    with pytest.raises(errors.UnknownTopic):
        admin.describe_topic(topic)
    with pytest.raises(errors.InvalidArgument, match="no topic setting 'lease'"):
        admin.create_topic("x", lease=1)


def test_bootstrap_skips_brokers_that_do_not_answer(server: Solo, topic: str) -> None:
    dead = f"127.0.0.1:{free_port()}"
    with Admin(f"{dead},{server.address}", request_timeout_ms=2000) as admin:
        admin.create_topic(topic, partitions=1)
        assert topic in names(admin)
    with Admin(dead, request_timeout_ms=2000) as only_dead, pytest.raises(errors.Unavailable):
        only_dead.list_topics()


def test_parse_bootstrap() -> None:
    assert parse_bootstrap(" a:1, b:2 ,") == ("a:1", "b:2")
    for bad in ("", "nohost", "a:port"):
        with pytest.raises(errors.InvalidArgument):
            parse_bootstrap(bad)


def test_admin_pickles_without_channels_and_live_clients_refuse(
    server: Solo, admin: Admin, topic: str
) -> None:
    admin.create_topic(topic, partitions=1)
    copy = pickle.loads(pickle.dumps(admin))
    assert topic in names(copy)
    copy.close()
    with Producer(server.address) as producer, pytest.raises(TypeError, match="where it is used"):
        pickle.dumps(producer)


# --- Producer -------------------------------------------------------------------------------


def sends(tap: Wiretap, topic: str) -> int:
    """Send requests the broker received for ``topic`` (a SendStream's messages too)."""
    return len(tap.requests("Send", lambda r: r.topic == topic))


def shapes(tap: Wiretap, topic: str) -> list[tuple[int, int]]:
    """(values, records) of each Send request for ``topic``."""
    return [
        (len(r.values), len(r.records)) for r in tap.requests("Send", lambda r: r.topic == topic)
    ]


def test_records_wait_for_linger_then_flush_sends_one_batch(
    admin: Admin, server: Solo, topic: str
) -> None:
    admin.create_topic(topic, partitions=1)
    with Producer(server.address, linger_ms=60_000) as producer:
        futures = [producer.send(topic, f"r{i}".encode()) for i in range(10)]
        assert not any(f.done() for f in futures)  # lingering: a minute, unless flushed
        assert sends(server.tap, topic) == 0
        producer.flush(WAIT_S)
        assert all(f.done() for f in futures)
        assert [f.result().offset for f in futures] == list(range(10))
        assert sends(server.tap, topic) == 1


def test_full_batches_go_without_waiting_for_linger(admin: Admin, server: Solo, topic: str) -> None:
    admin.create_topic(topic, partitions=1)
    with Producer(server.address, linger_ms=60_000, batch_records_max=4) as producer:
        futures = [producer.send(topic, b"x") for _ in range(8)]
        results = [f.result(WAIT_S) for f in futures]  # two full batches: no flush needed
        assert [r.offset for r in results] == list(range(8))
        late = producer.send(topic, b"y")
        producer.flush(WAIT_S)
        assert late.result().offset == 8
    assert sends(server.tap, topic) == 3


def test_keys_pick_the_murmur2_partition_and_metadata_is_returned(
    admin: Admin, server: Solo, topic: str
) -> None:
    admin.create_topic(topic, partitions=5)
    with Producer(server.address, linger_ms=1) as producer:
        futures = {k: producer.send(topic, b"v", key=k) for k in (b"a", b"b", b"c", b"dd")}
        producer.flush(WAIT_S)
    for key, future in futures.items():
        meta = future.result()
        assert isinstance(meta, RecordMetadata) and meta.topic == topic
        assert meta.partition == partition_for(key, 5, 0)


def test_send_failures_arrive_on_the_future_typed(admin: Admin, server: Solo, topic: str) -> None:
    admin.create_topic(topic, partitions=2, max_record_bytes=64)
    with Producer(server.address, linger_ms=0) as producer:
        with pytest.raises(errors.UnknownTopic):
            producer.send("nope", b"x").result(WAIT_S)
        with pytest.raises(errors.RecordTooLarge, match="max_record_bytes"):
            producer.send(topic, b"x" * 65).result(WAIT_S)
        with pytest.raises(errors.UnknownPartition):
            producer.send(topic, b"x", partition=2).result(WAIT_S)
        ok = producer.send(topic, b"fine", headers={"h": b"1"}, priority=2, partition=0)
        assert ok.result(WAIT_S).offset == 0
    stored = admin.fetch(topic, 0, 0).records[0]
    assert (stored.value, dict(stored.headers), stored.priority) == (b"fine", {"h": b"1"}, 2)
    with pytest.raises(RuntimeError, match="after close"):
        producer.send(topic, b"x")


def test_a_send_stream_answers_each_request_as_it_completes(
    admin: Admin, server: Solo, topic: str
) -> None:
    slow, fast = f"{topic}-slow", f"{topic}-fast"
    admin.create_topic(slow, partitions=1)
    admin.create_topic(fast, partitions=1)
    gate = server.tap.stall(slow)
    requests: queue.SimpleQueue[api_pb2.SendRequest | None] = queue.SimpleQueue()
    with grpc.insecure_channel(server.address) as channel:
        answers = api_pb2_grpc.ProducerStub(channel).SendStream(iter(requests.get, None))
        requests.put(api_pb2.SendRequest(topic=slow, values=[b"s"], request_id=1))
        requests.put(api_pb2.SendRequest(topic=fast, values=[b"f"], request_id=2))
        assert next(answers).request_id == 2  # not held behind the stalled one
        gate.set()
        assert next(answers).request_id == 1
        requests.put(None)
        assert list(answers) == []


def test_an_unanswered_stream_send_times_out_and_its_retry_writes_once(
    admin: Admin, server: Solo, topic: str
) -> None:
    admin.create_topic(topic, partitions=1)
    gate = server.tap.stall(topic)
    with Producer(server.address, linger_ms=0, request_timeout_ms=500, retries=1) as producer:
        sent = producer.send(topic, b"a").result(WAIT_S)  # the retry's answer
        gate.set()  # the stalled first attempt now reaches the broker: a duplicate
        assert (sent.offset, sent.duplicate) == (0, False)
        after = producer.send(topic, b"b").result(WAIT_S)
    assert after.offset == 1  # "a" was written once
    assert sends(server.tap, topic) == 3


def test_a_broker_out_of_send_streams_is_sent_unary(tmp_path: Any) -> None:
    env = {**BROKER_ENV, "RAFTQ_CAPACITY__SEND_STREAMS_MAX": "1"}  # room for one send stream
    with make_cluster(tmp_path, env=env) as cluster:
        cluster.wait_ready()
        address = cluster.client_addr(1)
        cluster.admin().create_topic("orders", partitions=1)
        requests: queue.SimpleQueue[api_pb2.SendRequest | None] = queue.SimpleQueue()
        with grpc.insecure_channel(address) as channel:
            stub = api_pb2_grpc.ProducerStub(channel)
            held = stub.SendStream(iter(requests.get, None))  # takes the one stream slot
            requests.put(api_pb2.SendRequest(topic="orders", values=[b"x"], request_id=1))
            assert next(held).request_id == 1
            with pytest.raises(grpc.RpcError) as refused:
                next(stub.SendStream(iter([api_pb2.SendRequest(topic="orders", values=[b"y"])])))
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            with Producer(address, linger_ms=0) as producer:
                sent = [producer.send("orders", b"v%d" % i).result(WAIT_S) for i in range(3)]
            assert [m.offset for m in sent] == [1, 2, 3]
            requests.put(None)


def test_a_retried_batch_keeps_its_sequence_so_nothing_is_written_twice(
    admin: Admin, server: Solo, topic: str
) -> None:
    admin.create_topic(topic, partitions=1)
    server.tap.lose_answers(2)
    with Producer(server.address, linger_ms=0) as producer:
        first = producer.send(topic, b"a").result(WAIT_S)
        second = producer.send(topic, b"b").result(WAIT_S)
    assert (first.offset, first.duplicate, second.offset) == (0, True, 1)
    assert sends(server.tap, topic) == 4  # a, a again, a again (answered from dedup state), b
    assert [p.end for p in admin.list_offsets(topic)] == [2]


def test_without_idempotence_a_retry_duplicates(admin: Admin, server: Solo, topic: str) -> None:
    admin.create_topic(topic, partitions=1)
    server.tap.lose_answers(1)
    with Producer(server.address, linger_ms=0, idempotent=False) as producer:
        assert producer.send(topic, b"a").result(WAIT_S).offset == 1
    assert [p.end for p in admin.list_offsets(topic)] == [2]


def test_retries_run_out_then_the_partition_continues_under_a_new_producer_id(
    admin: Admin, server: Solo, topic: str
) -> None:
    admin.create_topic(topic, partitions=1)
    server.tap.lose_answers(2)
    with Producer(server.address, linger_ms=0, retries=1) as producer:
        with pytest.raises(errors.Timeout):
            producer.send(topic, b"a").result(WAIT_S)
        after = producer.send(topic, b"b").result(WAIT_S)
    assert (after.offset, after.duplicate) == (1, False)  # not mistaken for batch "a"


@dataclass
class Trio:
    """Three brokers, each with its own tap; ``journal`` has (broker, method) in call order."""

    addresses: dict[int, str]
    taps: dict[int, Wiretap]
    journal: list[tuple[str, str]]

    def sends(self) -> list[int]:
        return [int(broker) for broker, method in self.journal if method.startswith("Send")]


@pytest.fixture(scope="module")
def trio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trio]:
    journal: list[tuple[str, str]] = []
    taps = {i: Wiretap(str(i), journal) for i in (1, 2, 3)}
    root = tmp_path_factory.mktemp("trio")
    with make_cluster(root, brokers=3, interceptors=lambda i: [taps[i]]) as cluster:
        cluster.wait_ready()
        yield Trio({i: cluster.client_addr(i) for i in (1, 2, 3)}, taps, journal)


def lone_replica(trio: Trio, topic: str) -> tuple[int, int]:
    """Create ``topic`` (one partition, one replica): (its leader, another broker)."""
    with Admin(trio.addresses[1]) as admin:
        created = admin.create_topic(topic, partitions=1, replication_factor=1)
    leader = created.partitions[0].leader
    assert leader in trio.addresses
    for tap in trio.taps.values():
        tap.reset()
    trio.journal.clear()
    return leader, next(b for b in trio.addresses if b != leader)


def test_sends_go_to_the_leader_from_metadata_and_follow_not_leader(trio: Trio, topic: str) -> None:
    leader, other = lone_replica(trio, topic)
    with Producer(trio.addresses[other], linger_ms=0, send_streams=False) as producer:
        producer.send(topic, b"x").result(WAIT_S)
        assert trio.sends() == [leader]
        moved = errors.NotLeader("moved", leader_hint=trio.addresses[other])

        def refuse(_request: Any) -> Any:
            raise moved

        trio.taps[leader].answer("Send", refuse, times=1)  # as if leadership moved to other
        producer.send(topic, b"y", partition=0).result(WAIT_S)
    # other forwarded it to the leader; nothing was written twice
    assert trio.sends() == [leader, leader, other]
    assert "DescribeTopic" in trio.taps[other].methods()  # metadata came through the bootstrap
    with Admin(trio.addresses[leader]) as admin:
        assert [r.value for r in admin.fetch(topic, 0, 0).records] == [b"x", b"y"]


def test_a_forwarded_send_moves_the_next_sends_to_the_leader_it_names(
    trio: Trio, topic: str
) -> None:
    leader, other = lone_replica(trio, topic)

    def stale(_request: Any, described: api_pb2.TopicDescription) -> Any:
        for partition in described.partitions:  # other leads every partition, it says
            partition.leader, partition.leader_addr = other, trio.addresses[other]
        return described

    for tap in trio.taps.values():
        tap.rewrite("DescribeTopic", stale)
    try:
        with Producer(trio.addresses[other], linger_ms=0) as producer:
            first = producer.send(topic, b"x", partition=0).result(WAIT_S)
            second = producer.send(topic, b"y", key=b"k", partition=0).result(WAIT_S)
            many = producer.send_many(topic, [b"v1", b"v2"])
            [m.result(WAIT_S) for m in many]
    finally:
        for tap in trio.taps.values():
            tap.rewrite("DescribeTopic", None)
    assert (first.offset, second.offset) == (0, 1)  # nothing resent
    assert trio.sends() == [other, leader, leader]  # other forwarded the first and named leader


def test_a_poll_answered_away_from_the_leader_moves_polls_and_acks_to_it(
    trio: Trio, topic: str, group: str
) -> None:
    """A broker that leased the records on another broker (the partition's leader) names it
    in the answer (PollResponse.leader_hint), and the member polls and acks there from then
    on: one hop fewer each, and a poll there wakes when records are proposed (issue 16)."""
    leader, other = lone_replica(trio, topic)
    bootstrap = f"{trio.addresses[other]},{trio.addresses[leader]}"
    with Producer(trio.addresses[leader], linger_ms=0) as producer:
        producer.send(topic, b"x", partition=0).result(WAIT_S)
        with Consumer(bootstrap, group, [topic]) as consumer:
            trio.journal.clear()
            first = consumer.poll(1, int(WAIT_S * 1000))
            assert [m.value for m in first] == [b"x"]
            assert [b for b, m in trio.journal if m == "Poll"] == [str(other)]
            consumer.ack(first)
            producer.send(topic, b"y", partition=0).result(WAIT_S)
            second = consumer.poll(1, int(WAIT_S * 1000))
            assert [m.value for m in second] == [b"y"]
            consumer.ack(second)
            calls = [(b, m) for b, m in trio.journal if m in ("Poll", "Ack")]
    assert calls == [(str(other), "Poll")] + [(str(leader), m) for m in ("Ack", "Poll", "Ack")]


def test_concurrent_senders_keep_per_partition_order(
    admin: Admin, server: Solo, topic: str
) -> None:
    admin.create_topic(topic, partitions=3)
    with Producer(server.address, linger_ms=2, batch_records_max=7) as producer:

        def produce(worker: int) -> None:
            for i in range(50):
                producer.send(topic, f"{worker}:{i}".encode(), key=f"w{worker}".encode())

        threads = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        producer.flush(WAIT_S)
        assert producer.statistics()["outstanding_records"] == 0
    seen: dict[str, list[int]] = {}
    for p in range(3):
        for r in admin.fetch(topic, p, 0, max_records=1000).records:
            worker, i = r.value.decode().split(":")
            seen.setdefault(worker, []).append(int(i))
    assert {w: sorted(v) for w, v in seen.items()} == seen  # in send order within each key
    assert sorted(seen) == ["0", "1", "2", "3"] and all(len(v) == 50 for v in seen.values())


def test_bare_records_go_as_values_and_get_dense_offsets(
    admin: Admin, server: Solo, topic: str
) -> None:
    admin.create_topic(topic, partitions=2)
    with Producer(server.address, linger_ms=60_000, batch_records_max=4) as producer:
        futures = [producer.send(topic, b"v%d" % i, partition=1) for i in range(10)]
        producer.flush(WAIT_S)
    assert shapes(server.tap, topic) == [(4, 0), (4, 0), (2, 0)]  # no Record message anywhere
    metas = [f.result(0) for f in futures]
    assert [(m.partition, m.offset, m.duplicate) for m in metas] == [
        (1, i, False) for i in range(10)
    ]
    stored = admin.fetch(topic, 1, 0).records
    assert [r.value for r in stored] == [b"v%d" % i for i in range(10)]


def test_bare_and_full_records_interleaved_keep_their_order(
    admin: Admin, server: Solo, topic: str
) -> None:
    kinds: list[dict[str, Any]] = [
        {},
        {"key": b"k"},
        {},
        {},
        {"headers": {"h": b"1"}},
        {"priority": 3},
        {},
        {"idempotency_key": "once"},
        {"key": b""},  # an empty key is a key
        {},
    ]
    admin.create_topic(topic, partitions=1)
    n = len(kinds)
    with Producer(server.address, linger_ms=60_000) as producer:
        futures = [
            producer.send(topic, b"r%d" % i, partition=0, **kw) for i, kw in enumerate(kinds)
        ]
        producer.flush(WAIT_S)
        assert shapes(server.tap, topic) == [(0, n)]  # mixed: one batch, all records
        # Values queued in bulk, then a keyed record: the values batch becomes records.
        bulk = producer.send_many(topic, [b"m0", b"m1"], partition=0)
        keyed = producer.send(topic, b"m2", key=b"k", partition=0)
        producer.flush(WAIT_S)
        assert shapes(server.tap, topic)[1:] == [(0, 3)]
        # A values batch already sent is not touched: the keyed record starts the next.
        sent = producer.send(topic, b"s0", partition=0)
        producer.flush(WAIT_S)
        after = producer.send(topic, b"s1", key=b"k", partition=0)
        producer.flush(WAIT_S)
        assert shapes(server.tap, topic)[2:] == [(1, 0), (0, 1)]
    done = [*futures, *bulk, keyed, sent, after]
    assert [f.result(0).offset for f in done] == list(range(n + 5))
    stored = list(admin.fetch(topic, 0, 0).records)
    assert [r.value for r in stored] == [b"r%d" % i for i in range(n)] + [
        b"m0",
        b"m1",
        b"m2",
        b"s0",
        b"s1",
    ]
    assert (stored[1].key, dict(stored[4].headers), stored[5].priority) == (
        b"k",
        {"h": b"1"},
        3,
    )
    assert stored[8].key is not None and stored[0].key is None


def test_a_retried_values_batch_is_answered_with_its_original_offsets(
    admin: Admin, server: Solo, topic: str
) -> None:
    admin.create_topic(topic, partitions=1)
    with Producer(server.address, linger_ms=60_000) as producer:
        producer.send(topic, b"first")  # a batch before: the lost one has sequence 1
        producer.flush(WAIT_S)
        server.tap.lose_answers(1)
        futures = [producer.send(topic, b"v%d" % i) for i in range(5)]
        producer.flush(WAIT_S)
        after = producer.send(topic, b"after")
        producer.flush(WAIT_S)
    metas = [f.result(0) for f in futures]
    assert [(m.offset, m.duplicate) for m in metas] == [(1 + i, True) for i in range(5)]
    assert (after.result(0).offset, after.result(0).duplicate) == (6, False)
    assert sends(server.tap, topic) == 4  # first, the batch, the batch again (dedup), after
    assert [p.end for p in admin.list_offsets(topic)] == [7]


def test_a_values_batch_answered_otherwise_than_one_range_fails_internal(
    admin: Admin, server: Solo, topic: str
) -> None:
    """A broker from before SendRequest.values sees no records in a values request and
    answers no results (or, broken otherwise, one result of the wrong count): the client
    fails the batch INTERNAL, never takes it for success and does not retry it."""
    admin.create_topic(topic, partitions=1)
    count = [0]

    def predates_values(request: api_pb2.SendRequest) -> api_pb2.SendResponse:
        if count[0]:
            return api_pb2.SendResponse(results=[api_pb2.SendResult(count=count[0])])
        return api_pb2.SendResponse()

    def values_sends() -> int:
        return len(server.tap.requests("Send", lambda r: r.topic == topic and bool(r.values)))

    server.tap.answer("Send", predates_values, where=lambda r: r.topic == topic and r.values)
    with Producer(server.address, linger_ms=0, send_streams=False) as producer:
        with pytest.raises(errors.Internal, match="0 results"):
            producer.send(topic, b"a").result(WAIT_S)
        assert values_sends() == 1  # not retried, never taken for success
        count[0] = 2
        with pytest.raises(errors.Internal, match="range of 2 records for 1"):
            producer.send(topic, b"b").result(WAIT_S)
        keyed = producer.send(topic, b"c", key=b"k").result(WAIT_S)
    assert keyed.offset == 0  # the records path is unaffected; nothing else was written


def test_send_many_spreads_values_round_robin_in_batches(
    admin: Admin, server: Solo, topic: str
) -> None:
    admin.create_topic(topic, partitions=3)
    values = [b"m%d" % i for i in range(50)]
    with Producer(server.address, linger_ms=60_000, batch_records_max=7) as producer:
        before = producer.send(topic, b"before", partition=0)
        futures = producer.send_many(topic, values)
        pinned = producer.send_many(topic, [b"p0", b"p1"], partition=0)
        producer.flush(WAIT_S)
    assert before.result(0).offset == 0
    metas = [f.result(0) for f in futures]
    assert len({m.partition for m in metas}) == 3
    assert all((b.partition - a.partition) % 3 == 1 for a, b in itertools.pairwise(metas))
    assert all(0 < v <= 7 and r == 0 for v, r in shapes(server.tap, topic))
    expected: dict[int, list[tuple[int, bytes]]] = {0: [(before.result(0).offset, b"before")]}
    for meta, value in zip(metas, values, strict=True):
        expected.setdefault(meta.partition, []).append((meta.offset, value))
    for future, value in zip(pinned, [b"p0", b"p1"], strict=True):
        expected[0].append((future.result(0).offset, value))
    for p, sent in expected.items():
        stored = admin.fetch(topic, p, 0, max_records=100).records
        assert sent == [(r.offset, r.value) for r in stored]  # dense, in send order


def test_send_many_failures_are_per_value(admin: Admin, server: Solo, topic: str) -> None:
    admin.create_topic(topic, partitions=1, max_record_bytes=8)
    with Producer(server.address, linger_ms=0) as producer:
        unknown = producer.send_many("nope", [b"a", b"b"])
        assert [type(f.exception(WAIT_S)) for f in unknown] == [errors.UnknownTopic] * 2
        bad = producer.send_many(topic, [b"a"], partition=1)
        assert isinstance(bad[0].exception(WAIT_S), errors.UnknownPartition)
        mixed = producer.send_many(topic, [b"ok", b"x" * 9, b"ok2"])
        producer.flush(WAIT_S)
        assert isinstance(mixed[1].exception(0), errors.RecordTooLarge)
        assert [mixed[0].result(0).offset, mixed[2].result(0).offset] == [0, 1]
        assert producer.send_many(topic, []) == []


# --- Consumer -------------------------------------------------------------------------------


def produce(address: str, topic: str, *values: bytes, **kw: Any) -> None:
    with Producer(address, linger_ms=0) as producer:
        for value in values:
            producer.send(topic, value, **kw)


def test_poll_ack_nack_extend(admin: Admin, server: Solo, topic: str, group: str) -> None:
    address = server.address
    admin.create_topic(topic, partitions=1)
    produce(address, topic, b"a", b"b", b"c", key=b"k")
    with Consumer(address, group, [topic], lease_ms=60_000) as consumer:
        assert consumer.assignment == [(topic, 0)]
        got = consumer.poll(10, timeout_ms=2000)
        assert [(m.value, m.key, m.delivery_count) for m in got] == [
            (b"a", b"k", 1),
            (b"b", b"k", 1),
            (b"c", b"k", 1),
        ]
        a, b, c = got
        a.ack()
        a.ack()  # acks are idempotent: a retried ack of a finished record succeeds
        before = c.lease_deadline_ms
        c.extend(120_000)
        assert c.lease_deadline_ms > before
        b.nack(delay_ms=0)
        again = consumer.poll(10, timeout_ms=2000)
        assert [(m.value, m.delivery_count) for m in again] == [(b"b", 2)]
        with pytest.raises(errors.LeaseExpired):
            b.ack()  # the first delivery of b is over
        assert consumer.ack([again[0], c]) == [None, None]
        assert consumer.poll(10, timeout_ms=0) == []


def test_poll_waits_for_records_up_to_its_timeout(
    admin: Admin, server: Solo, topic: str, group: str
) -> None:
    admin.create_topic(topic, partitions=1)
    with Consumer(server.address, group, [topic]) as consumer:
        result: list[list[Message]] = []
        poller = threading.Thread(target=lambda: result.append(consumer.poll(5, timeout_ms=5000)))
        poller.start()
        polls = lambda: server.tap.requests("Poll", lambda r: r.group == group)  # noqa: E731
        wait_until(polls, WAIT_S, "the long poll to start")
        produce(server.address, topic, b"late")
        poller.join(WAIT_S)
        assert [m.value for m in result[0]] == [b"late"]


def test_heartbeats_keep_a_short_session_alive(
    admin: Admin, server: Solo, topic: str, group: str
) -> None:
    address = server.address
    admin.create_topic(topic, partitions=2)
    with Consumer(
        address, group, [topic], session_timeout_ms=300, heartbeat_interval_ms=50
    ) as consumer:
        member = consumer.member_id
        # Ten heartbeats span more than the session timeout: without them the member is gone.
        beats = lambda: server.tap.requests("Heartbeat", lambda r: r.group == group)  # noqa: E731
        wait_until(lambda: len(beats()) >= 10, WAIT_S, "10 heartbeats")
        described = admin.describe_group(group)
        assert [m.member_id for m in described.members] == [member]
        assert consumer.rejoins == 0 and consumer.member_id == member
        produce(address, topic, b"x")
        assert [m.value for m in consumer.poll(5, timeout_ms=2000)] == [b"x"]
    assert admin.describe_group(group).members == ()  # close() left the group


def test_a_rebalance_fences_the_old_generation_and_the_consumer_rejoins(
    admin: Admin, server: Solo, topic: str, group: str
) -> None:
    address = server.address
    admin.create_topic(topic, partitions=2)
    produce(address, topic, b"p0", partition=0)
    produce(address, topic, b"p1", partition=1)
    heartbeat = 60_000  # no heartbeat during the test: poll itself must notice the rebalance
    with Consumer(address, group, [topic], heartbeat_interval_ms=heartbeat) as first:
        assert first.assignment == [(topic, 0), (topic, 1)]
        held = first.poll(10, timeout_ms=2000)
        assert len(held) == 2
        with Consumer(address, group, [topic], heartbeat_interval_ms=heartbeat) as second:
            (mine,) = second.assignment
            assert first.poll(10, timeout_ms=0) == []  # fenced, rejoined, nothing ready
            assert first.rejoins == 1 and len(first.assignment) == 1
            assert mine not in first.assignment
            moved = next(m for m in held if (m.topic, m.partition) == mine)
            with pytest.raises(errors.Fenced):
                moved.ack()  # its lease went with the partition
            redelivered = second.poll(10, timeout_ms=2000)
            assert [(m.value, m.delivery_count) for m in redelivered] == [(moved.value, 2)]
            kept = next(m for m in held if m is not moved)
            kept.ack()


def test_a_rejoin_whose_member_is_gone_joins_afresh_with_an_id_the_broker_issues(
    admin: Admin, server: Solo, topic: str, group: str
) -> None:
    """After FENCED the consumer rejoins with its member id; if the member left the group
    meanwhile (session expiry) that id is UNKNOWN_MEMBER (callers cannot choose ids), so the
    consumer joins as a new member."""
    address = server.address
    admin.create_topic(topic, partitions=1)
    with Consumer(address, group, [topic], heartbeat_interval_ms=60_000) as consumer:
        old = consumer.member_id
        with grpc.insecure_channel(address) as channel:
            leave = api_pb2.LeaveGroupRequest(group=group, member_id=old)
            api_pb2_grpc.ConsumerStub(channel).LeaveGroup(leave, timeout=10)
        rejoin = consumer._member.rejoin(errors.Fenced("a newer generation"), consumer.generation)
        consumer._run(rejoin)
        assert consumer.member_id not in ("", old)
        assert [m.member_id for m in admin.describe_group(group).members] == [consumer.member_id]


def test_admin_values_out_of_their_fields_range_are_invalid_argument_not_value_error(
    admin: Admin, server: Solo, topic: str
) -> None:
    """protobuf refuses 2**40 for an int32 with a bare ValueError; the client answers as the
    broker would (a wire request carrying it is INVALID_ARGUMENT there: tests/test_grpc_api)."""
    admin.create_topic(topic, partitions=1)
    produce(server.address, topic, b"x")
    big = unique_name("big")
    for call in (
        lambda: admin.fetch(topic, 2**40, 0),
        lambda: admin.fetch(topic, 0, 2**64),
        lambda: admin.cancel_record(topic, 2**31, 0),
        lambda: admin.update_record(topic, 0, 0, priority=2**31),
        lambda: admin.commit_txn("app", 2**63),
        lambda: admin.create_topic(big, partitions=2**40),
    ):
        with pytest.raises(errors.InvalidArgument, match="out of range"):
            call()
    assert topic in names(admin) and big not in names(admin)
    assert [(p.partition, p.end) for p in admin.list_offsets(topic)] == [(0, 1)]
    assert [r.value for r in admin.fetch(topic, 0, 0).records] == [b"x"]
