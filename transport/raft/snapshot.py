"""Snapshot files for pysyncobj's ``serializer`` / ``deserializer`` hooks.

pysyncobj calls ``serializer(tmp_path, (last_entry, prev_entry, cluster))`` during log
compaction (synchronously: raftq sets ``useFork=False``), renames ``tmp_path`` over
``fullDumpFile``, and later calls ``deserializer(fullDumpFile)`` at start-up and after a
snapshot arrived from the leader. A raftq snapshot file is::

    MAGIC | u32 header length | JSON header | the user's snapshot bytes

The header carries pysyncobj's bookkeeping (the last two applied entries and the cluster
addresses); the user's bytes come from the group's ``snapshot(path)`` callback (the partition
store writes an SQLite backup there) and go back through ``restore(path)``. Nothing is pickled:
no DB connection or lock can leak into a snapshot.

Crash safety. A local snapshot is written to a tmp file and fsync'd, pysyncobj renames it over
``fullDumpFile``, and the journal fsyncs the directory before it compacts (journal.py), so a
crash at any point leaves either the old snapshot with the full journal, or the new snapshot
with a journal that may still start before it. Loading reconciles the two by (index, term)
(:func:`journal_keep_from`, Raft §7): journal entries after the snapshot are never dropped
when the journal holds the snapshot's last entry. A snapshot arriving from the leader goes
through :class:`SnapshotReceiver` (chunks checked by offset and written on the process's
writer thread, tmp → fsync → rename → directory fsync) before the same reconciliation;
:class:`SnapshotSender` reads the file ahead on the process's reader thread and hands out the
chunks read within the follower's window and the link's budget (snapshots.py, "Paced
transfer"). :class:`SnapshotInstall` restores a received snapshot
on a worker thread (groups given ``capture``), so a follower's tick thread only writes the
chunks and, once the worker is done, renames the file and reconciles the journal.
"""

from __future__ import annotations

import base64
import collections
import concurrent.futures
import contextlib
import itertools
import json
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from raftq.transport.raft.journal import fsync_dir

logger = logging.getLogger(__name__)

MAGIC = b"RAFTQS1\n"
_LEN = struct.Struct("<I")
_COPY_BYTES = 1 << 20
_SYNC_EVERY_BYTES = 16 << 20  # a snapshot file being written is fdatasync'd this often

Entry = tuple[bytes, int, int]


def _entry_to_json(entry: Any) -> list[Any]:
    command, idx, term = entry
    return [base64.b64encode(bytes(command)).decode(), int(idx), int(term)]


def _entry_from_json(raw: list[Any]) -> Entry:
    return (base64.b64decode(raw[0]), int(raw[1]), int(raw[2]))


def write_snapshot(
    tmp_path: str,
    data: tuple[Any, ...],
    snapshot: Callable[[str], None],
    *,
    fsync: bool,
    learners: Sequence[str] = (),
) -> None:
    """Write a snapshot file at ``tmp_path``; exceptions make pysyncobj keep its log.
    ``learners``: the members of ``cluster`` that do not vote (membership.py)."""
    last_entry, prev_entry, cluster = data
    user_path = tmp_path + ".state"
    snapshot(user_path)
    fields: dict[str, Any] = {
        "last": _entry_to_json(last_entry),
        "prev": _entry_to_json(prev_entry),
        "cluster": sorted(str(getattr(node, "id", node)) for node in cluster),
    }
    if learners:
        fields["learners"] = sorted(learners)
    header = json.dumps(
        fields,
        sort_keys=True,
    ).encode()
    with open(tmp_path, "wb") as out, open(user_path, "rb") as state:
        out.write(MAGIC + _LEN.pack(len(header)) + header)
        _copy(state, out, fsync)
        if fsync:
            os.fsync(out.fileno())
    os.unlink(user_path)


