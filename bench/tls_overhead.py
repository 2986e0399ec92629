"""Produce throughput with and without client-port TLS and token auth.

Two real 3-broker clusters (tests/cluster.py ``ProcessCluster``), one after the other: plaintext
without auth, then TLS with tokens and ACLs on (the ``raftq dev up --tls`` setup: dev CA,
broker/devca.py). Each gets one topic of 3 partitions at RF 3, fsync on, and one
``raftq.client.Producer`` sends the same records (100 B values, default batching); the
figure is acknowledged records per second. The raft port is encrypted in both runs (always
on), so the ratio isolates the client port: TLS + the ACL interceptor.

    python -m bench tls [--tls-records 50000]
    python -m bench tls --quick        (10,000 records)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Result, median
from raftq.client import Producer
from raftq.devca import ensure_dev_pki
from tests.cluster import ProcessCluster

NAME = "tls"
GOAL_RATIO = 0.7  # TLS + auth keep at least 70% of plaintext produce throughput


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--tls-records", type=int, default=50_000, help="records per run")


def produce_rate(root: Path, records: int, repeat: int, *, secured: bool) -> list[float]:
    env: dict[str, str] = {}
    client: dict[str, Any] = {}
    if secured:
        pki = ensure_dev_pki(root / "tls")
        env = pki.broker_env()
        client = {"tls_ca_file": str(pki.ca), "token": pki.tokens()["admin"]}
    rates: list[float] = []
    with ProcessCluster(root, brokers=3, env=env, client=client) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic("bench", partitions=3, replication_factor=3)
        cluster.wait_leaders("bench")
        value = b"x" * 100
        with Producer(cluster.bootstrap, **client) as producer:
            producer.send("bench", value).result(timeout=60)  # metadata, channels, leaders
            for _ in range(repeat):
                started = time.perf_counter()
                futures = [producer.send("bench", value) for _ in range(records)]
                for future in futures:
                    future.result(timeout=120)
                rates.append(records / (time.perf_counter() - started))
    return rates


def run(options: argparse.Namespace) -> list[Result]:
    records = 10_000 if options.quick else options.tls_records
    with tempfile.TemporaryDirectory(prefix="raftq-tls-") as tmp:
        plain = median(produce_rate(Path(tmp) / "plain", records, options.repeat, secured=False))
        tls = median(produce_rate(Path(tmp) / "tls", records, options.repeat, secured=True))
    ratio = tls / plain
    note = f"{records:,} x 100 B, 3 brokers RF 3, fsync on, one Producer"
    return [
        Result("produce: plaintext, no auth", plain, "rec/s", note=note),
        Result("produce: TLS + token + ACLs", tls, "rec/s", note=note),
        Result(
            "produce: TLS+auth / plaintext",
            ratio,
            "",
            f">= {GOAL_RATIO}",
            ratio >= GOAL_RATIO,
            "the raft port is encrypted (AES-GCM) in both",
        ),
    ]
