"""A Producer made while no broker answers waits for the cluster instead of failing its sends.

Real broker processes (tests/cluster.py): the whole cluster is down when the Producer is made
and its first send to a topic is called; the send's metadata fetch is retried (within the
Producer's delivery timeout) until the restarted cluster answers, and the record is written.
A topic that does not exist still fails at once, and a delivery timeout that runs out fails
the send with the retriable error.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from raftq.client import Producer
from raftq.client.send_future import SendFuture
from raftq.proto import errors
from tests.cluster import ProcessCluster
from tests.helpers import free_port

pytestmark = pytest.mark.timeout(180)


def test_a_producer_made_while_the_cluster_is_down_delivers_once_it_is_back(
    tmp_path: Path,
) -> None:
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic("boot", partitions=2, replication_factor=3)
        for broker in (1, 2, 3):
            cluster.kill(broker, signal.SIGKILL)
        sent: list[SendFuture] = []
        with Producer(cluster.bootstrap, linger_ms=0) as producer:
            sender = threading.Thread(target=lambda: sent.append(producer.send("boot", b"v")))
            sender.start()
            sender.join(timeout=2)
            assert sender.is_alive(), "the send gave up while no broker answered"
            cluster.start()
            sender.join(timeout=90)
            assert not sender.is_alive()
            metadata = sent[0].result(timeout=90)
            assert cluster.admin().fetch("boot", metadata.partition, metadata.offset, 1).records
            with pytest.raises(errors.UnknownTopic):
                producer.send("no-such-topic", b"v").result(timeout=30)


def test_the_first_metadata_fetch_gives_up_at_the_delivery_timeout() -> None:
    nobody = f"127.0.0.1:{free_port()}"
    with Producer(nobody, delivery_timeout_ms=1_500, request_timeout_ms=1_000) as producer:
        started = time.monotonic()
        with pytest.raises(errors.Unavailable):
            producer.send("t", b"v").result(timeout=30)
        assert time.monotonic() - started >= 1.4  # retried until the delivery timeout