def _copy(source: IO[bytes], out: IO[bytes], fsync: bool, bytes_per_s: float = 0) -> None:
    """Copy the rest of ``source`` to ``out`` (flushed), fdatasync'ing it every
    ``_SYNC_EVERY_BYTES`` when ``fsync``: never gigabytes of dirty pages at once, or the kernel
    would throttle every writer on the machine (the driver's journal appends too).
    ``bytes_per_s``: at most that rate (0: as fast as the disk goes)."""
    copied = 0
    started = time.monotonic()
    while chunk := source.read(_COPY_BYTES):
        _write_out(out, chunk)
        copied += len(chunk)
        if fsync and copied % _SYNC_EVERY_BYTES == 0:
            out.flush()
            os.fdatasync(out.fileno())
        if bytes_per_s > 0 and not _inline:  # the simulation's time is its own
            ahead_s = started + copied / bytes_per_s - time.monotonic()
            if ahead_s > 0:
                time.sleep(ahead_s)
    out.flush()


def _write_out(out: IO[bytes], data: bytes) -> None:
    """One piece of a snapshot file being copied (a test may slow it)."""
    out.write(data)


# A snapshot received from the leader is copied out of its file at most this fast before it
# is moved into place (SnapshotInstall): the install's disk writes stay near the transfer's.
INSTALL_BYTES_PER_S = 64 << 20

# Replaced files (an older snapshot, a partition's SQLite file before an install) are freed in
# steps on the process's remover thread: the rename that replaces one frees nothing (a second
# link keeps it), then it is truncated ``REMOVE_STEP_BYTES`` at a time, ``REMOVE_PAUSE_S``
# apart, and unlinked. Freeing gigabytes at once keeps the disk's journal busy long enough for
# the drivers' journal fsyncs to wait on it. A file still being sent waits for its transfer.
REMOVE_STEP_BYTES = 64 << 20
REMOVE_PAUSE_S = 0.05
RETIRED_SUFFIX = ".old"
_retired = itertools.count(1)
_sending: collections.Counter[tuple[int, int]] = collections.Counter()  # (dev, inode) being sent


def replace_retiring(source: str, path: str) -> None:
    """``os.replace(source, path)``; the file ``path`` held is freed by :func:`remove_paced`
    (a crash leaves it as ``<path>.old<n>``, removed at start). Raises ``OSError``; then
    nothing changed."""
    old = f"{path}{RETIRED_SUFFIX}{next(_retired)}"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(old)  # a crash's leftover of the same name: garbage
        os.link(path, old)
    except OSError:  # nothing to retire, or no hard links here: freed by the rename
        os.replace(source, path)
        return
    try:
        os.replace(source, path)
    except BaseException:
        os.unlink(old)  # only a second name: the file is still ``path``
        raise
    remove_paced(old)


def remove_paced(path: str) -> None:
    """Free the file at ``path`` in steps on the remover thread (at once inside
    :func:`written_inline`); it must have no other name. Errors are logged."""
    if _inline:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    _io_thread("raft-snapshot-remove").submit(_truncate_away, path)


def _truncate_away(path: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return
    except OSError:
        logger.warning("cannot remove %s", path, exc_info=True)
        return
    try:
        st = os.fstat(fd)
        if _sending[(st.st_dev, st.st_ino)]:  # a leader still sends it: later
            threading.Timer(1.0, remove_paced, (path,)).start()
            return
        size = st.st_size
        while size > 0:
            size = max(0, size - REMOVE_STEP_BYTES)
            _truncate(fd, size)
            if size:
                time.sleep(REMOVE_PAUSE_S)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    except OSError:
        logger.warning("cannot remove %s", path, exc_info=True)
    finally:
        os.close(fd)


def _truncate(fd: int, size: int) -> None:
    """One step of freeing a replaced file (a test may watch it)."""
    os.ftruncate(fd, size)


Writer = Callable[[str, threading.Event], None]

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
SNAPSHOT_WORKERS = 2  # snapshots written at once per process; more wait their turn
# Pinned snapshots per process (each holds a SQLite connection and its read transaction until
# written); a group due for one while this many are pinned tries again at a later tick.
MAX_PINNED_SNAPSHOTS = 16
_pinned = 0


def _workers() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                SNAPSHOT_WORKERS, thread_name_prefix="raft-snapshot"
            )
        return _pool


_inline = 0


@contextlib.contextmanager
def written_inline() -> Iterator[None]:
    """Inside the block a BackgroundSnapshot is written at once, on the capturing thread: the
    simulation tier (hub.py) stays a function of its seed. Process-wide, like its clock."""
    global _inline
    _inline += 1
    try:
        yield
    finally:
        _inline -= 1


