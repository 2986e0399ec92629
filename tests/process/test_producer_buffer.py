"""The Producer's bounded buffer (Kafka's buffer.memory / max.block.ms) against a real broker
process that stops answering (SIGSTOP): at the limit nothing blocks, just past it send() blocks
for max_block_ms and raises TIMEOUT without queuing the record, a record larger than the whole
buffer fails at once, and room comes back as the broker answers."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from raftq.client import Producer
from raftq.proto import errors
from tests.cluster import ProcessCluster

pytestmark = pytest.mark.timeout(180)

RECORD = 1000
BUFFER = 3 * RECORD
BLOCK_MS = 600


def test_send_blocks_at_a_full_buffer_then_raises_timeout_and_resumes(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, 1) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("t", partitions=1, replication_factor=1)
        cluster.wait_leaders("t")
        with Producer(
            cluster.bootstrap, linger_ms=1, buffer_memory_bytes=BUFFER, max_block_ms=BLOCK_MS
        ) as producer:
            producer.send("t", b"w" * RECORD).result(timeout=30)  # metadata cached, room back
            assert producer.statistics()["buffered_bytes"] == 0
            cluster.kill(1, signal.SIGSTOP)
            try:
                held = [producer.send("t", b"a%d" % i + b"x" * (RECORD - 2)) for i in range(3)]
                assert producer.statistics()["buffered_bytes"] == BUFFER  # at the limit: no wait
                too_big = producer.send("t", b"x" * (BUFFER + 1))  # far past: fails at once
                with pytest.raises(errors.RecordTooLarge):
                    too_big.result(timeout=1)
                start = time.monotonic()
                with pytest.raises(errors.Timeout, match="buffer full"):
                    producer.send("t", b"y")  # just past: one byte more
                assert time.monotonic() - start >= BLOCK_MS / 1000 * 0.9
                assert producer.statistics()["outstanding_records"] == 3  # it was not queued
                blocked: list[object] = []
                waiter = threading.Thread(
                    target=lambda: blocked.append(producer.send("t", b"z" * RECORD))
                )
                waiter.start()
                time.sleep(0.1)  # let it block; it must still be waiting (no broker answers)
                assert not blocked
            finally:
                cluster.kill(1, signal.SIGCONT)
            offsets = [f.result(timeout=60).offset for f in held]
            assert offsets == [1, 2, 3]
            waiter.join(timeout=30)
            assert len(blocked) == 1
            later = blocked[0]
            assert later.result(timeout=30).offset == 4  # type: ignore[attr-defined]
            many = producer.send_many("t", [b"m" * RECORD] * 10)  # 10x the buffer: in turns
            assert [f.result(timeout=60).offset for f in many] == list(range(5, 15))
            assert producer.statistics()["buffered_bytes"] == 0
