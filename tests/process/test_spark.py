"""The ``raftq`` Spark data source against a real 3-broker cluster, Spark in local mode.

One SparkSession for the whole run (local[2,3]: two cores, a task may fail up to 3 times, so
a forced failure is retried; UI off; one shuffle partition; driver on 127.0.0.1). Streaming
queries use ``trigger(availableNow=True)`` + ``awaitTermination()``: deterministic, no sleeps.
Faults come from ``tests/spark_faults.py`` (subclasses of the data source, one-shot marker
files). The data is deterministic (no seed to print).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from raftq.assignors.partitioner import partition_for
from raftq.client import Admin, Producer, StoredRecord
from tests.cluster import ProcessCluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers run the venv, not python3 on PATH
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))  # tests.spark_faults
    from pyspark.sql import SparkSession

    from raftq.spark import register
    from tests.spark_faults import CrashySource, FlakySource

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("raftq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    session.dataSource.register(CrashySource)
    session.dataSource.register(FlakySource)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with ProcessCluster(tmp_path_factory.mktemp("spark-cluster"), brokers=3) as c:
        c.wait_ready()
        yield c


@pytest.fixture(scope="module")
def admin(cluster: ProcessCluster) -> Admin:
    return cluster.admin()


def make_topic(cluster: ProcessCluster, admin: Admin, name: str, partitions: int = 3) -> str:
    admin.create_topic(name, partitions=partitions, replication_factor=3)
    cluster.wait_leaders(name)
    return name


def read_all(admin: Admin, topic: str) -> list[tuple[int, StoredRecord]]:
    """Every record of ``topic`` as (partition, record), through Fetch."""
    out = []
    for bounds in admin.list_offsets(topic):
        offset = bounds.log_start
        while offset < bounds.end:
            fetched = admin.fetch(topic, bounds.partition, offset, 1000)
            out += [(bounds.partition, r) for r in fetched.records]
            offset = fetched.records[-1].offset + 1
    return out


def produce(cluster: ProcessCluster, topic: str, n: int) -> list[tuple[bytes, bytes]]:
    """n keyed records through the Python producer; returns (key, value) in send order."""
    rows = [(b"k%d" % (i % 37), b"v%05d" % i) for i in range(n)]
    with Producer(cluster.bootstrap) as producer:
        futures = [
            producer.send(topic, value, key=key, headers={"h": key}, priority=i % 3)
            for i, (key, value) in enumerate(rows)
        ]
        producer.flush()
    assert all(not f.exception() for f in futures)
    return rows


def values_once(admin: Admin, topic: str, expected: list[bytes]) -> None:
    """Each expected value is in ``topic`` exactly once, and nothing else is."""
    seen = collections.Counter(r.value for _, r in read_all(admin, topic))
    duplicated = sorted(v for v, c in seen.items() if c > 1)
    missing = sorted(set(expected) - set(seen))
    extra = sorted(set(seen) - set(expected))
    assert not duplicated and not missing and not extra, (
        f"{len(duplicated)} duplicated (e.g. {duplicated[:3]}), {len(missing)} missing "
        f"(e.g. {missing[:3]}), {len(extra)} unexpected"
    )
    assert sum(seen.values()) == len(expected)


# --- 4. the source reads what was produced; maxOffsetsPerTrigger --------------------------------


@pytest.mark.slow
def test_batch_read_equals_what_was_produced_and_write_partitions_by_murmur2(
    spark: Any, cluster: ProcessCluster, admin: Admin
) -> None:
    src = make_topic(cluster, admin, "spark-read")
    rows = produce(cluster, src, 500)

    def reader() -> Any:  # DataFrameReader.option mutates the reader: a fresh one each time
        return (
            spark.read.format("raftq").option("bootstrap", cluster.bootstrap).option("topic", src)
        )

    got = reader().load().collect()
    stored = {(p, r.offset): r for p, r in read_all(admin, src)}
    assert len(got) == len(rows) == len(stored)
    for row in got:
        record = stored[(row.partition, row.offset)]
        assert (row.key, row.value) == (record.key, record.value)
        assert row.headers == {"h": row.key} and row.priority == record.priority
        assert row.topic == src and row.timestamp is not None and row.deliver_at is None
    assert sorted((r.key, r.value) for r in got) == sorted(rows)
    ranged = (
        reader()
        .option("startingOffsets", '{"spark-read": {"0": 5}}')
        .option("endingOffsets", '{"spark-read": {"0": 9, "1": -2, "2": -2}}')
    )
    assert sorted(r.offset for r in ranged.load().collect()) == [5, 6, 7, 8]

    # and back out through the writer: same rows, keys on the broker's murmur2 partition
    out = make_topic(cluster, admin, "spark-written")
    written = reader().load().selectExpr("key", "value", "headers", "priority")
    (
        written.write.format("raftq")
        .option("bootstrap", cluster.bootstrap)
        .option("topic", out)
        .mode("append")
        .save()
    )
    copied = read_all(admin, out)
    assert sorted((r.key, r.value) for _, r in copied) == sorted(rows)
    for partition, r in copied:
        assert partition == partition_for(r.key or b"", 3, 0)
        assert r.headers["h"] == r.key


def test_streaming_read_honours_max_offsets_per_trigger(
    spark: Any, cluster: ProcessCluster, admin: Admin, tmp_path: Path
) -> None:
    src = make_topic(cluster, admin, "spark-trickle")
    rows = produce(cluster, src, 350)
    sizes: list[int] = []
    seen: list[bytes] = []

    def collect(batch_df: Any, batch_id: int) -> None:
        values = [r.value for r in batch_df.select("value").collect()]
        sizes.append(len(values))
        seen.extend(values)

    query = (
        spark.readStream.format("raftq")
        .option("bootstrap", cluster.bootstrap)
        .option("topic", src)
        .option("maxOffsetsPerTrigger", 100)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert sizes == [100, 100, 100, 50]
    assert sorted(seen) == sorted(v for _, v in rows)


# --- 1. a streaming query that crashes in its sink commit and restarts ---------------------------


@pytest.mark.slow
@pytest.mark.parametrize("point", ["before", "after"])
def test_streaming_sink_crash_in_commit_then_restart_writes_each_row_once(
    spark: Any, cluster: ProcessCluster, admin: Admin, tmp_path: Path, point: str
) -> None:
    """``before``: tasks wrote batch 1, the watermark did not move: the replay resumes each
    task after its producer's last applied batch (more than the 5 the broker remembers, so a
    resend from sequence 0 would be refused). ``after``: the watermark moved: the replay is
    skipped."""
    src = make_topic(cluster, admin, f"spark-crash-in-{point}")
    out = make_topic(cluster, admin, f"spark-crash-out-{point}")
    rows = produce(cluster, src, 600)
    marker = tmp_path / "crash-once"
    marker.touch()

    def run() -> Any:
        query = (
            spark.readStream.format("raftq")
            .option("bootstrap", cluster.bootstrap)
            .option("topic", src)
            .option("maxOffsetsPerTrigger", 200)
            .load()
            .selectExpr("key", "value")
            .writeStream.format("raftq_crashy")
            .option("bootstrap", cluster.bootstrap)
            .option("topic", out)
            .option("batchRecords", 3)  # ~8 batches per producer and partition
            .option("crashFile", str(marker))
            .option("crashBatch", 1)
            .option("crashPoint", point)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        except Exception as exc:  # StreamingQueryException: the injected crash
            assert "injected crash" in str(exc)
        return query

    first = run()
    assert first.exception() is not None and not marker.exists()
    in_topic_after_crash = len(read_all(admin, out))
    assert in_topic_after_crash >= 400  # batches 0 and 1 were written before the crash
    second = run()
    assert second.exception() is None
    assert second.id == first.id  # same checkpoint, same query id: same app id
    values_once(admin, out, [v for _, v in rows])
    assert admin.get_txn(f"query-{second.id}", out) == 2


# --- 2. a task forced to fail and retried --------------------------------------------------------


def _write_failing_once(
    spark: Any, cluster: ProcessCluster, out: str, tmp_path: Path, partitions: int, **options: Any
) -> list[dict[str, Any]]:
    """Write ids 0-2,999 (key ``id % 101``, value ``v<id>``) in ``partitions`` Spark partitions
    through ``raftq_flaky``, whose attempt 0 of a task fails after 900 rows as ``options`` say
    (failMode, purgePartition...), batches of 7; assert that attempt failed and return the
    tasks' summaries (records_written, records_skipped)."""
    fail, report = tmp_path / "fail-once", tmp_path / "report.json"
    fail.touch()
    df = spark.range(0, 3000, numPartitions=partitions).selectExpr(
        "cast(id % 101 as string) as key", "concat('v', cast(id as string)) as value"
    )
    writer = (
        df.write.format("raftq_flaky")
        .option("bootstrap", cluster.bootstrap)
        .option("topic", out)
        .option("batchRecords", 7)
        .option("failFile", str(fail))
        .option("failAfterRows", 900)
        .option("reportFile", str(report))
    )
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.mode("append").save()
    assert not fail.exists()  # attempt 0 of a task failed
    summaries: list[dict[str, Any]] = json.loads(report.read_text())
    return summaries


