"""Deleting and expiring consumer groups, and describing groups without members, on real
broker processes (issues 12 and 17).

A group's delivery state (acks, leases, delivery counts) lives in every replica of every
partition of its topics; deleting the group (``raftq group delete``, Admin.DeleteGroup) or its
expiry after ``groups.offsets_retention_ms`` without members removes it there too, so a group of
the same name starts afresh. The replicas' SQLite files are read directly to check that.
"""

from __future__ import annotations

import time
from pathlib import Path

import immutables
import pytest

from raftq import cli, inspector
from raftq.backend import expired_groups, expiry_interval_s
from raftq.client import Admin, Consumer, Message, Producer
from raftq.metadata.table import GroupInfo, MemberInfo, Table, frozen_map
from raftq.proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(240)

TOPIC = "orders"
RECORDS = 10
SESSION_MS = 30_000  # long: a loaded machine must not expire a member the test keeps


def produce(bootstrap: str) -> None:
    with Producer(bootstrap, linger_ms=1) as producer:
        futures = [producer.send(TOPIC, b"v%d" % i, key=b"k%d" % i) for i in range(RECORDS)]
        for future in futures:
            future.result(timeout=30)


def consume(consumer: Consumer, count: int, timeout_s: float = 30.0) -> list[Message]:
    """Poll until ``count`` records came (none acked)."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.poll(timeout_ms=500)
    assert len(got) == count, f"{len(got)} of {count} records"
    return got


def replica_files(cluster: ProcessCluster) -> list[Path]:
    files = sorted(cluster.root.glob(f"broker-*/partitions/{TOPIC}-*/*.sqlite"))
    assert len(files) == 2 * 3, files  # 2 partitions x RF 3
    return files


def groups_in(path: Path) -> set[str]:
    """The groups a live replica's file holds, read read-only (as ``raftq inspect`` does)."""
    return {g.group for g in inspector.report(path).groups}


def set_up(cluster: ProcessCluster) -> Admin:
    cluster.wait_ready()
    admin = cluster.admin()
    admin.create_topic(TOPIC, partitions=2, replication_factor=3)
    cluster.wait_leaders(TOPIC)
    produce(cluster.bootstrap)
    return admin


