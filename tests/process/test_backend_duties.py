"""What an idle broker's backend leaves undone, and what it still does (broker/backend.py).

In-process brokers (real gRPC, SQLite and Raft), the backend's threads stopped so the test steps
them: a led replica whose duties found nothing pending is passed over until its applied index,
its term or the table changes, and a change is still acted on at the next pass (an altered
config is replicated into every partition); a report that says what the last answered one said
is sent again only after ``REPORT_UNCHANGED_MAX_S``, a changed one at once.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from raftq.backend import REPORT_UNCHANGED_MAX_S
from raftq.client import Admin, Producer
from raftq.proto import internal_pb2
from tests.cluster import InProcessCluster
from tests.helpers import wait_until

PARTITIONS = 4


def test_settled_leader_duties_are_skipped_until_something_they_read_changes(
    tmp_path: Path,
) -> None:
    with InProcessCluster(tmp_path) as cluster:
        broker = cluster.broker(1)
        address = broker.config.broker.client_addr
        admin = Admin(address)
        try:
            wait_until(lambda: broker.meta.is_leader() and broker.meta.table.broker(1), 30, "up")
            admin.create_topic("idle", partitions=PARTITIONS)
            keys = [("idle", p) for p in range(PARTITIONS)]
            wait_until(lambda: all(broker.replicas.get(k) for k in keys), 30, "replicas open")
            replicas = [broker.replicas.get(k) for k in keys]

            def configured() -> bool:
                info = broker.meta.table.topics["idle"]
                return all(
                    r is not None and r.config_bytes() == info.config_bytes for r in replicas
                )

            wait_until(configured, 30, "config replicated")
            backend = broker.backend
            backend.stop()  # from here on the test steps it
            calls: Counter[str] = Counter()
            lead = backend._lead

            def counting(replica: Any, table: Any) -> bool:
                calls[replica.name] += 1
                return lead(replica, table)

            backend._lead = counting  # type: ignore[method-assign]

            def passes(n: int) -> None:
                for _ in range(n):
                    backend._due.pop("lead", None)  # a lead pass at every step
                    backend.step()

            passes(20)
            print(f"duties run in 20 passes: {dict(calls)}")
            assert sum(calls.values()) >= 1  # the led replicas were looked at
            assert all(n <= 2 for n in calls.values()), calls  # 20 each before

            calls.clear()
            with Producer(address, linger_ms=0) as producer:
                producer.send("idle", b"x", partition=2).result(timeout=30)
            passes(3)
            sent = broker.replicas.get(("idle", 2))
            assert sent is not None
            assert calls[sent.name] >= 1  # its applied index moved
            assert all(n == 0 for name, n in calls.items() if name != sent.name), calls

            calls.clear()
            admin.alter_topic_config("idle", lease_ms=12_345)
            wait_until(lambda: broker.meta.table.topics["idle"].config.lease_ms == 12_345, 30, "")
            passes(1)
            assert sorted(calls) == sorted(r.name for r in replicas if r is not None)
            assert configured()  # the new config replicated into every partition
        finally:
            admin.close()


def test_an_unchanged_report_is_sent_again_only_after_a_while(tmp_path: Path) -> None:
    """A broker that is not the metadata leader sends a report saying what the last answered one
    said only every REPORT_UNCHANGED_MAX_S; a changed one at once."""
    with InProcessCluster(tmp_path, brokers=2) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("idle", partitions=2, replication_factor=2)
        cluster.wait_leaders("idle")
        follower = next(b for b in cluster.brokers.values() if not b.meta.is_leader())

        def configured() -> bool:  # the leaders' duties done: config in every replica
            info = follower.meta.table.topics["idle"]
            replicas = [
                b.replicas.get(("idle", p)) for b in cluster.brokers.values() for p in (0, 1)
            ]
            return all(r is not None and r.config_bytes() == info.config_bytes for r in replicas)

        wait_until(configured, 30, "config replicated")
        backend = follower.backend
        backend.stop()  # from here on the test reports
        sent: list[float] = []
        last: list[internal_pb2.BrokerReport] = []
        real_report = backend._internal.report

        def counting(
            address: str, report: internal_pb2.BrokerReport, timeout_s: float
        ) -> internal_pb2.ReportAck:
            sent.append(time.monotonic())
            last.append(report)
            return real_report(address, report, timeout_s)

        backend._internal.report = counting  # type: ignore[method-assign]

        def quiet() -> bool:  # the new topic's leaders settled: half a second without a send
            backend.report()
            return not sent or time.monotonic() - sent[-1] >= REPORT_UNCHANGED_MAX_S / 2

        wait_until(quiet, 30, "a report unchanged for half a second", interval_max_s=0.02)
        sent.clear()
        window_s = 2.5 * REPORT_UNCHANGED_MAX_S
        started = time.monotonic()
        while time.monotonic() - started < window_s:
            backend.report()
            time.sleep(0.02)
        gaps = [b - a for a, b in itertools.pairwise(sent)]
        print(f"{len(sent)} unchanged reports sent in {window_s} s, gaps {gaps}")
        assert 1 <= len(sent) <= 3  # of about 125 calls
        assert all(gap >= REPORT_UNCHANGED_MAX_S for gap in gaps)
        # A change is sent: a record applied on this broker's replica of partition 0 (reports
        # go on meanwhile, as the reporter thread's would: clients route by them).
        replica = follower.replicas.get(("idle", 0))
        assert replica is not None
        stop = threading.Event()

        def reporter() -> None:
            while not stop.wait(0.1):
                backend.report()

        thread = threading.Thread(target=reporter, daemon=True)
        thread.start()
        try:
            with Producer(cluster.bootstrap, linger_ms=0) as producer:
                producer.send("idle", b"x", partition=0).result(timeout=30)
            wait_until(lambda: replica.machine.offsets().end == 1, 10, "the record applied here")
        finally:
            stop.set()
            thread.join(5)
        backend.report()  # sends unless the last one sent already said so

        def end_of_partition_0(report: internal_pb2.BrokerReport) -> int:
            (mine,) = [r for r in report.replicas if (r.topic, r.partition) == ("idle", 0)]
            return mine.end

        assert end_of_partition_0(last[-1]) == 1
