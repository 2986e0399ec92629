"""Partition state machine throughput: PartitionMachine.apply over a SqliteStore.

Three benchmarks (only ``apply`` is timed; the leader's work of building command bytes is not):

1. append — batches of 1000 x 100-byte records through apply, beside a raw APSW insert of the
   same rows into a table of the same shape (``raw_insert_benchmark``) in the same run, on the
   same disk with the same pragmas (WAL, synchronous=NORMAL unless ``--synchronous``); the two
   alternate every 10 batches so that both see the same load.
   Goal: the machine reaches >= 0.5 of raw.
2. lease+ack — pre-fill records, then Lease(max_records) -> Ack of every delivery, each a
   separate command, until the partition is drained; fifo and priority ordering separately.
   The first Lease materializes the whole pre-fill into the group's timeline: that one-time
   cost is part of the figure (every record pays it once per group). Goal: >= 100,000 rec/s.
   ``fair``: the same on a fifo topic and on fair topics (ordering=fair) whose records spread
   over 1, 1,000 and 100,000 fair keys (``--fair-keys``): what the round robin costs.
3. growth — append throughput in windows taken at 100k, 1M and 10M stored records (the fill
   in between runs with synchronous=OFF to save time; the windows use the configured mode,
   after 3 untimed warm-up batches).
   Goal: every point within 20% of the first.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw

from bench.common import Result, at_least, format_number, median
from raftq.partitions.machine import PartitionMachine
from raftq.partitions.sqlite_store import _RECORD_COLUMNS, SYNCHRONOUS_MODES, SqliteStore
from raftq.proto import common_pb2, partition_pb2

NAME = "partition_apply"

BATCH_RECORDS = 1000
APPEND_CHUNK = 10  # batches; the append benchmark alternates machine and raw chunks
VALUE_BYTES = 100
APPEND_GOAL_RATIO = 0.5
LEASE_ACK_GOAL = 100_000
GROWTH_TOLERANCE = 0.20
FILL_BATCH_RECORDS = 10_000
GROWTH_WARMUP_BATCHES = 3  # after the fill's reopen: the first batches meet a cold cache
NOW_MS = 1_700_000_000_000


def raw_insert_benchmark(
    path: str,
    batches: int,
    batch_size: int,
    value_size: int,
    *,
    synchronous: str = "FULL",
    seed: int = 0,
) -> float:
    """BENCHMARK BASELINE: seconds spent inserting ``batches`` x ``batch_size`` rows of
    ``value_size``-byte values into a table shaped like ``records``, one transaction per batch,
    with the same pragmas as SqliteStore (WAL, ``synchronous``). Building the rows is not timed.
    Called again on the same file, it appends after the rows already there.
    """
    if synchronous not in SYNCHRONOUS_MODES:
        raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, not {synchronous!r}")
    rng = random.Random(seed)
    conn = apsw.Connection(path)
    try:
        cur = conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute("PRAGMA cache_size=-65536")
        cur.execute(
            "CREATE TABLE IF NOT EXISTS records("
            "ofs INTEGER PRIMARY KEY, timestamp_ms INTEGER NOT NULL, key BLOB, "
            "value BLOB NOT NULL, headers BLOB, priority INTEGER NOT NULL, "
            "deliver_at_ms INTEGER NOT NULL, idempotency_key TEXT, producer_id TEXT, "
            "sequence INTEGER, size INTEGER NOT NULL)"
        )
        sql = f"INSERT INTO records({_RECORD_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
        ((offset,),) = cur.execute("SELECT coalesce(max(ofs) + 1, 0) FROM records")
        elapsed = 0.0
        for b in range(batches):
            rows = [
                (
                    offset + i,
                    b,
                    None,
                    rng.randbytes(value_size),
                    None,
                    0,
                    0,
                    None,
                    None,
                    None,
                    value_size,
                )
                for i in range(batch_size)
            ]
            offset += batch_size
            start = time.perf_counter()
            with conn:
                cur.executemany(sql, rows)
            elapsed += time.perf_counter() - start
        return elapsed
    finally:
        conn.close()


def add_arguments(group: Any) -> None:
    group.add_argument(
        "--growth-max",
        type=int,
        default=None,
        help="largest stored-record count of the growth benchmark (default 10,000,000; "
        "20,000 with --quick); points are it, a tenth and a hundredth of it (>= 1000)",
    )
    group.add_argument(
        "--synchronous",
        default="NORMAL",
        choices=("OFF", "NORMAL", "FULL", "EXTRA"),
        help="SQLite synchronous mode of the measured stores (default NORMAL, as configured)",
    )
    group.add_argument(
        "--append-batches", type=int, default=None, help="batches per append run (default 200)"
    )
    group.add_argument(
        "--lease-prefill", type=int, default=None, help="records per lease+ack run (200,000)"
    )
    group.add_argument(
        "--lease-max-records", type=int, default=1000, help="Lease.max_records (500..1000)"
    )
    group.add_argument(
        "--topic-ttl-ms",
        type=int,
        default=0,
        help="the lease+ack topic's ttl_ms (default 0 = none): what checking every leased "
        "record's time to live costs (give one longer than the run: nothing expires)",
    )
    group.add_argument(
        "--fair-keys",
        default="1,1000,100000",
        help="fair part: the numbers of fair keys to run (record i has key i mod K)",
    )
    group.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"which of {','.join(PARTS)} to run (default: all)",
    )
    group.add_argument(
        "--producer-id",
        default="",
        help="append part: every batch is an idempotent producer's (this id, sequences 0, 1, "
        "...); one containing spark: is a tracked producer, as the Spark writer's (default: "
        "none)",
    )
    group.add_argument(
        "--keep-data", action="store_true", help="leave the temp directory behind (debugging)"
    )


class Partition:
    """One partition replica on disk with a raft index and a leader clock to stamp commands."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.path = path
        self.index = 0
        self.now_ms = NOW_MS
        self.store = SqliteStore(str(path), synchronous=synchronous)
        self.machine = PartitionMachine(self.store)

    def reopen(self, synchronous: str) -> None:
        self.store.close()
        self.store = SqliteStore(str(self.path), synchronous=synchronous)
        self.machine = PartitionMachine(self.store)

    def command(self, **op: Any) -> bytes:
        """Stamp the next now_ms (1 ms later) into a command, as the leader does."""
        self.now_ms += 1
        return partition_pb2.PartitionCommand(now_ms=self.now_ms, **op).SerializeToString()

    def apply(self, data: bytes) -> tuple[partition_pb2.CommandResult, float]:
        """Apply the next entry; returns the result and the seconds apply took."""
        self.index += 1
        start = time.perf_counter()
        result = self.machine.apply(data, self.index)
        elapsed = time.perf_counter() - start
        if result.error:
            raise RuntimeError(f"apply of entry {self.index} failed: {result.message}")
        return result, elapsed

    def close(self) -> None:
        self.store.close()


