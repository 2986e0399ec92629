"""``raftq dlq redrive``: dead letters back to their origin, resumable, nothing lost or doubled.

Records of a topic with ``max_deliveries=1`` are nacked once each and so dead-lettered into
``<topic>.dlq``. A first redrive stops after 3 (an interruption); a second one resumes. Then
every dead letter is back in its origin partition exactly once (its copy names where it came
from), the redrive group has nothing left to take, and a third redrive moves nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from raftq.client import Admin, Consumer, Producer
from raftq.client.redrive import redrive
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
RECORDS = 12


def redriven_copies(admin: Admin, topic: str, partitions: int) -> Counter[bytes]:
    copies: Counter[bytes] = Counter()
    for partition in range(partitions):
        for stored in admin.fetch(topic, partition, 0, 1000).records:
            headers = stored.headers
            if "raftq.redrive.from" in headers:
                assert headers["raftq.redrive.reason"]  # why it was dead-lettered
                assert "raftq.dlq.topic" not in headers
                copies[headers["raftq.redrive.from"]] += 1
    return copies


def test_redrive_moves_each_dead_letter_back_once_and_resumes(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("orders", partitions=2, max_deliveries=1)
        cluster.wait_leaders("orders")
        with Producer(cluster.bootstrap) as producer:
            for i in range(RECORDS):
                producer.send("orders", b"o%d" % i, key=b"k%d" % i, headers={"app": b"x"})
            producer.flush(30)
        with Consumer(cluster.bootstrap, "billing", ["orders"]) as consumer:
            nacked = 0

            def all_nacked() -> bool:
                nonlocal nacked
                messages = consumer.poll(50, 500)
                assert all(e is None for e in consumer.nack(messages, delay_ms=0))
                nacked += len(messages)
                return nacked >= RECORDS

            wait_until(all_nacked, 60, "every record delivered and nacked once")

        def dead_lettered() -> bool:
            try:
                offsets = admin.list_offsets("orders.dlq")
            except Exception:  # the dead-letter topic is created on demand
                return False
            return sum(p.end for p in offsets) == RECORDS

        wait_until(dead_lettered, 60, f"{RECORDS} dead letters in orders.dlq")

        first = redrive(cluster.bootstrap, "orders.dlq", limit=3, idle_exit_ms=1000)
        assert first.moved == 3
        done = subprocess.run(
            [sys.executable, "-m", "raftq.cli", "dlq", "redrive", "orders.dlq", "--rate", "20"],
            cwd=ROOT,
            env={**os.environ, "RAFTQ_BOOTSTRAP": cluster.bootstrap},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert f"moved {RECORDS - 3} dead letters from orders.dlq" in done.stdout

        copies = redriven_copies(admin, "orders", 2)
        assert len(copies) == RECORDS and set(copies.values()) == {1}, copies
        again = redrive(cluster.bootstrap, "orders.dlq", idle_exit_ms=1000)
        assert again.moved == 0 and redriven_copies(admin, "orders", 2) == copies
