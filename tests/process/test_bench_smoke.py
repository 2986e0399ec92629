"""`python -m bench partition_apply --quick` runs to the end and prints its table (no timing
assertions: figures on a shared machine are not a test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench(*argv: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``python -m bench ARGV`` from the repository root, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "bench", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def test_partition_apply_quick_run_prints_the_table() -> None:
    done = bench("partition_apply", "--quick", timeout_s=240)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "| metric" in out and "goal" in out and "result" in out, out
    for metric in ("append: apply / raw", "lease+ack fifo", "lease+ack priority", "append at"):
        assert metric in out, out
    assert "- cpu:" in out and "- sqlite:" in out, out


def test_group_join_quick_run_prints_the_table() -> None:
    done = bench("group_join", "--quick", timeout_s=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "join at 10 groups" in done.stdout and "join at 1,000 / at 10 groups" in done.stdout


def test_term_write_quick_run_prints_the_table() -> None:
    done = bench("term_write", "--quick", "--term-busy-mb", "4", timeout_s=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for metric in ("term write rename: p50", "term write in place: p99", "rename / in place"):
        assert metric in done.stdout, done.stdout


def test_admin_answers_quick_run_prints_the_table() -> None:
    done = bench("admin_answers", "--quick", timeout_s=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for metric in ("fetch answer: protobuf fields read", "fetch answer: read into a FetchResult"):
        assert metric in done.stdout, done.stdout


@pytest.mark.slow  # three broker processes
def test_disk_quick_run_prints_each_file_kind_on_leader_and_follower() -> None:
    done = bench("disk", "--quick", timeout_s=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for role in ("leader", "follower"):
        assert f"disk per 100 B record, {role}, before a snapshot" in done.stdout, done.stdout
    for kind in (".journal", ".sqlite-wal"):
        assert kind in done.stdout, done.stdout


@pytest.mark.slow
def test_snapshot_stall_quick_run_prints_the_table() -> None:
    done = bench("snapshot_stall", "--quick", timeout_s=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for metric in ("snapshot: all 3 replicas written", "snapshot: longest driver stall"):
        assert metric in done.stdout, done.stdout
    assert "snapshot: groups that changed term or leader" in done.stdout, done.stdout


@pytest.mark.slow
def test_snapshot_stall_install_quick_run_prints_the_table() -> None:
    done = bench("snapshot_stall", "--quick", "--snap-install", timeout_s=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for metric in (
        "install: restarted follower caught up",
        "install: longest driver stall",
        "install: groups that changed term or leader",
    ):
        assert metric in done.stdout, done.stdout


@pytest.mark.slow  # three broker processes, 25 s of load
def test_contention_quick_run_prints_the_table() -> None:
    done = bench("contention", "--quick", "--hogs", "1", timeout_s=600)
    assert done.returncode == 0, done.stderr
    assert "contention: contended / quiet" in done.stdout
    assert "contention: elections under contention" in done.stdout
    # why each term moved (here at least the groups' first elections), from the brokers' logs
    assert "term change:" in done.stderr and "standing for term 1" in done.stderr, done.stderr


@pytest.mark.slow  # three broker processes and 2 spawned client processes
def test_big_records_quick_run_prints_the_table() -> None:
    done = bench("big_records", "--quick", "--big-clients", "2", timeout_s=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for metric in ("big records, one client", "broker CPU", "big records, 2 clients"):
        assert metric in out, out
