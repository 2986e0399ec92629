"""Client habits of Kafka/NATS users against a real broker: ``for message in consumer``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftq.client import Admin, Consumer, Message, Producer
from raftq.client.send_future import RecordMetadata
from raftq.proto import errors
from tests.cluster import ProcessCluster


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with ProcessCluster(tmp_path_factory.mktemp("habits"), brokers=1) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic("habits", partitions=2, replication_factor=1)
        cluster.wait_leaders("habits")
        yield cluster.bootstrap


def test_a_consumer_is_iterable_and_the_loop_ends_when_it_is_closed(bootstrap: str) -> None:
    with Producer(bootstrap) as producer:
        for i in range(6):
            producer.send("habits", f"m{i}".encode()).result(30)
    consumer = Consumer(bootstrap, "iterating", ["habits"])
    seen: list[Message] = []
    for message in consumer:
        message.ack()
        seen.append(message)
        if len(seen) == 6:
            break
    assert sorted(m.value for m in seen) == [f"m{i}".encode() for i in range(6)]

    ended = threading.Event()

    def drain() -> None:
        for _ in consumer:  # nothing left: waits until closed
            pass
        ended.set()

    loop = threading.Thread(target=drain, daemon=True)
    loop.start()
    consumer.close()
    loop.join(30)
    assert ended.is_set()


def test_a_broker_unreachable_a_moment_ago_is_reached_as_soon_as_it_listens(
    tmp_path: Path,
) -> None:
    """Refused connects put gRPC's subchannel in reconnect backoff; neither that nor a broker
    that is still starting may fail a client call whose deadline has time left."""
    cluster = ProcessCluster(tmp_path, brokers=1)
    address = cluster.client_addr(1)
    with Admin(address, request_timeout_ms=300) as early, pytest.raises(errors.Unavailable):
        early.list_topics()  # nothing listens yet: refused, retried until its deadline
    with cluster:
        with Admin(address, request_timeout_ms=60_000) as waiting:
            assert waiting.list_topics() == []  # waits through the broker's start
        for _ in range(20):  # new clients at once: none inherits a refused connect's backoff
            with Admin(address, request_timeout_ms=5_000) as admin:
                admin.list_topics()


def test_on_delivery_reports_each_outcome_once(bootstrap: str) -> None:
    outcomes: list[tuple[errors.RaftqError | None, RecordMetadata | None]] = []
    done = threading.Event()

    def on_delivery(error: errors.RaftqError | None, metadata: RecordMetadata | None) -> None:
        outcomes.append((error, metadata))
        if len(outcomes) == 4:
            done.set()

    with Producer(bootstrap) as producer:
        for i in range(3):
            producer.send("habits", f"cb{i}".encode(), partition=1, on_delivery=on_delivery)
        producer.send("habits", b"nowhere", partition=9, on_delivery=on_delivery)
        producer.flush(30)
    assert done.wait(30)
    delivered = sorted(m.offset for e, m in outcomes if e is None and m is not None)
    assert len(delivered) == 3 and delivered == list(range(delivered[0], delivered[0] + 3))
    (failed,) = [e for e, m in outcomes if e is not None]
    assert isinstance(failed, errors.UnknownPartition)
    assert all((e is None) != (m is None) for e, m in outcomes)
