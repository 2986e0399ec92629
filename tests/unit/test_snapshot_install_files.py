"""How an installed snapshot reaches the disk (issue 12): the partition's state copied out of a
received snapshot is moved into place instead of written through the WAL a second and third
time, and the files it replaces are freed in paced steps off the calling thread.

- ``SqliteStore.restore_from(path, take=True)`` renames the copy over the live file when its
  connection is the only one (the WAL then stays small), falls back to the backup API when
  another connection has the file open, and a crash (an image of the directory) between any
  two of its steps reopens to exactly the old or exactly the new state.
- ``snapshot.replace_retiring`` / ``remove_paced`` free a replaced file by truncating it in
  steps on the remover thread, and wait while a leader still sends the old file.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from raftq.partitions import sqlite_store
from raftq.partitions.rows import Meta
from raftq.partitions.sqlite_store import SqliteStore, retired_files
from raftq.transport.raft import snapshot
from tests.helpers import wait_until

VALUE = b"v" * 4000  # about a page a record


def store_with(path: Path, applied: int, records: int, tag: bytes) -> SqliteStore:
    store = SqliteStore(str(path), synchronous="NORMAL")
    with store.transaction():
        store.save_meta(Meta(applied_index=applied, next_offset=records))
        store.insert_values(0, 1, [tag + VALUE] * records, None, None)
    return store


def copy_of(tmp_path: Path, applied: int, records: int, tag: bytes) -> tuple[str, dict[str, Any]]:
    """A backup_to copy of a partition at ``applied`` (the new state), and its dump."""
    source = store_with(tmp_path / f"source-{applied}.db", applied, records, tag)
    copy = str(tmp_path / f"copy-{applied}.db")
    source.backup_to(copy)
    dump = source.dump()
    source.close()
    return copy, dump


def reopened_dump(path: Path) -> dict[str, Any]:
    store = SqliteStore(str(path))
    try:
        return store.dump()
    finally:
        store.close()


def test_a_taken_copy_is_moved_into_place_not_written_through_the_wal(tmp_path: Path) -> None:
    live = tmp_path / "p.db"
    store = store_with(live, 5, 50, b"old")
    copy, new = copy_of(tmp_path, 9, 800, b"new")  # about 3 MiB: a WAL copy would hold it all
    removed: list[str] = []
    store.remove_file = removed.append

    store.restore_from(copy, take=True)

    assert store.dump() == new
    assert not os.path.exists(copy), "the copy was moved, not copied"
    wal = str(live) + "-wal"
    assert not os.path.exists(wal) or os.path.getsize(wal) < 256 << 10, "written through the WAL"
    assert removed == retired_files(str(live)) and len(removed) == 1
    assert reopened_dump(Path(removed[0]))["records"] != new["records"], "not the old file"
    with store.transaction():  # the reopened store keeps working
        store.insert_values(800, 2, [b"after"], None, None)
    store.close()
    assert len(reopened_dump(live)["records"]) == 801


def test_a_copy_not_taken_or_with_another_connection_open_goes_through_the_backup_api(
    tmp_path: Path,
) -> None:
    live = tmp_path / "p.db"
    store = store_with(live, 5, 20, b"old")
    reader = SqliteStore(str(live))  # a second connection on the file (a partition reader)
    copy, new = copy_of(tmp_path, 9, 30, b"new")
    removed: list[str] = []
    store.remove_file = removed.append

    store.restore_from(copy, take=True)  # the reader keeps the file: no rename under it

    assert store.dump() == new and reader.dump() == new
    assert os.path.exists(copy) and removed == [] and retired_files(str(live)) == []
    reader.close()
    store.restore_from(copy)  # not taken: copied in as before
    assert os.path.exists(copy) and store.dump() == new
    store.close()


STEPS = ("copy fsync'd", "closed", "old file linked", "renamed", "directory fsync'd", "reopened")


@pytest.mark.parametrize("crash_after", range(len(STEPS)))
def test_a_crash_between_any_two_steps_reopens_to_the_old_or_the_new_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_after: int
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    live = work / "p.db"
    store = store_with(live, 5, 40, b"old")
    old = store.dump()
    copy, new = copy_of(work, 9, 60, b"new")
    images: list[Path] = []

    def image() -> None:  # what a crash (power loss after the fsyncs) leaves at this point
        target = tmp_path / f"image{len(images)}"
        shutil.copytree(work, target, ignore=shutil.ignore_patterns("copy-*", "source-*", "*-shm"))
        images.append(target)

    def after(fn: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any) -> Any:
            result = fn(*args)
            image()
            return result

        return step

    monkeypatch.setattr(sqlite_store, "_fsync", after(sqlite_store._fsync))
    monkeypatch.setattr(sqlite_store, "_replace", after(sqlite_store._replace))
    monkeypatch.setattr(sqlite_store.os, "link", after(os.link))
    store._conn = _Closing(store._conn, after(store._conn.close))  # type: ignore[assignment]
    store.remove_file = lambda path: None  # the freed file stays for the image
    store.restore_from(copy, take=True)
    image()  # reopened
    monkeypatch.undo()
    # fsync(copy), close, link, replace, fsync(dir), reopen: one image after each.
    assert len(images) == len(STEPS), images
    assert store.dump() == new
    store.close()

    got = reopened_dump(images[crash_after] / "p.db")
    expected = old if crash_after < STEPS.index("renamed") else new
    assert got == expected, f"crash after {STEPS[crash_after]}"
    if 0 < crash_after < STEPS.index("reopened"):  # no WAL of one file beside the other
        assert not (images[crash_after] / "p.db-wal").exists()


class _Closing:
    """The store's connection with ``close`` watched (apsw's Connection is not patchable)."""

    def __init__(self, conn: Any, close: Callable[[], None]) -> None:
        self._conn = conn
        self.close = close

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_a_replaced_file_is_freed_in_steps_on_the_remover_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot, "REMOVE_STEP_BYTES", 1 << 20)
    monkeypatch.setattr(snapshot, "REMOVE_PAUSE_S", 0.0)
    steps: list[tuple[str, int]] = []
    real = snapshot._truncate

    def truncate(fd: int, size: int) -> None:
        steps.append((threading.current_thread().name, size))
        real(fd, size)

    monkeypatch.setattr(snapshot, "_truncate", truncate)
    path = tmp_path / "p.snapshot"
    path.write_bytes(b"o" * (5 << 20))
    new = tmp_path / "p.snapshot.rx"
    new.write_bytes(b"n" * 100)

    snapshot.replace_retiring(str(new), str(path))

    assert path.read_bytes() == b"n" * 100 and not new.exists()
    wait_until(lambda: not list(tmp_path.glob("*.old*")), 10, "the old file freed")
    assert [size for _, size in steps] == [4 << 20, 3 << 20, 2 << 20, 1 << 20, 0]
    assert all(name.startswith("raft-snapshot-remove") for name, _ in steps), steps


def test_a_replaced_snapshot_still_being_sent_is_freed_after_its_transfer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot, "REMOVE_PAUSE_S", 0.0)
    truncated: list[int] = []
    real = snapshot._truncate

    def truncate(fd: int, size: int) -> None:
        truncated.append(size)
        real(fd, size)

    def state(user: str) -> None:
        Path(user).write_bytes(os.urandom(3 << 20))

    monkeypatch.setattr(snapshot, "_truncate", truncate)
    path = str(tmp_path / "p.snapshot")
    snapshot.write_snapshot(path, ((b"", 7, 1), (b"", 6, 1), ["a:1"]), state, fsync=False)
    whole = Path(path).read_bytes()
    sender = snapshot.SnapshotSender(path, 1 << 20)
    got = b""
    finished = False
    deadline = time.monotonic() + 30
    while not finished:
        assert time.monotonic() < deadline, "the transfer never finished"
        sent = sender.chunks("f", 1 << 20)
        assert sent is not None, "the snapshot being sent was cut short"
        chunks, last = sent
        for data, _first, _is_last, _offset, xfer in chunks:
            got += data
            sender.acked("f", (xfer, len(got)))
        if got and not truncated and not list(tmp_path.glob("*.old*")):
            new = tmp_path / "p.snapshot.bg1"  # a newer local snapshot while the old is sent
            new.write_bytes(b"newer")
            snapshot.replace_retiring(str(new), path)
            # The remover has looked at the old file (its one thread runs tasks in order).
            snapshot._io_thread("raft-snapshot-remove").submit(lambda: None).result(10)
            assert truncated == [], "a file being sent was truncated"
        finished = last is not None
        if not chunks:
            threading.Event().wait(0.005)  # the reader thread's next chunk
    assert got == whole
    assert Path(path).read_bytes() == b"newer"
    wait_until(lambda: not list(tmp_path.glob("*.old*")), 10, "the old file freed after it")
    assert truncated[-1] == 0
