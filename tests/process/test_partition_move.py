"""``raftq partition move`` under load on real broker processes (issue 17; Kafka's partition
reassignment): a producer and a consumer group run through the move of a partition off its
leader's broker onto a broker that had no replica; nothing acknowledged is lost, no record is
written twice, and a record is delivered again only as a redelivery (a higher delivery count).
"""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path

import pytest

from raftq import cli
from raftq.client import Admin, Consumer, Producer, SendFuture
from raftq.proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(300)

TOPIC = "moving"


def test_move_a_partition_off_its_leader_under_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ProcessCluster(tmp_path, 4) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic(TOPIC, partitions=1, replication_factor=3)
        cluster.wait_leaders(TOPIC)
        before = list(admin.describe_topic(TOPIC).partitions[0].replicas)
        leader = cluster.leader_of(TOPIC, 0)
        (newcomer,) = {1, 2, 3, 4} - set(before)
        target = [newcomer, *[b for b in before if b != leader]]  # the leader's broker leaves

        stop = threading.Event()  # the producer stops
        done = threading.Event()  # the consumer stops: everything acked was delivered
        sent: list[tuple[int, SendFuture]] = []
        deliveries: dict[bytes, list[int]] = collections.defaultdict(list)
        failures: list[BaseException] = []

        def produce() -> None:
            with Producer(cluster.bootstrap, linger_ms=2) as producer:
                i = 0
                while not stop.is_set():
                    sent.append((i, producer.send(TOPIC, b"r%d" % i)))
                    i += 1
                    time.sleep(0.004)
                producer.flush(30)

        def consume() -> None:
            try:
                with Consumer(
                    cluster.bootstrap, "g", [TOPIC], session_timeout_ms=30_000, lease_ms=5_000
                ) as consumer:
                    while not done.is_set():
                        try:
                            batch = consumer.poll(timeout_ms=200)
                            for message in batch:
                                deliveries[message.value].append(message.delivery_count)
                            consumer.ack(batch)  # a failed ack: redelivered, counted then
                        except errors.RaftqError as exc:
                            if not exc.retriable:
                                raise
                            # a call cut by its deadline on a loaded machine: the records
                            # it leased come again after lease_ms, as for any consumer
            except BaseException as exc:  # surfaced by the main thread
                failures.append(exc)

        threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
        for thread in threads:
            thread.start()
        try:
            wait_until(lambda: len(deliveries) > 200, 60, "traffic before the move")
            code = cli.main(
                [
                    "partition",
                    "move",
                    TOPIC,
                    "0",
                    "--replicas",
                    ",".join(map(str, target)),
                    "--bootstrap",
                    cluster.bootstrap,
                ]
            )
            out, err = capsys.readouterr()
            assert code == 0, (out, err)
            assert f"on brokers {target}" in out, out
            moved_at = len(sent)
            wait_until(lambda: len(sent) > moved_at + 200, 60, "traffic after the move")
            stop.set()
            threads[0].join(60)
            for _, future in sent:
                future.result(timeout=60)  # every send of the run was acknowledged
            acked = {b"r%d" % i for i, _ in sent}
            wait_until(
                lambda: failures or acked <= deliveries.keys(), 90, "every acked record delivered"
            )
        finally:
            stop.set()
            done.set()
            for thread in threads:
                thread.join(60)
        assert not failures, failures
        assert acked <= deliveries.keys(), f"lost: {sorted(acked - deliveries.keys())[:10]}"
        for value, counts in deliveries.items():
            # again only as a redelivery: never the same delivery twice
            assert counts == sorted(set(counts)), (value, counts)
        described = admin.describe_topic(TOPIC).partitions[0]
        assert list(described.replicas) == target
        assert_log_once(admin, len(acked))


def assert_log_once(admin: Admin, count: int) -> None:
    """The partition's log holds every record once (no producer retry wrote one twice)."""
    values: list[bytes] = []
    offset = 0
    while len(values) < count:
        fetched = admin.fetch(TOPIC, 0, offset, 1000).records
        assert fetched, (offset, len(values), count)
        values += [r.value for r in fetched]
        offset = fetched[-1].offset + 1
    assert len(values) == len(set(values)) == count


def test_move_refuses_bad_input(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, 3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("t", partitions=1, replication_factor=3)
        cluster.wait_leaders("t")
        with pytest.raises(errors.UnknownTopic):
            admin.move_partition("nope", 0, [1, 2, 3])
        with pytest.raises(errors.UnknownPartition):
            admin.move_partition("t", 5, [1, 2, 3])
        for replicas in ([], [1, 1, 2], [1, 2, 9], [0, 1, 2]):
            with pytest.raises(errors.InvalidArgument):
                admin.move_partition("t", 0, replicas)
        assert list(admin.describe_topic("t").partitions[0].replicas) != []
        unchanged = list(admin.describe_topic("t").partitions[0].replicas)
        # the same set again is done at once
        again = admin.move_partition("t", 0, unchanged, timeout_s=30)
        assert list(again.replicas) == unchanged and again.leader in unchanged


def test_move_a_single_replica_to_another_broker(tmp_path: Path) -> None:
    """RF 1: the new set shares no broker with the old one, so no new voter can take over
    before the leader added it (the leader adds it as a learner, promotes it, hands over)."""
    with ProcessCluster(tmp_path, 3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("solo", partitions=1, replication_factor=1)
        cluster.wait_leaders("solo")
        with Producer(cluster.bootstrap, linger_ms=1) as producer:
            for future in [producer.send("solo", b"s%d" % i) for i in range(20)]:
                future.result(timeout=30)
        (old,) = admin.describe_topic("solo").partitions[0].replicas
        new = next(b for b in (1, 2, 3) if b != old)
        moved = admin.move_partition("solo", 0, [new], timeout_s=120)
        assert (list(moved.replicas), moved.leader) == ([new], new)
        records = admin.fetch("solo", 0, 0, 100).records
        assert [r.value for r in records] == [b"s%d" % i for i in range(20)]
