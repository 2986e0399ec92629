"""The partition replica's own SQLite file, written through APSW (the only module importing apsw).

One file per partition replica, WAL mode, ``synchronous=FULL`` by default. The layout:

    meta        one row: applied Raft index, next offset, log start, bytes, clock, config
    records     the log: offset -> key, value, headers, priority, deliver_at, dedup fields
    idempotency idempotency key -> (offset, timestamp) within the topic's dedup window
    producers   (producer_id, sequence) -> offsets of the batch (the last few per producer)
    tracked_batches  a tracked producer's (Spark writer's) batches: first and last offset of
                each (producer_id, sequence) in the log, one row per batch, so a retried task
                counts what its producer id wrote without an index entry per record
    groups      consumer groups that have leased from this partition
    pending     per group, every record it has not acknowledged: ready (ordered by
                (k1, k2, offset)) or waiting until visible_at_ms (delay, nack or lease)
    outbox      dead-lettered records waiting to be forwarded to the dead-letter topic
    fences      per group, the lowest generation a Lease may carry (raised by a revoking Release)
    fair_keys   fair topics: per group, each fair key with ready rows (its turn, how many rows),
                kept by triggers on pending (FAIR_SCHEMA); fair_clock: deliveries served

``applied_index`` is written in the same transaction as the change it belongs to, so a replay
after a crash skips exactly the entries already applied.
"""

from __future__ import annotations

import array
import contextlib
import itertools
import operator
import os
import struct
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import apsw

