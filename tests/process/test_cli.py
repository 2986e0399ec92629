"""The ``raftq`` client commands against one real broker in this process (for the module);
each test names its own topic and group."""

from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from raftq import cli
from tests.cluster import make_cluster
from tests.helpers import unique_name, wait_until

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with make_cluster(tmp_path_factory.mktemp("broker")) as cluster:
        cluster.wait_ready()
        yield cluster.bootstrap


@pytest.fixture
def topic() -> str:
    return unique_name("orders")


@pytest.fixture
def group() -> str:
    return unique_name("g")


def run(capsys: pytest.CaptureFixture[str], bootstrap: str, *argv: str) -> tuple[int, str, str]:
    code = cli.main([*argv, "--bootstrap", bootstrap])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], bootstrap: str, *argv: str) -> object:
    code, out, err = run(capsys, bootstrap, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_topic_commands(capsys: pytest.CaptureFixture[str], bootstrap: str, topic: str) -> None:
    code, out, _ = run(
        capsys, bootstrap, "topic", "create", topic, "--partitions", "2", "--lease-ms", "5000"
    )
    assert code == 0 and f"topic {topic}: 2 partitions" in out and "lease_ms=5000" in out
    code, out, _ = run(capsys, bootstrap, "topic", "list")
    lines = out.splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITIONS", "REPLICATION"]
    assert [line.split() for line in lines if line.startswith(topic)] == [[topic, "2", "1"]]
    described = run_json(capsys, bootstrap, "topic", "describe", topic)
    assert isinstance(described, dict) and len(described["partitions"]) == 2
    altered = run_json(capsys, bootstrap, "topic", "alter", topic, "--ordering", "priority")
    assert isinstance(altered, dict) and altered["config"]["ordering"] == "PRIORITY"
    code, out, _ = run(capsys, bootstrap, "topic", "delete", topic)
    assert code == 0 and out == f"deleted topic {topic}\n"
    listed = run_json(capsys, bootstrap, "topic", "list")
    assert isinstance(listed, list) and topic not in {t["name"] for t in listed}


def test_errors_print_the_catalogue_hint_and_exit_1(
    capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    code, out, err = run(capsys, bootstrap, "topic", "describe", "nope")
    assert code == 1 and out == ""
    assert "error: UNKNOWN_TOPIC" in err and "hint: no such topic: create it first" in err
    code, _, err = run(capsys, bootstrap, "topic", "create", "bad name")
    assert code == 1 and "error: INVALID_ARGUMENT" in err and "A-Z a-z 0-9" in err
    code, _, err = run(capsys, bootstrap, "topic", "alter", "orders")
    assert code == 1 and "--lease-ms" in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["consume", "orders"])  # --group is required
    assert info.value.code == 2
    assert "--group" in capsys.readouterr().err


def test_produce_stdin_then_consume_count(
    capsys: pytest.CaptureFixture[str],
    bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    topic: str,
    group: str,
) -> None:
    run(capsys, bootstrap, "topic", "create", topic, "--partitions", "1")
    monkeypatch.setattr(sys, "stdin", io.StringIO("alpha\nbeta\ngamma\n"))
    code, out, _ = run(capsys, bootstrap, "produce", topic, "--key", "k")
    assert code == 0 and out.startswith(f"produced 3 records to {topic}")
    code, out, _ = run(capsys, bootstrap, "consume", topic, "--group", group, "--count", "2")
    assert code == 0
    assert out.splitlines() == [
        f"{topic}/0@0 [delivery 1] key=k alpha",
        f"{topic}/0@1 [delivery 1] key=k beta",
    ]
    code, out, _ = run(
        capsys,
        bootstrap,
        "consume",
        topic,
        "--group",
        group,
        "--count",
        "5",
        "--idle-exit-ms",
        "300",
        "--json",
    )
    (line,) = out.splitlines()  # the first two were acked; only gamma is left
    assert json.loads(line)["value"] == "gamma" and json.loads(line)["offset"] == 2


def test_produce_count_reports_progress_and_rate(
    capsys: pytest.CaptureFixture[str], bootstrap: str, topic: str
) -> None:
    run(capsys, bootstrap, "topic", "create", topic, "--partitions", "3")
    code, out, err = run(capsys, bootstrap, "produce", topic, "--count", "300", "--size", "50")
    assert code == 0 and "produced 300 records" in out and "records/s" in out
    assert "300/300 records" in err  # the final progress line

    def ends() -> int:  # describe shows the leaders' last reports: it catches up
        described = run_json(capsys, bootstrap, "topic", "describe", topic)
        assert isinstance(described, dict)
        return sum(int(p["end"]) for p in described["partitions"])

    wait_until(lambda: ends() == 300, 30, "describe to show the 300 records")


def test_produce_to_an_unknown_topic_fails_with_the_hint(
    capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    code, _, err = run(capsys, bootstrap, "produce", "nope", "--count", "3")
    assert code == 1 and "UNKNOWN_TOPIC" in err


def test_group_and_cluster_commands(
    capsys: pytest.CaptureFixture[str], bootstrap: str, topic: str, group: str
) -> None:
    run(capsys, bootstrap, "topic", "create", topic, "--partitions", "2")
    run(capsys, bootstrap, "produce", topic, "--count", "4")
    run(capsys, bootstrap, "consume", topic, "--group", group, "--count", "1", "--no-ack")
    code, out, _ = run(capsys, bootstrap, "group", "list")
    header = out.splitlines()[0].split()
    (row,) = [line.split() for line in out.splitlines() if line.split()[0] == group]
    assert header == ["GROUP", "STATE", "GENERATION", "MEMBERS", "TOPICS"]
    assert row[:2] == [group, "Empty"] and row[3:] == ["0", topic]  # the consumer left
    described = run_json(capsys, bootstrap, "group", "describe", group)
    assert isinstance(described, dict) and described["members"] == []  # the consumer left
    assert sum(int(p["lag"]) for p in described["partitions"]) == 4  # nothing acked
    code, out, _ = run(capsys, bootstrap, "group", "describe", group)
    assert code == 0 and "LAG" in out
    code, out, _ = run(capsys, bootstrap, "cluster", "status")
    assert code == 0 and out.startswith("cluster HEALTHY: metadata leader 1")
    assert out.splitlines()[1].split()[-1] == "METADATA" and out.splitlines()[2].endswith("voter")
    cluster = run_json(capsys, bootstrap, "cluster", "status")
    assert isinstance(cluster, dict) and cluster["health"] == "HEALTHY"


def test_python_m_broker_cli_in_a_subprocess_reads_raftq_bootstrap(bootstrap: str) -> None:
    topic = unique_name("jobs")
    env = {**os.environ, "RAFTQ_BOOTSTRAP": bootstrap}
    created = subprocess.run(
        [sys.executable, "-m", "raftq.cli", "topic", "create", topic, "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["name"] == topic
    missing = subprocess.run(
        [sys.executable, "-m", "raftq.cli", "group", "describe", "nobody"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 1 and "UNKNOWN_GROUP" in missing.stderr
