"""Growing a topic (``raftq topic add-partitions``, Admin.AddPartitions) and preferred leader
election (``raftq cluster rebalance-leaders``, Admin.RebalanceLeaders) on real broker processes
(issue 17).

Growing: keyed records produced after the growth go to murmur2(key) mod the new count (as in
Kafka: a key's partition changes), a group subscribed to the topic is rebalanced onto the new
partitions, and nothing produced before or after is lost. Leaders: with
``broker.auto_leader_rebalance`` off, a restarted broker gets back none of its leaderships until
the call moves them.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from raftq import cli
from raftq.assignors.partitioner import partition_for
from raftq.client import Admin, Consumer, LeaderRebalance, Producer
from raftq.client.aio import AsyncAdmin
from raftq.proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(240)

TOPIC = "orders"
KEYS = 60
SESSION_MS = 30_000  # long: a loaded machine must not expire the member the test keeps


def run_cli(bootstrap: str, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main([*argv, "--bootstrap", bootstrap])
    out, err = capsys.readouterr()
    return code, out, err


def produce_keyed(producer: Producer, batch: str) -> dict[bytes, int]:
    """KEYS records keyed k0..; value -> the partition the producer put it in."""
    futures = {
        f"{batch}-{i}".encode(): producer.send(TOPIC, f"{batch}-{i}".encode(), key=b"k%d" % i)
        for i in range(KEYS)
    }
    return {value: future.result(timeout=30).partition for value, future in futures.items()}


def consume_all(consumer: Consumer, wanted: set[bytes], timeout_s: float = 60.0) -> list[bytes]:
    """Poll and ack until every wanted value came; every value received, in order."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while not wanted <= set(got) and time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=500)
        got += [m.value for m in batch]
        if batch:
            assert not any(consumer.ack(batch))
    assert wanted <= set(got), f"missing {sorted(wanted - set(got))[:10]}"
    return got