from raftq.partitions.rows import GroupRow, Meta, OutboxRow, PendingRow, ReadyRecord, RecordRow
from raftq.partitions.store import (
    INT64_MAX,
    TRACKED_PRODUCER_MARK,
    BackupWriter,
    CancelFlag,
    canonical_dump,
    fair_key_of,
    fair_plan,
    fair_sequence,
    fair_turns,
    is_tracked_producer,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(
    id INTEGER PRIMARY KEY CHECK (id = 1),
    applied_index INTEGER NOT NULL, next_offset INTEGER NOT NULL, log_start INTEGER NOT NULL,
    log_bytes INTEGER NOT NULL, clock_ms INTEGER NOT NULL, outbox_seq INTEGER NOT NULL,
    config BLOB NOT NULL, topic TEXT NOT NULL, partition_id INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES (1, 0, 0, 0, 0, 0, 0, x'', '', 0);
CREATE TABLE IF NOT EXISTS records(
    ofs INTEGER PRIMARY KEY, timestamp_ms INTEGER NOT NULL, key BLOB, value BLOB NOT NULL,
    headers BLOB, priority INTEGER NOT NULL, deliver_at_ms INTEGER NOT NULL,
    idempotency_key TEXT, producer_id TEXT, sequence INTEGER, size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS idempotency(
    key TEXT PRIMARY KEY, ofs INTEGER NOT NULL, timestamp_ms INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idempotency_age ON idempotency(timestamp_ms);
CREATE TABLE IF NOT EXISTS producers(
    producer_id TEXT NOT NULL, sequence INTEGER NOT NULL, offsets BLOB NOT NULL,
    updated_ms INTEGER NOT NULL, PRIMARY KEY (producer_id, sequence)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS groups(
    gid INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, materialized_upto INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS pending(
    gid INTEGER NOT NULL, ofs INTEGER NOT NULL, k1 INTEGER NOT NULL, k2 INTEGER NOT NULL,
    visible_at_ms INTEGER NOT NULL, ready INTEGER NOT NULL, owner TEXT,
    delivery_count INTEGER NOT NULL, fkey BLOB, PRIMARY KEY (gid, ofs)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS pending_ready ON pending(gid, k1, k2, ofs) WHERE ready = 1;
CREATE INDEX IF NOT EXISTS pending_waiting ON pending(gid, visible_at_ms) WHERE ready = 0;
CREATE TABLE IF NOT EXISTS outbox(
    seq INTEGER PRIMARY KEY, grp TEXT NOT NULL, ofs INTEGER NOT NULL, reason TEXT NOT NULL,
    delivery_count INTEGER NOT NULL, dead_at_ms INTEGER NOT NULL, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS fences(grp TEXT PRIMARY KEY, generation INTEGER NOT NULL)
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS expiries(ofs INTEGER PRIMARY KEY, expires_at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS schedules(name TEXT PRIMARY KEY, schedule BLOB NOT NULL) WITHOUT ROWID;
"""

# Fair ordering (partitions/store.py, "Fair ordering"). A pending row of a fair topic carries its
# fair key (fkey; NULL elsewhere). The triggers keep fair_keys = the keys with ready rows, each
# with how many and its turn: a key joins at 2 * served + 1 when it gains its first ready row and
# leaves when it has none. Run after the pending table has its fkey column (files from before
# it get one by ALTER TABLE).
_FAIR_JOIN = """
    INSERT INTO fair_keys(gid, fkey, turn, ready) VALUES (NEW.gid, NEW.fkey,
        2 * coalesce((SELECT served FROM fair_clock WHERE gid = NEW.gid), 0) + 1, 1)
        ON CONFLICT(gid, fkey) DO UPDATE SET ready = ready + 1;"""
_FAIR_LEAVE = """
    UPDATE fair_keys SET ready = ready - 1 WHERE gid = OLD.gid AND fkey = OLD.fkey;
    DELETE FROM fair_keys WHERE gid = OLD.gid AND fkey = OLD.fkey AND ready = 0;"""
FAIR_SCHEMA = f"""
CREATE INDEX IF NOT EXISTS pending_fair ON pending(gid, fkey, k1, k2, ofs)
    WHERE ready = 1 AND fkey IS NOT NULL;
CREATE TABLE IF NOT EXISTS fair_keys(
    gid INTEGER NOT NULL, fkey BLOB NOT NULL, turn INTEGER NOT NULL, ready INTEGER NOT NULL,
    PRIMARY KEY (gid, fkey)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fair_rotation ON fair_keys(gid, turn, fkey);
CREATE TABLE IF NOT EXISTS fair_clock(gid INTEGER PRIMARY KEY, served INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS fair_join_insert AFTER INSERT ON pending
    WHEN NEW.ready = 1 AND NEW.fkey IS NOT NULL BEGIN {_FAIR_JOIN} END;
CREATE TRIGGER IF NOT EXISTS fair_join_update AFTER UPDATE OF ready, fkey ON pending
    WHEN NEW.ready = 1 AND NEW.fkey IS NOT NULL AND NOT (OLD.ready = 1 AND OLD.fkey IS NEW.fkey)
    BEGIN {_FAIR_JOIN} END;
CREATE TRIGGER IF NOT EXISTS fair_leave_update AFTER UPDATE OF ready, fkey ON pending
    WHEN OLD.ready = 1 AND OLD.fkey IS NOT NULL AND NOT (NEW.ready = 1 AND NEW.fkey IS OLD.fkey)
    BEGIN {_FAIR_LEAVE} END;
CREATE TRIGGER IF NOT EXISTS fair_leave_delete AFTER DELETE ON pending
    WHEN OLD.ready = 1 AND OLD.fkey IS NOT NULL BEGIN {_FAIR_LEAVE} END;
"""


# A record's fair key in SQL (?N: the topic's fair_key setting; NULL: not a fair topic).
def _fkey_sql(param: str, key: str = "key", headers: str = "headers") -> str:
    return (
        f"CASE WHEN {param} IS NULL THEN NULL WHEN {param} = '' THEN coalesce({key}, x'') "
        f"ELSE raftq_fair_header({headers}, {param}) END"
    )


def _fair_header(*args: Any) -> Any:  # raftq_fair_header(headers, name) in SQL
    headers, name = args
    return fair_key_of(None, headers, name)


# A tracked producer's batches (is_tracked_producer): one row per (producer_id, sequence) run
# of records, written with them (insert_records, insert_values) and dropped with the last of
# them (delete_records_below). What the producer wrote is counted over the records in each
# batch's offset range that carry its id and sequence (exact whatever was deleted: a cancelled
# record), plus what retention or a purge cut away (tracked_cut), so a write pays one row per
# batch, not an index entry per record.
TRACKED_SCHEMA = """
CREATE TABLE IF NOT EXISTS tracked_batches(
    first_ofs INTEGER PRIMARY KEY, last_ofs INTEGER NOT NULL, producer_id TEXT NOT NULL,
    sequence INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS tracked_batches_producer ON tracked_batches(producer_id, sequence);
"""
# What retention or a purge cut away of each tracked producer's records (tracked_cut_below):
# counted on in producer_written, so a retried Spark task after a cut still skips every row an
# earlier attempt wrote; forgotten TRACKED_CUT_KEEP_MS after its last cut (partitions/machine.py).
CUT_SCHEMA = """
CREATE TABLE IF NOT EXISTS tracked_cut(
    producer_id TEXT PRIMARY KEY, records INTEGER NOT NULL, last_sequence INTEGER NOT NULL,
    cut_ms INTEGER NOT NULL);
"""
# The records of producer ?1's batches (b: tracked_batches, r: records).
TRACKED_RECORDS = (
    "tracked_batches b JOIN records r ON r.ofs BETWEEN b.first_ofs AND b.last_ofs "
    "AND r.producer_id = b.producer_id AND r.sequence = b.sequence WHERE b.producer_id = ?1"
)

_RECORD_COLUMNS = (
    "ofs, timestamp_ms, key, value, headers, priority, deliver_at_ms, idempotency_key, "
    "producer_id, sequence, size"
)
_record_producer = operator.attrgetter("producer_id")
_record_sequence = operator.attrgetter("sequence")
_record_offset = operator.attrgetter("offset")
_PENDING_COLUMNS = "ofs, k1, k2, visible_at_ms, ready, owner, delivery_count, fkey"
# A RecordRow as the values of _RECORD_COLUMNS, in C (a batch of appends is thousands of rows).
_record_values = operator.attrgetter(
    "offset",
    "timestamp_ms",
    "key",
    "value",
    "headers",
    "priority",
    "deliver_at_ms",
    "idempotency_key",
    "producer_id",
    "sequence",
    "size",
)
SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
# What a -wal file is cut back to after a checkpoint (PRAGMA journal_size_limit): a busy
# partition writes its first MiB again without growing the file, an idle one holds no more.
WAL_SIZE_LIMIT_BYTES = 1 << 20
BUSY_TIMEOUT_MS = 5000


# A batch's offsets in producers.offsets: consecutive ones (every batch but one whose records
# an idempotency key matched) as RUN_MARK + first + count, 17 bytes whatever the batch's size;
# any others as 8 bytes each (a length that is a multiple of 8, so the two never mix up).
RUN_MARK = b"R"
_RUN = struct.Struct("<qq")


def _offsets_blob(offsets: Sequence[int]) -> bytes:
    count = len(offsets)
    if count > 2 and (
        (isinstance(offsets, range) and offsets.step == 1)  # a bare values Append's
        or all(b == a + 1 for a, b in itertools.pairwise(offsets))
    ):
        return RUN_MARK + _RUN.pack(offsets[0], count)
    packed = array.array("q", offsets)  # 8 bytes each, little-endian on disk
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def _blob_offsets(blob: bytes) -> list[int]:
    if len(blob) == 1 + _RUN.size and blob[:1] == RUN_MARK:
        first, count = _RUN.unpack_from(blob, 1)
        return list(range(first, first + count))
    return [int.from_bytes(blob[i : i + 8], "little", signed=True) for i in range(0, len(blob), 8)]


def _int64s(values: Sequence[int]) -> Any:  # an apsw carray binding
    """Bind a list of integers as one parameter: ``WHERE ofs IN carray(?)`` (one statement
    instead of one per value; SQLite reads the array without calling back into Python).
    Sorted: SQLite searches the B-tree once per value in array order, and offsets in key order
    walk neighbouring pages (a priority-ordered lease or ack names them scattered)."""
    return apsw.carray(array.array("q", sorted(values)))


def _pending(row: tuple[Any, ...]) -> PendingRow:
    ofs, k1, k2, visible_at_ms, ready, owner, delivery_count, fkey = row
    return PendingRow(ofs, k1, k2, visible_at_ms, ready != 0, owner, delivery_count, fkey)


class SqliteStore:
    """A partition replica's SQLite file. Raises apsw errors on I/O failure (disk full etc.)."""

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "FULL",
        cache_kib: int = 65536,
        wal_autocheckpoint_pages: int = 1000,
        wal_size_limit_bytes: int = WAL_SIZE_LIMIT_BYTES,
        deferred_checkpoints: bool = False,
        remove_file: Callable[[str], None] = os.unlink,
    ) -> None:
        """``deferred_checkpoints``: a commit that grows the WAL to ``wal_autocheckpoint_pages``
        only sets ``checkpoint_due``, and the owner calls ``checkpoint()`` when it suits it
        (the broker: after the driver's round sent its messages), instead of SQLite
        checkpointing inside that commit. ``remove_file(path)``: how the file a restore
        replaced is freed (the broker: in paced steps on another thread).
        ``wal_size_limit_bytes`` (PRAGMA journal_size_limit): the first commit after a
        checkpoint copied the whole WAL in cuts the ``-wal`` file back to this size (SQLite
        truncates it only then: a crash never loses a frame the file did not yet hold);
        ``trim_wal`` cuts it to 0."""
        if synchronous not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, not {synchronous!r}")
        self.path = path
        self.checkpoint_due = False
        self.remove_file = remove_file
        self._settings = (
            synchronous,
            int(cache_kib),
            int(wal_autocheckpoint_pages),
            int(wal_size_limit_bytes),
        )
        self._deferred_checkpoints = deferred_checkpoints
        self._open()

    def _open(self) -> None:
        synchronous, cache_kib, wal_autocheckpoint_pages, wal_size_limit_bytes = self._settings
        self._conn = apsw.Connection(self.path)
        self._conn.setbusytimeout(BUSY_TIMEOUT_MS)
        cur = self._conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute(f"PRAGMA cache_size=-{cache_kib}")
        cur.execute("PRAGMA temp_store=MEMORY")
        cur.execute(f"PRAGMA wal_autocheckpoint={wal_autocheckpoint_pages}")
        cur.execute(f"PRAGMA journal_size_limit={wal_size_limit_bytes}")
        if self._deferred_checkpoints and wal_autocheckpoint_pages > 0:
            threshold = wal_autocheckpoint_pages

            def wal_grew(_conn: apsw.Connection, _db: str, pages: int) -> int:
                if pages >= threshold:
                    self.checkpoint_due = True
                return apsw.SQLITE_OK

            self._conn.set_wal_hook(wal_grew)  # replaces SQLite's own autocheckpoint
        self._conn.create_scalar_function("raftq_fair_header", _fair_header, 2, deterministic=True)
        with self._conn:
            cur.execute(SCHEMA)
        self._cur = cur
        self._migrate()

    def _migrate(self) -> None:
        """Bring a file written before fair ordering or before tracked_batches (or a snapshot
        of one) to this schema."""
        with self._conn:
            columns = {row[1] for row in self._cur.execute("PRAGMA table_info(pending)")}
            if "fkey" not in columns:
                self._cur.execute("ALTER TABLE pending ADD COLUMN fkey BLOB")
            self._cur.execute(FAIR_SCHEMA)
            self._cur.execute(CUT_SCHEMA)
            if not self._rows("SELECT 1 FROM sqlite_master WHERE name = 'tracked_batches'"):
                # Before it, a partial index on records(producer_id, sequence) answered: build
                # the batches from the records it covered, then drop it (and its predecessor).
                self._cur.execute(TRACKED_SCHEMA)
                self._cur.execute(
                    "INSERT INTO tracked_batches(first_ofs, last_ofs, producer_id, sequence) "
                    "SELECT min(ofs), max(ofs), producer_id, sequence FROM records "
                    f"WHERE instr(producer_id, '{TRACKED_PRODUCER_MARK}') > 0 "
                    "GROUP BY producer_id, sequence"
                )
                self._cur.execute("DROP INDEX IF EXISTS records_spark_producer")
                self._cur.execute("DROP INDEX IF EXISTS records_tracked_producer")

    def pragmas(self) -> dict[str, str]:
        """The durability settings in force: ``journal_mode`` and ``synchronous``, upper case."""
        (journal,) = self._rows("PRAGMA journal_mode")[0]
        (sync,) = self._rows("PRAGMA synchronous")[0]
        return {"journal_mode": str(journal).upper(), "synchronous": SYNCHRONOUS_MODES[sync]}

    # -- transactions -------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self._conn:
            yield

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._cur.execute(sql, args))

    def load_meta(self) -> Meta:
        (row,) = self._rows(
            "SELECT applied_index, next_offset, log_start, log_bytes, clock_ms, outbox_seq, "
            "config, topic, partition_id FROM meta WHERE id = 1"
        )
        return Meta(*row)

    def save_meta(self, meta: Meta) -> None:
        self._cur.execute(
            "UPDATE meta SET applied_index=?, next_offset=?, log_start=?, log_bytes=?, "
            "clock_ms=?, outbox_seq=?, config=?, topic=?, partition_id=? WHERE id = 1",
            (
                meta.applied_index,
                meta.next_offset,
                meta.log_start,
                meta.log_bytes,
                meta.clock_ms,
                meta.outbox_seq,
                meta.config,
                meta.topic,
                meta.partition,
            ),
        )

    # -- records ------------------------------------------------------------------------------

    def insert_records(self, rows: Sequence[RecordRow]) -> None:
        self._cur.executemany(
            f"INSERT INTO records({_RECORD_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            list(map(_record_values, rows)),
        )
        producers = set(map(_record_producer, rows))  # one, from an Append: no loop per row
        if any(p is not None and is_tracked_producer(p) for p in producers):
            self._track(rows, one_producer=len(producers) == 1)

    def _track(self, rows: Sequence[RecordRow], *, one_producer: bool) -> None:
        """Add the tracked producers' batches among ``rows`` to tracked_batches."""
        if one_producer and len(set(map(_record_sequence, rows))) == 1:  # an Append's rows
            offsets = list(map(_record_offset, rows))
            spans = {(rows[0].producer_id, rows[0].sequence): (min(offsets), max(offsets))}
        else:
            spans = {}
            for row in rows:
                key = (row.producer_id, row.sequence)
                low, high = spans.get(key, (row.offset, row.offset))
                spans[key] = (min(low, row.offset), max(high, row.offset))
        self._cur.executemany(
            "INSERT INTO tracked_batches(first_ofs, last_ofs, producer_id, sequence) "
            "VALUES (?,?,?,?)",
            [
                (low, high, producer, sequence)
                for (producer, sequence), (low, high) in spans.items()
                if producer is not None and is_tracked_producer(producer)
            ],
        )

    def insert_values(
        self,
        first_offset: int,
        timestamp_ms: int,
        values: Sequence[bytes],
        producer_id: str | None,
        sequence: int | None,
    ) -> None:
        # Every row built by C iterators: no Python frame per value.
        none, zero = itertools.repeat(None), itertools.repeat(0)
        self._cur.executemany(
            f"INSERT INTO records({_RECORD_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            zip(
                itertools.count(first_offset),
                itertools.repeat(timestamp_ms),
                none,
                values,
                none,
                zero,
                zero,
                none,
                itertools.repeat(producer_id),
                itertools.repeat(sequence),
                map(len, values),
            ),
        )
        if values and producer_id is not None and is_tracked_producer(producer_id):
            self._cur.execute(
                "INSERT INTO tracked_batches(first_ofs, last_ofs, producer_id, sequence) "
                "VALUES (?,?,?,?)",
                (first_offset, first_offset + len(values) - 1, producer_id, sequence),
            )

    def get_record(self, offset: int) -> RecordRow | None:
        rows = self._rows(f"SELECT {_RECORD_COLUMNS} FROM records WHERE ofs = ?", (offset,))
        return RecordRow(*rows[0]) if rows else None

    def records_from(self, offset: int, limit: int) -> list[RecordRow]:
        return [
            RecordRow(*r)
            for r in self._cur.execute(
                f"SELECT {_RECORD_COLUMNS} FROM records WHERE ofs >= ? ORDER BY ofs LIMIT ?",
                (offset, max(limit, 0)),
            )
        ]

    def get_records(self, offsets: Sequence[int]) -> dict[int, RecordRow]:
        if not offsets:
            return {}
        lo, hi = min(offsets), max(offsets)
        if hi - lo < 4 * len(offsets):
            wanted = set(offsets)
            return {
                r[0]: RecordRow(*r)
                for r in self._cur.execute(
                    f"SELECT {_RECORD_COLUMNS} FROM records WHERE ofs BETWEEN ? AND ?", (lo, hi)
                )
                if r[0] in wanted
            }
        return {
            r[0]: RecordRow(*r)
            for r in self._cur.execute(
                f"SELECT {_RECORD_COLUMNS} FROM records WHERE ofs IN carray(?)",
                (_int64s(offsets),),
            )
        }

    def set_record_schedule(self, offset: int, priority: int, deliver_at_ms: int) -> None:
        self._cur.execute(
            "UPDATE records SET priority = ?, deliver_at_ms = ? WHERE ofs = ?",
            (priority, deliver_at_ms, offset),
        )
        assert self._conn.changes() == 1, f"no record at offset {offset} to schedule"

    def delete_record(self, offset: int) -> None:
        self._cur.execute("DELETE FROM records WHERE ofs = ?", (offset,))
        assert self._conn.changes() == 1, f"no record at offset {offset} to delete"
        self._cur.execute("DELETE FROM expiries WHERE ofs = ?", (offset,))

    def first_offset_since(self, timestamp_ms: int) -> int | None:
        rows = self._rows(
            "SELECT ofs FROM records WHERE timestamp_ms >= ? ORDER BY ofs LIMIT 1", (timestamp_ms,)
        )
        return rows[0][0] if rows else None

    def sizes_from(self, offset: int, limit: int) -> list[tuple[int, int]]:
        return [
            (r[0], r[1])
            for r in self._cur.execute(
                "SELECT ofs, size FROM records WHERE ofs >= ? ORDER BY ofs LIMIT ?",
                (offset, max(limit, 0)),
            )
        ]

    def delete_records_below(self, offset: int) -> None:
        self._cur.execute("DELETE FROM records WHERE ofs < ?", (offset,))
        self._cur.execute("DELETE FROM expiries WHERE ofs < ?", (offset,))
        self._cur.execute(
            "DELETE FROM tracked_batches WHERE first_ofs < ?1 AND last_ofs < ?1", (offset,)
        )

    def expiry_put(self, entries: Sequence[tuple[int, int]]) -> None:
        self._cur.executemany("INSERT INTO expiries(ofs, expires_at_ms) VALUES (?, ?)", entries)

    def expiry_get(self, offsets: Sequence[int]) -> dict[int, int]:
        if not offsets:
            return {}
        return dict(
            self._rows(
                "SELECT ofs, expires_at_ms FROM expiries WHERE ofs IN carray(?)",
                (_int64s(offsets),),
            )
        )

    # -- dedup --------------------------------------------------------------------------------

    def idempotency_lookup(self, keys: Sequence[str]) -> dict[str, tuple[int, int]]:
        found: dict[str, tuple[int, int]] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for key, ofs, ts in self._cur.execute(
                f"SELECT key, ofs, timestamp_ms FROM idempotency WHERE key IN ({marks})", chunk
            ):
                found[key] = (ofs, ts)
        return found

    def idempotency_put(self, entries: Sequence[tuple[str, int, int]]) -> None:
        self._cur.executemany(
            "INSERT OR REPLACE INTO idempotency(key, ofs, timestamp_ms) VALUES (?,?,?)", entries
        )

    def idempotency_forget_before(self, timestamp_ms: int) -> int:
        self._cur.execute("DELETE FROM idempotency WHERE timestamp_ms < ?", (timestamp_ms,))
        return self._conn.changes()

    def producer_batch(self, producer_id: str, sequence: int) -> list[int] | None:
        rows = self._rows(
            "SELECT offsets FROM producers WHERE producer_id = ? AND sequence = ?",
            (producer_id, sequence),
        )
        return _blob_offsets(rows[0][0]) if rows else None

    def producer_last_sequence(self, producer_id: str) -> int | None:
        rows = self._rows(
            "SELECT max(sequence) FROM producers WHERE producer_id = ?", (producer_id,)
        )
        return rows[0][0]

    def producer_written(self, producer_id: str) -> tuple[int, int, list[int]] | None:
        assert is_tracked_producer(producer_id), producer_id
        ((count, last),) = self._rows(
            f"SELECT count(*), max(b.sequence) FROM {TRACKED_RECORDS}", (producer_id,)
        )
        cut = self._rows(
            "SELECT records, last_sequence FROM tracked_cut WHERE producer_id = ?", (producer_id,)
        )
        cut_records, cut_last = cut[0] if cut else (0, -1)
        if not count and not cut_records:
            return None
        last = max(-1 if last is None else int(last), int(cut_last))
        rows = self._rows(
            f"SELECT r.ofs FROM {TRACKED_RECORDS} AND b.sequence = ?2 ORDER BY r.ofs",
            (producer_id, last),
        )
        return int(count) + int(cut_records), last, [int(ofs) for (ofs,) in rows]

    def tracked_cut_below(self, offset: int, now_ms: int) -> None:
        self._cur.execute(
            "INSERT INTO tracked_cut(producer_id, records, last_sequence, cut_ms) "
            "SELECT b.producer_id, count(*), max(b.sequence), ?2 FROM tracked_batches b "
            "JOIN records r ON r.ofs BETWEEN b.first_ofs AND b.last_ofs "
            "AND r.producer_id = b.producer_id AND r.sequence = b.sequence "
            "WHERE b.first_ofs < ?1 AND r.ofs < ?1 GROUP BY b.producer_id "
            "ON CONFLICT(producer_id) DO UPDATE SET records = records + excluded.records, "
            "last_sequence = max(last_sequence, excluded.last_sequence), cut_ms = excluded.cut_ms",
            (offset, now_ms),
        )

    def tracked_cut_forget_before(self, timestamp_ms: int) -> int:
        self._cur.execute("DELETE FROM tracked_cut WHERE cut_ms < ?", (timestamp_ms,))
        return self._conn.changes()

    def producer_put(
        self, producer_id: str, sequence: int, offsets: Sequence[int], now_ms: int, keep: int
    ) -> None:
        self._cur.execute(
            "INSERT OR REPLACE INTO producers(producer_id, sequence, offsets, updated_ms) "
            "VALUES (?,?,?,?)",
            (producer_id, sequence, _offsets_blob(offsets), now_ms),
        )
        assert keep >= 1, "keep at least the batch being written"
        self._cur.execute(
            "DELETE FROM producers WHERE producer_id = ?1 AND sequence NOT IN (SELECT sequence "
            "FROM producers WHERE producer_id = ?1 ORDER BY sequence DESC LIMIT ?2)",
            (producer_id, keep),
        )

    def producer_forget_before(self, timestamp_ms: int) -> int:
        """Forget every producer whose newest batch is older; returns how many producers."""
        gone = self._rows(
            "SELECT producer_id FROM producers GROUP BY producer_id HAVING max(updated_ms) < ?",
            (timestamp_ms,),
        )
        self._cur.executemany("DELETE FROM producers WHERE producer_id = ?", gone)
        return len(gone)

    # -- groups -------------------------------------------------------------------------------

    def group_get(self, name: str) -> GroupRow | None:
        rows = self._rows("SELECT gid, name, materialized_upto FROM groups WHERE name = ?", (name,))
        return GroupRow(*rows[0]) if rows else None

    def group_create(self, name: str, materialized_upto: int) -> GroupRow:
        self._cur.execute(
            "INSERT INTO groups(name, materialized_upto) VALUES (?, ?)", (name, materialized_upto)
        )
        return GroupRow(self._conn.last_insert_rowid(), name, materialized_upto)

    def group_set_materialized(self, gid: int, upto: int) -> None:
        self._cur.execute("UPDATE groups SET materialized_upto = ? WHERE gid = ?", (upto, gid))

    def groups(self) -> list[GroupRow]:
        return [
            GroupRow(*r)
            for r in self._cur.execute(
                "SELECT gid, name, materialized_upto FROM groups ORDER BY gid"
            )
        ]

    def fence_get(self, name: str) -> int:
        rows = self._rows("SELECT generation FROM fences WHERE grp = ?", (name,))
        return int(rows[0][0]) if rows else 0

    def fence_set(self, name: str, generation: int) -> None:
        self._cur.execute(
            "INSERT INTO fences(grp, generation) VALUES (?, ?) "
            "ON CONFLICT(grp) DO UPDATE SET generation = excluded.generation",
            (name, generation),
        )

    def schedule_get(self, name: str) -> bytes | None:
        rows = self._rows("SELECT schedule FROM schedules WHERE name = ?", (name,))
        return bytes(rows[0][0]) if rows else None

    def schedule_put(self, name: str, schedule: bytes) -> None:
        self._cur.execute(
            "INSERT INTO schedules(name, schedule) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET schedule = excluded.schedule",
            (name, schedule),
        )

    def schedule_delete(self, name: str) -> None:
        self._cur.execute("DELETE FROM schedules WHERE name = ?", (name,))
        assert self._conn.changes() == 1, f"no schedule {name!r} to delete"

    def schedules(self) -> list[tuple[str, bytes]]:
        rows = self._rows("SELECT name, schedule FROM schedules ORDER BY name")
        return [(name, bytes(blob)) for name, blob in rows]

    def group_forget(self, name: str) -> int:
        self._cur.execute("DELETE FROM fences WHERE grp = ?", (name,))
        row = self.group_get(name)
        if row is None:
            return 0
        self._cur.execute("DELETE FROM pending WHERE gid = ?", (row.gid,))
        gone = self._conn.changes()
        self._cur.execute("DELETE FROM groups WHERE gid = ?", (row.gid,))
        self._cur.execute("DELETE FROM fair_clock WHERE gid = ?", (row.gid,))
        return gone

    def materialize(
        self,
        gid: int,
        from_offset: int,
        now_ms: int,
        ordering: int,
        end_offset: int | None = None,
        owner: str | None = None,
        deadline_ms: int = 0,
        fair_key: str | None = None,
    ) -> int:
        # leased: an owner is given (?6) and the record is visible now
        self._cur.execute(
            "INSERT INTO pending(gid, ofs, k1, k2, visible_at_ms, ready, owner, delivery_count, "
            "fkey) "
            "SELECT ?1, ofs, CASE WHEN ?2 THEN priority ELSE 0 END, "
            "CASE WHEN ?2 THEN deliver_at_ms ELSE 0 END, "
            "CASE WHEN leased THEN ?7 ELSE deliver_at_ms END, "
            "CASE WHEN leased THEN 0 ELSE deliver_at_ms <= ?3 END, "
            "CASE WHEN leased THEN ?6 ELSE NULL END, leased, fkey "
            "FROM (SELECT ofs, priority, deliver_at_ms, "
            f"(?6 IS NOT NULL AND deliver_at_ms <= ?3) AS leased, {_fkey_sql('?8')} AS fkey "
            "FROM records WHERE ofs >= ?4 AND ofs < ?5)",
            (
                gid,
                ordering,
                now_ms,
                from_offset,
                INT64_MAX if end_offset is None else end_offset,
                owner,
                deadline_ms,
                fair_key,
            ),
        )
        return self._conn.changes()

    def select_ready_offsets(self, gid: int, limit: int) -> list[tuple[int, int, int]]:
        # CROSS JOIN: as select_ready_records, reading only the size column of each record
        return self._rows(
            "SELECT p.ofs, p.delivery_count, r.size "
            "FROM pending p CROSS JOIN records r ON r.ofs = p.ofs "
            "WHERE p.gid = ? AND p.ready = 1 ORDER BY p.k1, p.k2, p.ofs LIMIT ?",
            (gid, max(limit, 0)),
        )

    def fresh_offsets(
        self, from_offset: int, now_ms: int, limit: int
    ) -> list[tuple[int, int, int]]:
        return self._rows(
            "SELECT ofs, 0, size FROM records WHERE ofs >= ? AND deliver_at_ms <= ? "
            "ORDER BY ofs LIMIT ?",
            (from_offset, now_ms, max(limit, 0)),
        )

    def fresh_records(self, from_offset: int, now_ms: int, limit: int) -> list[ReadyRecord]:
        return self._rows(
            "SELECT ofs, 0, timestamp_ms, key, value, headers, priority, deliver_at_ms, "
            "idempotency_key, size FROM records WHERE ofs >= ? AND deliver_at_ms <= ? "
            "ORDER BY ofs LIMIT ?",
            (from_offset, now_ms, max(limit, 0)),
        )

    def due_offsets(
        self, gid: int, now_ms: int, min_count: int, lease_grace_ms: int = 0
    ) -> list[int]:
        return [
            r[0]
            for r in self._cur.execute(
                "SELECT ofs FROM pending WHERE gid = ? AND ready = 0 AND visible_at_ms <= ? "
                "AND (owner IS NULL OR visible_at_ms <= ?) AND delivery_count >= ? "
                "ORDER BY ofs",
                (gid, now_ms, now_ms - lease_grace_ms, min_count),
            )
        ]

    def promote(self, gid: int, now_ms: int, lease_grace_ms: int = 0) -> int:
        # A leased row (owner set) is due lease_grace_ms after its deadline (machine.py).
        self._cur.execute(
            "UPDATE pending SET ready = 1, owner = NULL "
            "WHERE gid = ? AND ready = 0 AND visible_at_ms <= ? "
            "AND (owner IS NULL OR visible_at_ms <= ?)",
            (gid, now_ms, now_ms - lease_grace_ms),
        )
        return self._conn.changes()

    def select_ready(self, gid: int, limit: int) -> list[PendingRow]:
        return [
            _pending(r)
            for r in self._cur.execute(
                f"SELECT {_PENDING_COLUMNS} FROM pending WHERE gid = ? AND ready = 1 "
                "ORDER BY k1, k2, ofs LIMIT ?",
                (gid, max(limit, 0)),
            )
        ]

    def select_ready_records(self, gid: int, limit: int) -> list[ReadyRecord]:
        # CROSS JOIN keeps pending (walked in pending_ready order, no sort) the outer loop.
        return self._rows(
            "SELECT p.ofs, p.delivery_count, r.timestamp_ms, r.key, r.value, r.headers, "
            "r.priority, r.deliver_at_ms, r.idempotency_key, r.size "
            "FROM pending p CROSS JOIN records r ON r.ofs = p.ofs "
            "WHERE p.gid = ? AND p.ready = 1 ORDER BY p.k1, p.k2, p.ofs LIMIT ?",
            (gid, max(limit, 0)),
        )

    def lease(self, gid: int, offsets: Sequence[int], owner: str, deadline_ms: int) -> None:
        assert len(set(offsets)) == len(offsets), f"group {gid} leases an offset twice"
        if not offsets:
            return
        self._cur.execute(
            "UPDATE pending SET ready = 0, owner = ?, visible_at_ms = ?, "
            "delivery_count = delivery_count + 1 WHERE gid = ? AND ofs IN carray(?)",
            (owner, deadline_ms, gid, _int64s(offsets)),
        )
        leased = self._conn.changes()
        assert leased == len(offsets), f"group {gid} leases offsets it does not have"

    def pending_get(self, gid: int, offsets: Sequence[int]) -> dict[int, PendingRow]:
        if not offsets:
            return {}
        return {
            r[0]: _pending(r)
            for r in self._cur.execute(
                f"SELECT {_PENDING_COLUMNS} FROM pending WHERE gid = ? AND ofs IN carray(?)",
                (gid, _int64s(offsets)),
            )
        }

    def pending_leases(
        self, gid: int, offsets: Sequence[int], owner: str, now_ms: int
    ) -> dict[int, int]:
        if not offsets:
            return {}
        return dict(
            self._cur.execute(
                "SELECT ofs, delivery_count FROM pending WHERE gid = ? AND ofs IN carray(?) "
                "AND owner = ? AND ready = 0 AND visible_at_ms > ? AND delivery_count != 0",
                (gid, _int64s(offsets), owner, now_ms),
            )
        )

    def pending_put(self, gid: int, rows: Sequence[PendingRow]) -> None:
        # An upsert, not INSERT OR REPLACE: a replaced row would leave the fair triggers
        # unfired (and lose its fkey); the update keeps fkey and fires them.
        self._cur.executemany(
            "INSERT INTO pending(gid, ofs, k1, k2, visible_at_ms, ready, owner, "
            "delivery_count) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(gid, ofs) DO UPDATE SET "
            "k1 = excluded.k1, k2 = excluded.k2, visible_at_ms = excluded.visible_at_ms, "
            "ready = excluded.ready, owner = excluded.owner, "
            "delivery_count = excluded.delivery_count",
            [
                (
                    gid,
                    p.offset,
                    p.k1,
                    p.k2,
                    p.visible_at_ms,
                    int(p.ready),
                    p.owner,
                    p.delivery_count,
                )
                for p in rows
            ],
        )

    def pending_delete(self, gid: int, offsets: Sequence[int]) -> None:
        if offsets:
            self._cur.execute(
                "DELETE FROM pending WHERE gid = ? AND ofs IN carray(?)", (gid, _int64s(offsets))
            )

    def pending_for_offset(self, offset: int) -> dict[int, PendingRow]:
        found: dict[int, PendingRow] = {}
        for g in self.groups():
            rows = self._rows(
                f"SELECT {_PENDING_COLUMNS} FROM pending WHERE gid = ? AND ofs = ?",
                (g.gid, offset),
            )
            if rows:
                found[g.gid] = _pending(rows[0])
        return found

    def pending_delete_offset(self, offset: int) -> int:
        gone = 0
        for g in self.groups():
            self._cur.execute("DELETE FROM pending WHERE gid = ? AND ofs = ?", (g.gid, offset))
            gone += self._conn.changes()
        return gone

    def pending_delete_below(self, offset: int) -> int:
        gone = 0
        for g in self.groups():
            self._cur.execute("DELETE FROM pending WHERE gid = ? AND ofs < ?", (g.gid, offset))
            gone += self._conn.changes()
        return gone

    def pending_reorder(self, ordering: int, fair_key: str | None = None) -> None:
        # First every fair key leaves (one direction per statement: see store.py), then the
        # fair ones join again.
        self._cur.execute("UPDATE pending SET fkey = NULL WHERE fkey IS NOT NULL")
        self._cur.execute(
            "UPDATE pending SET "
            "k1 = CASE WHEN ?1 THEN (SELECT priority FROM records r WHERE r.ofs = pending.ofs) "
            "ELSE 0 END, k2 = CASE WHEN ?1 THEN "
            "(SELECT deliver_at_ms FROM records r WHERE r.ofs = pending.ofs) ELSE 0 END",
            (ordering,),
        )
        if fair_key is not None:
            self._cur.execute(
                f"UPDATE pending SET fkey = (SELECT {_fkey_sql('?1', 'r.key', 'r.headers')} "
                "FROM records r WHERE r.ofs = pending.ofs)",
                (fair_key,),
            )

    def release(self, gid: int, owner: str | None, now_ms: int) -> int:
        if owner is None:
            self._cur.execute(
                "UPDATE pending SET owner = NULL, visible_at_ms = ? "
                "WHERE gid = ? AND ready = 0 AND owner IS NOT NULL",
                (now_ms, gid),
            )
        else:
            self._cur.execute(
                "UPDATE pending SET owner = NULL, visible_at_ms = ? "
                "WHERE gid = ? AND ready = 0 AND owner = ?",
                (now_ms, gid, owner),
            )
        return self._conn.changes()

    def lowest_pending(self, gid: int) -> int | None:
        rows = self._rows("SELECT min(ofs) FROM pending WHERE gid = ?", (gid,))
        return rows[0][0]

    def count_leased(self, gid: int, now_ms: int) -> int:
        rows = self._rows(
            "SELECT count(*) FROM pending WHERE gid = ? AND ready = 0 AND owner IS NOT NULL "
            "AND visible_at_ms > ?",
            (gid, now_ms),
        )
        return int(rows[0][0])

    def count_pending(self, gid: int) -> int:
        return int(self._rows("SELECT count(*) FROM pending WHERE gid = ?", (gid,))[0][0])

    # -- fair ordering ------------------------------------------------------------------------

    def fair_rotation(self, gid: int) -> tuple[list[tuple[bytes, int, int]], int]:
        rotation = self._rows(
            "SELECT fkey, turn, ready FROM fair_keys WHERE gid = ? ORDER BY turn, fkey", (gid,)
        )
        return [(bytes(k), t, r) for k, t, r in rotation], self._served(gid)

    def _served(self, gid: int) -> int:
        rows = self._rows("SELECT served FROM fair_clock WHERE gid = ?", (gid,))
        return int(rows[0][0]) if rows else 0

    def _select_fair(self, gid: int, limit: int, columns: str) -> list[Any]:
        """Round robin over the first ``limit`` keys of the rotation (fair_keys by turn: an
        index walk); the keys that give the same number of rows share one statement, which
        reads each key's first rows by a search of pending_fair: O(limit log n)."""
        rotation = self._rows(
            "SELECT fkey, ready FROM fair_keys WHERE gid = ? ORDER BY turn, fkey LIMIT ?",
            (gid, max(limit, 0)),
        )
        order = fair_plan([ready for _, ready in rotation], limit)
        takes: dict[bytes, int] = {}
        for i in order:
            fkey = rotation[i][0]
            takes[fkey] = takes.get(fkey, 0) + 1
        by_take: dict[int, list[bytes]] = {}
        for fkey, take in takes.items():
            by_take.setdefault(take, []).append(fkey)
        rows: dict[bytes, list[Any]] = {}
        for take, fkeys in by_take.items():
            found = self._rows(
                f"SELECT p.fkey, p.k1, p.k2, {columns} FROM carray(?2) ks "
                "CROSS JOIN pending p CROSS JOIN records r ON r.ofs = p.ofs "
                "WHERE p.gid = ?1 AND p.ofs IN (SELECT q.ofs FROM pending q WHERE q.gid = ?1 "
                "AND q.fkey = ks.value AND q.ready = 1 ORDER BY q.k1, q.k2, q.ofs LIMIT ?3)",
                (gid, apsw.carray(tuple(fkeys)), take),
            )
            found.sort(key=lambda row: (row[0], row[1], row[2], row[3]))  # key, k1, k2, ofs
            for row in found:
                rows.setdefault(row[0], []).append(row[3:])
        per_key = [rows.get(fkey, []) for fkey, _ in rotation]
        for (fkey, _), got in zip(rotation, per_key, strict=True):
            assert len(got) == takes.get(fkey, 0), f"group {gid}: a fair key lacks ready rows"
        return fair_sequence(order, per_key)

    def select_fair_records(self, gid: int, limit: int) -> list[ReadyRecord]:
        return self._select_fair(
            gid,
            limit,
            "p.ofs, p.delivery_count, r.timestamp_ms, r.key, r.value, r.headers, r.priority, "
            "r.deliver_at_ms, r.idempotency_key, r.size",
        )

    def select_fair_offsets(self, gid: int, limit: int) -> list[tuple[int, int, int]]:
        return self._select_fair(gid, limit, "p.ofs, p.delivery_count, r.size")

    def fair_served(self, gid: int, offsets: Sequence[int]) -> None:
        if not offsets:
            return
        fkeys = dict(
            self._cur.execute(
                "SELECT ofs, fkey FROM pending WHERE gid = ? AND ofs IN carray(?)",
                (gid, _int64s(offsets)),
            )
        )
        assert len(fkeys) == len(offsets), f"group {gid} served offsets it lacks"
        served = self._served(gid)
        turns = fair_turns([fkeys[o] for o in offsets], served)
        self._cur.executemany(
            "UPDATE fair_keys SET turn = ? WHERE gid = ? AND fkey = ?",
            [(turn, gid, fkey) for fkey, turn in turns.items()],
        )
        self._cur.execute(
            "INSERT INTO fair_clock(gid, served) VALUES (?, ?) "
            "ON CONFLICT(gid) DO UPDATE SET served = excluded.served",
            (gid, served + len(offsets)),
        )

    # -- outbox -------------------------------------------------------------------------------

    def outbox_put(self, rows: Sequence[OutboxRow]) -> None:
        self._cur.executemany(
            "INSERT INTO outbox(seq, grp, ofs, reason, delivery_count, dead_at_ms, record) "
            "VALUES (?,?,?,?,?,?,?)",
            [
                (o.seq, o.group, o.offset, o.reason, o.delivery_count, o.dead_at_ms, o.record)
                for o in rows
            ],
        )

    def outbox_list(self, limit: int) -> list[OutboxRow]:
        return [
            OutboxRow(*r)
            for r in self._cur.execute(
                "SELECT seq, grp, ofs, reason, delivery_count, dead_at_ms, record FROM outbox "
                "ORDER BY seq LIMIT ?",
                (max(limit, 0),),
            )
        ]

    def outbox_delete_upto(self, seq: int) -> int:
        self._cur.execute("DELETE FROM outbox WHERE seq <= ?", (seq,))
        return self._conn.changes()

    # -- whole store --------------------------------------------------------------------------

    def backup_to(self, path: str) -> None:
        """Write a consistent copy of the partition to ``path`` (SQLite backup API), fsync'd."""
        _backup(self._conn, path, None)

    def pin_backup(self) -> BackupWriter:
        """Pin the partition as it is now and return a writer of exactly that state.

        Cheap (a second connection opens a WAL read transaction), so the tick thread can call
        it between two applies. The writer runs on any thread while applies go on committing
        through the WAL: ``writer(path, cancelled)`` copies the pinned state to ``path`` with
        the backup API in steps, fsync'd, and releases the pin; it raises
        ``SnapshotCancelled`` (leaving no file) once ``cancelled`` is set, apsw errors on I/O
        failure. Call it exactly once: it is what releases the pin.
        """
        source = apsw.Connection(self.path)
        source.setbusytimeout(5000)
        try:
            source.execute("BEGIN")
            source.execute("SELECT applied_index FROM meta WHERE id = 1").fetchall()
        except BaseException:
            source.close()
            raise

        def write(path: str, cancelled: CancelFlag) -> None:
            try:
                _backup(source, path, cancelled)
            finally:
                with contextlib.suppress(apsw.Error):
                    source.execute("ROLLBACK")
                source.close()

        return write

    def restore_from(self, path: str, *, take: bool = False) -> None:
        """Replace the whole partition with the copy at ``path`` (written by backup_to).

        With ``take`` (the copy is the caller's to give: a snapshot's state copied out for
        this) and this connection the file's only one, the copy is moved into place: fsync'd,
        this connection closed (SQLite checkpoints and removes the WAL), the copy renamed over
        the file (a second link keeps the old one, freed by ``remove_file``), the directory
        fsync'd, the file reopened; ``path`` is consumed, and nothing but the copy is
        written. A crash at any step leaves a whole SQLite file, the old or the new, with no
        WAL of the other. Otherwise (another connection has the file open: a pinned copy,
        a reader) the copy is written in through the backup API in one transaction (a crash
        midway leaves the state as it was), then checkpointed; on a snapshot worker
        (transport/raft/snapshots.py) the WAL is fdatasync'd after every step of the copy
        and the file behind the checkpoint, so no backlog of dirty pages makes the broker's
        other writers (the driver's journal fsyncs) wait for it. Raises apsw errors and
        ``OSError``; the store is open afterwards either way."""
        if take and self._move_into_place(path):
            return  # reopened: a snapshot from before fair ordering or tracked_batches is migrated
        source = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
        try:
            with self._conn.backup("main", source, "main") as backup:
                while not backup.done:
                    backup.step(BACKUP_STEP_PAGES)
                    _fdatasync(self.path + "-wal")  # on disk before the next step is written
        finally:
            source.close()
        self._migrate()  # a snapshot from before fair ordering or tracked_batches
        with _flushing(self.path):
            self.checkpoint()

    def _move_into_place(self, path: str) -> bool:
        """restore_from's rename of the copy at ``path`` over the file; False (nothing
        changed) when another connection still has the file open."""
        _fsync(path)  # whole on disk before it is the partition
        self._conn.close()
        try:
            if os.path.exists(self.path + "-wal"):
                return False  # not the last connection: SQLite kept the WAL for the others
            name = f"{self.path}{RETIRED_SUFFIX}{next(_retired)}"
            old: str | None = name
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name)  # a crash's leftover of the same name
                os.link(self.path, name)
            except OSError:  # no hard links here: the rename frees the old file
                old = None
            try:
                _replace(path, self.path)
            except BaseException:
                if old is not None:
                    os.unlink(old)  # only a second name: the file is still the partition
                raise
            _fsync(os.path.dirname(os.path.abspath(self.path)))  # the rename is durable
            if old is not None:
                self.remove_file(old)
            return True
        finally:
            self._open()

    def dump(self) -> dict[str, Any]:
        return canonical_dump(
            self.load_meta(),
            (RecordRow(*r) for r in self._rows(f"SELECT {_RECORD_COLUMNS} FROM records")),
            (
                (k, (o, t))
                for k, o, t in self._rows("SELECT key, ofs, timestamp_ms FROM idempotency")
            ),
            (
                (p, s, _blob_offsets(b), t)
                for p, s, b, t in self._rows(
                    "SELECT producer_id, sequence, offsets, updated_ms FROM producers"
                )
            ),
            self.groups(),
            (
                (r[0], _pending(r[1:]))
                for r in self._rows(f"SELECT gid, {_PENDING_COLUMNS} FROM pending")
            ),
            (
                OutboxRow(*r)
                for r in self._rows(
                    "SELECT seq, grp, ofs, reason, delivery_count, dead_at_ms, record FROM outbox"
                )
            ),
            self._rows("SELECT grp, generation FROM fences"),
            self._rows("SELECT ofs, expires_at_ms FROM expiries"),
            self.schedules(),
            self._rows("SELECT gid, ofs, fkey FROM pending WHERE fkey IS NOT NULL"),
            self._rows("SELECT gid, fkey, turn, ready FROM fair_keys"),
            self._rows("SELECT gid, served FROM fair_clock"),
            self._rows("SELECT producer_id, records, last_sequence, cut_ms FROM tracked_cut"),
        )

    def checkpoint(self) -> None:
        """Copy the WAL into the database file (PASSIVE: never waits for readers)."""
        self.checkpoint_due = False
        self._conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)

    def trim_wal(self) -> bool:
        """Copy the whole WAL into the database file and truncate the ``-wal`` file to 0 bytes
        (``wal_checkpoint(TRUNCATE)``: SQLite truncates only after every frame is in the
        synced database file). False, nothing lost, when another connection is reading
        (the replica's reader, a pinned snapshot copy): it does not wait for them."""
        self.checkpoint_due = False
        self._conn.setbusytimeout(0)
        try:
            self._conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        except apsw.BusyError:
            return False
        finally:
            self._conn.setbusytimeout(BUSY_TIMEOUT_MS)
        return True

    def close(self) -> None:
        self._conn.close()

    def reopen(self) -> None:
        """Open the file again after ``close`` (it may be another file by now: a restore)."""
        self._open()


# -- for reports ----------------------------------------------------------------------------


def sqlite_versions() -> dict[str, str]:
    """The APSW and SQLite library versions this store runs on (for benchmark reports)."""
    return {"apsw": apsw.apswversion(), "sqlite": apsw.sqlitelibversion()}


class SnapshotCancelled(Exception):
    """A pinned backup was abandoned (its group was destroyed or installed a newer snapshot)."""


BACKUP_STEP_PAGES = 4096  # 16 MiB of 4 KiB pages between two looks at the cancel flag
# restore_from keeps the file it replaced as ``<path>.old<n>`` until ``remove_file`` frees it;
# what a crash left is removed at start (``remove_retired_files``).
RETIRED_SUFFIX = ".old"
_retired = itertools.count(1)


def retired_files(path: str) -> list[str]:
    """What restore_from left of files it replaced at ``path`` (a crash before their removal)."""
    parent = os.path.dirname(os.path.abspath(path))
    prefix = os.path.basename(path) + RETIRED_SUFFIX
    try:
        names = os.listdir(parent)
    except FileNotFoundError:
        return []
    return [os.path.join(parent, n) for n in sorted(names) if n.startswith(prefix)]


def _fsync(path: str) -> None:
    """fsync a file or a directory."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace(source: str, path: str) -> None:
    """The rename that makes a restored copy the partition (a test may fail it)."""
    os.replace(source, path)


def _fdatasync(path: str) -> None:
    """fdatasync ``path`` if it exists (its dirty pages to disk: not a durability point)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fdatasync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _flushing(path: str, every_s: float = 0.05) -> Iterator[None]:
    """fdatasync ``path`` every ``every_s`` on a helper thread while the block runs (a
    checkpoint writes the whole WAL into the file before its one fsync)."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every_s):
            _fdatasync(path)

    helper = threading.Thread(target=run, name="raftq-flush", daemon=True)
    helper.start()
    try:
        yield
    finally:
        stop.set()
        helper.join()


def _backup(source: apsw.Connection, path: str, cancelled: CancelFlag | None) -> None:
    """Copy ``source``'s main database to ``path`` (tmp, fsync, rename); see pin_backup."""
    tmp = path + ".tmp"
    if os.path.exists(tmp):
        os.remove(tmp)
    try:
        dest = apsw.Connection(tmp)
        try:
            with dest.backup("main", source, "main") as backup:
                while not backup.done:
                    if cancelled is not None and cancelled.is_set():
                        raise SnapshotCancelled(path)
                    backup.step(-1 if cancelled is None else BACKUP_STEP_PAGES)
        finally:
            dest.close()
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def copy_position(path: str) -> tuple[int, int]:
    """(applied index, next offset) of a partition copy written by the backup API (a backup's
    or a snapshot's SQLite file), read without changing it. Raises apsw errors when ``path``
    is not such a copy."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?immutable=1"
    conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    try:
        row = conn.execute("SELECT applied_index, next_offset FROM meta WHERE id = 1").fetchone()
    finally:
        conn.close()
    if row is None:
        raise apsw.CorruptError(f"{path}: no meta row")
    return int(row[0]), int(row[1])
