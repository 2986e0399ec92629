"""The Spark writer's engine and the broker calls it relies on, without Spark: a real 3-broker
cluster, ``broker/spark/sink.py`` driven directly, and the pure offset planning of
``broker/spark/source.py``. Data is deterministic, except the shuffle test (seed printed)."""

from __future__ import annotations

import collections
import logging
import os
import pathlib
import queue
import random
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from raftq import cli
from raftq.assignors.partitioner import partition_for
from raftq.client import Admin
from raftq.proto import api_pb2, api_pb2_grpc, common_pb2, errors
from raftq.spark import common, sink, source
from tests.cluster import Cluster, ProcessCluster, make_cluster
from tests.process.test_authz import POLICY


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with ProcessCluster(tmp_path_factory.mktemp("sink-cluster"), brokers=3) as c:
        c.wait_ready()
        yield c


@pytest.fixture(scope="module")
def admin(cluster: ProcessCluster) -> Admin:
    return cluster.admin()


def topic(cluster: ProcessCluster, admin: Admin, name: str) -> str:
    admin.create_topic(name, partitions=3, replication_factor=3)
    cluster.wait_leaders(name)
    return name


def options(cluster: ProcessCluster, name: str, **extra: str) -> sink.SinkOptions:
    return sink.SinkOptions.parse({"bootstrap": cluster.bootstrap, "topic": name, **extra})


def values(admin: Admin, name: str) -> collections.Counter[bytes]:
    seen: collections.Counter[bytes] = collections.Counter()
    for bounds in admin.list_offsets(name):
        offset = bounds.log_start
        while offset < bounds.end:
            fetched = admin.fetch(name, bounds.partition, offset, 1000)
            seen.update(r.value for r in fetched.records)
            offset = fetched.records[-1].offset + 1
    return seen


def rows(n: int) -> list[tuple[bytes, bytes]]:
    return [(b"k%d" % (i % 29), b"v%04d" % i) for i in range(n)]


def write(
    cluster: ProcessCluster,
    opts: sink.SinkOptions,
    producer_id: str | None,
    data: list[tuple[bytes, bytes]],
    *,
    finish: bool = True,
    recovery: sink.Recovery | None = None,
    rows_at_once: bool = False,
) -> sink.TaskSummary:
    """One task's attempt: rows one at a time (``add``), or all at once (``add_rows``, the
    data source's path for frames of a key and a value); both cut the same batches."""
    task = sink.TaskSink(
        common.connection(cluster.bootstrap),
        opts,
        producer_id=producer_id,
        spark_partition=0,
        recovery=recovery,
    )
    if rows_at_once:
        task.add_rows([v for _, v in data], [k for k, _ in data])
    else:
        for key, value in data:
            task.add(value, key=key)
    return task.finish() if finish else task.summary


def test_txn_watermark_rises_and_never_falls(admin: Admin) -> None:
    assert admin.get_txn("app-w") is None
    assert admin.commit_txn("app-w", 3) == 3
    assert admin.commit_txn("app-w", 2) == 3  # a stale version is a no-op
    assert admin.commit_txn("app-w", 4) == 4
    assert admin.get_txn("app-w") == 4
    with pytest.raises(errors.InvalidArgument):
        admin.commit_txn("app-w", -1)
    assert admin.commit_txn("app-w", 1, "topic-b") == 1  # its own watermark per scope
    assert (admin.get_txn("app-w", "topic-b"), admin.get_txn("app-w")) == (1, 4)
    with pytest.raises(errors.InvalidArgument):
        admin.commit_txn("app-w", 1, "no/such topic")


def test_a_retried_task_resumes_after_the_producers_last_applied_batch(
    cluster: ProcessCluster, admin: Admin
) -> None:
    name = topic(cluster, admin, "sink-resume")
    opts = options(cluster, name, batchRecords="4")
    data = rows(400)
    # attempt 0 dies after 250 rows: ~20 batches per partition applied, the tail in flight
    write(cluster, opts, "spark:app:7:0", data[:250], finish=False)
    first = admin.producer_state(name, "spark:app:7:0")
    assert all(s.known and s.last_sequence >= 5 for s in first.values())  # > the 5 remembered
    summary = write(cluster, opts, "spark:app:7:0", data)
    assert summary.records_skipped >= 200 and summary.records_written <= 200
    assert values(admin, name) == collections.Counter(v for _, v in data)
    # a third attempt (a replay) writes nothing
    again = write(cluster, opts, "spark:app:7:0", data)
    assert again.records_written == 0 and again.records_skipped == 400
    assert values(admin, name) == collections.Counter(v for _, v in data)


