"""Dead letters reach their dead-letter topic once, with the topic's replication factor.

- A dead-letter topic is created on the metadata leader, whose view of live brokers sets its
  replication factor, even when the dead-lettering partition's leader is another broker (3 real
  broker processes; tests/cluster.py).
- Forwarding the same outbox rows twice — what a new partition leader does when the old one died
  between forwarding them and proposing ``DeadLetterDone`` — stores each dead letter once (an
  in-process broker: real gRPC, SQLite and Raft, its backend stopped so the test forwards).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from raftq.client import Admin, Consumer, Producer, TopicInfo
from raftq.proto import errors
from raftq.server import Broker
from tests.cluster import InProcessCluster, ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(180)


def fetch_all(admin: Admin, topic: str, partition: int) -> list[bytes]:
    values: list[bytes] = []
    offset = 0
    while True:
        fetched = admin.fetch(topic, partition, offset, 1000)
        if not fetched.records:
            return values
        values += [r.value for r in fetched.records]
        offset = fetched.records[-1].offset + 1


def nack_all(consumer: Consumer, count: int) -> None:
    """Poll and nack until ``count`` records were nacked (each dead-letters at once)."""
    nacked = 0

    def more() -> bool:
        nonlocal nacked
        messages = consumer.poll(timeout_ms=200)
        for error in consumer.nack(messages):
            assert error is None, error
        nacked += len(messages)
        return nacked >= count

    wait_until(more, 60, f"{count} records nacked")


def test_a_dead_letter_topic_created_through_a_partition_leader_that_is_not_the_metadata_leader_has_the_topics_replication_factor(  # noqa: E501
    tmp_path: Path,
) -> None:
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("jobs", partitions=3, replication_factor=3, max_deliveries=1)

        def led_elsewhere() -> int:
            """A partition stably led (by its preferred leader) off the metadata leader, + 1."""
            meta_leader = admin.describe_cluster().metadata_leader
            for p in admin.describe_topic("jobs").partitions:
                if p.leader and p.leader == p.replicas[0] and p.leader != meta_leader:
                    return int(p.partition) + 1
            return 0

        partition = wait_until(led_elsewhere, 60, "a partition led off the metadata leader") - 1
        with Producer(cluster.bootstrap, linger_ms=0) as producer:
            producer.send("jobs", b"poison", partition=partition).result(timeout=30)
        with Consumer(cluster.bootstrap, "workers", ["jobs"]) as consumer:
            nack_all(consumer, 1)

        def dead_letter_topic() -> TopicInfo | None:
            try:
                described = admin.describe_topic("jobs.dlq")
            except errors.UnknownTopic:
                return None
            partitions = [p.partition for p in described.partitions]
            stored = sum(len(fetch_all(admin, "jobs.dlq", p)) for p in partitions)
            return described if stored == 1 else None

        described = wait_until(dead_letter_topic, 60, "the dead letter in jobs.dlq")
        assert described is not None
        assert described.replication_factor == 3
        assert [len(p.replicas) for p in described.partitions] == [3, 3, 3]


@pytest.fixture
def solo_broker(cluster: InProcessCluster) -> Broker:
    return cluster.broker(1)  # the `cluster` fixture's one broker, in this process


def test_dead_letters_forwarded_twice_are_stored_once(solo_broker: Broker) -> None:
    broker = solo_broker
    address = broker.config.broker.client_addr
    admin = Admin(address)
    try:
        wait_until(lambda: broker.meta.is_leader() and broker.meta.table.broker(1), 30, "ready")
        # The dead-letter topic has more partitions than the source: key-less dead letters
        # could land on any of them.
        admin.create_topic("work.dlq", partitions=4)
        admin.create_topic("work", partitions=1, max_deliveries=1)
        wait_until(lambda: broker.replicas.get(("work", 0)), 30, "work/0 open")
        replica = broker.replicas.get(("work", 0))
        assert replica is not None
        info = broker.meta.table.topics["work"]
        wait_until(lambda: replica.config_bytes() == info.config_bytes, 30, "config replicated")
        broker.backend.stop()  # from here on the test forwards the outbox, not the backend
        with Producer(address, linger_ms=0) as producer:
            values = [b"job-%d" % i for i in range(6)]
            for future in [producer.send("work", v) for v in values]:
                future.result(timeout=30)
            producer.send("work", b"keyed", key=b"key")  # to work.dlq/1.result(timeout=30)
        with Consumer(address, "workers", ["work"]) as consumer:
            nack_all(consumer, 7)
        rows = replica.outbox(100)
        assert len(rows) == 7
        # The first leader forwards and dies before DeadLetterDone; the next forwards again.
        broker.backend._send_dead_letters(replica, rows, "work.dlq", 4)
        broker.backend._send_dead_letters(replica, rows, "work.dlq", 4)
        stored = [v for p in range(4) for v in fetch_all(admin, "work.dlq", p)]
        assert sorted(stored) == sorted([*values, b"keyed"])
        assert fetch_all(admin, "work.dlq", 0) == values  # the source partition's number
    finally:
        admin.close()
