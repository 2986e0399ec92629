"""The Python client against a real gRPC server over the single-node test facade.

Written against the client API only (plus the facade's call log where routing is the point),
so the tests can be pointed at a real cluster.
"""

from __future__ import annotations

import itertools
import pathlib
import pickle
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from raftq.assignors.partitioner import partition_for
from raftq.client import Admin, Consumer, Message, Producer, RecordMetadata, parse_bootstrap
from raftq.proto import api_pb2, api_pb2_grpc, errors
from raftq.transport.grpc_server import serve
from tests.api_facade import ApiFacade, api_server
from tests.helpers import free_port, wait_until

WAIT_S = 10


@pytest.fixture
def server(tmp_path: pathlib.Path) -> Iterator[tuple[str, ApiFacade]]:
    with api_server(tmp_path) as running:
        yield running


@pytest.fixture
def admin(server: tuple[str, ApiFacade]) -> Iterator[Admin]:
    with Admin(server[0]) as client:
        yield client


# --- Admin ----------------------------------------------------------------------------------


def test_admin_topic_calls_and_log_reads(admin: Admin, server: tuple[str, ApiFacade]) -> None:
    created = admin.create_topic("orders", partitions=2, ordering="priority", lease_ms=5000)
    assert len(created.partitions) == 2 and created.config.lease_ms == 5000
    assert [t.name for t in admin.list_topics()] == ["orders"]
    assert admin.alter_topic_config("orders", max_deliveries=3).config.max_deliveries == 3
    assert admin.describe_topic("orders").config.max_deliveries == 3
    with Producer(server[0], linger_ms=0) as producer:
        producer.send("orders", b"a", partition=1).result(WAIT_S)
    assert [(p.partition, p.end) for p in admin.list_offsets("orders")] == [(0, 0), (1, 1)]
    fetched = admin.fetch("orders", 1, 0)
    assert [r.record.value for r in fetched.records] == [b"a"]
    admin.update_record("orders", 1, 0, priority=3)
    admin.cancel_record("orders", 1, 0)
    assert admin.fetch("orders", 1, 0).records == []
    assert admin.describe_cluster().health == api_pb2.HEALTHY
    admin.delete_topic("orders")
    with pytest.raises(errors.UnknownTopic):
        admin.describe_topic("orders")
    with pytest.raises(errors.InvalidArgument, match="no topic setting 'lease'"):
        admin.create_topic("x", lease=1)


def test_bootstrap_skips_brokers_that_do_not_answer(server: tuple[str, ApiFacade]) -> None:
    dead = f"127.0.0.1:{free_port()}"
    with Admin(f"{dead},{server[0]}", request_timeout_ms=2000) as admin:
        admin.create_topic("orders", partitions=1)
        assert [t.name for t in admin.list_topics()] == ["orders"]
    with Admin(dead, request_timeout_ms=2000) as only_dead, pytest.raises(errors.Unavailable):
        only_dead.list_topics()


def test_parse_bootstrap() -> None:
    assert parse_bootstrap(" a:1, b:2 ,") == ("a:1", "b:2")
    for bad in ("", "nohost", "a:port"):
        with pytest.raises(errors.InvalidArgument):
            parse_bootstrap(bad)


def test_admin_pickles_without_channels_and_live_clients_refuse(
    server: tuple[str, ApiFacade], admin: Admin
) -> None:
    admin.create_topic("orders", partitions=1)
    copy = pickle.loads(pickle.dumps(admin))
    assert [t.name for t in copy.list_topics()] == ["orders"]
    copy.close()
    with Producer(server[0]) as producer, pytest.raises(TypeError, match="where it is used"):
        pickle.dumps(producer)


# --- Producer -------------------------------------------------------------------------------


def sends(facade: ApiFacade) -> int:
    return facade.calls.count("send")


def test_records_wait_for_linger_then_flush_sends_one_batch(
    admin: Admin, server: tuple[str, ApiFacade]
) -> None:
    address, facade = server
    admin.create_topic("orders", partitions=1)
    with Producer(address, linger_ms=60_000) as producer:
        futures = [producer.send("orders", f"r{i}".encode()) for i in range(10)]
        assert not any(f.done() for f in futures)  # lingering: a minute, unless flushed
        assert sends(facade) == 0
        producer.flush(WAIT_S)
        assert all(f.done() for f in futures)
        assert [f.result().offset for f in futures] == list(range(10))
        assert sends(facade) == 1


