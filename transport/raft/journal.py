"""Durable Raft journal for pysyncobj: explicit fsync, group commit, checksummed records.

pysyncobj's ``FileJournal`` writes into an mmap that is never flushed and stores ``.meta``
without fsync (PYSYNCOBJ.md defect 1). :class:`DurableJournal` replaces it behind the same
``pysyncobj.journal.Journal`` interface:

* ``add`` / ``deleteEntriesFrom`` / ``clear`` change the file with plain ``pwrite``/``pwritev`` and
  ``ftruncate`` and mark the journal dirty; nothing is durable until :meth:`sync`, which
  fsyncs once for everything appended since the last call (group commit) and advances
  :attr:`durable_index`. The node calls ``sync`` before an append acknowledgement leaves and
  counts the leader toward commit only up to ``durable_index``.
* ``setCurrentTerm`` (term and vote) is written to ``<journal>.meta`` synchronously, before
  any vote or message reflecting it: the file holds two 512-byte slots (each ``META_MAGIC``,
  a sequence number, the JSON and a crc32), and a write overwrites the slot *not* holding the
  newest in place, then fdatasyncs (one flush; the file's size never changes). A torn write
  fails its crc, and loading takes the valid slot of the highest sequence: the value before
  the write that was never acted on. A file of the earlier format (plain JSON, written
  through tmp, fsync, rename and directory fsync, two flushes and a rename per vote) is read,
  and replaced durably by the two-slot file at its next write.
* The commit index is a hint (Raft keeps it volatile); it is stored with the next ``sync``
  after the one-second timer, after the journal fsync, and is clamped to the journal end on
  load so it never points past what is on disk.
* Creating a file fsyncs its directory. Compaction (``deleteEntriesTo``) first fsyncs the
  directory (making the snapshot rename durable), then rewrites the journal to a tmp file,
  fsyncs it, renames it over the old one and fsyncs the directory again.

File format: ``MAGIC`` then records ``<I payload_len><I crc32(payload)><Q idx><Q term>command``
where payload = idx, term and command. Loading stops at the first short or corrupt record
(a torn write of an entry that was never acknowledged) and truncates the file there.

Every method runs on the node's tick thread; none is thread-safe.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pysyncobj.journal import Journal

logger = logging.getLogger(__name__)

MAGIC = b"RAFTQJ1\n"
_RECORD = struct.Struct("<IIQQ")  # payload length, crc32 of payload, idx, term
_IDX_TERM = struct.Struct("<QQ")
META_MAGIC = b"RAFTQM2\n"
META_SLOT_BYTES = 512  # one sector each: a slot is written whole or fails its crc
_SLOT = struct.Struct("<8sQII")  # META_MAGIC, sequence, JSON length, crc32(sequence + JSON)

Entry = tuple[bytes, int, int]  # (command, idx, term), pysyncobj's entry shape


def fsync_dir(path: Path) -> None:
    """fsync a directory so that creations and renames inside it survive power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_durably(path: Path, data: bytes, *, fsync: bool) -> None:
    """Replace ``path`` atomically with ``data``; with ``fsync`` the result survives power loss."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)


class DurableJournal(Journal):
    """A pysyncobj ``Journal`` whose writes become durable at :meth:`sync`.

    ``fsync=False`` keeps the bookkeeping (``durable_index`` follows the log end at every
    ``sync``) but never calls fsync: for tests and throwaway clusters only.
    """

    def __init__(self, path: str | Path, *, fsync: bool = True, group: str = "") -> None:
        self.path = Path(path)
        self.meta_path = self.path.with_name(self.path.name + ".meta")
        self.fsync_enabled = fsync
        self.group = group
        self.fsync_count = 0
        self.bytes_written = 0
        self._entries: list[Entry] = []
        self._offsets: list[int] = []  # file offset of each entry's record
        self._end = len(MAGIC)
        self._dirty = False
        self._durable_index = 0
        self._meta: dict[str, Any] = self._load_meta()
        self._meta_dirty = False
        self._meta_due = False
        self._fd = self._open()
        self._durable_index = self._entries[-1][1] if self._entries else 0

    # ---------------------------------------------------------------- loading
    def _open(self) -> int:
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if created or os.fstat(fd).st_size == 0:
            os.pwrite(fd, MAGIC, 0)
            os.ftruncate(fd, len(MAGIC))
            if self.fsync_enabled:
                os.fsync(fd)
                fsync_dir(self.path.parent)
            return fd
        with open(self.path, "rb") as f:
            data = f.read()
        if data[: len(MAGIC)] != MAGIC:
            os.close(fd)
            raise ValueError(f"[group={self.group}] {self.path} is not a raftq journal")
        self._parse(data, fd)
        return fd

    def _parse(self, data: bytes, fd: int) -> None:
        pos = len(MAGIC)
        while pos + _RECORD.size <= len(data):
            length, crc, idx, term = _RECORD.unpack_from(data, pos)
            payload_end = pos + 8 + length
            if length < _IDX_TERM.size or payload_end > len(data):
                break
            if zlib.crc32(data[pos + 8 : payload_end]) != crc:
                break
            if self._entries and idx != self._entries[-1][1] + 1:
                break
            self._entries.append((bytes(data[pos + _RECORD.size : payload_end]), idx, term))
            self._offsets.append(pos)
            pos = payload_end
        self._end = pos
        if pos != len(data):
            logger.warning(
                "[group=%s] journal %s: dropping %d bytes of torn tail after index %s",
                self.group,
                self.path,
                len(data) - pos,
                self._entries[-1][1] if self._entries else None,
            )
            os.ftruncate(fd, pos)
            if self.fsync_enabled:
                os.fsync(fd)

    def _load_meta(self) -> dict[str, Any]:
        """Term, vote and commit hint from ``<journal>.meta`` (either format; see the module
        docstring). Raises ``ValueError`` when neither slot of a two-slot file is whole."""
        self._meta_seq = 0
        self._meta_slots = False  # the file is in the two-slot format (written in place)
        try:
            raw = self.meta_path.read_bytes()
        except FileNotFoundError:
            return {}
        if raw[:1] == b"{":  # the earlier format: rewritten as slots at the next write
            meta: dict[str, Any] = json.loads(raw)
            return meta
        found = read_meta(raw)
        if found is None:
            raise ValueError(f"[group={self.group}] {self.meta_path}: no whole slot")
        self._meta_seq, meta = found
        self._meta_slots = True
        return meta

    # ------------------------------------------------------------ durability
    @property
    def durable_index(self) -> int:
        """Highest log index known to be on disk (0 when nothing is)."""
        return self._durable_index

    @property
    def dirty(self) -> bool:
        return self._dirty or (self._meta_dirty and self._meta_due)

    def sync(self) -> bool:
        """Make every change so far durable; returns True when it had something to do.

        One fsync covers all appends since the previous call (group commit). The commit
        index is stored afterwards, at most once a second, so it never exceeds the durable log.
        """
        did = False
        if self._dirty:
            if self.fsync_enabled:
                os.fsync(self._fd)
                self.fsync_count += 1
            self._dirty = False
            did = True
        self._durable_index = self._entries[-1][1] if self._entries else 0
        if self._meta_dirty and self._meta_due:
            self._store_meta()
            did = True
        return did

    def _store_meta(self) -> None:
        """Write the meta durably: over the older slot and fdatasync; the first time (no file,
        or the earlier format) a whole two-slot file through tmp and rename."""
        self._meta_seq += 1
        slot = _meta_slot(self._meta_seq, json.dumps(self._meta, sort_keys=True).encode())
        if not self._meta_slots:
            previous = _meta_slot(self._meta_seq - 1, b"{}")  # never newer than ``slot``
            pair = (previous, slot) if self._meta_seq % 2 else (slot, previous)
            write_file_durably(self.meta_path, b"".join(pair), fsync=self.fsync_enabled)
            self._meta_slots = True
            if self.fsync_enabled:
                self.fsync_count += 2
        else:  # opened per write: no descriptor per group kept
            fd = os.open(self.meta_path, os.O_WRONLY)
            try:
                os.pwrite(fd, slot, (self._meta_seq % 2) * META_SLOT_BYTES)
                if self.fsync_enabled:
                    os.fdatasync(fd)
                    self.fsync_count += 1
            finally:
                os.close(fd)
        self._meta_dirty = False
        self._meta_due = False

    # ------------------------------------------------------- Journal interface
    def add(self, command: bytes, idx: int, term: int) -> None:
        if self._entries:
            assert idx == self._entries[-1][1] + 1, (idx, self._entries[-1][1])
        command = bytes(command)
        # The record is header + idx/term + command, written from its parts: no copy of the
        # command to join them (the crc runs on over the parts as over the joined payload).
        idx_term = _IDX_TERM.pack(idx, term)
        crc = zlib.crc32(command, zlib.crc32(idx_term))
        header = struct.pack("<II", len(idx_term) + len(command), crc)
        size = len(header) + len(idx_term) + len(command)
        if os.pwritev(self._fd, (header, idx_term, command), self._end) != size:
            raise OSError(f"[group={self.group}] short journal write at {self._end}")
        self._entries.append((command, idx, term))
        self._offsets.append(self._end)
        self._end += size
        self.bytes_written += size
        self._dirty = True

    def clear(self) -> None:
        self._entries = []
        self._offsets = []
        self._end = len(MAGIC)
        os.ftruncate(self._fd, self._end)
        self._durable_index = 0
        self._dirty = True

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        """Drop entries at list positions >= ``entryFrom`` (the caller checks commit)."""
        if entryFrom >= len(self._entries):
            return
        self._end = self._offsets[entryFrom]
        del self._entries[entryFrom:]
        del self._offsets[entryFrom:]
        os.ftruncate(self._fd, self._end)
        last = self._entries[-1][1] if self._entries else 0
        self._durable_index = min(self._durable_index, last)
        self._dirty = True

    def deleteEntriesTo(self, entryTo: int) -> None:
        """Compaction: keep entries at list positions >= ``entryTo``, rewrite the file durably."""
        keep = self._entries[entryTo:]
        if self.fsync_enabled:
            fsync_dir(self.path.parent)  # the snapshot's rename, before entries go away
        tmp = self.path.with_name(self.path.name + ".compact")
        chunks = [MAGIC]
        offsets = []
        end = len(MAGIC)
        for command, idx, term in keep:
            payload = _IDX_TERM.pack(idx, term) + command
            record = struct.pack("<II", len(payload), zlib.crc32(payload)) + payload
            offsets.append(end)
            end += len(record)
            chunks.append(record)
        write_file_durably(tmp, b"".join(chunks), fsync=self.fsync_enabled)
        os.replace(tmp, self.path)
        if self.fsync_enabled:
            fsync_dir(self.path.parent)
            self.fsync_count += 3
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR)
        self._entries = list(keep)
        self._offsets = offsets
        self._end = end
        self._dirty = False
        self._durable_index = keep[-1][1] if keep else 0

    def __getitem__(self, item: int | slice) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        if self._fd < 0:
            return
        self._meta_due = True
        self.sync()
        os.close(self._fd)
        self._fd = -1

    def flush(self) -> None:
        self.sync()

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        if self._meta.get("commit_index") != raftCommitIndex:
            self._meta["commit_index"] = raftCommitIndex
            self._meta_dirty = True

    def getRaftCommitIndex(self) -> int:
        last = self._entries[-1][1] if self._entries else 1
        return int(min(self._meta.get("commit_index", 1), last))

    def setCurrentTerm(self, term: int, votedForNodeId: str | None) -> None:
        """Store term and vote durably now: Raft needs them on disk before any reply."""
        self._meta["term"] = term
        self._meta["voted_for"] = votedForNodeId
        started = time.monotonic()
        self._store_meta()
        logger.debug(
            "[group=%s] term=%d voted_for=%s stored in %.1f ms",
            self.group,
            term,
            votedForNodeId,
            (time.monotonic() - started) * 1000,
        )

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("term", 0))

    def getVotedForNodeId(self) -> str | None:
        voted = self._meta.get("voted_for")
        return None if voted is None else str(voted)

    def onOneSecondTimer(self) -> None:
        self._meta_due = True

    # ----------------------------------------------------------- inspection
    def entries(self) -> Sequence[Entry]:
        return list(self._entries)


def _meta_slot(sequence: int, payload: bytes) -> bytes:
    body = struct.pack("<Q", sequence) + payload
    head = _SLOT.pack(META_MAGIC, sequence, len(payload), zlib.crc32(body))
    assert len(head) + len(payload) <= META_SLOT_BYTES, "journal meta too large for a slot"
    return (head + payload).ljust(META_SLOT_BYTES, b"\0")


def read_meta(data: bytes) -> tuple[int, dict[str, Any]] | None:
    """(sequence, meta) of the newest whole slot in the bytes of a two-slot meta file, or
    None when neither slot is whole."""
    best: tuple[int, dict[str, Any]] | None = None
    for at in (0, META_SLOT_BYTES):
        raw = data[at : at + META_SLOT_BYTES]
        if len(raw) < _SLOT.size:
            continue
        magic, sequence, length, crc = _SLOT.unpack_from(raw)
        payload = raw[_SLOT.size : _SLOT.size + length]
        if magic != META_MAGIC or len(payload) != length:
            continue
        if zlib.crc32(struct.pack("<Q", sequence) + payload) != crc:
            continue
        if best is None or sequence > best[0]:
            best = (sequence, json.loads(payload))
    return best


def parse_journal(data: bytes) -> list[Entry]:
    """The valid entries in the bytes of a journal file (stops at a torn or corrupt record)."""
    if not data:
        return []
    assert data[: len(MAGIC)] == MAGIC, "not a raftq journal"
    out: list[Entry] = []
    pos = len(MAGIC)
    while pos + _RECORD.size <= len(data):
        length, crc, _idx, _term = _RECORD.unpack_from(data, pos)
        end = pos + 8 + length
        if end > len(data) or zlib.crc32(data[pos + 8 : end]) != crc:
            break
        out.append((bytes(data[pos + _RECORD.size : end]), _idx, _term))
        pos = end
    return out


def read_journal(path: str | Path) -> list[Entry]:
    """The entries a journal file holds as it is on disk (for tests and tooling)."""
    return parse_journal(Path(path).read_bytes())