def append_command(
    partition: Partition,
    rng: random.Random,
    records: int,
    priorities: bool = False,
    keys: int = 0,
    first: int = 0,
    producer_id: str = "",
    sequence: int = 0,
) -> bytes:
    """``records`` records; with ``keys``, record ``first + i`` has the key (first + i) % keys;
    with ``producer_id``, the batch is that producer's ``sequence``."""
    batch = [
        common_pb2.Record(
            value=rng.randbytes(VALUE_BYTES), priority=rng.randrange(10) if priorities else 0
        )
        for _ in range(records)
    ]
    if keys:
        for i, record in enumerate(batch):
            record.key = b"%d" % ((first + i) % keys)
    append = partition_pb2.Append(records=batch, producer_id=producer_id, sequence=sequence)
    return partition.command(append=append)


@contextlib.contextmanager
def workdir(options: argparse.Namespace) -> Iterator[Path]:
    if options.keep_data:
        path = Path(tempfile.mkdtemp(prefix="raftq-bench-"))
        print(f"   data kept in {path}")
        yield path
    else:
        with tempfile.TemporaryDirectory(prefix="raftq-bench-") as name:
            yield Path(name)


# -- 1. append ----------------------------------------------------------------------------------


def append_once(options: argparse.Namespace, batches: int, seed: int) -> tuple[float, float]:
    """(machine records/s, raw records/s), measured in one directory in alternating chunks of
    APPEND_CHUNK batches, so that both see the same load on a shared machine."""
    machine_s = raw_s = 0.0
    pid = options.producer_id
    with workdir(options) as tmp:
        partition = Partition(tmp / "partition.sqlite", options.synchronous)
        try:
            rng = random.Random(seed)
            for start in range(0, batches, APPEND_CHUNK):
                chunk = min(APPEND_CHUNK, batches - start)
                commands = [
                    append_command(
                        partition, rng, BATCH_RECORDS, producer_id=pid, sequence=start + i
                    )
                    for i in range(chunk)
                ]
                machine_s += sum(partition.apply(c)[1] for c in commands)
                raw_s += raw_insert_benchmark(
                    str(tmp / "raw.sqlite"),
                    chunk,
                    BATCH_RECORDS,
                    VALUE_BYTES,
                    synchronous=options.synchronous,
                    seed=seed * 1_000_003 + start,
                )
        finally:
            partition.close()
    records = batches * BATCH_RECORDS
    return records / machine_s, records / raw_s


