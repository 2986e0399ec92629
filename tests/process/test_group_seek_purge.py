"""``raftq group seek`` and ``raftq topic purge`` on real broker processes (issue 17).

A seek moves a group's committed offset on one or every partition of a topic: records below count
as acknowledged, records at and above are delivered again (from delivery 1). It is refused
GROUP_NOT_EMPTY while members live unless forced. A purge deletes every record now in a topic:
the log start moves to the end offset, groups' pending rows go, later records are delivered as
usual. Admin calls go through a broker that is not the metadata leader (it forwards the seek).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from raftq import cli, inspector
from raftq.client import Admin, Consumer, Message, Producer
from raftq.proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(240)

RECORDS = 10
SESSION_MS = 30_000  # long: a loaded machine must not expire a member the test keeps


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with ProcessCluster(tmp_path_factory.mktemp("seek"), 3) as cluster:
        cluster.wait_ready()
        yield cluster


def via_follower(cluster: ProcessCluster) -> str:
    """The client address of a broker that does not lead the metadata group."""
    leader = cluster.admin().describe_cluster().metadata_leader
    return cluster.client_addr(next(b for b in (1, 2, 3) if b != leader))


def set_up(cluster: ProcessCluster, topic: str) -> Admin:
    admin = cluster.admin()
    admin.create_topic(topic, partitions=2, replication_factor=3)
    cluster.wait_leaders(topic)
    produce(cluster.bootstrap, topic, range(RECORDS))
    return admin


def produce(bootstrap: str, topic: str, numbers: range) -> None:
    with Producer(bootstrap, linger_ms=1) as producer:
        futures = [producer.send(topic, b"v%d" % i, key=b"k%d" % i) for i in numbers]
        for future in futures:
            future.result(timeout=30)


def consume(consumer: Consumer, count: int, timeout_s: float = 30.0) -> list[Message]:
    """Poll until ``count`` records came, acking each; then check nothing more comes now."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=500)
        assert not any(consumer.ack(batch))
        got += batch
    assert len(got) == count, f"{len(got)} of {count} records"
    assert consumer.poll(timeout_ms=300) == []
    return got


