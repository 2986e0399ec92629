"""``raftq backup`` (online, full or incremental) and ``raftq restore`` (offline, a new cluster).

A backup directory holds one cluster's backups::

    DIR/raftq-backup.json        {"format": 1, "cluster_id": ..., "backups": ["0001", ...]}
    DIR/chunks/ab/ab12...        content-addressed chunks (SHA-256 of the bytes), shared
    DIR/0001/manifest.json       one backup: its metadata table and every partition's chunks
    DIR/0001/metadata.bin        the metadata table (a ClusterSnapshot)

**Backup.** The metadata leader's table first (``Admin.BackupMetadata``), then every partition
of its topics from the partition's leader (``Admin.BackupPartition``, broker/backup_source.py):
an SQLite copy of the leader's replica at one committed point, which holds everything acked
before the call (records, every group's delivery state and offsets, dead letters not yet
forwarded, producer dedup state). Incremental backups are SQLite page-level diffs: a copy is
cut into fixed chunks (64 KiB, sixteen 4 KiB pages); the leader gets the previous backup's
chunk hashes and sends only the chunks that changed, and only chunks not already stored are
written. Each backup's manifest lists every chunk, so each one restores on its own; removing an
old backup's directory leaves the chunks it shares (nothing here prunes them). The manifest is
written last (tmp, fsync, rename): an interrupted backup leaves chunks and no manifest.

**Restore** is offline and builds a *new* cluster with the backup's broker ids (the raft
addresses may differ: ``--broker ID=RAFT_ADDR`` for every broker the backup's placement names).
Run it once per broker, into that broker's empty data directory, before the broker first starts.
Each partition replica the backup placed on the broker is seeded as a Raft snapshot of its group
at the copy's applied index (``raftq.transport.raft.node.seed_snapshot``), so the group
continues its log after it and a replica added later gets the snapshot from its leader. The
table goes to ``<data_dir>/restore/``; once the brokers run, the metadata leader proposes it
(RestoreTable: topics with their ids, configs and placement; groups without members; Spark
watermarks) into the fresh cluster, and every broker drops the marker when its table holds it.
The restored cluster is a new cluster (a new cluster id): back it up into a new directory. ACLs
and tokens are not in the cluster (``security.auth_file`` on each broker): copy that file
yourself.

Errors (``errors.BadBackup``): a missing directory or backup, a manifest or chunk that does not
verify, another cluster's directory, a data directory that is not empty, a broker id or address
the backup needs and was not given.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raftq.client import Admin
from raftq.partitions.sqlite_store import copy_position
from raftq.proto import errors, metadata_pb2
from raftq.replica import group_name
from raftq.transport.raft.node import seed_snapshot

FORMAT = 1
ROOT_FILE = "raftq-backup.json"
CHUNK_BYTES = 64 * 1024
MISSING = b"\0" * 32  # a `have` entry whose chunk is not stored: the leader sends it again
RESTORE_DIR = "restore"  # broker/backend.py proposes what a restore leaves here


@dataclass(frozen=True)
class BackupSummary:
    backup: str  # its directory name, e.g. "0002"
    base: str  # the backup it is incremental to ("" = full)
    partitions: int
    total_bytes: int  # the partitions' copies
    copied_bytes: int  # chunks received from the leaders
    stored_bytes: int  # chunks new to the directory


@dataclass(frozen=True)
class RestoreSummary:
    backup: str
    broker_id: int
    partitions: int  # replicas seeded on this broker
    topics: int
    groups: int


def _bad(message: str) -> errors.BadBackup:
    return errors.BadBackup(message)


# -- the directory ---------------------------------------------------------------------------


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_root(directory: Path) -> dict[str, Any] | None:
    """The directory's root file, or None for an empty or new directory."""
    path = directory / ROOT_FILE
    if not path.exists():
        return None
    root = _load_json(path)
    if root.get("format") != FORMAT or not isinstance(root.get("backups"), list):
        raise _bad(f"{path}: not a raftq backup directory of format {FORMAT}")
    return root


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError as exc:
        raise _bad(f"{path} is missing") from exc
    except (ValueError, OSError) as exc:
        raise _bad(f"{path} is corrupt: {exc}") from exc
    if not isinstance(data, dict):
        raise _bad(f"{path} is corrupt: not a JSON object")
    return data