def test_full_batches_go_without_waiting_for_linger(
    admin: Admin, server: tuple[str, ApiFacade]
) -> None:
    address, facade = server
    admin.create_topic("orders", partitions=1)
    with Producer(address, linger_ms=60_000, batch_records_max=4) as producer:
        futures = [producer.send("orders", b"x") for _ in range(8)]
        results = [f.result(WAIT_S) for f in futures]  # two full batches: no flush needed
        assert [r.offset for r in results] == list(range(8))
        late = producer.send("orders", b"y")
        producer.flush(WAIT_S)
        assert late.result().offset == 8
    assert sends(facade) == 3


def test_keys_pick_the_murmur2_partition_and_metadata_is_returned(
    admin: Admin, server: tuple[str, ApiFacade]
) -> None:
    admin.create_topic("orders", partitions=5)
    with Producer(server[0], linger_ms=1) as producer:
        futures = {k: producer.send("orders", b"v", key=k) for k in (b"a", b"b", b"c", b"dd")}
        producer.flush(WAIT_S)
    for key, future in futures.items():
        meta = future.result()
        assert isinstance(meta, RecordMetadata) and meta.topic == "orders"
        assert meta.partition == partition_for(key, 5, 0)


def test_send_failures_arrive_on_the_future_typed(
    admin: Admin, server: tuple[str, ApiFacade]
) -> None:
    admin.create_topic("orders", partitions=2, max_record_bytes=64)
    with Producer(server[0], linger_ms=0) as producer:
        with pytest.raises(errors.UnknownTopic):
            producer.send("nope", b"x").result(WAIT_S)
        with pytest.raises(errors.RecordTooLarge, match="max_record_bytes"):
            producer.send("orders", b"x" * 65).result(WAIT_S)
        with pytest.raises(errors.UnknownPartition):
            producer.send("orders", b"x", partition=2).result(WAIT_S)
        ok = producer.send("orders", b"fine", headers={"h": b"1"}, priority=2, partition=0)
        assert ok.result(WAIT_S).offset == 0
    stored = admin.fetch("orders", 0, 0).records[0].record
    assert (stored.value, dict(stored.headers), stored.priority) == (b"fine", {"h": b"1"}, 2)
    with pytest.raises(RuntimeError, match="after close"):
        producer.send("orders", b"x")


class LosesAnswers(ApiFacade):
    """Applies a Send, then answers as if it timed out (``lose`` times): the client cannot
    know the batch was written, so it must retry with the same sequence."""

    lose = 0

    def send(self, request: api_pb2.SendRequest, *, timeout_s: float | None) -> Any:
        response = super().send(request, timeout_s=timeout_s)
        if self.lose > 0:
            self.lose -= 1
            raise errors.Timeout("the answer was lost")
        return response


class Stalls(ApiFacade):
    """A Send to a topic in ``stalled`` waits for ``release`` before it is applied."""

    def __init__(self, data_dir: pathlib.Path) -> None:
        super().__init__(data_dir)
        self.stalled: set[str] = set()
        self.release = threading.Event()

    def send(self, request: api_pb2.SendRequest, *, timeout_s: float | None) -> Any:
        if request.topic in self.stalled:
            self.stalled.discard(request.topic)  # the next one goes through
            self.release.wait(WAIT_S)
        return super().send(request, timeout_s=timeout_s)


def test_a_send_stream_answers_each_request_as_it_completes(tmp_path: pathlib.Path) -> None:
    with api_server(tmp_path, Stalls(tmp_path)) as (address, facade):
        assert isinstance(facade, Stalls)
        with Admin(address) as admin:
            admin.create_topic("slow", partitions=1)
            admin.create_topic("fast", partitions=1)
        facade.stalled.add("slow")
        requests: queue.SimpleQueue[api_pb2.SendRequest | None] = queue.SimpleQueue()
        with grpc.insecure_channel(address) as channel:
            answers = api_pb2_grpc.ProducerStub(channel).SendStream(iter(requests.get, None))
            requests.put(api_pb2.SendRequest(topic="slow", values=[b"s"], request_id=1))
            requests.put(api_pb2.SendRequest(topic="fast", values=[b"f"], request_id=2))
            assert next(answers).request_id == 2  # not held behind the stalled one
            facade.release.set()
            assert next(answers).request_id == 1
            requests.put(None)
            assert list(answers) == []