@pytest.mark.parametrize("mode", ["raise", "end", "exit"])
def test_retried_task_resumes_after_what_its_first_attempt_wrote(
    spark: Any, cluster: ProcessCluster, admin: Admin, tmp_path: Path, mode: str
) -> None:
    """Attempt 0 of a task fails after handing 900 rows over: its input raises (``raise``),
    ends normally so the writer sends short last batches (``end``: a UDF failing upstream),
    or its worker dies (``exit``: an executor kill). The retry writes the rest: every id once."""
    out = make_topic(cluster, admin, f"spark-retry-{mode}")
    # ~40 batches per raftq partition before the failure
    summaries = _write_failing_once(spark, cluster, out, tmp_path, 2, failMode=mode)
    values_once(admin, out, [b"v%d" % i for i in range(3000)])
    assert sum(s["records_written"] + s["records_skipped"] for s in summaries) == 3000
    assert max(s["records_skipped"] for s in summaries) >= 600  # the retry skipped, not resent


@pytest.mark.slow  # a task's two attempts in real Spark: 60-130 s at load 15-30
def test_a_retry_after_a_purge_cut_part_of_the_first_attempt_skips_all_it_wrote(
    spark: Any, cluster: ProcessCluster, admin: Admin, tmp_path: Path
) -> None:
    """Attempt 0 of the one task writes its first 900 rows, then raftq partition 0 is purged
    (an operator's purge, or retention, cutting away part of what it wrote) and the task
    fails. The retry skips all 900 and writes the rest: each id written once, the cut ones
    gone, none back. On the code before, the partition counted only the records left, so the
    retry resent rows of the first attempt (or failed OUT_OF_ORDER_SEQUENCE / a
    nondeterministic-input error, depending on what was left)."""
    out = make_topic(cluster, admin, "spark-retry-purged")
    summaries = _write_failing_once(
        spark, cluster, out, tmp_path, 1, failMode="end", purgePartition=0
    )
    cut = {i for i in range(900) if partition_for(str(i % 101).encode(), 3, 0) == 0}
    assert 200 < len(cut) < 700
    assert admin.list_offsets(out)[0].log_start > 0
    values_once(admin, out, [b"v%d" % i for i in range(3000) if i not in cut])
    assert [(s["records_skipped"], s["records_written"]) for s in summaries] == [(900, 2100)]