def read_manifest(directory: Path, backup: str) -> dict[str, Any]:
    """One backup's manifest, checked for the fields a restore needs."""
    manifest = _load_json(directory / backup / "manifest.json")
    try:
        for part in manifest["partitions"]:
            _ = (part["topic"], part["topic_id"], part["partition"], part["applied_index"])
            if not all(isinstance(c, str) and len(c) == 64 for c in part["chunks"]):
                raise ValueError("a chunk name is not a SHA-256")
        _ = (manifest["cluster_id"], manifest["metadata_sha256"], manifest["chunk_bytes"])
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(f"{directory / backup / 'manifest.json'} is corrupt: {exc!r}") from exc
    return manifest


def _chunk_path(directory: Path, digest_hex: str) -> Path:
    return directory / "chunks" / digest_hex[:2] / digest_hex


def _store_chunk(directory: Path, digest: bytes, data: bytes) -> int:
    if hashlib.sha256(data).digest() != digest:
        raise errors.Unavailable("a backup chunk arrived damaged: take the backup again")
    path = _chunk_path(directory, digest.hex())
    if path.exists():
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, data)
    return len(data)


# -- backup ----------------------------------------------------------------------------------


def take_backup(
    admin: Admin,
    directory: Path,
    *,
    full: bool = False,
    timeout_s: float = 300.0,
    log: Callable[[str], None] = lambda line: None,
) -> BackupSummary:
    """Back the cluster ``admin`` reaches up into ``directory`` (created if missing):
    incremental to the directory's latest backup unless ``full`` or there is none.

    Raises (normal): BadBackup (another cluster's directory, a corrupt root file, a directory
    that is neither empty nor a backup directory),
    Unavailable / Timeout (a leader could not be reached before ``timeout_s``: run it again;
    chunks already stored are kept)."""
    deadline = time.monotonic() + timeout_s
    directory.mkdir(parents=True, exist_ok=True)
    root = read_root(directory)
    if root is None and any(directory.iterdir()):
        raise _bad(f"{directory} is not empty and not a raftq backup directory")
    meta = admin.backup_metadata()
    if not meta.cluster_id:
        raise errors.Unavailable("the cluster has no id yet (nothing applied): try again")
    if root is not None and root["cluster_id"] != meta.cluster_id:
        raise _bad(
            f"{directory} holds backups of cluster {root['cluster_id']}, not of this cluster "
            f"({meta.cluster_id}): use another directory"
        )
    backups: list[str] = list(root["backups"]) if root else []
    base = "" if full or not backups else backups[-1]
    previous = _previous_chunks(directory, base)
    name = f"{len(backups) + 1:04d}"
    table = metadata_pb2.ClusterSnapshot.FromString(meta.table)
    parts, copied, stored, total = [], 0, 0, 0
    for topic in table.topics:
        for partition in range(len(topic.partitions)):
            part, got, new = _backup_partition(
                admin, directory, topic.name, topic.topic_id, partition, previous, deadline
            )
            parts.append(part)
            copied, stored, total = copied + got, stored + new, total + part["size_bytes"]
            log(
                f"{topic.name}/{partition}: index {part['applied_index']}, "
                f"{part['size_bytes']} bytes, {got} copied"
            )
    (directory / name).mkdir(exist_ok=True)
    _write_atomic(directory / name / "metadata.bin", meta.table)
    manifest = {
        "format": FORMAT,
        "backup": name,
        "base": base,
        "cluster_id": meta.cluster_id,
        "taken_ms": int(time.time() * 1000),
        "chunk_bytes": CHUNK_BYTES,
        "metadata_applied_index": meta.applied_index,
        "metadata_sha256": hashlib.sha256(meta.table).hexdigest(),
        "partitions": parts,
    }
    _write_atomic(directory / name / "manifest.json", json.dumps(manifest, indent=1).encode())
    root = {"format": FORMAT, "cluster_id": meta.cluster_id, "backups": [*backups, name]}
    _write_atomic(directory / ROOT_FILE, json.dumps(root, indent=1).encode())
    return BackupSummary(name, base, len(parts), total, copied, stored)