def test_an_unanswered_stream_send_times_out_and_its_retry_writes_once(
    tmp_path: pathlib.Path,
) -> None:
    with api_server(tmp_path, Stalls(tmp_path)) as (address, facade):
        assert isinstance(facade, Stalls)
        Admin(address).create_topic("orders", partitions=1)
        facade.stalled.add("orders")
        with Producer(address, linger_ms=0, request_timeout_ms=500, retries=1) as producer:
            sent = producer.send("orders", b"a").result(WAIT_S)  # the retry's answer
            facade.release.set()  # the stalled first attempt now applies: a duplicate
            assert (sent.offset, sent.duplicate) == (0, False)
            after = producer.send("orders", b"b").result(WAIT_S)
        assert after.offset == 1  # "a" was written once
        assert sends(facade) == 3


def test_a_broker_out_of_send_streams_is_sent_unary(tmp_path: pathlib.Path) -> None:
    facade = ApiFacade(tmp_path)
    address = f"127.0.0.1:{free_port()}"
    facade.client_addr = address
    server = serve(facade, address, max_workers=2)  # room for one send stream
    try:
        Admin(address).create_topic("orders", partitions=1)
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
    finally:
        server.stop(None).wait(5)
        facade.close()


def test_a_retried_batch_keeps_its_sequence_so_nothing_is_written_twice(
    tmp_path: pathlib.Path,
) -> None:
    with api_server(tmp_path, LosesAnswers(tmp_path)) as (address, facade):
        Admin(address).create_topic("orders", partitions=1)
        assert isinstance(facade, LosesAnswers)
        facade.lose = 2
        with Producer(address, linger_ms=0) as producer:
            first = producer.send("orders", b"a").result(WAIT_S)
            second = producer.send("orders", b"b").result(WAIT_S)
        assert (first.offset, first.duplicate, second.offset) == (0, True, 1)
        assert sends(facade) == 4  # a, a again, a again (answered from dedup state), b
        assert [p.end for p in Admin(address).list_offsets("orders")] == [2]


def test_without_idempotence_a_retry_duplicates(tmp_path: pathlib.Path) -> None:
    with api_server(tmp_path, LosesAnswers(tmp_path)) as (address, facade):
        Admin(address).create_topic("orders", partitions=1)
        assert isinstance(facade, LosesAnswers)
        facade.lose = 1
        with Producer(address, linger_ms=0, idempotent=False) as producer:
            assert producer.send("orders", b"a").result(WAIT_S).offset == 1
        assert [p.end for p in Admin(address).list_offsets("orders")] == [2]


def test_retries_run_out_then_the_partition_continues_under_a_new_producer_id(
    tmp_path: pathlib.Path,
) -> None:
    with api_server(tmp_path, LosesAnswers(tmp_path)) as (address, facade):
        Admin(address).create_topic("orders", partitions=1)
        assert isinstance(facade, LosesAnswers)
        facade.lose = 2
        with Producer(address, linger_ms=0, retries=1) as producer:
            with pytest.raises(errors.Timeout):
                producer.send("orders", b"a").result(WAIT_S)
            after = producer.send("orders", b"b").result(WAIT_S)
        assert (after.offset, after.duplicate) == (1, False)  # not mistaken for batch "a"


class Recording:
    """A facade proxy that logs (server name, RPC), can answer NOT_LEADER once, and can
    answer sends as a broker that forwarded them to the leader at ``forwarded_to``."""

    def __init__(self, facade: ApiFacade, name: str, log: list[tuple[str, str]]) -> None:
        self.facade, self.name, self.log = facade, name, log
        self.not_leader_hint: str | None = None
        self.forwarded_to = ""

    def __getattr__(self, method: str) -> Any:
        getattr(self.facade, method)  # only what the facade has (no send_async)

        def call(request: Any, *, timeout_s: float | None) -> Any:
            self.log.append((self.name, method))
            if method == "send" and self.not_leader_hint is not None:
                hint, self.not_leader_hint = self.not_leader_hint, None
                raise errors.NotLeader("moved", leader_hint=hint)
            response = getattr(self.facade, method)(request, timeout_s=timeout_s)
            if method == "send":
                for result in response.results:
                    result.leader_hint = self.forwarded_to
            return response

        return call


