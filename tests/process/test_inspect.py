"""``raftq inspect DATA_DIR``: a real broker's partition files, read offline and read-only.

One broker process writes a topic of two partitions (records with keys, headers, priorities),
a group takes some records and acks part of them. The inspector must then show, from the
files alone, while the broker runs and after it stopped: every record as sent, each group's
committed offset, lag and leased count, the producer, and it must leave the files unchanged.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from raftq import cli
from raftq.client import Consumer, Message, Producer
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

TOPIC = "inspected"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["inspect", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, object]]:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    loaded = json.loads(out)
    assert isinstance(loaded, list)
    return loaded


def digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*.sqlite*"))
    }


def test_inspect_shows_records_groups_and_producers_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ProcessCluster(tmp_path, brokers=1) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic(TOPIC, partitions=2, replication_factor=1)
        cluster.wait_leaders(TOPIC)
        producer = Producer(cluster.bootstrap, linger_ms=0)
        for i in range(10):
            producer.send(
                TOPIC,
                f"value-{i}".encode(),
                key=f"k{i}".encode(),
                headers={"trace": f"t{i}".encode()},
                partition=i % 2,
                priority=i,
            ).result(30)
        producer.close()
        consumer = Consumer(cluster.bootstrap, "workers", [TOPIC], lease_ms=600_000)
        taken: list[Message] = []

        def took_all() -> bool:
            taken.extend(consumer.poll(10, 200))
            return len(taken) >= 10

        wait_until(took_all, 30, "the group took all 10 records")
        acked = [m for m in taken if m.partition == 0][:3]
        assert all(e is None for e in consumer.ack(acked))
        data_dir = cluster.root / "broker-1"

        # While the broker runs: the last committed state through SQLite's WAL.
        summary = run_json(capsys, str(data_dir), "--topic", TOPIC)
        assert [(s["partition"], s["end_offset"], s["records"]) for s in summary] == [
            (0, 5, 5),
            (1, 5, 5),
        ]
        groups = run_json(capsys, str(data_dir), "groups", "--topic", TOPIC)
        by_partition = {g["partition"]: g for g in groups if g["group"] == "workers"}
        assert by_partition[0]["committed"] == 3 and by_partition[0]["lag"] == 2
        assert by_partition[0]["leased"] == 2 and by_partition[1]["leased"] == 5
        assert by_partition[1]["committed"] == 0 and by_partition[1]["lag"] == 5
        consumer.close()

    # After the broker stopped: the same records, and reading changes no file.
    before = digest(data_dir)
    records = run_json(capsys, str(data_dir), "records", "--topic", TOPIC, "--partition", "1")
    assert [r["offset"] for r in records] == [0, 1, 2, 3, 4]
    assert [r["value_preview"] for r in records] == [f"value-{i}" for i in (1, 3, 5, 7, 9)]
    assert records[2]["key"] == "k5" and records[2]["headers"] == {"trace": "t5"}
    # An ordinary idempotent producer is named by its batches (producers), not in each record.
    assert records[2]["priority"] == 5 and records[2]["producer_id"] is None
    producers = run_json(capsys, str(data_dir), "producers", "--topic", TOPIC)
    assert {p["partition"] for p in producers} == {0, 1} and len(
        {p["producer_id"] for p in producers}
    ) == 1
    code, table, _ = run(capsys, str(data_dir))
    assert code == 0 and table.splitlines()[0].split()[:3] == ["TOPIC", "PART", "APPLIED"]
    assert TOPIC in table
    assert run_json(capsys, str(data_dir), "dlq") == []
    assert digest(data_dir) == before


def test_inspect_errors_say_what_to_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, str(tmp_path / "missing"))
    assert code == 1 and "is not a directory" in err
    code, _, err = run(capsys, str(tmp_path))
    assert code == 1 and "no partition files" in err and "data_dir" in err
    (tmp_path / "partitions").mkdir()
    (tmp_path / "partitions" / "junk.sqlite").write_bytes(b"")
    code, _, err = run(capsys, str(tmp_path))
    assert code == 1 and "not a raftq partition file" in err
