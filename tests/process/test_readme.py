"""README.md's five-minute tour, executed as written against ``raftq dev up``.

The tour's bash block runs in bash (its ``raftq`` function calls ``.venv/bin/raftq``) with
``RAFTQ_BOOTSTRAP`` naming the dev cluster, and its Python block runs with the dev cluster's
address in place of ``127.0.0.1:7070`` (the cluster runs on free ports, so a developer's own
``make run`` does not collide with the test). The operations section's ``raftq inspect``
examples run against a broker's data directory afterwards. A README edit that breaks a step
breaks this test.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.process.test_dev_up import DevUp, free_bases

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"\n## {title}")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def blocks(text: str, language: str) -> list[str]:
    """The code blocks fenced as ```language (exactly: "" is a plain fence), fences at line
    starts, so a block in another language never shifts which fences pair up."""
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.S | re.M)


@pytest.fixture(scope="module")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevUp, str]]:
    bases = free_bases(3)
    dev = DevUp(tmp_path_factory.mktemp("readme") / "data", 3, bases)
    try:
        line = dev.expect("export RAFTQ_BOOTSTRAP=")
        yield dev, line.split("=", 1)[1].strip()
    finally:
        assert dev.stop() == 0


def test_the_tour_runs_as_written(dev_cluster: tuple[DevUp, str]) -> None:
    _, bootstrap = dev_cluster
    tour = section("A five-minute tour")
    (shell,) = blocks(tour, "bash")
    python, asyncio_python = blocks(tour, "python")

    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", shell],
        cwd=ROOT,
        env={**os.environ, "RAFTQ_BOOTSTRAP": bootstrap},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "produced 1000 records to jobs" in out and "produced 100000 records to jobs" in out
    assert len([line for line in out.splitlines() if line.startswith("jobs/")]) == 10
    assert "group workers" in out

    first = bootstrap.split(",")[0]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(python.replace("127.0.0.1:7070", first), "README.md", "exec"), {})
    lines = printed.getvalue().splitlines()
    offsets = [line for line in lines if re.fullmatch(r"\[\d+, \d+, \d+\]", line)]
    assert len(offsets) == 1, lines
    # Admin's answers print as dataclasses (issue 18), partition 0 first with its end offset
    listed = [line for line in lines if line.startswith("[PartitionOffsets(partition=0, ")]
    assert len(listed) == 1 and re.search(r"log_start=0, end=\d+\)", listed[0]), lines
    assert any(line.startswith("FetchResult(records=(StoredRecord(offset=0, ") for line in lines)

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(asyncio_python.replace("127.0.0.1:7070", first), "README.md", "exec"), {})
    lines = printed.getvalue().splitlines()
    assert re.fullmatch(r"\d+ \d+", lines[0]) and "jobs" in lines[-1], lines


def test_the_operations_examples_run_as_written(dev_cluster: tuple[DevUp, str]) -> None:
    """Every ``raftq`` line of the operations section's plain code blocks (after the tour,
    so its topic and group exist); ``raftq inspect`` reads broker 1's data directory."""
    dev, bootstrap = dev_cluster
    runnable = [b for b in blocks(section("Operations"), "") if b.startswith("raftq ")]
    examples = [line for block in runnable for line in block.splitlines() if line.strip()]
    assert any(line.startswith("raftq inspect data/broker-1") for line in examples)
    assert any(line.startswith("raftq group delete") for line in examples)
    for example in examples:
        argv = example.split()[1:]
        if argv[0] == "inspect":
            argv[1] = str(dev.data / "broker-1")
        done = subprocess.run(
            [sys.executable, "-m", "raftq.cli", *argv],
            cwd=ROOT,
            env={**os.environ, "RAFTQ_BOOTSTRAP": bootstrap},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (example, done.stderr)
        assert done.stdout.strip(), example