@dataclass
class TwoBrokers:
    """Two gRPC servers, ``a`` and ``b``, over one facade; ``log`` records (server, RPC)."""

    facade: ApiFacade
    log: list[tuple[str, str]]
    a: Recording
    b: Recording
    addr_a: str
    addr_b: str

    def sends(self) -> list[str]:
        return [name for name, method in self.log if method == "send"]


@contextmanager
def two_brokers(tmp_path: pathlib.Path) -> Iterator[TwoBrokers]:
    facade = ApiFacade(tmp_path)
    log: list[tuple[str, str]] = []
    a, b = Recording(facade, "a", log), Recording(facade, "b", log)
    addr_a, addr_b = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    servers = [serve(a, addr_a, max_workers=8), serve(b, addr_b, max_workers=8)]
    try:
        yield TwoBrokers(facade, log, a, b, addr_a, addr_b)
    finally:
        for server in servers:
            server.stop(None).wait(5)
        facade.close()


def test_sends_go_to_the_leader_from_metadata_and_follow_not_leader(
    tmp_path: pathlib.Path,
) -> None:
    with two_brokers(tmp_path) as two:
        two.facade.client_addr = two.addr_b  # metadata: b leads every partition
        Admin(two.addr_a).create_topic("orders", partitions=2)
        with Producer(two.addr_a, linger_ms=0) as producer:
            producer.send("orders", b"x").result(WAIT_S)
            assert two.sends() == ["b"]
            two.b.not_leader_hint = two.addr_a  # leadership moved to a
            producer.send("orders", b"y", partition=0).result(WAIT_S)
        assert two.sends() == ["b", "b", "a"]
        assert ("a", "describe_topic") in two.log  # metadata came through the bootstrap broker


def test_a_forwarded_send_moves_the_next_sends_to_the_leader_it_names(
    tmp_path: pathlib.Path,
) -> None:
    with two_brokers(tmp_path) as two:
        two.facade.client_addr = two.addr_b  # stale metadata: b leads every partition
        Admin(two.addr_a).create_topic("orders", partitions=1)
        two.b.forwarded_to = two.addr_a  # b no longer leads: it forwards, answers OK, names a
        with Producer(two.addr_a, linger_ms=0) as producer:
            first = producer.send("orders", b"x", partition=0).result(WAIT_S)
            second = producer.send("orders", b"y", key=b"k", partition=0).result(WAIT_S)
            many = producer.send_many("orders", [b"v1", b"v2"])
            [m.result(WAIT_S) for m in many]
        assert (first.offset, second.offset) == (0, 1)  # nothing resent
        assert two.sends() == ["b", "a", "a"]


def test_concurrent_senders_keep_per_partition_order(
    admin: Admin, server: tuple[str, ApiFacade]
) -> None:
    admin.create_topic("orders", partitions=3)
    with Producer(server[0], linger_ms=2, batch_records_max=7) as producer:

        def produce(worker: int) -> None:
            for i in range(50):
                producer.send("orders", f"{worker}:{i}".encode(), key=f"w{worker}".encode())

        threads = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        producer.flush(WAIT_S)
        assert producer.statistics()["outstanding_records"] == 0
    seen: dict[str, list[int]] = {}
    for p in range(3):
        for r in admin.fetch("orders", p, 0, max_records=1000).records:
            worker, i = r.record.value.decode().split(":")
            seen.setdefault(worker, []).append(int(i))
    assert {w: sorted(v) for w, v in seen.items()} == seen  # in send order within each key
    assert sorted(seen) == ["0", "1", "2", "3"] and all(len(v) == 50 for v in seen.values())


