"""Spark → raftq rows per second (the ``raftq`` writer, exactly-once) beside the raw Python
producer, in the same run against the same cluster.

Three real broker processes (tests/cluster.py ``ProcessCluster``, broker default raft timings,
fsync on), one topic of 3 partitions at RF 3 per measurement. Rows: a string key (1,000
distinct) and a 100-byte value.

- ``raw producer``: one ``broker.client.Producer`` (batching, idempotent) sends ``--rows``
  records and flushes; rows / elapsed.
- ``spark writer``: a cached DataFrame of the same rows in ``local[2]`` (2 Spark partitions)
  written with ``df.write.format("raftq")`` (exactly_once: producer ids per task, resume
  lookups, 500-record batches); rows / elapsed of ``save()``.

Goal: the Spark writer reaches at least 50% of the raw producer's rate. The two alternate
(``--repeat`` times each) and the medians are compared.

    python -m bench spark_write [--rows 100000]
    python -m bench spark_write --quick
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Result, at_least, median
from broker.client import Admin, Producer
from tests.cluster import ProcessCluster

NAME = "spark_write"
GOAL_RATIO = 0.5
VALUE_BYTES = 100
ROOT = Path(__file__).resolve().parent.parent


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--rows", type=int, default=100_000, help="rows per measurement")


def _rows(n: int) -> list[tuple[bytes, bytes]]:
    return [(b"%d" % (i % 1000), (b"%012d" % i) + b"x" * (VALUE_BYTES - 12)) for i in range(n)]


def _session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))])
    )
    from pyspark.sql import SparkSession

    from broker.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("raftq-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def _topic(cluster: ProcessCluster, admin: Admin, name: str) -> str:
    admin.create_topic(name, partitions=3, replication_factor=3)
    cluster.wait_leaders(name)
    return name


def _raw(cluster: ProcessCluster, topic: str, rows: list[tuple[bytes, bytes]]) -> float:
    with Producer(cluster.bootstrap) as producer:
        started = time.perf_counter()
        futures = [producer.send(topic, value, key=key) for key, value in rows]
        producer.flush()
        elapsed = time.perf_counter() - started
    failed = sum(1 for f in futures if f.exception() is not None)
    assert failed == 0, f"{failed} raw sends failed"
    return len(rows) / elapsed


def _spark(cluster: ProcessCluster, df: Any, topic: str, rows: int) -> float:
    started = time.perf_counter()
    (
        df.write.format("raftq")
        .option("bootstrap", cluster.bootstrap)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    elapsed = time.perf_counter() - started
    return rows / elapsed


def _written(admin: Admin, topic: str) -> int:
    return sum(p.end - p.log_start for p in admin.list_offsets(topic))


def run(options: argparse.Namespace) -> list[Result]:
    n = 5_000 if options.quick else options.rows
    rows = _rows(n)
    spark = _session()
    try:
        df = spark.range(0, n, numPartitions=2).selectExpr(
            "cast(cast(id % 1000 as string) as binary) as key",
            f"cast(concat(lpad(cast(id as string), 12, '0'), repeat('x', {VALUE_BYTES - 12})) "
            "as binary) as value",
        )
        df = df.cache()
        assert df.count() == n
        with (
            tempfile.TemporaryDirectory(prefix="raftq-bench-spark-") as tmp,
            ProcessCluster(Path(tmp), brokers=3, fast=False) as cluster,
        ):
            cluster.wait_ready()
            admin = cluster.admin()
            _spark(cluster, df.limit(1000), _topic(cluster, admin, "warm-up"), 1000)
            raw_rates, spark_rates = [], []
            for i in range(options.repeat):
                raw_topic = _topic(cluster, admin, f"raw-{i}")
                raw_rates.append(_raw(cluster, raw_topic, rows))
                spark_topic = _topic(cluster, admin, f"spark-{i}")
                spark_rates.append(_spark(cluster, df, spark_topic, n))
                assert _written(admin, raw_topic) == n and _written(admin, spark_topic) == n
                print(f"  raw {raw_rates[-1]:,.0f} rows/s, spark {spark_rates[-1]:,.0f} rows/s")
    finally:
        spark.stop()
    raw, written = median(raw_rates), median(spark_rates)
    note = f"{n:,} rows of {VALUE_BYTES} B, local[2], 3 brokers RF 3 fsync"
    return [
        Result("raw Python producer", raw, "rows/s", note=note),
        Result("spark writer (exactly_once)", written, "rows/s", note=note),
        at_least("spark writer / raw producer", written / raw, "ratio", GOAL_RATIO),
    ]
