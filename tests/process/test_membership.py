"""Cluster membership with real broker processes: a broker joins a running cluster (and rejoins
after a restart without joining again), and a removed broker's replicas move first.

Observables: DescribeCluster/DescribeTopic, records fetched back, the metadata voters as
Internal.MetaMembers reports them, and the joined broker's log (the join happens once).
"""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from raftq.client import Admin, Producer
from raftq.config import DEV_CLUSTER_SECRET
from raftq.proto import errors
from raftq.transport.internal import InternalClient
from tests.cluster import ProcessCluster
from tests.helpers import wait_until
from tests.process.test_health import NOT_SERVING, SERVING
from tests.process.test_health import status as health_status

pytestmark = pytest.mark.timeout(240)


def meta_members(cluster: ProcessCluster, via: int) -> tuple[set[str], set[str]] | None:
    """The metadata members and learners broker ``via`` knows (None while it does not answer)."""
    client = InternalClient(DEV_CLUSTER_SECRET)
    try:
        answer = client.meta_members(cluster.client_addr(via), 5.0)
    except errors.Unavailable:
        return None
    finally:
        client.close()
    return set(answer.members), set(answer.learners)


def meta_voters(cluster: ProcessCluster, via: int) -> set[str] | None:
    """The metadata voters broker ``via`` knows (None while it does not answer)."""
    known = meta_members(cluster, via)
    return None if known is None else known[0] - known[1]


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
            out |= {(partition, r.offset, r.value) for r in records}
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
        # raft.metadata_voters = 3: the 4th broker is a learner, replicated to, not voting
        members = {cluster.raft_addr(i) for i in (1, 2, 3, joiner)}
        voters = {cluster.raft_addr(i) for i in (1, 2, 3)}
        learner = {cluster.raft_addr(joiner)}
        wait_until(lambda: meta_members(cluster, 1) == (members, learner), 30, "3 voters + 1")
        wait_until(lambda: meta_members(cluster, joiner) == (members, learner), 30, "its view")
        assert all(meta_voters(cluster, i) == voters for i in (1, 2, 3))
        roles = {b.id: b.metadata_voter for b in cluster.admin().describe_cluster().brokers}
        assert roles == {1: True, 2: True, 3: True, joiner: False}

        admin = cluster.admin()
        admin.create_topic("after-join", partitions=4, replication_factor=3)
        described = cluster.wait_leaders("after-join")
        holders = [p.partition for p in described.partitions if joiner in p.replicas]
        assert len(holders) == 3  # 12 replicas over 4 brokers: 3 each
        acked = produce(cluster.bootstrap, "after-join", [b"a%d" % i for i in range(200)])
        wait_until(  # the joined broker's replicas follow the leaders
            lambda: all(
                joiner in p.isr
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
        assert meta_members(cluster, 1) == (members, learner)  # not added twice, not promoted
        wait_until(lambda: meta_members(cluster, joiner) == (members, learner), 30, "its view")
        wait_until(
            lambda: all(
                joiner in p.isr
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

        removing = ThreadPoolExecutor(1).submit(admin.remove_broker, removed, timeout_s=120)
        # draining, then removed: out of rotation (gRPC health) from the first report ack on
        wait_until(
            lambda: health_status(cluster.client_addr(removed)) == NOT_SERVING, 60, "drained"
        )
        moved = removing.result(timeout=130)
        assert moved == len(holding)
        assert health_status(cluster.client_addr(removed)) == NOT_SERVING
        assert health_status(cluster.client_addr(1)) == SERVING
        described = admin.describe_topic("moving")
        for p in described.partitions:
            assert len(p.replicas) == 3 and removed not in p.replicas, p
        cluster_view = admin.describe_cluster()
        assert removed not in {b.id for b in cluster_view.brokers}
        assert cluster.raft_addr(removed) not in (meta_voters(cluster, 1) or set())
        # broker 4 joined as a learner; with a voter removed it is promoted: 3 voters again
        survivors_raft = {cluster.raft_addr(i) for i in (1, 3, 4)}
        wait_until(lambda: meta_voters(cluster, 1) == survivors_raft, 30, "learner promoted")

        cluster.kill(removed, signal.SIGKILL)
        survivors = ",".join(cluster.client_addr(i) for i in (1, 3, 4))
        live_admin = cluster.admin(survivors)
        cluster.wait_leaders("moving")
        wait_until(
            lambda: all(
                set(p.isr) == set(p.replicas)
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


def test_learners_are_promoted_until_metadata_voters_are_reached(tmp_path: Path) -> None:
    """One seed, raft.metadata_voters = 3, three brokers: both joiners start as learners and
    are promoted (each once it has caught up); the table reaches every broker. (The fourth
    broker staying a learner: the join test above.)"""
    with ProcessCluster(tmp_path, brokers=3, seeds=1) as cluster:
        cluster.wait_ready()
        addrs = {i: cluster.raft_addr(i) for i in (1, 2, 3)}

        def shape() -> tuple[int, int] | None:
            known = meta_members(cluster, 1)
            if known is None or known[0] != set(addrs.values()):
                return None
            return len(known[0] - known[1]), len(known[1])

        wait_until(lambda: shape() == (3, 0), 60, "3 voters, no learner left")
        logs = "".join((tmp_path / f"broker-{i}.log").read_text() for i in (1, 2, 3))
        assert logs.count("added as a learner") == 2 and logs.count("promoted to voter") == 2
        wait_until(
            lambda: all(meta_members(cluster, i) == meta_members(cluster, 1) for i in (2, 3)),
            30,
            "every broker's view of the members",
        )
        admin = cluster.admin()
        admin.create_topic("everywhere", partitions=4, replication_factor=3)
        cluster.wait_leaders("everywhere")
        readers = [cluster.admin(cluster.client_addr(i)) for i in (1, 2, 3)]
        wait_until(  # every broker's table has the topic
            lambda: all("everywhere" in {t.name for t in r.list_topics()} for r in readers),
            30,
            "the topic in every broker's table",
        )
