"""Real broker processes: bring-up, produce/consume through any broker, restart without loss."""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from raftq.client import Consumer, Producer
from raftq.proto import api_pb2, api_pb2_grpc, common_pb2, errors
from raftq.transport.grpc_errors import from_rpc_error
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(180)


def test_three_brokers_serve_a_topic_from_any_broker(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("orders", partitions=3)
        cluster.wait_leaders("orders")
        wait_until(  # leadership settles on the preferred leaders, one per broker
            lambda: (
                sorted(p.leader for p in admin.describe_topic("orders").partitions) == [1, 2, 3]
            ),
            30,
            "leaders spread over the brokers",
        )
        with pytest.raises(errors.TopicExists):
            admin.create_topic("orders", partitions=3)
        with pytest.raises(errors.InvalidArgument):
            admin.create_topic("too-many-replicas", partitions=1, replication_factor=4)
        # any broker accepts any call: send through broker 3 only, read through broker 1 only
        with Producer(cluster.client_addr(3), linger_ms=1) as producer:
            futures = [producer.send("orders", b"v%d" % i, key=b"k%d" % i) for i in range(300)]
            sent = [f.result(timeout=30) for f in futures]
        assert len({(m.partition, m.offset) for m in sent}) == 300
        reader = cluster.admin(cluster.client_addr(1))
        ends = {p.partition: p.end for p in reader.list_offsets("orders")}
        assert sum(ends.values()) == 300
        seen = set()
        with Consumer(cluster.client_addr(2), "g1", ["orders"]) as consumer:

            def drained() -> bool:
                for message in consumer.poll(100, 500):
                    seen.add(message.value)
                    message.ack()
                return len(seen) == 300

            wait_until(drained, 60, "every record consumed")
        assert seen == {b"v%d" % i for i in range(300)}


def test_sigkill_every_broker_and_restart_loses_no_acknowledged_record(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic("durable", partitions=2)
        cluster.wait_leaders("durable")
        acked: set[bytes] = set()
        # A send is retried until its delivery timeout (Kafka's delivery.timeout.ms): 8 s
        # here, so the sends cut off by the power loss give up within the 30 s waited below.
        with Producer(
            cluster.bootstrap, linger_ms=1, request_timeout_ms=5000, delivery_timeout_ms=8000
        ) as producer:
            futures = {producer.send("durable", b"r%d" % i): b"r%d" % i for i in range(2000)}
            for i in (1, 2, 3):  # power loss of the whole cluster while sends are in flight
                cluster.kill(i)
            for future, value in futures.items():
                try:
                    future.result(timeout=30)
                    acked.add(value)
                except errors.RaftqError:
                    pass  # not acknowledged: may or may not have been written
        cluster.start()
        cluster.wait_ready()
        cluster.wait_leaders("durable")
        admin = cluster.admin()
        stored: list[bytes] = []
        for partition in (0, 1):
            offset = 0
            while True:
                fetched = admin.fetch("durable", partition, offset, 1000)
                if not fetched.records:
                    break
                offsets = [r.offset for r in fetched.records]
                assert offsets == list(range(offset, offset + len(offsets))), "offsets not dense"
                stored += [r.value for r in fetched.records]
                offset = offsets[-1] + 1
        assert acked <= set(stored), f"lost {len(acked - set(stored))} acknowledged records"
        assert len(stored) == len(set(stored)), "a record was applied twice"


def test_a_forwarded_send_names_the_leader_and_the_leader_names_none(tmp_path: Path) -> None:
    """Every broker accepts a send; one that forwarded it says where the leader is (the
    client then sends there directly), the leader says nothing."""
    with ProcessCluster(tmp_path) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic("hint", partitions=1)
        cluster.wait_leaders("hint")

        def hints() -> dict[int, str]:
            out = {}
            for broker in (1, 2, 3):
                with grpc.insecure_channel(cluster.client_addr(broker)) as channel:
                    request = api_pb2.SendRequest(topic="hint", values=[b"v"], partition=0)
                    response = api_pb2_grpc.ProducerStub(channel).Send(request, timeout=30)
                    out[broker] = response.results[0].leader_hint
            return out

        def consistent() -> bool:  # leadership may still move to the preferred leader
            seen = hints()
            leaders = [b for b, hint in seen.items() if not hint]
            return len(leaders) == 1 and all(
                hint == cluster.client_addr(leaders[0]) for hint in seen.values() if hint
            )

        wait_until(consistent, 30, "one leader answering no hint, the others naming it")
        # A call without a deadline is forwarded too (gRPC reports ~9e18 s left for it; as a
        # forwarded call's timeout that expired at once, and the router retried forever).
        answered: list[api_pb2.SendResponse] = []
        follower = next(b for b, hint in hints().items() if hint)

        def send_without_deadline() -> None:
            with grpc.insecure_channel(cluster.client_addr(follower)) as channel:
                request = api_pb2.SendRequest(topic="hint", values=[b"w"], partition=0)
                answered.append(api_pb2_grpc.ProducerStub(channel).Send(request))

        caller = threading.Thread(target=send_without_deadline, daemon=True)
        caller.start()
        caller.join(30)
        assert answered and answered[0].results[0].error == 0


def test_a_send_stream_to_the_leader_answers_values_like_send(tmp_path: Path) -> None:
    """On the leader a stream's bare values go straight to the proposer (send_async, no
    thread waiting): answers as Send's, a retried sequence answered from dedup state, a bad
    value refused in-band, and records (the pool path) in between."""
    with ProcessCluster(tmp_path) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("s", partitions=1, max_record_bytes=64)
        cluster.wait_leaders("s")
        wait_until(  # leadership settled on the preferred leader
            lambda: (
                admin.describe_topic("s").partitions[0].leader
                == admin.describe_topic("s").partitions[0].replicas[0]
            ),
            30,
            "the preferred leader leads",
        )
        leader = admin.describe_topic("s").partitions[0].leader
        requests: queue.SimpleQueue[api_pb2.SendRequest | None] = queue.SimpleQueue()
        with grpc.insecure_channel(cluster.client_addr(leader)) as channel:
            answers = api_pb2_grpc.ProducerStub(channel).SendStream(iter(requests.get, None))

            def send(request_id: int, **fields: Any) -> api_pb2.SendResponse:
                requests.put(api_pb2.SendRequest(topic="s", request_id=request_id, **fields))
                response: api_pb2.SendResponse = next(answers)
                assert response.request_id == request_id
                return response

            first = send(1, values=[b"a", b"b"], partition=0, producer_id="p", sequence=0)
            again = send(2, values=[b"a", b"b"], partition=0, producer_id="p", sequence=0)
            records = send(3, records=[common_pb2.Record(value=b"r")], partition=0)
            bad = send(4, values=[b"x" * 65], partition=0)
            third = send(5, values=[b"c"], partition=0, producer_id="p", sequence=1)
            requests.put(None)
            assert list(answers) == []
        assert [(r.offset, r.count, r.duplicate, r.leader_hint) for r in first.results] == [
            (0, 2, False, "")
        ]
        assert [(r.offset, r.count, r.duplicate) for r in again.results] == [(0, 2, True)]
        assert [(r.offset, r.error) for r in records.results] == [(2, 0)]
        assert (bad.error, list(bad.results)) == (errors.RecordTooLarge.kind.code, [])
        assert [(r.offset, r.count) for r in third.results] == [(3, 1)]
        stored = [r.value for r in admin.fetch("s", 0, 0, 10).records]
        assert stored == [b"a", b"b", b"r", b"c"]


def test_bare_values_through_a_follower_broker_land_once_with_dense_offsets(
    tmp_path: Path,
) -> None:
    """The values fast path end to end: forwarded by a broker that does not lead, replicated,
    a retried producer batch answered with its original offsets, a too-large value refused
    whole, and every replica holding the same records."""
    with ProcessCluster(tmp_path) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("bare", partitions=1, max_record_bytes=64)
        cluster.wait_leaders("bare")
        leader = admin.describe_topic("bare").partitions[0].leader
        other = next(i for i in (1, 2, 3) if i != leader)
        with grpc.insecure_channel(cluster.client_addr(other)) as channel:
            producer = api_pb2_grpc.ProducerStub(channel)

            def send(values: list[bytes], sequence: int) -> api_pb2.SendResponse:
                request = api_pb2.SendRequest(
                    topic="bare", values=values, partition=0, producer_id="p", sequence=sequence
                )
                response: api_pb2.SendResponse = producer.Send(request, timeout=30)
                return response

            first = send([b"v%d" % i for i in range(500)], 0)
            second = send([b"w%d" % i for i in range(300)], 1)
            retried = send([b"w%d" % i for i in range(300)], 1)
            assert [
                (r.error, r.partition, r.offset, r.count, r.duplicate) for r in first.results
            ] == [(0, 0, 0, 500, False)]
            assert [(r.offset, r.count, r.duplicate) for r in second.results] == [(500, 300, False)]
            assert [(r.offset, r.count, r.duplicate) for r in retried.results] == [(500, 300, True)]
            with pytest.raises(grpc.RpcError) as info:
                send([b"fine", b"x" * 65], 2)
            assert isinstance(from_rpc_error(info.value), errors.RecordTooLarge)
            with pytest.raises(grpc.RpcError) as info:
                producer.Send(
                    api_pb2.SendRequest(
                        topic="bare", values=[b"a"], records=[common_pb2.Record(value=b"b")]
                    ),
                    timeout=30,
                )
            assert isinstance(from_rpc_error(info.value), errors.InvalidArgument)
        expected = [b"v%d" % i for i in range(500)] + [b"w%d" % i for i in range(300)]
        for broker in (1, 2, 3):
            reader = cluster.admin(cluster.client_addr(broker))
            got: list[bytes] = []
            while len(got) < len(expected):
                fetched = reader.fetch("bare", 0, len(got), max_records=500)
                assert fetched.records, f"broker {broker}: nothing at offset {len(got)}"
                got += [r.value for r in fetched.records]
            assert got == expected
