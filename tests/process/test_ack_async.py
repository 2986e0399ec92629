"""Consumer.ack_async on three broker processes (RF 3, the Consumer bootstrapped on all three,
so its acks may be forwarded): acked records are not redelivered, close() sends the pending
acks before it leaves the group, an expired lease resolves to LeaseExpired, later settles wait
for pending acks, and a failed call reaches the future."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from raftq.client import Consumer, Message, Producer
from raftq.proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import unique_name

pytestmark = pytest.mark.timeout(180)
WAIT_MS = 5_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with ProcessCluster(tmp_path_factory.mktemp("acks"), 3) as built:
        built.wait_ready()
        yield built


def topic_with(cluster: ProcessCluster, records: int, lease_ms: int = 60_000) -> str:
    topic = unique_name("acks")
    cluster.admin().create_topic(topic, partitions=1, replication_factor=3, lease_ms=lease_ms)
    cluster.wait_leaders(topic)
    with Producer(cluster.bootstrap) as producer:
        for i in range(records):
            producer.send(topic, str(i).encode())
        producer.flush(30)
    return topic


def poll_all(consumer: Consumer, count: int) -> list[Message]:
    got: list[Message] = []
    while len(got) < count:
        more = consumer.poll(count - len(got), timeout_ms=WAIT_MS)
        assert more, f"only {len(got)} of {count} records came"
        got += more
    return got


def test_acked_records_are_not_redelivered_and_batches_answer_per_message(
    cluster: ProcessCluster,
) -> None:
    topic = topic_with(cluster, 40, lease_ms=1_000)
    with Consumer(cluster.bootstrap, unique_name("g"), [topic]) as consumer:
        got = poll_all(consumer, 40)
        futures = [consumer.ack_async(got[i : i + 7]) for i in range(0, 40, 7)]
        results = [f.result(30) for f in futures]
        assert results == [[None] * len(got[i : i + 7]) for i in range(0, 40, 7)]
        # Each lease ran out long ago by the end of this wait: unacked records would be back.
        assert consumer.poll(40, timeout_ms=2_500) == []


def test_close_right_after_ack_async_sends_the_acks_before_leaving(
    cluster: ProcessCluster,
) -> None:
    topic, group = topic_with(cluster, 20), unique_name("g")
    consumer = Consumer(cluster.bootstrap, group, [topic])
    got = poll_all(consumer, 20)
    futures = [consumer.ack_async(got[:10]), consumer.ack_async(got[10:])]
    consumer.close()  # leaving releases the leases: had the acks not gone first, all 20 return
    assert all(f.done() for f in futures)
    assert [f.result() for f in futures] == [[None] * 10, [None] * 10]
    with pytest.raises(errors.InvalidArgument):
        consumer.ack_async(got)
    with Consumer(cluster.bootstrap, group, [topic]) as successor:
        assert successor.poll(20, timeout_ms=1_000) == []


def test_ack_async_of_an_expired_lease_resolves_to_lease_expired(
    cluster: ProcessCluster,
) -> None:
    topic = topic_with(cluster, 1, lease_ms=300)
    with Consumer(cluster.bootstrap, unique_name("g"), [topic]) as consumer:
        (first,) = poll_all(consumer, 1)
        (again,) = poll_all(consumer, 1)  # the lease ran out: redelivered
        assert (again.offset, again.delivery_count) == (first.offset, 2)
        (stale,) = consumer.ack_async([first]).result(30)
        assert isinstance(stale, errors.LeaseExpired), stale


def test_a_later_nack_waits_for_the_pending_ack(cluster: ProcessCluster) -> None:
    topic = topic_with(cluster, 10)
    with Consumer(cluster.bootstrap, unique_name("g"), [topic]) as consumer:
        got = poll_all(consumer, 10)
        pending = consumer.ack_async(got)
        nacked = consumer.nack(got, delay_ms=0)  # sent after the ack: nothing left to give back
        assert pending.result(0) == [None] * 10
        assert all(isinstance(e, errors.RecordNotFound) for e in nacked), nacked
        assert consumer.poll(10, timeout_ms=1_000) == []


def test_a_failed_ack_call_reaches_the_future(cluster: ProcessCluster) -> None:
    topic = topic_with(cluster, 1)
    with Consumer(cluster.bootstrap, unique_name("g"), [topic]) as consumer:
        (message,) = poll_all(consumer, 1)
        bogus = Message(**{**vars(message), "topic": "", "_consumer": consumer})
        future = consumer.ack_async([bogus])
        assert isinstance(future.exception(30), errors.InvalidArgument)
        assert consumer.ack_async([message]).result(30) == [None]  # the worker carries on