def run_cli(bootstrap: str, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main([*argv, "--bootstrap", bootstrap])
    out, err = capsys.readouterr()
    return code, out, err


def test_group_delete_refused_while_members_live_then_forgets_offsets_on_every_replica(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ProcessCluster(tmp_path, 3) as cluster:
        admin = set_up(cluster)
        # Admin calls go through a broker that is not the metadata leader: it forwards them,
        # typed errors included.
        leader = admin.describe_cluster().metadata_leader
        other = next(b for b in (1, 2, 3) if b != leader)
        forwarder = cluster.client_addr(other)
        via = cluster.admin(forwarder)
        with Consumer(cluster.bootstrap, "g", [TOPIC], session_timeout_ms=SESSION_MS) as first:
            got = consume(first, RECORDS)
            assert not any(first.ack(got[:6]))  # 4 stay unacknowledged

        # No member left: describe and list still show the group's topics and lag.
        described = admin.describe_group("g")
        assert not described.members and described.empty_since_ms > 0
        assert sorted((p.topic, p.partition) for p in described.partitions) == [
            (TOPIC, 0),
            (TOPIC, 1),
        ]
        assert sum(p.lag for p in described.partitions) == 4
        assert sum(p.pending for p in described.partitions) == 4
        assert sum(p.end for p in described.partitions) == RECORDS
        (summary,) = [g for g in admin.list_groups() if g.group_id == "g"]
        assert list(summary.topics) == [TOPIC] and summary.members == 0
        code, out, _ = run_cli(forwarder, capsys, "group", "describe", "g")
        assert code == 0 and "0 members" in out and out.count(f"{TOPIC} ") == 2, out

        with Consumer(cluster.bootstrap, "g", [TOPIC], session_timeout_ms=SESSION_MS):
            code, out, err = run_cli(forwarder, capsys, "group", "delete", "g")
            assert code == 1 and "GROUP_NOT_EMPTY" in err, (out, err)
            with pytest.raises(errors.GroupNotEmpty):
                via.delete_group("g")
            with pytest.raises(errors.GroupNotEmpty):
                cluster.admin(cluster.client_addr(leader)).delete_group("g")
        for bad in ("", "g" * 256, "bad\nname"):
            with pytest.raises(errors.InvalidArgument):
                via.delete_group(bad)
        with pytest.raises(errors.UnknownGroup):
            via.delete_group("never-joined")
        assert wait_until(
            lambda: (
                all(f.is_file() for f in replica_files(cluster))
                and all("g" in groups_in(f) for f in replica_files(cluster))
            ),
            30,
            "every replica holds the group's state",
        )

        code, out, err = run_cli(forwarder, capsys, "group", "delete", "g")
        assert code == 0, err
        assert out == "deleted group g: 2 partitions forgot it (4 pending records)\n", out
        assert "g" not in {g.group_id for g in admin.list_groups()}
        with pytest.raises(errors.UnknownGroup):
            admin.describe_group("g")
        with pytest.raises(errors.UnknownGroup):
            via.delete_group("g")
        wait_until(
            lambda: not any("g" in groups_in(f) for f in replica_files(cluster)),
            30,
            "every replica forgot the group",
        )

        # The name starts afresh: every record again, first delivery.
        with Consumer(cluster.bootstrap, "g", [TOPIC], session_timeout_ms=SESSION_MS) as again:
            fresh = consume(again, RECORDS)
            assert sorted(m.value for m in fresh) == sorted(b"v%d" % i for i in range(RECORDS))
            assert {m.delivery_count for m in fresh} == {1}


def test_an_empty_group_expires_after_offsets_retention_and_a_live_one_does_not(
    tmp_path: Path,
) -> None:
    env = {"RAFTQ_GROUPS__OFFSETS_RETENTION_MS": "3000"}
    with ProcessCluster(tmp_path, 3, env=env) as cluster:
        admin = set_up(cluster)
        with Consumer(cluster.bootstrap, "gone", [TOPIC], session_timeout_ms=SESSION_MS) as c:
            assert not any(c.ack(consume(c, RECORDS)))
        left = time.monotonic()
        with Consumer(cluster.bootstrap, "kept", [TOPIC], session_timeout_ms=SESSION_MS) as kept:
            consume(kept, RECORDS)
            wait_until(
                lambda: "gone" not in {g.group_id for g in admin.list_groups()},
                40,
                "the empty group expired",
            )
            assert time.monotonic() - left >= 3.0 - 0.5  # never before the retention
            assert "kept" in {g.group_id for g in admin.list_groups()}  # it has a member
        wait_until(
            lambda: not any("gone" in groups_in(f) for f in replica_files(cluster)),
            30,
            "every replica forgot the expired group",
        )
        with Consumer(cluster.bootstrap, "gone", [TOPIC], session_timeout_ms=SESSION_MS) as c:
            assert {m.delivery_count for m in consume(c, RECORDS)} == {1}


def test_expired_groups_are_judged_by_the_leaders_time_and_include_interrupted_deletes() -> None:
    member = MemberInfo("m", (TOPIC,), 10_000)
    table = Table(
        groups=immutables.Map(
            {
                "live": GroupInfo("live", 1, frozen_map({"m": member}), (TOPIC,)),
                "old": GroupInfo("old", 2, topics=(TOPIC,), empty_since_ms=1_000),
                "new": GroupInfo("new", 2, topics=(TOPIC,), empty_since_ms=5_000),
                "half": GroupInfo("half", 2, empty_since_ms=9_000, deleting=True),
            }
        )
    )
    assert expired_groups(table, 4_000, 4_999) == [("half", 0)]
    assert expired_groups(table, 4_000, 5_000) == [("half", 0), ("old", 1_000)]  # at the limit
    assert expired_groups(table, 4_000, 9_000) == [("half", 0), ("new", 5_000), ("old", 1_000)]
    assert expired_groups(table, 0, 10**15) == [("half", 0)]  # 0: never expire
    assert expiry_interval_s(604_800_000) == 60.0 and expiry_interval_s(3_000) == 1.0
