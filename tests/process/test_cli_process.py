"""The ``raftq`` CLI as a user runs it (a real process) against a real broker process.

produce counts acknowledged records and says how many on Ctrl-C; consume fails fast on a
missing topic, rides out an outage with one status line, and leaves quietly when its reader
(``head``) closes the pipe.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import ProcessCluster
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


def raftq(*argv: str) -> list[str]:
    return [sys.executable, "-m", "raftq.cli", *argv]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    with ProcessCluster(tmp_path, brokers=1) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic("cli", partitions=2, replication_factor=1)
        cluster.wait_leaders("cli")
        yield cluster


def run(cluster: ProcessCluster, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        raftq(*argv, "--bootstrap", cluster.bootstrap),
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_produce_counts_acknowledged_records(cluster: ProcessCluster) -> None:
    done = run(cluster, "produce", "cli", "--count", "3000", "--size", "100")
    assert done.returncode == 0, done.stderr
    assert "produced 3000 records to cli" in done.stdout
    assert "3000/3000 records acknowledged" in done.stderr  # the final progress line


def test_produce_interrupted_says_how_many_were_acknowledged(cluster: ProcessCluster) -> None:
    proc = subprocess.Popen(
        raftq("produce", "cli", "--bootstrap", cluster.bootstrap, "--linger-ms", "0"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdin is not None
    for i in range(50):
        proc.stdin.write(f"line-{i}\n")
    proc.stdin.flush()
    admin = cluster.admin()
    wait_until(lambda: sum(p.end for p in admin.list_offsets("cli")) == 50, 30, "50 records stored")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted: 50 of 50 records sent were acknowledged" in err


def test_consume_of_a_missing_topic_fails_at_once(cluster: ProcessCluster) -> None:
    started = time.monotonic()
    done = run(cluster, "consume", "no-such-topic", "--group", "g")
    assert done.returncode == 1 and "UNKNOWN_TOPIC" in done.stderr
    assert time.monotonic() - started < 60


def test_consume_piped_to_head_leaves_without_a_traceback(cluster: ProcessCluster) -> None:
    run(cluster, "produce", "cli", "--count", "2000")
    pipeline = (
        f"{' '.join(raftq('consume', 'cli', '--group', 'heads', '--count', '2000'))} "
        f"--bootstrap {cluster.bootstrap} | head -3"
    )
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", pipeline],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert len(done.stdout.splitlines()) == 3
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
    assert done.returncode == 0, done.stderr


@pytest.mark.slow  # kept out of make test's budget, run by make test-slow
def test_consume_rides_out_an_outage(cluster: ProcessCluster) -> None:
    proc = subprocess.Popen(
        raftq("consume", "cli", "--group", "patient", "--count", "5"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "RAFTQ_BOOTSTRAP": cluster.bootstrap},
    )
    try:
        admin = cluster.admin()
        wait_until(lambda: admin.list_groups(), 30, "the consumer joined")
        cluster.kill(1)
        cluster.start(1)
        cluster.wait_ready()
        cluster.wait_leaders("cli")
        assert run(cluster, "produce", "cli", "--count", "5").returncode == 0
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert len(out.splitlines()) == 5
    assert "Traceback" not in err