class Captures(ApiFacade):
    """Keeps the (values, records) counts of every SendRequest it answers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[tuple[int, int]] = []

    def send(self, request: api_pb2.SendRequest, *, timeout_s: float | None) -> Any:
        self.requests.append((len(request.values), len(request.records)))
        return super().send(request, timeout_s=timeout_s)


def test_bare_records_go_as_values_and_get_dense_offsets(tmp_path: pathlib.Path) -> None:
    with api_server(tmp_path, Captures(tmp_path)) as (address, facade):
        assert isinstance(facade, Captures)
        Admin(address).create_topic("orders", partitions=2)
        with Producer(address, linger_ms=60_000, batch_records_max=4) as producer:
            futures = [producer.send("orders", b"v%d" % i, partition=1) for i in range(10)]
            producer.flush(WAIT_S)
        assert facade.requests == [(4, 0), (4, 0), (2, 0)]  # no Record message anywhere
        metas = [f.result(0) for f in futures]
        assert [(m.partition, m.offset, m.duplicate) for m in metas] == [
            (1, i, False) for i in range(10)
        ]
        stored = Admin(address).fetch("orders", 1, 0).records
        assert [r.record.value for r in stored] == [b"v%d" % i for i in range(10)]


def test_bare_and_full_records_interleaved_keep_their_order(tmp_path: pathlib.Path) -> None:
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
    with api_server(tmp_path, Captures(tmp_path)) as (address, facade):
        assert isinstance(facade, Captures)
        admin = Admin(address)
        admin.create_topic("orders", partitions=1)
        n = len(kinds)
        with Producer(address, linger_ms=60_000) as producer:
            futures = [
                producer.send("orders", b"r%d" % i, partition=0, **kw) for i, kw in enumerate(kinds)
            ]
            producer.flush(WAIT_S)
            assert facade.requests == [(0, n)]  # mixed: one batch, all records
            # Values queued in bulk, then a keyed record: the values batch becomes records.
            bulk = producer.send_many("orders", [b"m0", b"m1"], partition=0)
            keyed = producer.send("orders", b"m2", key=b"k", partition=0)
            producer.flush(WAIT_S)
            assert facade.requests[1:] == [(0, 3)]
            # A values batch already sent is not touched: the keyed record starts the next.
            sent = producer.send("orders", b"s0", partition=0)
            producer.flush(WAIT_S)
            after = producer.send("orders", b"s1", key=b"k", partition=0)
            producer.flush(WAIT_S)
            assert facade.requests[2:] == [(1, 0), (0, 1)]
        done = [*futures, *bulk, keyed, sent, after]
        assert [f.result(0).offset for f in done] == list(range(n + 5))
        stored = [r.record for r in admin.fetch("orders", 0, 0).records]
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
        assert stored[8].HasField("key") and not stored[0].HasField("key")


def test_a_retried_values_batch_is_answered_with_its_original_offsets(
    tmp_path: pathlib.Path,
) -> None:
    with api_server(tmp_path, LosesAnswers(tmp_path)) as (address, facade):
        Admin(address).create_topic("orders", partitions=1)
        assert isinstance(facade, LosesAnswers)
        with Producer(address, linger_ms=60_000) as producer:
            producer.send("orders", b"first")  # a batch before: the lost one has sequence 1
            producer.flush(WAIT_S)
            facade.lose = 1
            futures = [producer.send("orders", b"v%d" % i) for i in range(5)]
            producer.flush(WAIT_S)
            after = producer.send("orders", b"after")
            producer.flush(WAIT_S)
        metas = [f.result(0) for f in futures]
        assert [(m.offset, m.duplicate) for m in metas] == [(1 + i, True) for i in range(5)]
        assert (after.result(0).offset, after.result(0).duplicate) == (6, False)
        assert sends(facade) == 4  # first, the batch, the batch again (dedup), after
        assert [p.end for p in Admin(address).list_offsets("orders")] == [7]


class PredatesValues(ApiFacade):
    """A broker from before SendRequest.values: it sees no records and answers no results
    (``count`` > 0: answers one result with that count instead)."""

    count = 0
    values_requests = 0

    def send(self, request: api_pb2.SendRequest, *, timeout_s: float | None) -> Any:
        if not request.values:
            return super().send(request, timeout_s=timeout_s)
        self.values_requests += 1
        if self.count:
            return api_pb2.SendResponse(results=[api_pb2.SendResult(count=self.count)])
        return api_pb2.SendResponse()


def test_a_values_batch_answered_otherwise_than_one_range_fails_internal(
    tmp_path: pathlib.Path,
) -> None:
    with api_server(tmp_path, PredatesValues(tmp_path)) as (address, facade):
        assert isinstance(facade, PredatesValues)
        Admin(address).create_topic("orders", partitions=1)
        with Producer(address, linger_ms=0) as producer:
            with pytest.raises(errors.Internal, match="0 results"):
                producer.send("orders", b"a").result(WAIT_S)
            assert facade.values_requests == 1  # not retried, never taken for success
            facade.count = 2
            with pytest.raises(errors.Internal, match="range of 2 records for 1"):
                producer.send("orders", b"b").result(WAIT_S)
            keyed = producer.send("orders", b"c", key=b"k").result(WAIT_S)
        assert keyed.offset == 0  # the records path is unaffected; nothing else was written


def test_send_many_spreads_values_round_robin_in_batches(tmp_path: pathlib.Path) -> None:
    with api_server(tmp_path, Captures(tmp_path)) as (address, facade):
        assert isinstance(facade, Captures)
        admin = Admin(address)
        admin.create_topic("orders", partitions=3)
        values = [b"m%d" % i for i in range(50)]
        with Producer(address, linger_ms=60_000, batch_records_max=7) as producer:
            before = producer.send("orders", b"before", partition=0)
            futures = producer.send_many("orders", values)
            pinned = producer.send_many("orders", [b"p0", b"p1"], partition=0)
            producer.flush(WAIT_S)
        assert before.result(0).offset == 0
        metas = [f.result(0) for f in futures]
        assert len({m.partition for m in metas}) == 3
        assert all((b.partition - a.partition) % 3 == 1 for a, b in itertools.pairwise(metas))
        assert all(0 < v <= 7 and r == 0 for v, r in facade.requests)
        expected: dict[int, list[tuple[int, bytes]]] = {0: [(before.result(0).offset, b"before")]}
        for meta, value in zip(metas, values, strict=True):
            expected.setdefault(meta.partition, []).append((meta.offset, value))
        for future, value in zip(pinned, [b"p0", b"p1"], strict=True):
            expected[0].append((future.result(0).offset, value))
        for p, sent in expected.items():
            stored = admin.fetch("orders", p, 0, max_records=100).records
            assert sent == [(r.offset, r.record.value) for r in stored]  # dense, in send order


def test_send_many_failures_are_per_value(admin: Admin, server: tuple[str, ApiFacade]) -> None:
    admin.create_topic("orders", partitions=1, max_record_bytes=8)
    with Producer(server[0], linger_ms=0) as producer:
        unknown = producer.send_many("nope", [b"a", b"b"])
        assert [type(f.exception(WAIT_S)) for f in unknown] == [errors.UnknownTopic] * 2
        bad = producer.send_many("orders", [b"a"], partition=1)
        assert isinstance(bad[0].exception(WAIT_S), errors.UnknownPartition)
        mixed = producer.send_many("orders", [b"ok", b"x" * 9, b"ok2"])
        producer.flush(WAIT_S)
        assert isinstance(mixed[1].exception(0), errors.RecordTooLarge)
        assert [mixed[0].result(0).offset, mixed[2].result(0).offset] == [0, 1]
        assert producer.send_many("orders", []) == []


# --- Consumer -------------------------------------------------------------------------------


def produce(address: str, topic: str, *values: bytes, **kw: Any) -> None:
    with Producer(address, linger_ms=0) as producer:
        for value in values:
            producer.send(topic, value, **kw)


def test_poll_ack_nack_extend(admin: Admin, server: tuple[str, ApiFacade]) -> None:
    address = server[0]
    admin.create_topic("orders", partitions=1)
    produce(address, "orders", b"a", b"b", b"c", key=b"k")
    with Consumer(address, "g", ["orders"], lease_ms=60_000) as consumer:
        assert consumer.assignment == [("orders", 0)]
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
    admin: Admin, server: tuple[str, ApiFacade]
) -> None:
    admin.create_topic("orders", partitions=1)
    with Consumer(server[0], "g", ["orders"]) as consumer:
        result: list[list[Message]] = []
        poller = threading.Thread(target=lambda: result.append(consumer.poll(5, timeout_ms=5000)))
        poller.start()
        wait_until(lambda: "poll" in server[1].calls, WAIT_S, "the long poll to start")
        produce(server[0], "orders", b"late")
        poller.join(WAIT_S)
        assert [m.value for m in result[0]] == [b"late"]


def test_heartbeats_keep_a_short_session_alive(admin: Admin, server: tuple[str, ApiFacade]) -> None:
    address, facade = server
    admin.create_topic("orders", partitions=2)
    with Consumer(
        address, "g", ["orders"], session_timeout_ms=300, heartbeat_interval_ms=50
    ) as consumer:
        member = consumer.member_id
        # Ten heartbeats span more than the session timeout: without them the member is gone.
        wait_until(lambda: facade.calls.count("heartbeat") >= 10, WAIT_S, "10 heartbeats")
        described = admin.describe_group("g")
        assert [m.member_id for m in described.members] == [member]
        assert consumer.rejoins == 0 and consumer.member_id == member
        produce(address, "orders", b"x")
        assert [m.value for m in consumer.poll(5, timeout_ms=2000)] == [b"x"]
    assert admin.describe_group("g").members == []  # close() left the group


def test_a_rebalance_fences_the_old_generation_and_the_consumer_rejoins(
    admin: Admin, server: tuple[str, ApiFacade]
) -> None:
    address = server[0]
    admin.create_topic("orders", partitions=2)
    produce(address, "orders", b"p0", partition=0)
    produce(address, "orders", b"p1", partition=1)
    heartbeat = 60_000  # no heartbeat during the test: poll itself must notice the rebalance
    with Consumer(address, "g", ["orders"], heartbeat_interval_ms=heartbeat) as first:
        assert first.assignment == [("orders", 0), ("orders", 1)]
        held = first.poll(10, timeout_ms=2000)
        assert len(held) == 2
        with Consumer(address, "g", ["orders"], heartbeat_interval_ms=heartbeat) as second:
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
    admin: Admin, server: tuple[str, ApiFacade]
) -> None:
    """After FENCED the consumer rejoins with its member id; if the member left the group
    meanwhile (session expiry) that id is UNKNOWN_MEMBER (callers cannot choose ids), so the
    consumer joins as a new member."""
    address = server[0]
    admin.create_topic("orders", partitions=1)
    with Consumer(address, "g", ["orders"], heartbeat_interval_ms=60_000) as consumer:
        old = consumer.member_id
        with grpc.insecure_channel(address) as channel:
            leave = api_pb2.LeaveGroupRequest(group="g", member_id=old)
            api_pb2_grpc.ConsumerStub(channel).LeaveGroup(leave, timeout=10)
        rejoin = consumer._member.rejoin(errors.Fenced("a newer generation"), consumer.generation)
        consumer._run(rejoin)
        assert consumer.member_id not in ("", old)
        assert [m.member_id for m in admin.describe_group("g").members] == [consumer.member_id]


def test_admin_values_out_of_their_fields_range_are_invalid_argument_not_value_error(
    admin: Admin, server: tuple[str, ApiFacade]
) -> None:
    """protobuf refuses 2**40 for an int32 with a bare ValueError; the client answers as the
    broker would (a wire request carrying it is INVALID_ARGUMENT there: tests/test_grpc_api)."""
    admin.create_topic("orders", partitions=1)
    produce(server[0], "orders", b"x")
    for call in (
        lambda: admin.fetch("orders", 2**40, 0),
        lambda: admin.fetch("orders", 0, 2**64),
        lambda: admin.cancel_record("orders", 2**31, 0),
        lambda: admin.update_record("orders", 0, 0, priority=2**31),
        lambda: admin.commit_txn("app", 2**63),
        lambda: admin.create_topic("big", partitions=2**40),
    ):
        with pytest.raises(errors.InvalidArgument, match="out of range"):
            call()
    assert [t.name for t in admin.list_topics()] == ["orders"]
    assert [(p.partition, p.end) for p in admin.list_offsets("orders")] == [(0, 1)]
    assert [r.record.value for r in admin.fetch("orders", 0, 0).records] == [b"x"]