class BackgroundSnapshot:
    """One snapshot written off the tick thread (see "Off the tick thread", snapshots.py).

    The tick thread pinned the state (``write`` comes from the group's ``capture()`` and holds
    it) together with pysyncobj's bookkeeping ``data`` = (last, prev, cluster); a worker
    writes the snapshot file at a private tmp path and fsyncs it. The tick thread polls
    :meth:`done`, then :meth:`install` renames the file over ``path`` (cheap). :meth:`cancel`
    abandons it: the worker stops at its next step and removes its files.
    """

    _seq = 0

    @staticmethod
    def room() -> bool:
        """Whether another snapshot may be pinned now (MAX_PINNED_SNAPSHOTS)."""
        return _pinned < MAX_PINNED_SNAPSHOTS

    def __init__(
        self,
        path: str,
        data: tuple[Any, ...],
        write: Writer,
        *,
        fsync: bool,
        learners: Sequence[str] = (),
    ) -> None:
        BackgroundSnapshot._seq += 1
        self.path = path
        self.tmp_path = f"{path}.bg{BackgroundSnapshot._seq}"
        self.last_index = int(data[0][1])
        self.prev_index = int(data[1][1])  # pysyncobj compacts the journal to it
        self.cancelled = threading.Event()
        self._count(+1)
        if _inline:
            self._future: concurrent.futures.Future[None] = concurrent.futures.Future()
            try:
                self._run(data, write, fsync, tuple(learners))
                self._future.set_result(None)
            except Exception as exc:
                self._future.set_exception(exc)
        else:
            self._future = _workers().submit(self._run, data, write, fsync, tuple(learners))

    @staticmethod
    def _count(delta: int) -> None:
        global _pinned
        with _pool_lock:
            _pinned += delta

    def _run(
        self, data: tuple[Any, ...], write: Writer, fsync: bool, learners: Sequence[str]
    ) -> None:
        try:
            self._write(data, write, fsync, learners)
        finally:
            self._count(-1)

    def _write(
        self, data: tuple[Any, ...], write: Writer, fsync: bool, learners: Sequence[str]
    ) -> None:
        try:
            write_snapshot(
                self.tmp_path,
                data,
                lambda user_path: write(user_path, self.cancelled),
                fsync=fsync,
                learners=learners,
            )
        except BaseException:
            self._remove_files()
            raise
        if self.cancelled.is_set():
            self._remove_files()

    def _remove_files(self) -> None:
        for suffix in ("", ".state", ".state.tmp"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp_path + suffix)

    def done(self) -> bool:
        return self._future.done()

    def cancel(self) -> None:
        self.cancelled.set()

    def install(self) -> bool:
        """Once :meth:`done`: move the written snapshot over ``path``; False (logged) when it
        failed or was cancelled, and then nothing changed."""
        exc = self._future.exception()
        if exc is not None:
            if not self.cancelled.is_set():
                logger.error("snapshot %s at %d failed", self.path, self.last_index, exc_info=exc)
            return False
        if self.cancelled.is_set():
            self._remove_files()
            return False
        # The journal fsyncs the directory before compacting.
        replace_retiring(self.tmp_path, self.path)
        return True


def remove_stale_background_files(path: str) -> None:
    """Remove what a crash left of background snapshots of ``path`` and of snapshots being
    received or installed (never renamed over ``path``)."""
    parent = Path(path).parent
    name = Path(path).name
    for pattern in (".bg*", ".rx", ".rx.restore*", ".restore*"):
        for leftover in parent.glob(name + pattern):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    remove_retired(path)


def remove_retired(path: str) -> None:
    """Free what a crash left of files that replaced ``path`` (:func:`replace_retiring`)."""
    for leftover in Path(path).parent.glob(Path(path).name + RETIRED_SUFFIX + "*"):
        remove_paced(str(leftover))