def _previous_chunks(directory: Path, base: str) -> dict[tuple[int, int], list[str]]:
    if not base:
        return {}
    manifest = read_manifest(directory, base)
    if manifest["chunk_bytes"] != CHUNK_BYTES:
        return {}
    return {(p["topic_id"], p["partition"]): p["chunks"] for p in manifest["partitions"]}


def _backup_partition(
    admin: Admin,
    directory: Path,
    topic: str,
    topic_id: int,
    partition: int,
    previous: dict[tuple[int, int], list[str]],
    deadline: float,
) -> tuple[dict[str, Any], int, int]:
    """One partition from its leader, retried (other leader, no leader yet) until
    ``deadline``: (manifest entry, bytes received, bytes newly stored)."""
    before = previous.get((topic_id, partition), [])
    have = [bytes.fromhex(c) if _chunk_path(directory, c).exists() else MISSING for c in before]
    copy = _Copy(topic, topic_id, partition, have)
    address = ""
    while True:
        left = deadline - time.monotonic()
        try:
            if not address:
                described = admin.describe_topic(topic).partitions[partition]
                address = described.leader_addr
                if not address:
                    raise errors.Unavailable(f"{topic}/{partition} has no leader yet")
            return _receive(admin, directory, address, copy, before, left)
        except errors.NotLeader as exc:
            address = exc.leader_hint
            error: errors.RaftqError = exc
        except (errors.Unavailable, errors.Timeout) as exc:
            address, error = "", exc
        if time.monotonic() >= deadline:
            raise error
        time.sleep(0.2)


@dataclass(frozen=True)
class _Copy:
    """One partition's copy asked for: which incarnation, and the chunks already held."""

    topic: str
    topic_id: int
    partition: int
    have: list[bytes]


def _receive(
    admin: Admin,
    directory: Path,
    address: str,
    copy: _Copy,
    before: list[str],
    timeout_s: float,
) -> tuple[dict[str, Any], int, int]:
    stream = admin.backup_partition(
        address,
        copy.topic,
        copy.partition,
        topic_id=copy.topic_id,
        chunk_bytes=CHUNK_BYTES,
        have=copy.have,
        timeout_s=max(timeout_s, 1.0),
    )
    head = next(iter(stream), None)
    if head is None:
        raise errors.Unavailable(f"{address} ended the backup stream before it began")
    chunks = before[: head.chunks] + [""] * max(0, head.chunks - len(before))
    got = stored = 0
    for chunk in stream:
        if not 0 <= chunk.index < head.chunks:
            raise errors.Unavailable(f"{address} sent chunk {chunk.index} of {head.chunks}")
        stored += _store_chunk(directory, chunk.sha256, chunk.data)
        got += len(chunk.data)
        chunks[chunk.index] = chunk.sha256.hex()
    if "" in chunks:  # a chunk beyond the previous copy that was not sent
        raise errors.Unavailable(f"{address} left chunks of the copy out: take the backup again")
    entry = {
        "topic": copy.topic,
        "topic_id": copy.topic_id,
        "partition": copy.partition,
        "applied_index": head.applied_index,
        "next_offset": head.next_offset,
        "size_bytes": head.size_bytes,
        "chunks": chunks,
    }
    return entry, got, stored


# -- restore ---------------------------------------------------------------------------------


