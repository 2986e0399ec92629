"""raftq's metrics, alert rules and dashboard, checked by a real Prometheus (Debian's package).

``promtool`` checks the rule file and runs its unit tests (deploy/prometheus/). Then a real
``prometheus`` scrapes a 3-broker cluster every second while a producer writes and a group
lags behind: the lag (records and seconds) and throughput series must be there with the values
the cluster has, every rule must evaluate without error, and every query of the Grafana
dashboard must be valid PromQL against the live data. ``make test`` installs the package.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftq.client import Consumer, Producer
from tests.cluster import ProcessCluster
from tests.helpers import free_port, stop_processes, wait_until

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "raftq-alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "raftq-dashboard.json"


def tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} is missing: install Debian's prometheus package (make test does)"
    return found


def test_promtool_checks_the_rules_and_their_unit_tests() -> None:
    for argv in (
        ["check", "rules", str(RULES)],
        ["test", "rules", str(DEPLOY / "prometheus" / "raftq-alerts-test.yml")],
        ["check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
    ):
        done = subprocess.run([tool("promtool"), *argv], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


class Prometheus:
    def __init__(self, root: Path, targets: list[str]) -> None:
        root.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "raftq", "static_configs": [{"targets": targets}]}],
        }
        (root / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = (root / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                tool("prometheus"),
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'tsdb'}",
                f"--web.listen-address={self.url.removeprefix('http://')}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.loads(answer.read())

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def value(self, query: str) -> float | None:
        """The single value of an instant query, or None when it has no sample."""
        answer = self.get("/api/v1/query", query=query)
        assert answer["status"] == "success", answer
        result = answer["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        stop_processes([self.proc], 10)
        self.log.close()


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[ProcessCluster, Prometheus]]:
    with ProcessCluster(tmp_path / "cluster", brokers=3, metrics=True) as cluster:
        cluster.wait_ready()
        targets = [cluster.metrics_url(i).split("/")[2] for i in (1, 2, 3)]
        prometheus = Prometheus(tmp_path / "prometheus", targets)
        try:
            wait_until(prometheus.ready, 30, "prometheus ready")
            yield cluster, prometheus
        finally:
            prometheus.stop()


def test_a_real_prometheus_scrapes_lag_throughput_and_evaluates_every_rule(
    watched: tuple[ProcessCluster, Prometheus],
) -> None:
    cluster, prometheus = watched
    cluster.admin().create_topic("watched", partitions=2)
    cluster.wait_leaders("watched")
    with Producer(cluster.bootstrap) as producer:
        for i in range(50):
            producer.send("watched", f"r{i}".encode())
        producer.flush(30)
    with Consumer(cluster.bootstrap, "slow", ["watched"], lease_ms=120_000) as consumer:
        taken = wait_until(lambda: consumer.poll(10, 500), 30, "the group leased records")
        assert all(error is None for error in consumer.ack(taken[:5]))

        def brokers_up() -> bool:
            return prometheus.value('count(up{job="raftq"} == 1)') == 3

        wait_until(brokers_up, 30, "prometheus scraping the 3 brokers")

        def lag() -> float | None:
            return prometheus.value('sum(raftq_group_lag_records{group="slow"})')

        wait_until(lambda: lag() == 45, 30, "lag of 45 records (50 sent, 5 acked)")
        wait_until(
            lambda: (prometheus.value('max(raftq_group_lag_seconds{group="slow"})') or 0) > 0,
            30,
            "a positive lag in seconds",
        )
        wait_until(
            lambda: (
                prometheus.value('sum(raftq_partition_records_in_total{topic="watched"})') == 50
            ),
            30,
            "50 records in",
        )
        wait_until(
            lambda: (prometheus.value("max(raftq_data_dir_free_bytes)") or 0) > 0,
            30,
            "disk gauges",
        )

    healthy_cluster_alerts = {
        "RaftqNoMetadataQuorum",
        "RaftqBrokerDown",
        "RaftqPartitionWithoutLeader",
        "RaftqUnderReplicatedPartition",
    }

    def rules_evaluated() -> list[dict[str, Any]] | None:
        """Every rule evaluated without error, and (once the scrapes show a metadata leader
        and every broker up; before the first scrape the quorum rule is pending) the alerts
        of a broken cluster inactive."""
        groups = prometheus.get("/api/v1/rules")["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        healthy = rules and all(r["health"] == "ok" for r in rules)
        quiet = all(r["state"] == "inactive" for r in rules if r["name"] in healthy_cluster_alerts)
        return rules if healthy and quiet else None

    rules = wait_until(rules_evaluated, 30, "every rule evaluated, no quorum/broker alert")
    assert rules is not None and len(rules) == 9

    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(queries) >= 12
    for query in queries:
        answer = prometheus.get("/api/v1/query", query=query)
        assert answer["status"] == "success", (query, answer)