def run_cli(bootstrap: str, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main([*argv, "--bootstrap", bootstrap])
    out, err = capsys.readouterr()
    return code, out, err


def replicas(cluster: ProcessCluster, topic: str) -> list[tuple[int, int, int | None]]:
    """(log start, end, group g's committed offset or None) read from every replica's file:
    leaders and followers apply the same command. Read-only, as ``raftq inspect`` reads a
    live broker's files: a writing connection would contend for the broker's write lock."""
    files = sorted(cluster.root.glob(f"broker-*/partitions/{topic}-*/*.sqlite"))
    assert len(files) == 2 * 3, files  # 2 partitions x RF 3
    out = []
    for path in files:
        seen = inspector.report(path)
        committed = [g.committed for g in seen.groups if g.group == "g"]
        out.append((seen.log_start, seen.end_offset, committed[0] if committed else None))
    return out


def committed(admin: Admin, group: str, topic: str) -> dict[int, int]:
    return {
        p.partition: p.committed for p in admin.describe_group(group).partitions if p.topic == topic
    }


def test_group_seek_to_earliest_offset_timestamp_and_latest(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "seek-orders"
    admin = set_up(cluster, topic)
    forwarder = via_follower(cluster)
    via = cluster.admin(forwarder)
    with Consumer(cluster.bootstrap, "g", [topic], session_timeout_ms=SESSION_MS) as first:
        consume(first, RECORDS)
        code, out, err = run_cli(
            forwarder, capsys, "group", "seek", "g", "--topic", topic, "--to-earliest"
        )
        assert code == 1 and "GROUP_NOT_EMPTY" in err, (out, err)
        with pytest.raises(errors.GroupNotEmpty):
            via.seek_group("g", topic, earliest=True)
        assert sum(committed(admin, "g", topic).values()) == RECORDS  # nothing moved
    ends = {p.partition: p.end for p in admin.list_offsets(topic)}
    assert committed(admin, "g", topic) == ends

    # Backwards to the start: every record is delivered again, first delivery.
    code, out, err = run_cli(
        forwarder, capsys, "group", "seek", "g", "--topic", topic, "--to-earliest"
    )
    assert code == 0, err
    assert out.count("committed offset 0") == 2, out
    assert committed(admin, "g", topic) == {0: 0, 1: 0}
    assert sum(p.lag for p in admin.describe_group("g").partitions) == RECORDS
    wait_until(
        lambda: all(c == 0 for _, _, c in replicas(cluster, topic)),
        30,
        "every replica moved the group to offset 0",
    )
    with Consumer(cluster.bootstrap, "g", [topic], session_timeout_ms=SESSION_MS) as again:
        replayed = consume(again, RECORDS)
    assert sorted(m.value for m in replayed) == sorted(b"v%d" % i for i in range(RECORDS))
    assert {m.delivery_count for m in replayed} == {1}

    # One partition to an offset: only that partition's records from it come back.
    busy = max(ends, key=lambda p: ends[p])
    assert ends[busy] >= 2
    moved = via.seek_group("g", topic, partition=busy, offset=1)
    assert [(p.partition, p.offset) for p in moved] == [(busy, 1)]
    assert committed(admin, "g", topic) == {**ends, busy: 1}
    with Consumer(cluster.bootstrap, "g", [topic], session_timeout_ms=SESSION_MS) as again:
        got = consume(again, ends[busy] - 1)
    assert sorted(m.offset for m in got) == list(range(1, ends[busy]))
    assert {m.partition for m in got} == {busy}

    # A timestamp: the first record at or after it (Kafka's offsetsForTimes), per partition.
    stamps = [r.timestamp_ms for r in admin.fetch(topic, busy, 0).records]
    middle = stamps[len(stamps) // 2]
    expected = next(i for i, ts in enumerate(stamps) if ts >= middle)
    moved = via.seek_group("g", topic, partition=busy, timestamp_ms=middle)
    assert [(p.partition, p.offset) for p in moved] == [(busy, expected)]
    assert via.seek_group("g", topic, timestamp_ms=stamps[-1] + 3_600_000)[0].offset == ends[0]

    # Latest, forced while a member lives: nothing left for the group.
    with Consumer(cluster.bootstrap, "g", [topic], session_timeout_ms=SESSION_MS) as live:
        live.poll(timeout_ms=500)  # joined, maybe holding leases: they end
        code, out, err = run_cli(
            forwarder, capsys, "group", "seek", "g", "--topic", topic, "--to-latest", "--force"
        )
        assert code == 0, err
        assert committed(admin, "g", topic) == ends
        assert sum(p.lag for p in admin.describe_group("g").partitions) == 0

    # Far past the end is the end; the JSON answer names each partition.
    code, out, err = run_cli(
        forwarder, capsys, "group", "seek", "g", "--topic", topic, "--to-offset", "999999", "--json"
    )
    assert code == 0, err
    answer = json.loads(out)
    assert {p["partition"]: int(p["offset"]) for p in answer["partitions"]} == ends, out


def test_group_seek_refuses_bad_input_with_typed_errors(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "seek-bad"
    admin = set_up(cluster, topic)
    admin.create_topic("seek-other", partitions=1, replication_factor=3)
    via = cluster.admin(via_follower(cluster))
    with Consumer(cluster.bootstrap, "b", [topic], session_timeout_ms=SESSION_MS) as c:
        consume(c, RECORDS)
    before = committed(admin, "b", topic)
    with pytest.raises(errors.InvalidArgument):
        via.seek_group("b", topic, offset=-1)
    with pytest.raises(errors.InvalidArgument):
        via.seek_group("b", topic, timestamp_ms=-5)
    with pytest.raises(errors.InvalidArgument):
        via.seek_group("b", topic, partition=-1, earliest=True)
    with pytest.raises(errors.InvalidArgument):
        via.seek_group("b", topic)  # no target
    with pytest.raises(errors.InvalidArgument):
        via.seek_group("b", topic, earliest=True, offset=3)  # two
    with pytest.raises(errors.InvalidArgument):
        via.seek_group("b", topic, offset=2**63)  # wider than the field
    with pytest.raises(errors.InvalidArgument):
        via.seek_group("", topic, earliest=True)
    with pytest.raises(errors.InvalidArgument):
        via.seek_group("b", "seek-other", earliest=True)  # the group holds no state there
    with pytest.raises(errors.UnknownGroup):
        via.seek_group("never-joined", topic, earliest=True)
    with pytest.raises(errors.UnknownTopic):
        via.seek_group("b", "no-such-topic", earliest=True)
    with pytest.raises(errors.UnknownPartition):
        via.seek_group("b", topic, partition=2, earliest=True)
    assert committed(admin, "b", topic) == before  # nothing moved
    with pytest.raises(SystemExit) as exited:  # argparse: exactly one target
        cli.main(["group", "seek", "b", "--topic", topic, "--bootstrap", cluster.bootstrap])
    assert exited.value.code == 2
    capsys.readouterr()


def test_topic_purge_deletes_every_record_and_later_ones_are_delivered(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "purge-jobs"
    admin = set_up(cluster, topic)
    forwarder = via_follower(cluster)
    via = cluster.admin(forwarder)
    with Consumer(cluster.bootstrap, "w", [topic], session_timeout_ms=SESSION_MS) as c:
        got: list[Message] = []
        while len(got) < 3:
            got += c.poll(max_records=3 - len(got), timeout_ms=500)
        assert not any(c.ack(got))  # 7 stay pending
    assert sum(p.pending for p in admin.describe_group("w").partitions) == RECORDS - 3

    code, out, err = run_cli(forwarder, capsys, "topic", "purge", topic)
    assert code == 0, err
    assert out.count("records deleted") == 2 and f"{RECORDS} records" not in out, out
    offsets = admin.list_offsets(topic)
    assert all(p.log_start == p.end for p in offsets), offsets
    assert sum(p.end for p in offsets) == RECORDS
    for p in offsets:
        assert list(admin.fetch(topic, p.partition, 0).records) == []
    wait_until(
        lambda: all(start == end > 0 for start, end, _ in replicas(cluster, topic)),
        30,
        "every replica purged its log",
    )
    described = admin.describe_group("w").partitions
    assert [(p.lag, p.pending, p.leased) for p in described] == [(0, 0, 0), (0, 0, 0)]

    produce(cluster.bootstrap, topic, range(RECORDS, RECORDS + 4))
    with Consumer(cluster.bootstrap, "w", [topic], session_timeout_ms=SESSION_MS) as c:
        later = consume(c, 4)
    assert sorted(m.value for m in later) == sorted(b"v%d" % i for i in range(RECORDS, 14))

    # One partition; purging again deletes nothing more.
    purged = via.purge_topic(topic, partition=1)
    assert [p.partition for p in purged] == [1]
    assert purged[0].log_start == admin.list_offsets(topic)[1].end
    again = via.purge_topic(topic, partition=1)
    assert [(p.partition, p.deleted, p.log_start) for p in again] == [(1, 0, purged[0].log_start)]
    with pytest.raises(errors.UnknownTopic):
        via.purge_topic("no-such-topic")
    with pytest.raises(errors.UnknownPartition):
        via.purge_topic(topic, partition=2)
    with pytest.raises(errors.InvalidArgument):
        via.purge_topic(topic, partition=-1)
    with pytest.raises(errors.InvalidArgument):
        via.purge_topic("bad name!")