def read_snapshot(
    path: str,
    restore: Callable[[str], None],
    *,
    fsync: bool,
    commit: Callable[[], None] | None = None,
    bytes_per_s: float = 0,
) -> tuple[Entry, Entry, list[str]]:
    """Hand the user's part of the snapshot at ``path`` to ``restore``; return the bookkeeping.

    The file may have just been received from the leader without fsync (pysyncobj's
    ``setTransmissionData``): it is made durable here, before the journal is cleared. The
    user's part is copied out to ``<path>.restore`` (at most ``bytes_per_s``), which
    ``restore`` may move into place (it is removed after). ``commit`` (a snapshot received
    from the leader: rename it over the group's) runs between the copy and ``restore``: a
    crash during the long copy leaves the old snapshot, one after the commit the new one.
    """
    if fsync:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(Path(path).parent)
    user_path = path + ".restore"
    try:
        with open(path, "rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                raise ValueError(f"{path} is not a raftq snapshot")
            (length,) = _LEN.unpack(f.read(_LEN.size))
            header = json.loads(f.read(length))
            with open(user_path, "wb") as out:
                _copy(f, out, fsync, bytes_per_s)
        if commit is not None:
            commit()
        restore(user_path)
    finally:
        # The copy unless ``restore`` took it (freed in steps under a name of its own), and
        # the side files SQLite leaves beside a WAL file opened read-only.
        with contextlib.suppress(FileNotFoundError):
            retired = f"{user_path}{RETIRED_SUFFIX}{next(_retired)}"
            os.rename(user_path, retired)
            remove_paced(retired)
        for leftover in (user_path + "-wal", user_path + "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
    return _bookkeeping(header)


def read_snapshot_header(path: str) -> tuple[Entry, Entry, list[str]]:
    """The bookkeeping of the snapshot at ``path`` (last, prev, cluster), without restoring it.

    Raises ``OSError`` or ``ValueError`` for a missing or malformed file.
    """
    with open(path, "rb") as f:
        return _read_header(f, path)


def snapshot_learners(path: str) -> list[str]:
    """The learners recorded in the snapshot at ``path`` ([] when none or written before)."""
    with open(path, "rb") as f:
        return [str(a) for a in _header_json(f, path).get("learners", [])]


def _read_header(f: IO[bytes], path: str) -> tuple[Entry, Entry, list[str]]:
    return _bookkeeping(_header_json(f, path))


def _header_json(f: IO[bytes], path: str) -> dict[str, Any]:
    if f.read(len(MAGIC)) != MAGIC:
        raise ValueError(f"{path} is not a raftq snapshot")
    raw = f.read(_LEN.size)
    if len(raw) != _LEN.size:
        raise ValueError(f"{path}: truncated snapshot header")
    (length,) = _LEN.unpack(raw)
    data = f.read(length)
    if len(data) != length:
        raise ValueError(f"{path}: truncated snapshot header")
    header = json.loads(data)
    if not isinstance(header, dict):
        raise ValueError(f"{path}: snapshot header is not an object")
    return header


def _bookkeeping(header: dict[str, Any]) -> tuple[Entry, Entry, list[str]]:
    return (
        _entry_from_json(header["last"]),
        _entry_from_json(header["prev"]),
        list(header["cluster"]),
    )


def journal_keep_from(log: Sequence[Entry], last: Entry) -> int | None:
    """Plan how a journal continues a snapshot whose last entry is ``last`` (Raft §7).

    Returns the list position from which to keep ``log`` (the entry before the snapshot's last
    one when the journal holds it, so the journal starts at the snapshot's (prev, last) as
    after a compaction), or None when the journal does not hold ``last`` with its term and is
    to be replaced by the snapshot's two entries: it ends before the snapshot, starts after it,
    or holds a different (uncommitted, overwritten) entry at that index.
    """
    if not log:
        return None
    pos = last[1] - log[0][1]
    if pos < 0 or pos >= len(log) or log[pos][2] != last[2]:
        return None
    assert log[pos][1] == last[1], (log[pos][1], last[1])
    return max(pos - 1, 0)


# Snapshot transfer (snapshots.py, "Paced transfer"): the leader keeps at most this many
# bytes sent and not yet reported written by the follower, and reads this many chunks ahead.
SNAPSHOT_WINDOW_BYTES = 2 << 20
READ_AHEAD_CHUNKS = 3

_io_threads: dict[str, concurrent.futures.ThreadPoolExecutor] = {}


def _io_thread(name: str) -> concurrent.futures.ThreadPoolExecutor:
    """The process's one thread called ``name``: the leaders' chunk reads or the followers'
    chunk writes run there in submission order (a file is closed after its pending reads, a
    new transfer's file opened after the abandoned one's writes)."""
    with _pool_lock:
        pool = _io_threads.get(name)
        if pool is None:
            pool = _io_threads[name] = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=name
            )
        return pool


def _read_chunk(fd: int, offset: int, size: int) -> bytes:
    """One chunk of a snapshot being sent (the reader thread; a test may slow it)."""
    return os.pread(fd, size, offset)


def _write_chunk(f: IO[bytes], data: bytes) -> None:
    """One chunk of a snapshot being received (the writer thread; a test may slow it)."""
    f.write(data)


Chunk = tuple[bytes, bool, bool, int, int]  # data, is_first, is_last, offset, transfer id


@dataclass
class _Outgoing:
    fd: int
    size: int
    last_index: int
    xfer: int
    threaded: bool  # reads on the reader thread (not inside written_inline)
    inode: tuple[int, int] = (0, 0)  # (device, inode): remove_paced waits while it is sent
    sent: int = 0  # bytes handed to the transport
    acked: int = 0  # bytes the follower reported written
    next_read: int = 0
    ahead: collections.deque[tuple[int, int, concurrent.futures.Future[bytes]]] = field(
        default_factory=collections.deque
    )  # (offset, size, read) in file order


class SnapshotSender:
    """Leader side of snapshot transfer: one open snapshot file per follower being sent to.

    The chunks are read ahead on the reader thread (``READ_AHEAD_CHUNKS``, so memory stays
    bounded); :meth:`chunks` only hands out those already read, while the follower has fewer
    than ``window_bytes`` unacknowledged (:meth:`acked`) and the link has room
    (``room_bytes``, the transport's per-round budget). Inside :func:`written_inline` the
    reads are done at once on the calling thread.
    """

    def __init__(
        self, path: str, chunk_bytes: int, window_bytes: int = SNAPSHOT_WINDOW_BYTES
    ) -> None:
        self.path = path
        self.chunk_bytes = chunk_bytes
        self.window_bytes = window_bytes
        self._out: dict[Any, _Outgoing] = {}
        self._xfers = 0

    def active(self, node: Any) -> bool:
        return node in self._out

    def chunks(
        self, node: Any, room_bytes: int, term: int = 0
    ) -> tuple[list[Chunk], int | None] | None:
        """The chunks to send ``node`` now, and the snapshot's last index once its final chunk
        is among them; None when there is no snapshot file to send (or it failed to read).
        ``term``: the leader's, part of a new transfer's id (another leader's never match)."""
        out = self._out.get(node) or self._open(node, term)
        if out is None:
            return None
        self._prepare(out)
        result: list[Chunk] = []
        while out.ahead and room_bytes > 0 and out.sent - out.acked < self.window_bytes:
            offset, size, read = out.ahead[0]
            if not read.done():
                break
            out.ahead.popleft()
            try:
                data = read.result()
                if len(data) != size:
                    raise OSError(f"short read at {offset}: {len(data)} of {size} bytes")
            except OSError:
                logger.exception("cannot send snapshot %s", self.path)
                self.cancel(node)
                return None
            out.sent = offset + size
            room_bytes -= size
            is_last = out.sent >= out.size
            result.append((data, offset == 0, is_last, offset, out.xfer))
            if is_last:
                self.cancel(node)
                return result, out.last_index
        self._prepare(out)
        return result, None

    def _open(self, node: Any, term: int) -> _Outgoing | None:
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - its descriptor is kept, closed in cancel
        except OSError:
            return None
        with f:
            try:
                last, _prev, _cluster = _read_header(f, self.path)
            except ValueError:
                logger.exception("cannot send snapshot %s", self.path)
                return None
            fd = os.dup(f.fileno())
        self._xfers += 1
        xfer = (term << 32) | (self._xfers & 0xFFFFFFFF)
        st = os.fstat(fd)
        out = _Outgoing(fd, st.st_size, last[1], xfer, threaded=not _inline)
        out.inode = (st.st_dev, st.st_ino)
        with _pool_lock:
            _sending[out.inode] += 1
        self._out[node] = out
        return out

    def _prepare(self, out: _Outgoing) -> None:
        while len(out.ahead) < READ_AHEAD_CHUNKS and out.next_read < out.size:
            size = min(self.chunk_bytes, out.size - out.next_read)
            if out.threaded:
                read = _io_thread("raft-snapshot-read").submit(
                    _read_chunk, out.fd, out.next_read, size
                )
            else:
                read = concurrent.futures.Future()
                try:
                    read.set_result(_read_chunk(out.fd, out.next_read, size))
                except OSError as exc:
                    read.set_exception(exc)
            out.ahead.append((out.next_read, size, read))
            out.next_read += size

    def acked(self, node: Any, progress: Any) -> bool:
        """The follower reported ``progress`` = (transfer id, bytes written); True when it
        opened the window of the transfer in flight."""
        out = self._out.get(node)
        try:
            xfer, written = (int(v) for v in progress)
        except (TypeError, ValueError):
            return False
        if out is None or xfer != out.xfer or min(written, out.sent) <= out.acked:
            return False
        out.acked = min(written, out.sent)
        return True

    def cancel(self, node: Any) -> None:
        out = self._out.pop(node, None)
        if out is None:
            return
        with _pool_lock:
            _sending[out.inode] -= 1
            if not _sending[out.inode]:
                del _sending[out.inode]
        if out.threaded:  # after the reads queued before it
            _io_thread("raft-snapshot-read").submit(os.close, out.fd)
        else:
            os.close(out.fd)

    def cancel_all(self) -> None:
        for node in list(self._out):
            self.cancel(node)


def _crosses_sync(before: int, after: int) -> bool:
    return before // _SYNC_EVERY_BYTES != after // _SYNC_EVERY_BYTES


class _Incoming:
    """One transfer being written: the driver counts what it accepted (``received``), the
    writer what is on disk (``written``, ``finished`` once the final chunk is written and the
    file closed, or ``error``)."""

    def __init__(self, receiver: SnapshotReceiver, xfer: Any, threaded: bool) -> None:
        self.rx = receiver
        self.xfer = xfer
        self.threaded = threaded
        self.received = 0
        self.written = 0
        self.finished = False
        self.error: BaseException | None = None
        self.cancelled = False
        self._file: IO[bytes] | None = None

    def run(self, fn: Callable[..., None], *args: Any) -> None:
        if not self.threaded:
            fn(*args)
            return
        _io_thread("raft-snapshot-write").submit(fn, *args)

    def open(self) -> None:
        if self.cancelled:
            return
        try:
            self._file = open(self.rx.tmp_path, "wb")  # noqa: SIM115 - spans chunks
        except OSError as exc:
            self.error = exc
        self._notify()

    def write(self, data: bytes, is_last: bool) -> None:
        f = self._file
        if self.cancelled or f is None:
            return
        rx = self.rx
        try:
            _write_chunk(f, data)
            before, after = self.written, self.written + len(data)
            if is_last:
                self._file = None
                with f:
                    f.flush()
                    if rx.fsync and not rx.install_syncs:
                        os.fsync(f.fileno())
            elif rx.fsync and rx.install_syncs and _crosses_sync(before, after):
                if self.threaded:  # already off the tick thread: bound the dirty pages
                    f.flush()
                    os.fdatasync(f.fileno())
                else:
                    _sync_behind(f)
            self.written = after
            self.finished = is_last
        except OSError as exc:
            self.error = exc
            self.close()
        self._notify()

    def close(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            f.close()

    def _notify(self) -> None:
        if self.threaded and self.rx.on_written is not None:
            self.rx.on_written()


class SnapshotReceiver:
    """Follower side of snapshot transfer: chunks must arrive in order, without gaps.

    The file is assembled at ``<path>.rx``. :meth:`add` accepts a chunk; with ``background``
    (outside :func:`written_inline`) the writes, the final flush and an fdatasync every
    ``_SYNC_EVERY_BYTES`` run in order on the process's writer thread, which calls
    ``on_written`` after each (the driver's wake-up); otherwise at once. :meth:`progress`
    is what to acknowledge, :meth:`finished` tells when the final chunk is on disk (fsync'd
    there unless ``install_syncs``: :class:`SnapshotInstall` then fsyncs it on its worker);
    :meth:`install` moves it to ``path`` (rename → directory fsync). A chunk whose offset is
    not where the transfer stands (a lost or reordered message) aborts the transfer: the
    caller asks the leader to start over.
    """

    def __init__(
        self,
        path: str,
        *,
        fsync: bool,
        install_syncs: bool = False,
        background: bool = False,
        on_written: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.tmp_path = path + ".rx"
        self.fsync = fsync
        self.install_syncs = install_syncs
        self.background = background
        self.on_written = on_written
        self._in: _Incoming | None = None

    @property
    def receiving(self) -> bool:
        return self._in is not None

    def add(
        self, data: bytes, is_first: bool, is_last: bool, offset: int | None, xfer: Any = None
    ) -> None:
        """Raises ``ValueError`` when the chunk does not continue the transfer (aborted)."""
        if is_first:
            self.abort()
            self._in = _Incoming(self, xfer, self.background and not _inline)
            self._in.run(self._in.open)
        incoming = self._in
        if incoming is None or offset != incoming.received:
            where = incoming.received if incoming is not None else None
            self.abort()
            raise ValueError(f"snapshot chunk at offset {offset}, expected {where}")
        incoming.received += len(data)
        incoming.run(incoming.write, data, is_last)

    def progress(self) -> tuple[Any, int] | None:
        """(transfer id, bytes written) of the transfer in flight, or None."""
        incoming = self._in
        return None if incoming is None else (incoming.xfer, incoming.written)

    def finished(self) -> bool:
        """Whether the final chunk of the transfer is written (the transfer then ends here).
        Raises ``OSError`` when writing failed (the transfer is aborted)."""
        incoming = self._in
        if incoming is None:
            return False
        if incoming.error is not None:
            self.abort()
            raise incoming.error
        if not incoming.finished:
            return False
        self._in = None
        return True

    def header(self) -> tuple[Entry, Entry, list[str]]:
        """The bookkeeping of the completely received (not yet installed) snapshot."""
        return read_snapshot_header(self.tmp_path)

    def install(self) -> None:
        """Move the received snapshot over ``path`` durably (the one it replaces is freed in
        steps: :func:`replace_retiring`)."""
        replace_retiring(self.tmp_path, self.path)
        if self.fsync:
            fsync_dir(Path(self.path).parent)

    def discard(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp_path)

    def abort(self) -> None:
        incoming, self._in = self._in, None
        if incoming is not None:
            incoming.cancelled = True  # its queued writes do nothing; then its file closes
            incoming.run(incoming.close)


_syncer: concurrent.futures.ThreadPoolExecutor | None = None


def _sync_behind(f: IO[bytes]) -> None:
    """fdatasync ``f`` on the process's sync thread (a duplicate descriptor: the file may be
    closed meanwhile); the caller does not wait. A failure only leaves the pages to the
    kernel: the file is fsync'd before it is used (SnapshotInstall)."""
    global _syncer
    f.flush()
    fd = os.dup(f.fileno())
    with _pool_lock:
        if _syncer is None:
            _syncer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="raft-sync")
        syncer = _syncer

    def sync() -> None:
        try:
            os.fdatasync(fd)
        except OSError:
            logger.warning("fdatasync behind a received snapshot failed", exc_info=True)
        finally:
            os.close(fd)

    syncer.submit(sync)


class SnapshotInstall:
    """A snapshot received from the leader, restored off the tick thread (snapshots.py,
    "Installing").

    ``restore(cancelled)`` runs on the snapshot workers (at once on the calling thread inside
    :func:`written_inline`, so a simulation stays a function of its seed) and returns what the
    tick thread needs to adopt the snapshot; ``on_done()`` is called from the worker when it
    finished (the driver's wake-up). The tick thread polls :meth:`done`, then takes
    :meth:`result` (the worker's exception re-raised). :meth:`cancel` sets the flag
    ``restore`` checks before it begins.
    """

    def __init__(
        self,
        restore: Callable[[threading.Event], Any],
        on_done: Callable[[], None] | None = None,
    ) -> None:
        self.cancelled = threading.Event()
        if _inline:
            self._future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            try:
                self._future.set_result(restore(self.cancelled))
            except Exception as exc:
                self._future.set_exception(exc)
            return
        self._future = _workers().submit(restore, self.cancelled)
        if on_done is not None:
            self._future.add_done_callback(lambda _future: on_done())

    def done(self) -> bool:
        return self._future.done()

    def cancel(self) -> None:
        self.cancelled.set()

    def result(self) -> Any:
        """Once :meth:`done`: what ``restore`` returned; raises what it raised."""
        return self._future.result()
