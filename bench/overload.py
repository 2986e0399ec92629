"""Overload isolation: many long polls held on the metadata leader while an admin loop runs.

Three real broker processes (tests/cluster.py ``ProcessCluster``) on 127.0.0.1, default raft
timings, one quiet topic (nothing is ever sent to it). ``--overload-polls`` long polls
(``max_wait_ms`` 20 s) of ``--overload-groups`` one-member groups are kept outstanding against
the metadata leader for ``--overload-seconds`` (tests/poll_load.py: gRPC futures, no thread per
poll): each poll is re-issued as soon as it ends, and a poll refused RESOURCE_EXHAUSTED after
its retry hint times a random factor in [0.5, 1.5), as the Python client does. Meanwhile one
thread calls ListTopics (``Admin.list_topics``) on the same broker back to back and another
samples DescribeCluster there every 0.25 s.

Figures: ListTopics p50/p99/max; DescribeCluster samples that showed a broker not alive (the
metadata leader counts a broker dead after 3 s without its report: goal 0); polls admitted and
refused per second.

    python -m bench overload [--overload-polls 500] [--overload-seconds 30]
    python -m bench overload --quick        (100 polls, 5 s)
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from bench.common import Result
from raftq.proto import errors
from tests.cluster import ProcessCluster
from tests.poll_load import HeldPolls

NAME = "overload"
LIST_TOPICS_P99_GOAL_MS = 50.0
POLL_WAIT_MS = 20_000  # each poll waits this long for a record (none ever comes)


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--overload-polls", type=int, default=500, help="long polls held")
    parser.add_argument("--overload-groups", type=int, default=50, help="one-member groups")
    parser.add_argument("--overload-seconds", type=float, default=30.0, help="measured time")


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _measure(root: Path, polls: int, groups: int, seconds: float) -> list[Result]:
    with ProcessCluster(root, brokers=3, fast=False) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        admin.create_topic("quiet", partitions=3, replication_factor=3)
        cluster.wait_leaders("quiet")
        leader = admin.describe_cluster().metadata_leader
        address = cluster.client_addr(leader)
        on_leader = cluster.admin(address)
        held = HeldPolls(address, "quiet", groups=groups, count=polls, max_wait_ms=POLL_WAIT_MS)
        held.start()
        not_alive = [0]
        samples = [0]
        stop = threading.Event()

        def watch() -> None:
            watcher_admin = cluster.admin(address)
            while not stop.wait(0.25):
                try:
                    described = watcher_admin.describe_cluster()
                except errors.RaftqError:
                    not_alive[0] += 1
                    continue
                samples[0] += 1
                not_alive[0] += sum(not b.alive for b in described.brokers)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        latencies_ms: list[float] = []
        errors_seen = 0
        started = time.monotonic()
        try:
            while time.monotonic() - started < seconds:
                t0 = time.perf_counter()
                try:
                    on_leader.list_topics()
                except errors.RaftqError:
                    errors_seen += 1
                latencies_ms.append((time.perf_counter() - t0) * 1000)
        finally:
            elapsed = time.monotonic() - started
            stop.set()
            watcher.join()
            held.stop()
        p99 = _percentile(latencies_ms, 0.99)
        failed = ", ".join(f"{k} {v}" for k, v in sorted(held.failed.items())) or "none"
        return [
            Result("ListTopics p50", _percentile(latencies_ms, 0.5), "ms"),
            Result(
                "ListTopics p99",
                p99,
                "ms",
                f"<= {LIST_TOPICS_P99_GOAL_MS:.0f}",
                p99 <= LIST_TOPICS_P99_GOAL_MS and errors_seen == 0,
                f"{len(latencies_ms)} calls, {errors_seen} failed, max {max(latencies_ms):.1f} ms",
            ),
            Result(
                "brokers seen not alive",
                not_alive[0],
                "samples",
                "0",
                not_alive[0] == 0,
                f"{samples[0]} DescribeCluster samples of 3 brokers",
            ),
            Result(
                "long polls refused",
                held.refused / elapsed,
                "/s",
                note=f"{polls} kept outstanding; {held.answered} answered empty; "
                f"other failures: {failed}",
            ),
        ]


def run(options: argparse.Namespace) -> list[Result]:
    polls = 100 if options.quick else options.overload_polls
    seconds = 5.0 if options.quick else options.overload_seconds
    groups = min(options.overload_groups, polls)
    with tempfile.TemporaryDirectory(prefix="raftq-bench-overload-") as tmp:
        return _measure(Path(tmp), polls, groups, seconds)