def test_a_retry_after_a_partial_write_resumes_by_the_records_written(
    cluster: ProcessCluster, admin: Admin
) -> None:
    """Attempts that saw a normal end of input early (a UDF upstream of the writer failed after
    handing rows over) sent short last batches; each retry skips exactly the rows already in
    the log, whatever batches they went in, then writes the rest."""
    name = topic(cluster, admin, "sink-partial")
    opts = options(cluster, name, batchRecords="4")
    data = rows(400)
    pid = "spark:app:9:0"
    assert write(cluster, opts, pid, data[:250]).records_written == 250
    second = write(cluster, opts, pid, data[:331])  # cut elsewhere: short batches again
    assert (second.records_skipped, second.records_written) == (250, 81)
    third = write(cluster, opts, pid, data)
    assert (third.records_skipped, third.records_written) == (331, 69)
    assert values(admin, name) == collections.Counter(v for _, v in data)
    states = admin.producer_state(name, pid)
    assert sum(s.records for s in states.values()) == 400
    again = write(cluster, opts, pid, data)  # a replay writes nothing
    assert (again.records_skipped, again.records_written) == (400, 0)
    assert values(admin, name) == collections.Counter(v for _, v in data)


@pytest.mark.slow  # kept out of make test's budget, run by make test-slow
def test_a_retry_after_the_dedup_window_still_resumes_by_the_records_written(
    cluster: ProcessCluster, admin: Admin
) -> None:
    """The partition forgets a producer's batches after dedup_window_ms; the records stay, and
    a `spark:` producer's resume is read from them."""
    name = "sink-late-retry"
    admin.create_topic(name, partitions=3, replication_factor=3, dedup_window_ms=1)
    cluster.wait_leaders(name)
    opts = options(cluster, name, batchRecords="4")
    data = rows(300)
    write(cluster, opts, "spark:app:3:0", data[:170])
    control = [(b"k%d" % i, b"control-%d" % i) for i in range(30)]
    write(cluster, opts, "control-producer", control)  # not tracked: forgotten by the window
    # the leader's Retain (every 5 s while the partition changes) forgets it: keep appending
    ticks: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 90
    while any(s.known for s in admin.producer_state(name, "control-producer").values()):
        assert time.monotonic() < deadline, "the dedup window never forgot the control producer"
        tick = [(b"k%d" % i, b"tick-%d-%d" % (len(ticks), i)) for i in range(3)]
        write(cluster, opts, None, tick)
        ticks += tick
        time.sleep(0.5)
    resumed = write(cluster, opts, "spark:app:3:0", data)
    assert (resumed.records_skipped, resumed.records_written) == (170, 130)
    expected = collections.Counter(v for _, v in data + control + ticks)
    assert values(admin, name) == expected


def test_speculative_twins_write_each_row_once(cluster: ProcessCluster, admin: Admin) -> None:
    """Three attempts of one task with the same producer id at once (a speculative duplicate
    and a zombie): whichever applies a batch first, every row is in the log once."""
    name = topic(cluster, admin, "sink-twins")
    opts = options(cluster, name, batchRecords="3")
    data = rows(600)
    failures: list[BaseException] = []

    def attempt() -> None:
        try:
            write(cluster, opts, "spark:app:5:1", data)
        except BaseException as exc:  # reported below
            failures.append(exc)

    twins = [threading.Thread(target=attempt) for _ in range(3)]
    for twin in twins:
        twin.start()
    for twin in twins:
        twin.join(120)
    assert not failures, failures
    assert values(admin, name) == collections.Counter(v for _, v in data)