@pytest.mark.parametrize("mode", ["end", "exit"])
def test_a_retry_resumes_mid_growth_of_default_sized_batches(
    spark: Any, cluster: ProcessCluster, admin: Admin, tmp_path: Path, mode: str
) -> None:
    """At the default batchRecords a partition's batch caps grow (1,000, 1,000, 2,000, ...):
    attempt 0 fails after 4,500 rows, ~1,500 per raftq partition (a first batch of 1,000 and
    a short one sent, or the first in flight when the worker dies); the retry resumes from
    what was applied, mid-growth, and cuts its batches from there. Every id once."""
    out = make_topic(cluster, admin, f"spark-retry-growth-{mode}")
    fail, report = tmp_path / "fail-once", tmp_path / "report.json"
    fail.touch()
    df = spark.range(0, 12_000, numPartitions=2).selectExpr(
        "cast(id % 101 as string) as key", "concat('v', cast(id as string)) as value"
    )
    (
        df.write.format("raftq_flaky")
        .option("bootstrap", cluster.bootstrap)
        .option("topic", out)
        .option("failFile", str(fail))
        .option("failAfterRows", 4_500)
        .option("failMode", mode)
        .option("reportFile", str(report))
        .mode("append")
        .save()
    )
    assert not fail.exists()
    values_once(admin, out, [b"v%d" % i for i in range(12_000)])
    summaries = json.loads(report.read_text())
    assert sum(s["records_written"] + s["records_skipped"] for s in summaries) == 12_000
    if mode == "end":  # attempt 0 sent all it was handed, short batches too: none again
        assert max(s["records_skipped"] for s in summaries) == 4_500


