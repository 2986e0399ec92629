"""``raftq backup`` and ``raftq restore`` (issue 17; broker/backup.py, broker/backup_source.py).

The acceptance test runs on real broker processes: produce, consume part of it (acks, a dead
letter), back up, produce more, back up incrementally (only changed chunks travel), produce
more again, destroy the cluster, restore a new cluster (other ports) from the directory: exactly
the records acked before the last backup are there, at their offsets, with the group's
committed offsets and pending records and the dead-letter topic. Bad input is typed BadBackup.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from raftq import backup, cli, inspector
from raftq.client import Admin, Consumer, Message, Producer
from raftq.metadata.machine import MetadataMachine
from raftq.metadata.table import Table
from raftq.proto import common_pb2, errors, metadata_pb2
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(300)

TOPIC = "jobs"
DLQ = "jobs.dlq"
FIRST = 40  # records before the first backup (20 KB each: ~10 chunks per partition)
TOTAL = FIRST + 10  # and before the second


def produce(bootstrap: str, numbers: range, pad: int = 0) -> None:
    """Records ``v<i>:`` + ``pad`` bytes."""
    with Producer(bootstrap, linger_ms=1) as producer:
        futures = [producer.send(TOPIC, b"v%d:" % i + b"x" * pad, key=b"k%d" % i) for i in numbers]
        for future in futures:
            future.result(timeout=30)


def log_of(admin: Admin, topic: str) -> dict[int, list[tuple[int, bytes, dict[str, bytes]]]]:
    """Every record of every partition: (offset, value, headers)."""
    out: dict[int, list[tuple[int, bytes, dict[str, bytes]]]] = {}
    for offsets in admin.list_offsets(topic):
        rows: list[tuple[int, bytes, dict[str, bytes]]] = []
        offset = offsets.log_start
        while offset < offsets.end:
            fetched = admin.fetch(topic, offsets.partition, offset, 500).records
            assert fetched, (topic, offsets.partition, offset)
            rows += [(r.offset, r.value, dict(r.headers)) for r in fetched]
            offset = fetched[-1].offset + 1
        out[offsets.partition] = rows
    return out


def group_state(admin: Admin, group: str) -> dict[tuple[str, int], tuple[int, int]]:
    return {
        (p.topic, p.partition): (p.committed, p.lag) for p in admin.describe_group(group).partitions
    }


def take_some(consumer: Consumer, at_least: int) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + 30
    while len(got) < at_least and time.monotonic() < deadline:
        got += consumer.poll(max_records=3, timeout_ms=500)
    assert len(got) >= at_least, got
    return got


def restore_cluster(root: Path, directory: Path) -> ProcessCluster:
    """A new cluster (new ports, empty data directories) seeded from ``directory``."""
    new = ProcessCluster(root, 3)
    addrs = ",".join(f"{i}={new.raft_addr(i)}" for i in (1, 2, 3))
    for i in (1, 2, 3):
        argv = ["restore", str(directory), "--data-dir", str(root / f"broker-{i}")]
        assert cli.main([*argv, "--broker-id", str(i), "--broker", addrs]) == 0
    new.start()
    return new


def test_backup_incremental_destroy_restore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "backups"
    old = tmp_path / "old"
    with ProcessCluster(old, 3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic(TOPIC, partitions=2, replication_factor=3, max_deliveries=1)
        cluster.wait_leaders(TOPIC)
        produce(cluster.bootstrap, range(FIRST), pad=20_000)
        with Consumer(cluster.bootstrap, "g", [TOPIC], session_timeout_ms=30_000) as consumer:
            got = take_some(consumer, 6)
            assert not any(consumer.ack(got[1:]))
            assert not any(consumer.nack(got[:1]))  # max_deliveries 1: a dead letter
        wait_until(
            lambda: (
                DLQ in {t.name for t in admin.list_topics()}
                and sum(p.end for p in admin.list_offsets(DLQ)) == 1
            ),
            30,
            "the dead letter in its topic",
        )
        code = cli.main(["backup", str(directory), "--bootstrap", cluster.bootstrap])
        out, err = capsys.readouterr()
        assert code == 0 and "backup 0001 (full)" in out, (out, err)
        produce(cluster.bootstrap, range(FIRST, TOTAL))
        summary = backup.take_backup(admin, directory)
        assert summary.backup == "0002" and summary.base == "0001"
        # page-level diffs: each partition's header chunk and its appended tail changed, not
        # the chunks in between
        assert 0 < summary.stored_bytes <= summary.copied_bytes < summary.total_bytes / 2, summary
        expected_log, expected_dlq = log_of(admin, TOPIC), log_of(admin, DLQ)
        expected_group = group_state(admin, "g")
        assert sum(len(rows) for rows in expected_log.values()) == TOTAL
        produce(cluster.bootstrap, range(TOTAL, TOTAL + 5))  # after the last backup: not restored
        check_hops(cluster, admin)
    shutil.rmtree(old)  # the cluster is gone

    new = restore_cluster(tmp_path / "new", directory)
    try:
        new.wait_ready()
        admin = new.admin()
        wait_until(lambda: TOPIC in {t.name for t in admin.list_topics()}, 60, "the restore")
        new.wait_leaders(TOPIC)
        new.wait_leaders(DLQ)
        assert log_of(admin, TOPIC) == expected_log
        assert log_of(admin, DLQ) == expected_dlq
        (dead,) = [r for rows in expected_dlq.values() for r in rows]
        assert group_state(admin, "g") == expected_group
        # the group goes on where it stopped: the records it never had, none it acked, and not
        # the one it dead-lettered
        acked_or_dead = TOTAL - sum(lag for _, lag in expected_group.values())
        with Consumer(new.bootstrap, "g", [TOPIC], session_timeout_ms=30_000) as consumer:
            rest: list[Message] = []
            deadline = time.monotonic() + 60
            while len(rest) < TOTAL - acked_or_dead and time.monotonic() < deadline:
                batch = consumer.poll(timeout_ms=500)
                assert not any(consumer.ack(batch))
                rest += batch
            assert consumer.poll(timeout_ms=500) == []
        values = sorted(m.value.split(b":")[0] for m in rest)
        assert len(values) == len(set(values)) == TOTAL - acked_or_dead
        assert dead[1].split(b":")[0] not in values
        assert b"v%d" % (TOTAL - 1) in values
        assert not {b"v%d" % i for i in range(TOTAL, TOTAL + 5)} & set(values)
        # it is a cluster: new records follow the restored ones
        produce(new.bootstrap, range(100, 102))
        ends = {p.partition: p.end for p in admin.list_offsets(TOPIC)}
        assert sum(ends.values()) == TOTAL + 2
        # a replica added to a restored group gets the seeded snapshot from its leader
        joined = new.add_broker()
        new.start(joined)
        wait_until(
            lambda: any(b.id == joined and b.alive for b in admin.describe_cluster().brokers),
            60,
            "the new broker registered",
        )
        replicas = list(admin.describe_topic(TOPIC).partitions[0].replicas)
        admin.move_partition(TOPIC, 0, [*replicas[:2], joined], timeout_s=120)
        log0 = [offset for offset, _, _ in log_of(admin, TOPIC)[0]]

        def copied() -> bool:
            try:
                found = inspector.select(new.root / f"broker-{joined}", TOPIC, 0)
            except inspector.InspectError:
                return False  # no file yet
            rows = inspector.records(Path(found[0].path), 0, 10_000) if found else []
            return [r.offset for r in rows] == log0

        wait_until(copied, 60, "the added replica holds the restored log")
        # and a new one: its backups do not go into the old cluster's directory
        with pytest.raises(errors.BadBackup, match="holds backups of cluster"):
            backup.take_backup(admin, directory)
    finally:
        new.stop()


def check_hops(cluster: ProcessCluster, admin: Admin) -> None:
    """BackupMetadata through a broker that does not lead the metadata group (forwarded);
    BackupPartition at a follower (NOT_LEADER naming the leader: a stream is not forwarded);
    bad requests typed before anything is copied."""
    meta_leader = admin.describe_cluster().metadata_leader
    other = next(b for b in (1, 2, 3) if b != meta_leader)
    with cluster.admin(cluster.client_addr(other)) as via:
        assert via.backup_metadata().cluster_id == admin.backup_metadata().cluster_id
    leader = cluster.leader_of(TOPIC, 0)
    follower = next(b for b in (1, 2, 3) if b != leader)
    with pytest.raises(errors.NotLeader) as refused:
        list(admin.backup_partition(cluster.client_addr(follower), TOPIC, 0, timeout_s=10))
    assert refused.value.leader_hint == cluster.client_addr(leader)
    at = cluster.client_addr(leader)
    bad: dict[str, Any]
    for bad, error in (({"chunk_bytes": 5000}, "multiple"), ({"have": [b"x"]}, "32-byte")):
        with pytest.raises(errors.InvalidArgument, match=error):
            list(admin.backup_partition(at, TOPIC, 0, timeout_s=10, **bad))
    with pytest.raises(errors.UnknownTopic):
        list(admin.backup_partition(at, "nope", 0, timeout_s=10))
    with pytest.raises(errors.UnknownPartition):
        list(admin.backup_partition(at, TOPIC, 9, timeout_s=10))


# -- bad input (no cluster needed) -----------------------------------------------------------


def fake_backup(directory: Path, table: metadata_pb2.ClusterSnapshot) -> None:
    """A backup directory with one backup of ``table`` and no partition copies."""
    (directory / "0001").mkdir(parents=True)
    data = table.SerializeToString()
    (directory / "0001" / "metadata.bin").write_bytes(data)
    manifest: dict[str, Any] = {
        "format": 1,
        "backup": "0001",
        "base": "",
        "cluster_id": "c1",
        "chunk_bytes": backup.CHUNK_BYTES,
        "metadata_sha256": hashlib.sha256(data).hexdigest(),
        "partitions": [],
    }
    (directory / "0001" / "manifest.json").write_text(json.dumps(manifest))
    root = {"format": 1, "cluster_id": "c1", "backups": ["0001"]}
    (directory / backup.ROOT_FILE).write_text(json.dumps(root))


def one_topic_table() -> metadata_pb2.ClusterSnapshot:
    table = metadata_pb2.ClusterSnapshot(cluster_id="c1", next_topic_id=2)
    table.topics.add(name="t", topic_id=1).partitions.add(replicas=[1, 2])
    return table


def test_restore_refuses_bad_input(tmp_path: Path) -> None:
    addrs = {1: "127.0.0.1:1", 2: "127.0.0.1:2"}
    with pytest.raises(errors.BadBackup, match="not a raftq backup directory"):
        backup.restore(tmp_path / "missing", tmp_path / "d", 1, addrs)
    directory = tmp_path / "b"
    fake_backup(directory, one_topic_table())
    with pytest.raises(errors.BadBackup, match="no backup '0002'"):
        backup.restore(directory, tmp_path / "d", 1, addrs, backup="0002")
    with pytest.raises(errors.BadBackup, match=r"brokers \[2\]"):
        backup.restore(directory, tmp_path / "d", 1, {1: "127.0.0.1:1"})
    with pytest.raises(errors.BadBackup, match="broker 7 is not a broker"):
        backup.restore(directory, tmp_path / "d", 7, addrs)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("")
    with pytest.raises(errors.BadBackup, match="not empty"):
        backup.restore(directory, tmp_path / "busy", 1, addrs)
    metadata = directory / "0001" / "metadata.bin"
    metadata.write_bytes(metadata.read_bytes() + b"x")
    with pytest.raises(errors.BadBackup, match="SHA-256 does not match"):
        backup.restore(directory, tmp_path / "d", 1, addrs)
    (directory / "0001" / "manifest.json").write_text('{"partitions": [{"topic": 1}]')
    with pytest.raises(errors.BadBackup, match=r"manifest\.json is corrupt"):
        backup.restore(directory, tmp_path / "d", 1, addrs)
    (directory / backup.ROOT_FILE).write_text("[]")
    with pytest.raises(errors.BadBackup, match="corrupt"):
        backup.restore(directory, tmp_path / "d", 1, addrs)
    assert not (tmp_path / "d").exists()  # nothing was written by a refused restore
    with pytest.raises(errors.InvalidArgument, match="ID=HOST:PORT"):
        backup.parse_brokers(["1=127.0.0.1:1,two=x:2"])
    assert backup.parse_brokers(["1=a:1,2=b:2", "3=c:3"]) == {1: "a:1", 2: "b:2", 3: "c:3"}


def test_backup_refuses_a_directory_of_something_else(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    admin = Admin("127.0.0.1:1", request_timeout_ms=100)  # refused before any call
    try:
        with pytest.raises(errors.BadBackup, match="not empty and not a raftq backup"):
            backup.take_backup(admin, tmp_path)
        (tmp_path / backup.ROOT_FILE).write_text('{"format": 99, "backups": []}')
        with pytest.raises(errors.BadBackup, match="format 1"):
            backup.take_backup(admin, tmp_path)
    finally:
        admin.close()


def test_restore_writes_the_table_marker(tmp_path: Path) -> None:
    directory = tmp_path / "b"
    fake_backup(directory, one_topic_table())
    summary = backup.restore(directory, tmp_path / "d", 2, {1: "a:1", 2: "b:2"})
    assert (summary.topics, summary.partitions) == (1, 0)
    assert (tmp_path / "d" / "restore" / "backup_id").read_text() == "c1/0001"


# -- the metadata machine --------------------------------------------------------------------


def command(**op: Any) -> bytes:
    return metadata_pb2.MetaCommand(now_ms=1_000, **op).SerializeToString()


def register(broker_id: int) -> bytes:
    cmd = metadata_pb2.RegisterBroker(
        broker_id=broker_id, client_addr=f"h:{broker_id}", raft_addr=f"h:{broker_id + 100}"
    )
    return command(register_broker=cmd)


def test_cluster_id_is_the_first_command_and_survives_snapshots() -> None:
    machine = MetadataMachine()
    first = register(1)
    machine.apply(first, 1)
    assert machine.table.cluster_id == hashlib.sha256(first).hexdigest()[:32]
    machine.apply(register(2), 2)
    assert machine.table.cluster_id == hashlib.sha256(first).hexdigest()[:32]
    copy = MetadataMachine()
    copy.restore_bytes(machine.snapshot_bytes())
    assert copy.table.cluster_id == machine.table.cluster_id


def test_restore_table_fills_a_fresh_table_only() -> None:
    source = one_topic_table()
    source.topics[0].partitions[0].revision = 40  # moved in the old cluster
    source.topics[0].created_index = 3
    group = source.groups.add(name="g", generation=7, topics=["t"])
    group.members.add(member_id="m-1", topics=["t"], session_timeout_ms=10_000)
    source.txns.add(app_id="app", version=4)
    machine = MetadataMachine()
    machine.apply(register(1), 1)
    restore = metadata_pb2.RestoreTable(table=source.SerializeToString(), backup_id="c1/0001")
    result = machine.apply(command(restore_table=restore), 2)
    assert not result.error, result
    table: Table = machine.table
    assert table.restored_from == "c1/0001" and table.next_topic_id == 2
    assert list(table.brokers) == [1]  # the new cluster's brokers
    topic = table.topics["t"]
    assert (topic.topic_id, topic.partitions[0].replicas, topic.moved(0)) == (1, (1, 2), False)
    g = table.groups["g"]
    assert (g.generation, dict(g.members), g.topics, g.empty_since_ms) == (7, {}, ("t",), 1_000)
    assert table.txn_version("app") == 4
    again = machine.apply(command(restore_table=restore), 3)  # not fresh any more
    assert again.error == common_pb2.ErrorCode.INVALID_ARGUMENT
    assert machine.table.topics == table.topics
    garbage = metadata_pb2.RestoreTable(table=b"\xff\xff", backup_id="x")
    assert MetadataMachine().apply(command(restore_table=garbage), 1).error == (
        common_pb2.ErrorCode.MALFORMED_COMMAND
    )