def bench_append(options: argparse.Namespace) -> list[Result]:
    batches = options.append_batches or (10 if options.quick else 200)
    runs = [append_once(options, batches, seed) for seed in range(options.repeat)]
    ratios = [m / r for m, r in runs]
    machine_rate = median([m for m, _ in runs])
    raw_rate = median([r for _, r in runs])
    ratio = median(ratios)
    print(f"   append: machine {[round(m) for m, _ in runs]}, raw {[round(r) for _, r in runs]}")
    where = f"{batches} x {BATCH_RECORDS} x {VALUE_BYTES} B, sync={options.synchronous}"
    if options.producer_id:
        where += f", producer {options.producer_id}"
    return [
        Result("append: apply", machine_rate, "rec/s", note=where),
        Result("append: raw APSW insert", raw_rate, "rec/s", note=where),
        at_least("append: apply / raw", ratio, "", APPEND_GOAL_RATIO, "median of paired runs"),
    ]


# -- 2. lease + ack -----------------------------------------------------------------------------


def lease_ack_once(
    options: argparse.Namespace, ordering: int, prefill: int, seed: int, keys: int = 0
) -> tuple[float, float, float]:
    """(lease+ack records/s, lease records/s, ack records/s) draining ``prefill`` records
    (keyed over ``keys`` keys when given)."""
    with workdir(options) as tmp:
        partition = Partition(tmp / "partition.sqlite", options.synchronous)
        try:
            config = common_pb2.TopicConfig()
            config.CopyFrom(partition.machine.config)
            config.ordering = ordering  # type: ignore[assignment]
            config.ttl_ms = options.topic_ttl_ms
            partition.apply(partition.command(configure=partition_pb2.Configure(config=config)))
            rng = random.Random(seed)
            priorities = ordering == common_pb2.PRIORITY
            for start in range(0, prefill, FILL_BATCH_RECORDS):
                count = min(FILL_BATCH_RECORDS, prefill - start)
                partition.apply(append_command(partition, rng, count, priorities, keys, start))
            lease_s = ack_s = 0.0
            acked = 0
            while acked < prefill:
                lease = partition_pb2.Lease(
                    group="bench", member="m1", max_records=options.lease_max_records
                )
                result, spent = partition.apply(partition.command(lease=lease))
                lease_s += spent
                if not result.deliveries:
                    raise RuntimeError(f"drained after {acked} of {prefill} records")
                offsets = [d.record.offset for d in result.deliveries]
                ack = partition_pb2.Settle(  # the compact form, as the broker proposes it
                    group="bench", member="m1", offsets=offsets, delivery_counts=[1] * len(offsets)
                )
                result, spent = partition.apply(partition.command(ack=ack))
                ack_s += spent
                if result.count != len(offsets):
                    raise RuntimeError(f"acked {result.count} of {len(offsets)}")
                acked += len(offsets)
        finally:
            partition.close()
    return acked / (lease_s + ack_s), acked / lease_s, acked / ack_s


def bench_lease_ack(options: argparse.Namespace) -> list[Result]:
    prefill = options.lease_prefill or (5_000 if options.quick else 200_000)
    results = []
    for label, ordering in (("fifo", common_pb2.FIFO), ("priority", common_pb2.PRIORITY)):
        runs = [lease_ack_once(options, ordering, prefill, seed) for seed in range(options.repeat)]
        print(f"   lease+ack {label}: {[round(r[0]) for r in runs]}")
        note = (
            f"{format_number(prefill)} records, max_records={options.lease_max_records}, "
            + (f"topic ttl_ms={options.topic_ttl_ms}, " if options.topic_ttl_ms else "")
            + "compact ack; "
            f"lease {format_number(median([r[1] for r in runs]))}/s, "
            f"ack {format_number(median([r[2] for r in runs]))}/s"
        )
        results.append(
            at_least(
                f"lease+ack {label}", median([r[0] for r in runs]), "rec/s", LEASE_ACK_GOAL, note
            )
        )
    return results


