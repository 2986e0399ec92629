"""Per-record time to live through real broker processes (issue 19).

Three brokers; the consumers and producers talk to whichever broker they reach (forwarding to
the leader when it is another). Topic ``short``: records sent with ``Producer.send(ttl_ms=...)``
and ``AsyncProducer.send(ttl_ms=...)`` next to one without; once the ttl (plus the partition's
``max_clock_skew_ms`` grace) has passed, a poll gets only the record without a ttl. Topic
``perish``, made by the CLI with ``--ttl-ms`` and ``--ttl-action dead_letter``: its expired
record is never delivered and lands in ``perish.dlq`` with reason ``expired``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from raftq.client import Consumer, Producer
from raftq.client.aio import AsyncProducer
from raftq.client.send_future import RecordMetadata
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
TTL_MS = 1500
SKEW_MS = 2000  # raft.max_clock_skew_ms's default: expiry is judged this much late


def test_expired_records_are_never_delivered_and_dead_lettered_on_request(
    tmp_path: Path,
) -> None:
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("short", partitions=1)
        made = subprocess.run(
            [
                *(sys.executable, "-m", "raftq.cli", "topic", "create", "perish"),
                *("--partitions", "1", "--ttl-ms", str(TTL_MS), "--ttl-action", "dead_letter"),
            ],
            cwd=ROOT,
            env={**os.environ, "RAFTQ_BOOTSTRAP": cluster.bootstrap},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert made.returncode == 0, made.stderr
        cluster.wait_leaders("short")
        cluster.wait_leaders("perish")
        with Producer(cluster.bootstrap) as producer:
            doomed = producer.send("short", b"doomed", ttl_ms=TTL_MS).result(60)
            kept = producer.send("short", b"kept").result(60)
            perished = producer.send("perish", b"perished").result(60)

        async def send_async() -> RecordMetadata:
            async with AsyncProducer(cluster.bootstrap) as aio:
                return await aio.send("short", b"doomed too", ttl_ms=TTL_MS)

        doomed_too = asyncio.run(send_async())
        stamped_ms = max(
            admin.fetch(topic, 0, sent.offset, 1).records[0].timestamp_ms
            for topic, sent in (("short", doomed), ("short", doomed_too), ("perish", perished))
        )

        def expired_by_now() -> bool:  # partition time follows the brokers' clocks
            return time.time() * 1000 > stamped_ms + TTL_MS + SKEW_MS + 500

        wait_until(expired_by_now, 30, "the ttl and the clock-skew grace to pass")
        with Consumer(cluster.bootstrap, "g", ["short", "perish"]) as consumer:
            got: list[tuple[str, int, bytes]] = []

            def kept_delivered() -> bool:
                messages = consumer.poll(50, 500)
                got.extend((m.topic, m.offset, m.value) for m in messages)
                assert all(e is None for e in consumer.ack(messages))
                return any(value == b"kept" for _, _, value in got)

            wait_until(kept_delivered, 60, "the record without a ttl delivered")
            assert consumer.poll(50, 1000) == []
        assert got == [("short", kept.offset, b"kept")]

        def dead_lettered() -> list[dict[str, bytes]] | None:
            try:
                records = admin.fetch("perish.dlq", 0, 0, 10).records
            except Exception:  # the dead-letter topic is created on demand
                return None
            return [dict(r.headers) for r in records] or None

        letters = wait_until(dead_lettered, 60, "the expired record in perish.dlq")
        assert letters is not None and len(letters) == 1
        assert letters[0]["raftq.dlq.reason"] == b"expired"
        assert letters[0]["raftq.dlq.offset"] == str(perished.offset).encode()