def restore(
    directory: Path,
    data_dir: Path,
    broker_id: int,
    raft_addrs: dict[int, str],
    *,
    backup: str = "",
) -> RestoreSummary:
    """Seed ``data_dir`` (empty) as broker ``broker_id`` of a new cluster built from
    ``backup`` (default: the latest) of ``directory``; see the module docstring.

    Raises (normal): BadBackup."""
    root = read_root(directory) if directory.is_dir() else None
    if root is None:
        raise _bad(f"{directory} is not a raftq backup directory (no {ROOT_FILE})")
    name = backup or (root["backups"][-1] if root["backups"] else "")
    if name not in root["backups"]:
        raise _bad(f"{directory} has no backup {name!r}: it has {root['backups']}")
    manifest = read_manifest(directory, name)
    if manifest["cluster_id"] != root["cluster_id"]:
        raise _bad(f"backup {name} is of cluster {manifest['cluster_id']}, not the directory's")
    table_bytes = _verified(directory / name / "metadata.bin", manifest["metadata_sha256"])
    table = metadata_pb2.ClusterSnapshot.FromString(table_bytes)
    if data_dir.exists() and any(data_dir.iterdir()):
        raise _bad(f"{data_dir} is not empty: restore builds a new broker's data directory")
    placement = {
        (t.topic_id, p): list(info.replicas)
        for t in table.topics
        for p, info in enumerate(t.partitions)
    }
    needed = {b for replicas in placement.values() for b in replicas}
    if broker_id not in needed | {b.broker_id for b in table.brokers}:
        raise _bad(f"broker {broker_id} is not a broker of backup {name}: {sorted(needed)}")
    missing = sorted(needed - set(raft_addrs))
    if missing:
        raise _bad(f"give the new raft address of brokers {missing} (--broker ID=HOST:PORT)")
    names = {t.topic_id: t.name for t in table.topics}
    seeded = 0
    for part in manifest["partitions"]:
        key = (part["topic_id"], part["partition"])
        if broker_id not in placement.get(key, []) or part["applied_index"] < 2:
            continue  # not placed here; or never applied anything: the group starts fresh
        group_dir = data_dir / "partitions" / f"{names[key[0]]}-{key[0]}"
        group_dir.mkdir(parents=True, exist_ok=True)
        seed_snapshot(
            group_dir / f"{group_name(*key)}.snapshot",
            part["applied_index"],
            [raft_addrs[b] for b in placement[key]],
            lambda path, p=part: _assemble(directory, p, path),  # type: ignore[misc]
        )
        seeded += 1
    marker = data_dir / RESTORE_DIR
    marker.mkdir(parents=True, exist_ok=True)
    _write_atomic(marker / "table.bin", table_bytes)
    _write_atomic(marker / "backup_id", f"{root['cluster_id']}/{name}".encode())
    return RestoreSummary(name, broker_id, seeded, len(table.topics), len(table.groups))


def _verified(path: Path, sha256_hex: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _bad(f"{path} cannot be read: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != sha256_hex:
        raise _bad(f"{path} is corrupt: its SHA-256 does not match the manifest")
    return data


def _assemble(directory: Path, part: dict[str, Any], path: str) -> None:
    """Write a partition's copy from its chunks, each verified, and check the copy."""
    with open(path, "wb") as out:
        for digest in part["chunks"]:
            out.write(_verified(_chunk_path(directory, digest), digest))
    try:
        applied_index, _next_offset = copy_position(path)
    except Exception as exc:  # apsw's errors: the bytes are not a partition copy
        raise _bad(f"{part['topic']}/{part['partition']}: the copy is not readable: {exc}") from exc
    if applied_index != part["applied_index"]:
        raise _bad(f"{part['topic']}/{part['partition']}: the copy's index is {applied_index}")


def parse_brokers(specs: Iterable[str]) -> dict[int, str]:
    """``ID=HOST:PORT`` (repeated or comma-separated) -> {id: raft address}."""
    out: dict[int, str] = {}
    for spec in specs:
        for item in filter(None, (s.strip() for s in spec.split(","))):
            broker, sep, addr = item.partition("=")
            if not sep or not broker.isdigit() or ":" not in addr:
                raise errors.InvalidArgument(f"--broker {item!r}: expected ID=HOST:PORT")
            out[int(broker)] = addr
    return out
