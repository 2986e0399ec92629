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
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transport.raft.journal import fsync_dir

logger = logging.getLogger(__name__)

MAGIC = b"RAFTQS1\n"
_LEN = struct.Struct("<I")
_COPY_BYTES = 1 << 20

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
) -> None:
    """Write a snapshot file at ``tmp_path``; exceptions make pysyncobj keep its log."""
    last_entry, prev_entry, cluster = data
    user_path = tmp_path + ".state"
    snapshot(user_path)
    header = json.dumps(
        {
            "last": _entry_to_json(last_entry),
            "prev": _entry_to_json(prev_entry),
            "cluster": sorted(str(getattr(node, "id", node)) for node in cluster),
        },
        sort_keys=True,
    ).encode()
    with open(tmp_path, "wb") as out, open(user_path, "rb") as state:
        out.write(MAGIC + _LEN.pack(len(header)) + header)
        shutil.copyfileobj(state, out, _COPY_BYTES)
        out.flush()
        if fsync:
            os.fsync(out.fileno())
    os.unlink(user_path)


def read_snapshot(
    path: str,
    restore: Callable[[str], None],
    *,
    fsync: bool,
) -> tuple[Entry, Entry, list[str]]:
    """Hand the user's part of the snapshot at ``path`` to ``restore``; return the bookkeeping.

    The file may have just been received from the leader without fsync (pysyncobj's
    ``setTransmissionData``): it is made durable here, before the journal is cleared.
    """
    if fsync:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(Path(path).parent)
    user_path = path + ".restore"
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{path} is not a raftq snapshot")
        (length,) = _LEN.unpack(f.read(_LEN.size))
        header = json.loads(f.read(length))
        with open(user_path, "wb") as out:
            shutil.copyfileobj(f, out, _COPY_BYTES)
    try:
        restore(user_path)
    finally:
        os.unlink(user_path)
    return (
        _entry_from_json(header["last"]),
        _entry_from_json(header["prev"]),
        list(header["cluster"]),
    )
