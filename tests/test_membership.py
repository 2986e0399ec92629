"""Cluster membership with real broker processes: a broker joins a running cluster (and rejoins
after a restart without joining again), and a removed broker's replicas move first.

Observables: DescribeCluster/DescribeTopic, records fetched back, the metadata voters as
Internal.MetaMembers reports them, and the joined broker's log (the join happens once).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from broker.client import Admin, Producer
from broker.config import DEV_CLUSTER_SECRET
from proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import wait_until
from transport.internal import InternalClient

pytestmark = pytest.mark.timeout(240)


def meta_voters(cluster: ProcessCluster, via: int) -> set[str] | None:
    """The metadata voters broker ``via`` knows (None while it does not answer)."""
    client = InternalClient(DEV_CLUSTER_SECRET)
    try:
        return set(client.meta_members(cluster.client_addr(via), 5.0).members)
    except errors.Unavailable:
        return None
    finally:
        client.close()


def produce(bootstrap: str, topic: str, values: list[bytes]) -> set[tuple[int, int, bytes]]:
    """Send ``values``; the acknowledged ones as (partition, offset, value)."""
    acked = set()
    with Producer(bootstrap, linger_ms=1, request_timeout_ms=10_000) as producer:
        futures = [(producer.send(topic, v), v) for v in values]
        for future, value in futures:
            meta = future.result(timeout=60)
            acked.add((meta.partition, meta.offset, value))
    return acked


def read_all(admin: Admin, topic: str, partitions: int) -> set[tuple[int, int, bytes]]:
    out = set()
    for partition in range(partitions):
        offset = 0
        while True:
            records = admin.fetch(topic, partition, offset, max_records=500).records
            if not records:
                break
            out |= {(partition, r.offset, r.record.value) for r in records}
            offset = records[-1].offset + 1
    return out


def test_a_broker_joins_gets_replicas_of_new_topics_and_rejoins_after_restart(
    tmp_path: Path,
) -> None:
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        joiner = cluster.add_broker()
        cluster.start(joiner)
        cluster.wait_ready()
        voters = {cluster.raft_addr(i) for i in (1, 2, 3, joiner)}
        wait_until(lambda: meta_voters(cluster, 1) == voters, 30, "4 metadata voters")
        assert meta_voters(cluster, joiner) == voters

        admin = cluster.admin()
        admin.create_topic("after-join", partitions=4, replication_factor=3)
        described = cluster.wait_leaders("after-join")
        holders = [p.partition for p in described.partitions if joiner in p.replicas]
        assert len(holders) == 3  # 12 replicas over 4 brokers: 3 each
        acked = produce(cluster.bootstrap, "after-join", [b"a%d" % i for i in range(200)])
        wait_until(  # the joined broker's replicas follow the leaders
            lambda: all(
                joiner in p.in_sync
                for p in admin.describe_topic("after-join").partitions
                if p.partition in holders
            ),
            30,
            "the joined broker in sync",
        )

        cluster.kill(joiner)  # SIGKILL, then the same data directory
        acked |= produce(cluster.bootstrap, "after-join", [b"b%d" % i for i in range(200)])
        cluster.start(joiner)
        cluster.wait_ready()
        assert meta_voters(cluster, 1) == voters  # still 4 voters: not added twice
        wait_until(lambda: meta_voters(cluster, joiner) == voters, 30, "joined broker's view")
        wait_until(
            lambda: all(
                joiner in p.in_sync
                for p in admin.describe_topic("after-join").partitions
                if p.partition in holders
            ),
            30,
            "the restarted broker caught up",
        )
        # read through the restarted broker; its metadata copy may still be catching up
        # (UNAVAILABLE, retriable), never UNKNOWN_TOPIC for a topic that exists
        reader = cluster.admin(cluster.client_addr(joiner))

        def read_through_joiner() -> set[tuple[int, int, bytes]] | None:
            try:
                return read_all(reader, "after-join", 4)
            except errors.Unavailable:
                return None

        assert wait_until(read_through_joiner, 30, "a read through the joiner") == acked
        log = (tmp_path / f"broker-{joiner}.log").read_text()
        assert log.count("joined the metadata group") == 1  # the restart did not join again


@pytest.mark.slow
def test_removing_a_broker_moves_its_replicas_first(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, brokers=4) as cluster:  # 3 seeds, broker 4 joins
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("moving", partitions=4, replication_factor=3)
        cluster.wait_leaders("moving")
        acked = produce(cluster.bootstrap, "moving", [b"m%d" % i for i in range(500)])
        removed = 2
        holding = [
            p.partition for p in admin.describe_topic("moving").partitions if removed in p.replicas
        ]
        assert holding

        moved = admin.remove_broker(removed, timeout_s=120)
        assert moved == len(holding)
        described = admin.describe_topic("moving")
        for p in described.partitions:
            assert len(p.replicas) == 3 and removed not in p.replicas, p
        cluster_view = admin.describe_cluster()
        assert removed not in {b.id for b in cluster_view.brokers}
        assert cluster.raft_addr(removed) not in (meta_voters(cluster, 1) or set())

        cluster.kill(removed, signal.SIGKILL)
        survivors = ",".join(cluster.client_addr(i) for i in (1, 3, 4))
        live_admin = cluster.admin(survivors)
        cluster.wait_leaders("moving")
        wait_until(
            lambda: all(
                set(p.in_sync) == set(p.replicas)
                for p in live_admin.describe_topic("moving").partitions
            ),
            30,
            "every partition's three replicas in sync",
        )
        acked |= produce(survivors, "moving", [b"n%d" % i for i in range(200)])
        assert {p for p, _, _ in acked} == {0, 1, 2, 3}
        assert read_all(live_admin, "moving", 4) == acked
        with pytest.raises(errors.InvalidArgument):
            live_admin.remove_broker(removed, timeout_s=10)