def test_a_retry_with_its_rows_in_another_order_fails_loudly(
    cluster: ProcessCluster, admin: Admin
) -> None:
    seed = int(os.environ.get("RAFTQ_SEED", random.randrange(2**32)))
    print(f"RAFTQ_SEED={seed}")
    name = topic(cluster, admin, "sink-shuffled")
    opts = options(cluster, name, batchRecords="5")
    data = rows(120)
    write(cluster, opts, "spark:app:1:0", data)
    shuffled = list(data)
    random.Random(seed).shuffle(shuffled)
    with pytest.raises(sink.NondeterministicInput):
        write(cluster, opts, "spark:app:1:0", shuffled)
    with pytest.raises(sink.NondeterministicInput):  # fewer rows than the first attempt wrote
        write(cluster, opts, "spark:app:1:0", data[:60])


def test_a_batch_stuck_on_nondeterministic_input_is_recovered_by_the_documented_command(
    cluster: ProcessCluster, admin: Admin, capsys: pytest.CaptureFixture[str]
) -> None:
    """Input that really differs on every retry fails each time, naming the command; after
    `raftq spark recover` the batch's next attempt writes all its rows at-least-once (the
    failed attempt's rows stay: nothing lost), and the following batch is exactly-once again."""
    seed = int(os.environ.get("RAFTQ_SEED", random.randrange(2**32)))
    print(f"RAFTQ_SEED={seed}")
    name = topic(cluster, admin, "sink-stuck")
    opts = options(cluster, name, batchRecords="5")
    data = rows(120)
    shuffled = list(data)
    random.Random(seed).shuffle(shuffled)
    app, version = "stuck-app", 7
    pid = sink.producer_id_for(app, version, 0, name)
    recovery = sink.Recovery.for_batch(admin, app, name, version)
    write(cluster, opts, pid, data[:60], recovery=recovery)  # attempt 0, input ended early
    command = f"raftq spark recover --app {app} --topic {name} --batch {version}"
    for _ in range(2):  # stuck: every retry fails, naming the way out
        with pytest.raises(sink.NondeterministicInput, match=re.escape(command)):
            write(cluster, opts, pid, shuffled, recovery=recovery)
    argv = ["spark", "recover", "--bootstrap", cluster.bootstrap, "--app", app]
    assert cli.main([*argv, "--topic", name, "--batch", str(version)]) == 0
    assert "at-least-once" in capsys.readouterr().out
    summary = write(cluster, opts, pid, shuffled, recovery=recovery)
    assert summary.recovered and summary.records_written == 120
    seen = values(admin, name)
    assert set(seen) == {v for _, v in data} and sum(seen.values()) == 180
    # the next batch is exactly-once again; a batch already committed needs no recovery
    following = [(k, b"next-" + v) for k, v in data]
    after = sink.Recovery.for_batch(admin, app, name, version + 1)
    next_pid = sink.producer_id_for(app, version + 1, 0, name)
    write(cluster, opts, next_pid, following[:30], recovery=after)
    assert not write(cluster, opts, next_pid, following, recovery=after).recovered
    assert sum(values(admin, name).values()) == 180 + 120
    admin.commit_txn(app, version + 1, name)
    assert cli.main([*argv, "--topic", name, "--batch", str(version)]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_batches_split_by_encoded_size_and_a_row_that_fits_alone_never_fails(
    cluster: ProcessCluster, admin: Admin
) -> None:
    """batchBytes bounds a batch's encoded size; a row over it (but within max_record_bytes)
    goes alone; key-less rows fill one batch's worth of a partition, then the next, the same
    way on a retry that resumes (rows skipped count as routed)."""
    name = topic(cluster, admin, "sink-bytes")
    opts = options(cluster, name, batchBytes="1000")
    data = [(b"k%d" % (i % 7), b"%04d" % i + b"x" * 600) for i in range(30)]
    data.append((b"big", b"b" * 5000))
    summary = write(cluster, opts, "spark:bytes:0:0", data)
    assert summary.records_written == 31 and summary.batches_sent == 31  # 2 x 600 B > 1000
    assert values(admin, name) == collections.Counter(v for _, v in data)

    keyless = topic(cluster, admin, "sink-keyless")
    opts = options(cluster, keyless, batchRecords="50")
    plain = [b"plain-%03d" % i for i in range(300)]

    def send(pid: str, count: int) -> sink.TaskSummary:
        task = sink.TaskSink(common.connection(cluster.bootstrap), opts, producer_id=pid)
        for value in plain[:count]:
            task.add(value)
        return task.finish()

    send("spark:keyless:0:0", 130)  # attempt 0 ends early, mid-batch
    resumed = send("spark:keyless:0:0", 300)
    assert (resumed.records_skipped, resumed.records_written) == (130, 170)
    assert values(admin, keyless) == collections.Counter(plain)
    assert [p.end for p in admin.list_offsets(keyless)] == [100, 100, 100]
    with pytest.raises(errors.InvalidArgument, match="batchBytes"):
        sink.SinkOptions.parse({"bootstrap": "h:1", "batchbytes": str(8 << 20)})


def test_row_bytes_is_the_records_encoded_size_plus_framing() -> None:
    """add_rows sizes rows without building a Record: the same figure as Record.ByteSize()."""
    for key in (None, b"", b"k", b"x" * 127, b"x" * 128, b"x" * 16_383, b"x" * 16_384):
        for value in (b"", b"v", b"y" * 127, b"y" * 128, b"y" * 16_384, b"y" * (1 << 21)):
            record = common_pb2.Record(value=value)
            if key is not None:
                record.key = key
            expected = record.ByteSize() + sink.RECORD_FRAMING_BYTES
            assert sink.row_bytes(key, value) == expected, (key, len(value))


def test_a_lanes_first_batch_goes_before_batch_records_rows_and_batches_then_grow(
    cluster: ProcessCluster, admin: Admin
) -> None:
    """A lane's first FIRST_BATCH_RECORDS rows go at once (the brokers start while the task is
    still being fed), then each batch holds as many rows as came before it, up to
    batchRecords: 1,000, 1,000, 2,000, 4,000, then the rest (end of input)."""
    name = topic(cluster, admin, "sink-ramp")
    opts = options(cluster, name)  # batchRecords 10,000
    data = [(b"one-key", b"r%05d" % i) for i in range(9_000)]  # one partition
    partition = partition_for(b"one-key", len(admin.list_offsets(name)), 0)
    task = sink.TaskSink(common.connection(cluster.bootstrap), opts, producer_id="spark:ramp:0:0")
    for key, value in data[:1_500]:
        task.add(value, key=key)
    deadline = time.monotonic() + 30
    while (state := admin.producer_state(name, "spark:ramp:0:0")[partition]).records < 1_000:
        assert time.monotonic() < deadline, "the first 1,000 rows were not sent while fed"
        time.sleep(0.05)
    assert (state.records, state.last_sequence) == (1_000, 0)
    task.add_rows([v for _, v in data[1_500:]], [k for k, _ in data[1_500:]])
    summary = task.finish()
    assert (summary.batches_sent, summary.records_written) == (5, 9_000)
    state = admin.producer_state(name, "spark:ramp:0:0")[partition]
    assert (state.records, state.last_sequence, len(state.last_offsets)) == (9_000, 4, 1_000)
    assert values(admin, name) == collections.Counter(v for _, v in data)


def test_add_rows_routes_each_key_as_partition_for_does(
    cluster: ProcessCluster, admin: Admin
) -> None:
    """add_rows hashes each distinct key once per call and routes every row of it where
    partition_for (Kafka's murmur2) puts it: repeated keys, keys seen once, the empty key;
    key-less rows go too."""
    name = topic(cluster, admin, "sink-routes")
    keys: list[bytes | None] = [b"k%d" % (i % 7) for i in range(300)]
    keys += [b"once-%d" % i for i in range(100)] + [b""] * 5 + [None] * 20
    data = [b"v%04d" % i for i in range(len(keys))]
    task = sink.TaskSink(
        common.connection(cluster.bootstrap), options(cluster, name), producer_id=None
    )
    task.add_rows(data, keys)
    task.add_rows(data[:3], keys[:3])  # a second call: the same keys, routed alike
    assert task.finish().records_written == len(data) + 3
    partitions = len(admin.list_offsets(name))
    where: dict[bytes, set[int]] = collections.defaultdict(set)
    for bounds in admin.list_offsets(name):
        for r in admin.fetch(name, bounds.partition, bounds.log_start, 1000).records:
            where[r.value].add(bounds.partition)
    for key, value in zip(keys, data, strict=True):
        if key is not None:
            assert where[value] == {partition_for(key, partitions, 0)}, (key, value)
    assert values(admin, name) == collections.Counter(data + data[:3])


def test_growing_batches_resume_and_speculative_twins_write_each_row_once(
    cluster: ProcessCluster, admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With caps growing by position (2, 2, 4, 8, 16, 16, ...), attempts that ended early at
    any row, a retry through the other input path, and three twins at once still leave
    every row in the log once: cuts from a given row are a function of the rows alone."""
    monkeypatch.setattr(sink, "FIRST_BATCH_RECORDS", 2)
    name = topic(cluster, admin, "sink-ramp-resume")
    opts = options(cluster, name, batchRecords="16")
    data = rows(600)
    pid = "spark:ramp:1:0"
    assert write(cluster, opts, pid, data[:37]).records_written == 37  # ends mid-ramp
    second = write(cluster, opts, pid, data[:301], rows_at_once=True)
    assert (second.records_skipped, second.records_written) == (37, 264)
    failures: list[BaseException] = []

    def attempt(rows_at_once: bool) -> None:
        try:
            write(cluster, opts, pid, data, rows_at_once=rows_at_once)
        except BaseException as exc:  # reported below
            failures.append(exc)

    twins = [threading.Thread(target=attempt, args=(i % 2 == 0,)) for i in range(3)]
    for twin in twins:
        twin.start()
    for twin in twins:
        twin.join(120)
    assert not failures, failures
    assert values(admin, name) == collections.Counter(v for _, v in data)
    assert sum(s.records for s in admin.producer_state(name, pid).values()) == 600


def test_a_broker_out_of_send_streams_gets_the_batches_unary(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The sink sends on one SendStream per broker; a broker with no stream slot free
    (RESOURCE_EXHAUSTED) gets the same batches as unary Sends, each row once."""
    env = {"RAFTQ_CAPACITY__SEND_STREAMS_MAX": "1"}  # room for one send stream
    with make_cluster(tmp_path, env=env) as cluster:
        cluster.wait_ready()
        address = cluster.client_addr(1)
        admin = cluster.admin()
        admin.create_topic("orders", partitions=1)
        requests: queue.SimpleQueue[api_pb2.SendRequest | None] = queue.SimpleQueue()
        conn = common.Connection(address, 30_000)
        try:
            with grpc.insecure_channel(address) as channel:
                held = api_pb2_grpc.ProducerStub(channel).SendStream(iter(requests.get, None))
                requests.put(api_pb2.SendRequest(topic="orders", values=[b"x"], request_id=1))
                assert next(held).request_id == 1  # the one slot is taken
                opts = sink.SinkOptions.parse({"bootstrap": address, "topic": "orders"})
                data = rows(2_500)  # three batches: 1,000, 1,000, 500
                task = sink.TaskSink(conn, opts, producer_id="spark:unary:0:0")
                with caplog.at_level(logging.INFO, logger="raftq.client"):
                    task.add_rows([v for _, v in data], [k for k, _ in data])
                    assert task.finish().batches_sent == 3
                assert "refused a send stream" in caplog.text
                requests.put(None)
        finally:
            conn.close()
        assert values(admin, "orders") == collections.Counter([b"x", *(v for _, v in data)])


def test_at_least_once_and_bad_rows(cluster: ProcessCluster, admin: Admin) -> None:
    name = topic(cluster, admin, "sink-alo")
    opts = options(cluster, name, deliveryGuarantee="at_least_once")
    summary = write(cluster, opts, None, rows(50))
    assert summary.records_written == 50 and sum(values(admin, name).values()) == 50
    task = sink.TaskSink(common.connection(cluster.bootstrap), opts, producer_id=None)
    with pytest.raises(errors.InvalidArgument):
        task.add(b"x", partition=7)
    task.add(b"x", topic="no-such-topic")  # the topic option wins over the row's topic
    routed = sink.SinkOptions.parse({"bootstrap": cluster.bootstrap})  # no option: the row's
    task = sink.TaskSink(common.connection(cluster.bootstrap), routed, producer_id=None)
    with pytest.raises(errors.UnknownTopic):
        task.add(b"x", topic="no-such-topic")
    with pytest.raises(errors.InvalidArgument, match="no topic"):
        task.add(b"x")


def test_sink_options_are_checked() -> None:
    with pytest.raises(errors.InvalidArgument, match="bootstrap"):
        sink.SinkOptions.parse({"topic": "t"})
    with pytest.raises(errors.InvalidArgument, match="deliveryGuarantee"):
        sink.SinkOptions.parse({"bootstrap": "h:1", "deliveryguarantee": "maybe"})
    with pytest.raises(errors.InvalidArgument, match="together"):
        sink.SinkOptions.parse({"bootstrap": "h:1", "txnappid": "a"})
    parsed = sink.SinkOptions.parse({"bootstrap": "h:1", "txnappid": "a", "txnversion": "4"})
    assert (parsed.app_id, parsed.version, parsed.guarantee) == ("a", 4, "exactly_once")
    with pytest.raises(
        errors.InvalidArgument,
        match=r"batchrecord, kafka.bootstrap.servers \(raftq: bootstrap\); valid: bootstrap, ",
    ):
        sink.SinkOptions.parse(
            {"bootstrap": "h:1", "kafka.bootstrap.servers": "h:1", "batchrecord": "5"}
        )
    spark_own = {"bootstrap": "h:1", "path": "p", "checkpointLocation": "/c"}
    assert sink.SinkOptions.parse(spark_own).topic is None  # Spark's own options pass
    long_id = sink.producer_id_for("x" * 400, 3, 1)
    assert len(long_id) <= 255 and long_id.endswith(":3:1")
    assert sink.producer_id_for("a", 3, 1) == "spark:a:3:1"
    assert sink.producer_id_for("a", 3, 1, "t") == "spark:a/t:3:1"
    assert sink.txn_scope(sink.SinkOptions.parse({"bootstrap": "h:1", "topic": "t"})) == "t"
    assert sink.txn_scope(sink.SinkOptions.parse({"bootstrap": "h:1"})) == ""


def test_a_txn_version_is_new_a_replay_or_refused() -> None:
    assert sink.check_version("a", "t", 0, None) is False  # nothing committed yet
    assert sink.check_version("a", "t", 5, 4) is False  # the next batch
    assert sink.check_version("a", "t", 4, 4) is True  # the last batch, replayed: skip
    with pytest.raises(sink.StaleTxnVersion, match=r"txnAppId 'a' for topic 't'.* up to 4"):
        sink.check_version("a", "t", 3, 4)  # a checkpoint reset: loud


def test_the_source_reads_a_range_in_answers_of_at_most_fetch_max_bytes(
    cluster: ProcessCluster, admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """read_range passes its byte budget to every Fetch: many small answers, every record once
    in offset order; a record larger than the budget still comes (alone)."""
    name = "sink-fetch-bytes"
    admin.create_topic(name, partitions=1, replication_factor=3)
    cluster.wait_leaders(name)
    data = [(b"k", b"%03d" % i + b"r" * 1000) for i in range(40)] + [(b"k", b"L" * 9000)]
    write(cluster, options(cluster, name), None, data)
    got = list(source.read_range(admin, source.Range(name, 0, 0, 41), True, max_bytes=3000))
    assert [r.offset for r in got] == list(range(41))
    assert [r.value for r in got] == [v for _, v in data]
    budgets: list[int] = []
    real_fetch = admin.fetch

    def fetch(topic: str, partition: int, offset: int, count: int, max_bytes: int) -> Any:
        budgets.append(max_bytes)  # the real Fetch answers; this only notes the budget
        return real_fetch(topic, partition, offset, count, max_bytes)

    monkeypatch.setattr(admin, "fetch", fetch)
    assert len(list(source.read_range(admin, source.Range(name, 0, 0, 41), True, 3000))) == 41
    assert len(budgets) >= 14 and set(budgets) == {3000}  # ~2 records of 1 KB per answer


# --- offsets (pure) ---------------------------------------------------------------------------


def test_limit_offsets_shares_the_budget_fairly_and_never_past_latest() -> None:
    start = {"t": {"0": 0, "1": 10, "2": 5}}
    latest = {"t": {"0": 100, "1": 12, "2": 5}}
    assert source.limit_offsets(start, latest, None) == latest
    # partition 1 has 2 records, 2 has none: the rest of the budget goes to partition 0
    assert source.limit_offsets(start, latest, 30) == {"t": {"0": 28, "1": 12, "2": 5}}
    assert source.limit_offsets(start, latest, 1000) == latest
    two = {"t": {"0": 0, "1": 0}}
    assert source.limit_offsets(two, {"t": {"0": 50, "1": 50}}, 100) == {"t": {"0": 50, "1": 50}}
    assert source.limit_offsets(two, {"t": {"0": 50, "1": 50}}, 3) in (
        {"t": {"0": 2, "1": 1}},
        {"t": {"0": 1, "1": 2}},
    )


def test_resolve_ranges_and_cap() -> None:
    bounds = {"t": {"0": source.PartitionBounds(3, 10), "1": source.PartitionBounds(0, 4)}}
    assert source.resolve("earliest", bounds) == {"t": {"0": 3, "1": 0}}
    assert source.resolve("latest", bounds) == {"t": {"0": 10, "1": 4}}
    assert source.resolve({"t": {"0": 5, "1": -1}}, bounds) == {"t": {"0": 5, "1": 4}}
    assert source.resolve({"t": {"0": -2}}, bounds) == {"t": {"0": 3, "1": 0}}
    with pytest.raises(errors.InvalidArgument, match="partitions 2 of topic 't'"):
        source.resolve({"t": {"0": 5, "2": 0}}, bounds)
    got = source.ranges({"t": {"0": 5, "1": 4}}, {"t": {"0": 10, "1": 4}})
    assert got == [source.Range("t", 0, 5, 10)]
    assert source.cap({"t": {"0": 10, "1": 4}}, {"t": {"0": 7}}) == {"t": {"0": 7, "1": 4}}


def test_source_options_are_checked() -> None:
    parsed = source.SourceOptions.parse(
        {"bootstrap": "h:1", "topic": "a, b", "startingoffsets": '{"a": {"0": 4}}'}
    )
    assert parsed.topics == ("a", "b") and parsed.starting == {"a": {"0": 4}}
    assert parsed.ending == "latest" and parsed.fail_on_data_loss
    for bad in (
        {"topic": ""},
        {"topic": "a", "startingoffsets": "{oops"},
        {"topic": "a", "startingoffsets": '{"z": {"0": 1}}'},
        {"topic": "a", "maxoffsetspertrigger": "0"},
        {"topic": "a", "failondataloss": "perhaps"},
        {"topic": "a", "startingoffset": "earliest"},
        {"topic": "a", "includeheaders": "true"},
        {"topic": "a", "fetchmaxbytes": "0"},
        {"topic": "a", "fetchmaxbytes": str(4 << 20)},  # an answer must fit gRPC's 4 MiB
    ):
        with pytest.raises(errors.InvalidArgument):
            source.SourceOptions.parse({"bootstrap": "h:1", **bad})


@pytest.mark.cluster(auth=POLICY)
def test_a_retry_resumes_by_records_when_the_broker_prefixes_the_principal(
    cluster: Cluster,
) -> None:
    """With auth on, the broker stores the producer id as ``<principal>/spark:...``: the rows
    of such an id are counted too, so a retry still skips exactly what was written."""
    address = cluster.client_addr(1)
    with Admin(address, token="token-root") as root:
        root.create_topic("victim-spark", partitions=3)
        opts = sink.SinkOptions.parse(
            {
                "bootstrap": address,
                "topic": "victim-spark",
                "token": "token-victim",
                "batchRecords": "4",
            }
        )
        conn = common.Connection(address, 30_000, opts.security)
        data = rows(100)
        try:
            for count in (50, 100):
                task = sink.TaskSink(conn, opts, producer_id="spark:app:1:0")
                for key, value in data[:count]:
                    task.add(value, key=key)
                summary = task.finish()
        finally:
            conn.close()
        assert (summary.records_skipped, summary.records_written) == (50, 50)
        assert values(root, "victim-spark") == collections.Counter(v for _, v in data)