def bench_fair(options: argparse.Namespace) -> list[Result]:
    """lease+ack on a fifo topic next to fair topics over K keys (records keyed i mod K)."""
    prefill = options.lease_prefill or (5_000 if options.quick else 200_000)
    counts = [int(k) for k in options.fair_keys.split(",") if k.strip()]
    runs: list[tuple[str, int, int]] = [("fifo", common_pb2.FIFO, max(counts, default=1))]
    runs += [(f"fair {k:,} keys", common_pb2.FAIR, k) for k in counts]
    results = []
    for label, ordering, keys in runs:
        rates = [
            lease_ack_once(options, ordering, prefill, seed, keys) for seed in range(options.repeat)
        ]
        print(f"   lease+ack {label}: {[round(r[0]) for r in rates]}")
        note = (
            f"{format_number(prefill)} records over {keys:,} keys, "
            f"max_records={options.lease_max_records}, compact ack; "
            f"lease {format_number(median([r[1] for r in rates]))}/s, "
            f"ack {format_number(median([r[2] for r in rates]))}/s"
        )
        value = median([r[0] for r in rates])
        results.append(Result(f"lease+ack {label}", value, "rec/s", note=note))
    return results


# -- 3. growth ----------------------------------------------------------------------------------


def growth_points(largest: int) -> list[int]:
    return [p for p in (largest // 100, largest // 10, largest) if p >= 1000]


def bench_growth(options: argparse.Namespace) -> list[Result]:
    largest = options.growth_max or (20_000 if options.quick else 10_000_000)
    window_batches = 6 if options.quick else 99
    windows = max(1, options.repeat)
    per_window = max(1, window_batches // windows)
    rng = random.Random(7)
    rates: list[tuple[int, float]] = []
    with workdir(options) as tmp:
        partition = Partition(tmp / "growth.sqlite", options.synchronous)
        try:
            for point in growth_points(largest):
                stored = partition.machine.offsets().end
                if stored < point:
                    partition.reopen("OFF")
                    fill_start = time.perf_counter()
                    while stored < point:
                        count = min(FILL_BATCH_RECORDS, point - stored)
                        partition.apply(append_command(partition, rng, count))
                        stored += count
                    fill_s = time.perf_counter() - fill_start
                    print(f"   growth: filled to {format_number(stored)} in {fill_s:.1f} s")
                    partition.reopen(options.synchronous)
                    for _ in range(GROWTH_WARMUP_BATCHES):  # refill the page cache, untimed
                        partition.apply(append_command(partition, rng, BATCH_RECORDS))
                samples = []
                for _ in range(windows):
                    commands = [
                        append_command(partition, rng, BATCH_RECORDS) for _ in range(per_window)
                    ]
                    spent = sum(partition.apply(c)[1] for c in commands)
                    samples.append(per_window * BATCH_RECORDS / spent)
                print(f"   growth at {format_number(point)}: {[round(s) for s in samples]}")
                rates.append((point, median(samples)))
        finally:
            partition.close()
        size_mb = (tmp / "growth.sqlite").stat().st_size / 1e6
    first = rates[0][1]
    results = []
    for point, rate in rates:
        note = f"{windows} windows of {per_window} x {BATCH_RECORDS}"
        if point == rates[-1][0]:
            note += f"; file {size_mb:,.0f} MB"
        results.append(
            Result(
                f"append at {format_number(point)} stored",
                rate,
                "rec/s",
                f">= {1 - GROWTH_TOLERANCE:.0%} of first",
                rate >= (1 - GROWTH_TOLERANCE) * first,
                f"{rate / first:.0%} of first; {note}",
            )
        )
    return results


PARTS = {
    "append": bench_append,
    "lease_ack": bench_lease_ack,
    "fair": bench_fair,
    "growth": bench_growth,
}


def run(options: argparse.Namespace) -> list[Result]:
    parts = [p.strip() for p in options.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise SystemExit(f"--parts: unknown {unknown}; known: {','.join(PARTS)}")
    results: list[Result] = []
    for part in parts:
        results += PARTS[part](options)
    return results