def test_add_partitions_places_new_keys_and_rebalances_the_group_losing_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ProcessCluster(tmp_path, 3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic(TOPIC, partitions=2, replication_factor=2)
        cluster.wait_leaders(TOPIC)
        # through a broker that is not the metadata leader: it forwards, typed errors included
        leader = admin.describe_cluster().metadata_leader
        other = next(b for b in (1, 2, 3) if b != leader)
        via = cluster.admin(cluster.client_addr(other))
        # a Producer running across the growth refetches metadata older than its max age (0:
        # before every batch, for the test; 5 minutes by default)
        running = Producer(cluster.bootstrap, linger_ms=1, metadata_max_age_ms=0)
        with (
            running,
            Consumer(cluster.bootstrap, "g", [TOPIC], session_timeout_ms=SESSION_MS) as member,
        ):
            before = produce_keyed(running, "before")
            assert all(p == partition_for(b"k%d" % i, 2, 0) for i, p in enumerate(before.values()))
            generation = admin.describe_group("g").generation

            # bad input: at and below the current count, past the limit, unknown topic; the
            # asyncio Admin answers the same; nothing changes
            with pytest.raises(errors.InvalidArgument, match=r"2\.\.10000"):
                via.add_partitions(TOPIC, 1)  # no topic has fewer: refused at the first hop
            with pytest.raises(errors.InvalidArgument, match="only grow"):
                via.add_partitions(TOPIC, 2)
            with pytest.raises(errors.InvalidArgument):
                via.add_partitions(TOPIC, 10_001)
            with pytest.raises(errors.UnknownTopic):
                via.add_partitions("missing", 4)

            async def aio_bad() -> None:
                async with AsyncAdmin(cluster.bootstrap) as aio:
                    with pytest.raises(errors.InvalidArgument, match="only grow"):
                        await aio.add_partitions(TOPIC, 2)

            asyncio.run(aio_bad())
            code, _, err = run_cli(cluster.bootstrap, capsys, "topic", "add-partitions", TOPIC,
                                   "--partitions", "0")  # fmt: skip
            assert code != 0 and "INVALID_ARGUMENT" in err
            assert len(admin.describe_topic(TOPIC).partitions) == 2
            assert admin.describe_group("g").generation == generation

            code, _, err = run_cli(
                cluster.client_addr(other), capsys, "topic", "add-partitions", TOPIC,
                "--partitions", "5", "--json",
            )  # fmt: skip
            assert code == 0, err
            grown = cluster.wait_leaders(TOPIC)
            assert [p.partition for p in grown.partitions] == [0, 1, 2, 3, 4]
            assert all(len(p.replicas) == 2 for p in grown.partitions)

            # keyed records produced now go to murmur2(key) mod 5, the new partitions included:
            # a new Producer's at once, the running one's once its next batch refetched
            probe = running.send(TOPIC, b"probe", key=b"k0").result(timeout=30)
            # chosen from the count it had cached; sending its batch refetched the metadata
            assert probe.partition == partition_for(b"k0", 2, 0)
            after = produce_keyed(running, "after")
            with Producer(cluster.bootstrap, linger_ms=1) as fresh:
                new = produce_keyed(fresh, "new")
            assert list(new.values()) == list(after.values())
            assert all(p == partition_for(b"k%d" % i, 5, 0) for i, p in enumerate(after.values()))
            assert set(after.values()) & {2, 3, 4}
            placed = [*before.values(), *after.values(), *new.values(), probe.partition]
            wait_until(  # the leaders' reports (twice a second) show what they stored
                lambda: all(
                    p.end >= placed.count(p.partition)
                    for p in admin.describe_topic(TOPIC).partitions
                ),
                30,
                "the new partitions' records in describe",
            )

            # the live member was rebalanced onto all five partitions and gets everything
            got = consume_all(member, {*before, *after, *new, b"probe"})
            assert len(got) == len(set(got)) == 3 * KEYS + 1
            described = admin.describe_group("g")
            assert described.generation > generation
            owned = [p for m in described.members for t in m.assignment for p in t.partitions]
            assert sorted(owned) == [0, 1, 2, 3, 4]


def off_preferred(admin: Admin, topic: str) -> list[int]:
    return [
        p.partition for p in admin.describe_topic(topic).partitions if p.leader != p.replicas[0]
    ]


def test_rebalance_leaders_moves_leadership_back_to_the_preferred_replicas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"RAFTQ_BROKER__AUTO_LEADER_REBALANCE": "false"}
    with ProcessCluster(tmp_path, 3, env=env) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic(TOPIC, partitions=6, replication_factor=3)
        cluster.wait_leaders(TOPIC)

        def rebalanced(via: Admin) -> LeaderRebalance | None:
            """Call until nothing remains (a restarted replica may not have caught up)."""
            result = via.rebalance_leaders()
            moved.append(result.moved)
            return result if result.remaining == 0 else None

        moved: list[int] = []
        wait_until(lambda: rebalanced(admin), 60, "preferred leaders at start")
        assert off_preferred(admin, TOPIC) == []

        victim = cluster.leader_of(TOPIC, 0)  # the preferred leader of 2 of the 6 partitions
        led = [p.partition for p in admin.describe_topic(TOPIC).partitions if p.leader == victim]
        cluster.kill(victim)
        cluster.wait_leaders(TOPIC)
        cluster.start(victim)
        wait_until(
            lambda: all(b.alive for b in admin.describe_cluster().brokers), 60, "victim back"
        )
        # auto rebalance is off: the restarted broker leads nothing of its own
        assert off_preferred(admin, TOPIC) == led

        # the call, through a broker that is not the metadata leader, moves them back
        leader = admin.describe_cluster().metadata_leader
        other = next(b for b in (1, 2, 3) if b != leader)
        moved.clear()
        via = cluster.admin(cluster.client_addr(other))
        # called again only if an election (the restarted replicas may stand for one) moved a
        # leadership off its preferred replica after a call said none remained
        wait_until(lambda: rebalanced(via) and not off_preferred(admin, TOPIC), 60, "moved back")
        assert sum(moved) >= len(led) and all(0 <= m <= 6 for m in moved)
        code, out, err = run_cli(cluster.bootstrap, capsys, "cluster", "rebalance-leaders")
        assert code == 0, err
        assert re.match(r"\d+ partitions moved to their preferred leader; \d+ still led", out)

        async def aio_rebalance() -> LeaderRebalance:
            async with AsyncAdmin(cluster.bootstrap) as aio:
                return await aio.rebalance_leaders()

        answer = asyncio.run(aio_rebalance())
        assert isinstance(answer, LeaderRebalance)
        assert answer.moved + answer.remaining <= 6
