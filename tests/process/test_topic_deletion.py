"""Deleting topics: every replica's files go (also on a broker that was down), cleanly, and no
broker stops reporting while it happens (issue 12 item 6, issue 13 item 9).

Real broker processes (tests/cluster.py); a report missed for 3 s makes the metadata leader
count a broker dead, which DescribeCluster shows as ``alive = false``.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from raftq.backend import deleted_topic_dirs
from raftq.client import Admin, Producer
from raftq.metadata.table import Table, TopicInfo, frozen_map
from raftq.proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import wait_until


def _topic(name: str, topic_id: int) -> TopicInfo:
    return TopicInfo(name, topic_id, b"", ())


def test_deleted_topic_dirs_are_ids_handed_out_that_no_topic_has() -> None:
    table = Table(
        topics=frozen_map({"a-b": _topic("a-b", 3), "c": _topic("c", 5)}), next_topic_id=6
    )
    names = ["a-b-3", "a-b-2", "c-5", "c-4", "gone-1", "later-6", "later-9", "junk", "x-y"]
    assert deleted_topic_dirs(table, names) == [("a-b-2", 2), ("c-4", 4), ("gone-1", 1)]
    # a table still replaying after a restart (next id 1) deletes nothing
    assert deleted_topic_dirs(Table(), names) == []


def _topic_dirs(cluster: ProcessCluster, broker: int, topic: str) -> list[Path]:
    root = cluster.root / f"broker-{broker}" / "partitions"
    return sorted(root.glob(f"{topic}-*")) if root.is_dir() else []


def _fill(cluster: ProcessCluster, topic: str, partitions: int) -> None:
    with Producer(cluster.bootstrap) as producer:
        futures = [producer.send(topic, b"v%d" % i, partition=i % partitions) for i in range(40)]
        for future in futures:
            future.result(30)


def _no_file_errors(cluster: ProcessCluster) -> None:
    for i in cluster.procs:
        log = (cluster.root / f"broker-{i}.log").read_text(errors="replace")
        assert "FileNotFoundError" not in log, cluster.logs(80)
        assert "journal.meta.tmp" not in log, cluster.logs(80)


def test_deleting_a_multi_partition_topic_removes_every_replica_cleanly(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("multi", partitions=6, replication_factor=3)
        cluster.wait_leaders("multi")
        _fill(cluster, "multi", 6)
        assert all(_topic_dirs(cluster, i, "multi") for i in (1, 2, 3))
        admin.delete_topic("multi")
        wait_until(
            lambda: not any(_topic_dirs(cluster, i, "multi") for i in (1, 2, 3)),
            30,
            "every broker removed multi's files",
        )
        _no_file_errors(cluster)
        # the same name again is a new topic that works
        admin.create_topic("multi", partitions=2, replication_factor=3)
        cluster.wait_leaders("multi")
        _fill(cluster, "multi", 2)


def test_a_topic_deleted_while_a_broker_was_down_leaves_no_files_after_its_restart(
    tmp_path: Path,
) -> None:
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("doomed", partitions=3, replication_factor=3)
        admin.create_topic("kept", partitions=2, replication_factor=3)
        for topic in ("doomed", "kept"):
            cluster.wait_leaders(topic)
            _fill(cluster, topic, 2)
        cluster.kill(3)  # mid-deletion, as far as broker 3 is concerned: it never sees it live
        admin = cluster.admin(cluster.live_bootstrap())
        admin.delete_topic("doomed")
        wait_until(
            lambda: not any(_topic_dirs(cluster, i, "doomed") for i in (1, 2)),
            30,
            "the live brokers removed doomed's files",
        )
        assert _topic_dirs(cluster, 3, "doomed"), "broker 3 was down: its files are still there"
        cluster.start(3)
        cluster.wait_ready()
        wait_until(
            lambda: not _topic_dirs(cluster, 3, "doomed"),
            30,
            "broker 3 removed doomed's files after its restart",
        )
        assert len(_topic_dirs(cluster, 3, "kept")) == 1, "a live topic's files stay"
        _no_file_errors(cluster)


def _delete_many_while_watching(cluster: ProcessCluster, topics: int, partitions: int) -> None:
    """Create ``topics`` topics, delete them all at once, and check every DescribeCluster of
    the metadata leader, until every file is gone, shows every broker alive."""
    admin = cluster.admin()
    names = [f"del{i}" for i in range(topics)]

    def create(name: str) -> None:
        while True:  # a loaded cluster may time a creation out: it may have applied
            try:
                admin.create_topic(name, partitions=partitions)
                return
            except errors.TopicExists:
                return
            except errors.InvalidArgument:  # a new metadata leader before the brokers reported
                cluster.wait_ready()
            except errors.RaftqError as exc:  # Timeout, NotLeader (leader moved), Unavailable
                if not exc.retriable:
                    raise

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(create, names))
    for name in names:
        cluster.wait_leaders(name, 60)
    dead: list[str] = []
    samples = [0]
    stop = threading.Event()
    watcher_admin = Admin(cluster.bootstrap)

    def watch() -> None:
        while not stop.wait(0.2):
            samples[0] += 1
            try:
                described = watcher_admin.describe_cluster()
            except errors.RaftqError as exc:
                dead.append(f"DescribeCluster failed: {exc}")
                continue
            dead.extend(f"broker {b.id} not alive" for b in described.brokers if not b.alive)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(admin.delete_topic, names))
        wait_until(
            lambda: not any(_topic_dirs(cluster, i, "del") for i in (1, 2, 3)),
            120,
            "every deleted topic's files removed",
        )
        # keep watching past one more liveness window (3 s) after the last removal
        seen = samples[0]
        wait_until(lambda: samples[0] >= seen + 20, 30, "20 more DescribeCluster samples")
    finally:
        stop.set()
        watcher.join()
        watcher_admin.close()
    assert not dead, dead[:10]
    _no_file_errors(cluster)


@pytest.mark.slow  # kept out of make test's budget, run by make test-slow
def test_deleting_many_topics_at_once_reports_no_broker_dead(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        _delete_many_while_watching(cluster, topics=30, partitions=2)


@pytest.mark.slow
def test_deleting_200_topics_at_once_reports_no_broker_dead(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        _delete_many_while_watching(cluster, topics=200, partitions=1)
