"""A hung (SIGSTOPped) partition leader: its sockets stay open, nothing answers on them.

Real broker processes (tests/cluster.py). The survivors elect a new leader when the hung
broker's raft link falls silent; the Producer and the Consumer find the hung broker by gRPC
keepalive pings instead of waiting out their 30 s request timeout, and go to the others. The
speed is measured by ``python -m bench failover --failover-stop``; this test checks that
sending and consuming resume well inside the request timeout, and that after the broker is
continued nothing acknowledged is lost.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from bench.failover import ContinuousConsumer, ContinuousSender, wait_preferred_leader
from raftq.client import Consumer, Producer
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(240)

RESUME_S = 10.0  # far below the 30 s request timeout a hung broker used to cost


def test_producer_and_consumer_move_off_a_hung_partition_leader(tmp_path: Path) -> None:
    topic = "hung"
    with ProcessCluster(tmp_path, brokers=3, fast=False) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic(topic, partitions=1, replication_factor=3)
        victim = wait_preferred_leader(cluster, topic, 0)
        with (
            Producer(cluster.bootstrap, linger_ms=0) as producer,
            Consumer(cluster.bootstrap, "workers", [topic], lease_ms=5_000) as consumer,
        ):
            sender = ContinuousSender(producer, topic, 0).start()
            reader = ContinuousConsumer(consumer)
            try:
                wait_until(lambda: len(reader.delivered) >= 20, 60, "records flowing")
                stopped_at = time.monotonic()
                cluster.kill(victim, signal.SIGSTOP)
                time.sleep(0.01)  # acks already on the wire land; none come from it after
                after = time.monotonic()
                resumed = wait_until(
                    lambda: min(sender.acks_after(after), default=0.0),
                    RESUME_S,
                    f"a send acknowledged after broker {victim} hung",
                )
                consumed = wait_until(
                    lambda: reader.first_delivery_of_acked_after(sender, after),
                    RESUME_S,
                    "a record acknowledged after the hang consumed",
                )
                print(
                    f"broker {victim} hung: send acked after {resumed - stopped_at:.2f} s, "
                    f"consumed after {consumed - stopped_at:.2f} s"
                )
            finally:
                cluster.kill(victim, signal.SIGCONT)
                sender.stop()
            wait_until(lambda: all(v in reader.delivered for v in sender.acked), 60, "all consumed")
            reader.stop()
        assert not sender.failures, sender.failures[:3]
        stored: dict[bytes, int] = {}
        offset = 0
        while True:
            fetched = admin.fetch(topic, 0, offset, 1000)
            if not fetched.records:
                break
            for r in fetched.records:
                assert r.value not in stored, f"{r.value!r} stored twice"
                stored[r.value] = r.offset
            offset = fetched.records[-1].offset + 1
        lost = {v: o for v, o in sender.acked.items() if stored.get(v) != o}
        assert not lost, f"{len(lost)} acknowledged records lost or moved: {list(lost)[:5]}"


@pytest.mark.slow  # four broker processes: ~35 s on a loaded machine
def test_a_broker_without_a_replica_follows_a_hung_leaders_successor(tmp_path: Path) -> None:
    """RF 3 on 4 brokers: the fourth broker holds no replica, so it knows the partition's
    leader only as the preferred one (or a NOT_LEADER hint). When that leader hangs, the
    outsider asks the other replicas instead of calling the hung one again and again; clients
    that know only the outsider keep sending and consuming."""
    topic = "hung2"
    with ProcessCluster(tmp_path, brokers=4, fast=False) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic(topic, partitions=1, replication_factor=3)
        victim = wait_preferred_leader(cluster, topic, 0)
        replicas = list(admin.describe_topic(topic).partitions[0].replicas)
        outsider = next(i for i in (1, 2, 3, 4) if i not in replicas)
        bootstrap = cluster.client_addr(outsider)
        with (
            Producer(bootstrap, linger_ms=0) as producer,
            Consumer(bootstrap, "workers", [topic], lease_ms=5_000) as consumer,
        ):
            sender = ContinuousSender(producer, topic, 0).start()
            reader = ContinuousConsumer(consumer)
            try:
                wait_until(lambda: len(reader.delivered) >= 20, 60, "records flowing")
                cluster.kill(victim, signal.SIGSTOP)
                time.sleep(0.01)
                after = time.monotonic()
                wait_until(
                    lambda: sender.acks_after(after), RESUME_S, "a send acknowledged after the hang"
                )
                wait_until(
                    lambda: reader.first_delivery_of_acked_after(sender, after),
                    RESUME_S,
                    "a record acknowledged after the hang consumed",
                )
            finally:
                cluster.kill(victim, signal.SIGCONT)
                sender.stop()
                reader.stop()
        assert not sender.failures, sender.failures[:3]