# --- 3. foreachBatch with txnAppId / txnVersion ---------------------------------------------------


@pytest.mark.slow
def test_foreach_batch_with_txn_ids_is_replay_safe(
    spark: Any, cluster: ProcessCluster, admin: Admin, tmp_path: Path
) -> None:
    src = make_topic(cluster, admin, "spark-feb-in")
    out = make_topic(cluster, admin, "spark-feb-out")
    rows = produce(cluster, src, 300)
    marker = tmp_path / "fail-after-write"
    marker.touch()
    app = "feb-app"
    bootstrap = cluster.bootstrap

    def write(batch_df: Any, batch_id: int) -> None:
        (
            batch_df.selectExpr("key", "value")
            .write.format("raftq")
            .option("bootstrap", bootstrap)
            .option("topic", out)
            .option("txnAppId", app)
            .option("txnVersion", batch_id)
            .mode("append")
            .save()
        )
        if batch_id == 1 and marker.exists():  # wrote and committed, then died
            marker.unlink()
            raise RuntimeError("injected failure after the write")

    def run() -> Any:
        query = (
            spark.readStream.format("raftq")
            .option("bootstrap", bootstrap)
            .option("topic", src)
            .option("maxOffsetsPerTrigger", 100)
            .load()
            .writeStream.foreachBatch(write)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        except Exception as exc:
            assert "injected failure" in str(exc)
        return query

    assert run().exception() is not None
    assert run().exception() is None  # batch 1 replayed: skipped by the watermark
    values_once(admin, out, [v for _, v in rows])
    assert admin.get_txn(app, out) == 2  # the watermark of (app, target topic)
    # an old version written again (not a replay of the last batch: a checkpoint reset) is
    # refused loudly, and adds nothing
    again = spark.createDataFrame([(b"k", b"late")], "key binary, value binary")
    with pytest.raises(Exception, match="not a replay of the last batch"):
        write(again, 0)
    values_once(admin, out, [v for _, v in rows])


def test_two_writes_in_one_batch_are_each_exactly_once_and_a_reset_checkpoint_fails_loudly(
    spark: Any, cluster: ProcessCluster, admin: Admin
) -> None:
    """foreachBatch writing one batch to two topics under one txnAppId/txnVersion: the
    watermark is per (app, topic), so both land, and a replay of either adds nothing. After a
    checkpoint reset the batch ids start again at 0: refused loudly, not silently skipped."""
    first, second = (
        make_topic(cluster, admin, "spark-two-a"),
        make_topic(cluster, admin, "spark-two-b"),
    )
    app = "two-writes-app"

    def write(topic: str, values: list[bytes], batch_id: int) -> None:
        frame = spark.createDataFrame([(v,) for v in values], "value binary")
        (
            frame.write.format("raftq")
            .option("bootstrap", cluster.bootstrap)
            .option("topic", topic)
            .option("txnAppId", app)
            .option("txnVersion", batch_id)
            .mode("append")
            .save()
        )

    batch0 = [b"b0-%d" % i for i in range(20)]
    write(first, batch0, 0)
    write(second, batch0, 0)
    write(first, batch0, 0)  # the batch replayed after a crash: both skipped
    write(second, batch0, 0)
    batch1 = [b"b1-%d" % i for i in range(5)]
    write(first, batch1, 1)
    write(second, batch1, 1)
    values_once(admin, first, batch0 + batch1)
    values_once(admin, second, batch0 + batch1)
    assert (admin.get_txn(app, first), admin.get_txn(app, second)) == (1, 1)
    with pytest.raises(Exception, match="not a replay of the last batch"):
        write(first, [b"after-reset"], 0)
    values_once(admin, first, batch0 + batch1)


# --- 5. the Kafka connector's rules: option precedence, unknown options, modes, column types ----


def test_copying_a_topic_writes_to_the_topic_option_not_the_read_topic_column(
    spark: Any, cluster: ProcessCluster, admin: Admin
) -> None:
    """The reader's DataFrame has a ``topic`` column naming the source; the ``topic`` option
    wins over it (Spark's Kafka sink rule): the copy lands in the target, the source is
    unchanged. Without the option the column routes each row."""
    src = make_topic(cluster, admin, "spark-copy-src")
    dst = make_topic(cluster, admin, "spark-copy-dst")
    rows = produce(cluster, src, 120)
    read = spark.read.format("raftq").option("bootstrap", cluster.bootstrap).option("topic", src)
    (
        read.load()
        .write.format("raftq")
        .option("bootstrap", cluster.bootstrap)
        .option("topic", dst)
        .mode("append")
        .save()
    )
    values_once(admin, dst, [v for _, v in rows])
    values_once(admin, src, [v for _, v in rows])  # nothing written back into the source
    routed = spark.createDataFrame(
        [(dst, b"by-column")], "topic string, value binary"
    )  # no topic option: the column names the topic
    routed.write.format("raftq").option("bootstrap", cluster.bootstrap).mode("append").save()
    values_once(admin, dst, [v for _, v in rows] + [b"by-column"])


def test_register_caps_arrow_batches_unless_the_session_sets_its_own(spark: Any) -> None:
    """register() caps the Arrow batches Spark hands a writer at 4 MiB in a session that sets
    no cap (Spark's own default, 64 MiB, gives a task of 10 KB rows one batch of up to
    100 MB), and keeps a cap the session set; registering again (another session of the
    application, which shares the format) does not fail."""
    from raftq.spark import register
    from raftq.spark.datasource import ARROW_BATCH_BYTES, ARROW_BATCH_BYTES_CONF

    fresh = spark.newSession()
    assert fresh.conf.get(ARROW_BATCH_BYTES_CONF, None) is None
    register(fresh)
    assert fresh.conf.get(ARROW_BATCH_BYTES_CONF) == str(ARROW_BATCH_BYTES) == "4194304"
    own = spark.newSession()
    own.conf.set(ARROW_BATCH_BYTES_CONF, "1000000")
    register(own)
    assert own.conf.get(ARROW_BATCH_BYTES_CONF) == "1000000"


def test_unknown_options_overwrite_bad_columns_and_missing_partitions_are_refused(
    spark: Any, cluster: ProcessCluster, admin: Admin
) -> None:
    name = make_topic(cluster, admin, "spark-refusals")
    df = spark.createDataFrame([(b"k", b"v")], "key binary, value binary")

    def writer(frame: Any = df) -> Any:
        return (
            frame.write.format("raftq").option("bootstrap", cluster.bootstrap).option("topic", name)
        )

    def reader() -> Any:
        return spark.read.format("raftq").option("bootstrap", cluster.bootstrap)

    def refused(action: Any, *expected: str) -> None:
        with pytest.raises(Exception) as caught:
            action()
        for text in expected:
            assert text in str(caught.value), str(caught.value)[:2000]

    refused(
        lambda: writer().option("kafka.bootstrap.servers", "x:1").mode("append").save(),
        "kafka.bootstrap.servers (raftq: bootstrap)",
        "valid: bootstrap",
    )
    refused(
        lambda: reader().option("topic", name).option("startingOffset", "earliest").load(),
        "startingoffset (raftq: startingOffsets)",
    )
    refused(lambda: reader().option("topic", name).option("includeHeaders", "true").load())
    refused(lambda: writer().mode("overwrite").save(), 'mode("overwrite") is refused')
    int_key = spark.createDataFrame([(1, b"v")], "key int, value binary")
    refused(lambda: writer(int_key).mode("append").save(), "column 'key' has type int")
    refused(
        lambda: (
            reader()
            .option("topic", name)
            .option("startingOffsets", json.dumps({name: {"7": 0}}))
            .load()
            .collect()
        ),
        "partitions 7 of topic 'spark-refusals'",
    )
    assert sum(p.end for p in admin.list_offsets(name)) == 0  # nothing was written


# --- 6. the README's example runs as written ------------------------------------------------------


@pytest.mark.slow
def test_the_readme_spark_example_runs(
    cluster: ProcessCluster, admin: Admin, tmp_path: Path
) -> None:
    """The block after ``<!-- spark-example -->`` in README.md, as a program of its own (its
    own SparkSession, PYSPARK_PYTHON unset so the example's own setting is what works)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- spark-example -->", 1)[1]
    code = block.split("```python\n", 1)[1].split("```", 1)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["RAFTQ_BOOTSTRAP"] = cluster.bootstrap
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "orders: 1000" in done.stdout and "orders-audit: 1000" in done.stdout, done.stdout
    orders = [b"order-%d" % i for i in range(1000)]
    values_once(admin, "orders", orders)
    values_once(admin, "orders-upper", [v.upper() for v in orders])
    values_once(admin, "orders-audit", orders)
