"""Spark ↔ raftq rows per second beside the raw Python client, in one run against one cluster:
writes (``df.write.format("raftq")``, exactly-once, vs ``raftq.client.Producer``) and reads
(the streaming source, ``spark.readStream.format("raftq")`` under Trigger.AvailableNow into
Spark's ``noop`` sink, vs a ``Log.Fetch`` loop over every partition through
``raftq.client.Admin``), with 100-byte and 10-KB rows.

Three real broker processes (tests/cluster.py ``ProcessCluster``, broker default raft timings,
fsync on), a fresh topic of 3 partitions at RF 3 per measurement. Rows: a string key (1,000
distinct) and a value of the row size. Spark: ``local[2]``, a cached DataFrame of 2 Spark
partitions for writes.

- ``raw producer``: one Producer (batching, idempotent) sends every row and flushes. Its
  ``batch_bytes_max`` is 900,000: at main's default (1 MiB of key+value bytes, 10,000
  records) a batch of 100-byte rows encodes to ~1.09 MB, over the 1 MiB a partition's Raft
  entry carries, and is refused RECORD_TOO_LARGE (seen 2026-11-25, reported).
- ``spark writer``: ``save()`` of the cached DataFrame (producer ids per task, one resume
  lookup per leader broker, batches of 10,000 records or 1 MiB - 4 KiB encoded).
- ``raw fetch``: Fetch with the source's ``max_bytes`` (1 MiB) from offset 0 to the end of
  each partition, one partition after the other, on one thread.
- ``spark source``: a streaming query over the topic written by the raw producer, read to its
  end (Trigger.AvailableNow), rows / elapsed of ``start()`` to termination.

Each figure is rows / elapsed; measurements alternate ``--repeat`` times and medians are
compared. Goal: the Spark writer at least as fast as the raw producer (1.0x) at both sizes.

    python -m bench spark_write [--rows 100000] [--large-rows 10000]
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
from raftq.client import Admin, Producer
from raftq.spark.source import FETCH_BYTES_DEFAULT
from tests.cluster import ProcessCluster

NAME = "spark_write"
GOAL_RATIO = 1.0
SMALL_BYTES, LARGE_BYTES = 100, 10_000
FETCH_BYTES = FETCH_BYTES_DEFAULT  # as the Spark source
RAW_BATCH_BYTES = 900_000  # see the module docstring
SPARK_PARTITIONS = 2  # of the written frame: one write task (and Python worker) each
ROOT = Path(__file__).resolve().parent.parent


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--rows", type=int, default=100_000, help="rows of 100 B per figure")
    parser.add_argument("--large-rows", type=int, default=10_000, help="rows of 10 KB per figure")


def _rows(n: int, size: int) -> list[tuple[bytes, bytes]]:
    return [(b"%d" % (i % 1000), (b"%012d" % i) + b"x" * (size - 12)) for i in range(n)]


def _session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))])
    )
    from pyspark.sql import SparkSession

    from raftq.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("raftq-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def _frame(spark: Any, n: int, size: int) -> Any:
    df = spark.range(0, n, numPartitions=SPARK_PARTITIONS).selectExpr(
        "cast(cast(id % 1000 as string) as binary) as key",
        f"cast(concat(lpad(cast(id as string), 12, '0'), repeat('x', {size - 12})) "
        "as binary) as value",
    )
    df = df.cache()
    assert df.count() == n
    return df


def _topic(cluster: ProcessCluster, admin: Admin, name: str) -> str:
    admin.create_topic(name, partitions=3, replication_factor=3)
    cluster.wait_leaders(name)
    return name


def _raw_write(cluster: ProcessCluster, topic: str, rows: list[tuple[bytes, bytes]]) -> float:
    with Producer(cluster.bootstrap, batch_bytes_max=RAW_BATCH_BYTES) as producer:
        started = time.perf_counter()
        futures = [producer.send(topic, value, key=key) for key, value in rows]
        producer.flush()
        elapsed = time.perf_counter() - started
    failed = [f.exception() for f in futures if f.exception() is not None]
    assert not failed, f"{len(failed)} raw sends failed, e.g. {failed[0]!r}"
    return len(rows) / elapsed


def _spark_write(cluster: ProcessCluster, df: Any, topic: str, rows: int) -> float:
    started = time.perf_counter()
    (
        df.write.format("raftq")
        .option("bootstrap", cluster.bootstrap)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    return rows / (time.perf_counter() - started)


def _raw_read(admin: Admin, topic: str, rows: int) -> float:
    started = time.perf_counter()
    seen = 0
    for bounds in admin.list_offsets(topic):
        offset = bounds.log_start
        while offset < bounds.end:
            fetched = admin.fetch(topic, bounds.partition, offset, 10_000, FETCH_BYTES)
            seen += len(fetched.records)
            offset = fetched.records[-1].offset + 1
    elapsed = time.perf_counter() - started
    assert seen == rows, f"raw fetch read {seen} of {rows}"
    return rows / elapsed


def _spark_read(spark: Any, cluster: ProcessCluster, topic: str, rows: int, tmp: str) -> float:
    started = time.perf_counter()
    query = (
        spark.readStream.format("raftq")
        .option("bootstrap", cluster.bootstrap)
        .option("topic", topic)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", tempfile.mkdtemp(dir=tmp))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    progress = query.recentProgress
    read = sum(int(p["numInputRows"]) for p in progress)
    assert read == rows, f"the spark source read {read} of {rows}"
    return rows / elapsed


def _written(admin: Admin, topic: str) -> int:
    return sum(p.end - p.log_start for p in admin.list_offsets(topic))


def _measure(
    spark: Any,
    cluster: ProcessCluster,
    admin: Admin,
    size: int,
    n: int,
    repeat: int,
    tmp: str,
) -> list[Result]:
    rows = _rows(n, size)
    df = _frame(spark, n, size)
    # Warm-up: one task per Spark partition, so every Python worker the writes use has started
    # (a limit alone runs one task, and the first measured write started the other worker)
    warm_up = df.limit(100).repartition(SPARK_PARTITIONS)
    _spark_write(cluster, warm_up, _topic(cluster, admin, f"warm-up-{size}"), 100)
    rates: dict[str, list[float]] = {"raw": [], "spark": [], "fetch": [], "source": []}
    for i in range(repeat):
        raw_topic = _topic(cluster, admin, f"raw-{size}-{i}")
        rates["raw"].append(_raw_write(cluster, raw_topic, rows))
        spark_topic = _topic(cluster, admin, f"spark-{size}-{i}")
        rates["spark"].append(_spark_write(cluster, df, spark_topic, n))
        assert _written(admin, raw_topic) == n and _written(admin, spark_topic) == n
        rates["fetch"].append(_raw_read(admin, raw_topic, n))
        rates["source"].append(_spark_read(spark, cluster, raw_topic, n, tmp))
        print(
            f"  {size} B: write raw {rates['raw'][-1]:,.0f} spark {rates['spark'][-1]:,.0f}; "
            f"read raw {rates['fetch'][-1]:,.0f} spark {rates['source'][-1]:,.0f} rows/s"
        )
    df.unpersist()
    m = {k: median(v) for k, v in rates.items()}
    note = f"{n:,} rows of {size:,} B, local[2], 3 brokers RF 3 fsync"
    label = f"{size:,} B"
    return [
        Result(f"{label} write: raw Python producer", m["raw"], "rows/s", note=note),
        Result(f"{label} write: spark writer (exactly_once)", m["spark"], "rows/s", note=note),
        at_least(f"{label} write: spark / raw", m["spark"] / m["raw"], "ratio", GOAL_RATIO),
        Result(f"{label} read: raw Fetch loop", m["fetch"], "rows/s", note=note),
        Result(f"{label} read: spark streaming source", m["source"], "rows/s", note=note),
        Result(f"{label} read: spark / raw", m["source"] / m["fetch"], "ratio"),
    ]


def run(options: argparse.Namespace) -> list[Result]:
    small = 2_000 if options.quick else options.rows
    large = 200 if options.quick else options.large_rows
    spark = _session()
    results: list[Result] = []
    try:
        with (
            tempfile.TemporaryDirectory(prefix="raftq-bench-spark-") as tmp,
            ProcessCluster(Path(tmp), brokers=3, fast=False) as cluster,
        ):
            cluster.wait_ready()
            admin = cluster.admin()
            results += _measure(spark, cluster, admin, SMALL_BYTES, small, options.repeat, tmp)
            results += _measure(spark, cluster, admin, LARGE_BYTES, large, options.repeat, tmp)
    finally:
        spark.stop()
    return results
