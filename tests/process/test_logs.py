"""Broker logs as JSON (``log.format: json``): one object per line, tags lifted into fields."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from raftq.logs import JsonFormatter
from tests.cluster import ProcessCluster
from tests.helpers import wait_until


def test_a_record_becomes_one_json_object_with_its_tags_as_fields() -> None:
    record = logging.LogRecord(
        "raftq.broker.replica",
        logging.WARNING,
        __file__,
        1,
        "[topic/partition=jobs/3] [group=p.7.3] lease %s expired",
        ("x",),
        None,
    )
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "WARNING" and line["logger"] == "raftq.broker.replica"
    assert line["msg"] == "lease x expired" and line["topic/partition"] == "jobs/3"
    assert line["group"] == "p.7.3" and line["ts"].endswith("Z")


def test_a_broker_with_log_format_json_writes_only_json_lines(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, brokers=1, env={"RAFTQ_LOG__FORMAT": "json"}) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic("logged", partitions=1, replication_factor=1)
        cluster.wait_leaders("logged")
        log = cluster.root / "broker-1.log"

        def replica_line() -> list[dict[str, str]]:
            lines = [json.loads(text) for text in log.read_text().splitlines()]
            return [x for x in lines if x.get("topic/partition") == "logged/0"]

        opened = wait_until(replica_line, 30, "a JSON line about logged/0")
    assert all(line["logger"].startswith("raftq") for line in opened)
    assert any(line.get("broker") == "1" for line in map(json.loads, log.read_text().splitlines()))
