"""What a broker serves to ``raftq backup`` (the tool is broker/backup.py).

- **BackupMetadata** runs on the metadata leader (forwarded there like other leader-only calls):
  its table, which holds every change it acknowledged, serialized whole.
- **BackupPartition** runs on the partition's leader only (elsewhere NOT_LEADER with the
  leader's hint: a stream is not forwarded). The leader first commits a ``Retain`` through the
  partition's Raft group, so its applied state holds every entry committed before the call (a new
  leader may not have applied its predecessor's last entries yet), then pins that state
  (``SqliteStore.pin_backup``: a WAL read transaction, applies go on) and copies it with SQLite's
  backup API into ``<data_dir>/backup-tmp`` (the copy needs as much free disk as the partition),
  cut into chunks. The first message describes the copy (applied index, size, chunk count);
  then each chunk whose SHA-256 differs from the caller's ``have`` at the same position goes out:
  an incremental backup names its previous copy's hashes and gets only what changed. The copy is
  removed when the stream ends, however it ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from raftq.metadata.table import Table
from raftq.proto import api_pb2, errors, partition_pb2
from raftq.proto.limits import BACKUP_CHUNK_BYTES_DEFAULT
from raftq.replica import PartitionReplica
from raftq.transport.request_checks import CheckedBackupPartition

BARRIER_TIMEOUT_S = 10.0
_copies = itertools.count(1)


def metadata(table: Table) -> api_pb2.BackupMetadataResponse:
    """The metadata leader's table, whole (runs there)."""
    return api_pb2.BackupMetadataResponse(
        table=table.to_proto().SerializeToString(deterministic=True),
        applied_index=table.applied_index,
        cluster_id=table.cluster_id,
    )


def check_request(request: CheckedBackupPartition, table: Table) -> int:
    """The chunk size asked for (its shape was checked at the edge: check_backup_partition).
    Raises (normal): UnknownTopic, UnknownPartition."""
    chunk_bytes = request.chunk_bytes or BACKUP_CHUNK_BYTES_DEFAULT
    topic = table.topic(request.topic)
    if topic is None or (request.topic_id and request.topic_id != topic.topic_id):
        raise errors.UnknownTopic(f"topic {request.topic!r} does not exist")
    if not 0 <= request.partition < topic.partition_count:
        raise errors.UnknownPartition(
            f"topic {request.topic!r} has no partition {request.partition}"
        )
    return chunk_bytes


def partition_chunks(
    request: CheckedBackupPartition,
    table: Table,
    replica: PartitionReplica | None,
    leader_hint: Callable[[], str],
    tmp_dir: Path,
    cancelled: threading.Event,
) -> Iterator[api_pb2.BackupChunk]:
    """The BackupPartition stream (see the module docstring). Errors raised before the first
    message (normal): UnknownTopic, UnknownPartition, NotLeader (with the
    leader's client address), Unavailable / Timeout (the barrier did not commit: retry)."""
    chunk_bytes = check_request(request, table)
    if replica is None or not replica.is_leader():
        raise errors.NotLeader(
            f"this broker does not lead {request.topic}/{request.partition}",
            leader_hint=leader_hint(),
        )
    barrier = replica.propose(
        partition_pb2.PartitionCommand(retain=partition_pb2.Retain()), BARRIER_TIMEOUT_S
    )
    if barrier.error:
        raise errors.error_for(barrier.error, barrier.message)
    write = replica.pin_backup()
    tmp_dir.mkdir(parents=True, exist_ok=True)
    path = tmp_dir / f"{replica.name}.{os.getpid()}.{next(_copies)}.backup"
    try:
        write(str(path), cancelled)
        yield from _chunks(path, chunk_bytes, list(request.have))
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _chunks(path: Path, chunk_bytes: int, have: list[bytes]) -> Iterator[api_pb2.BackupChunk]:
    applied_index, next_offset = PartitionReplica.copy_position(str(path))
    size = path.stat().st_size
    yield api_pb2.BackupChunk(
        applied_index=applied_index,
        size_bytes=size,
        chunks=-(-size // chunk_bytes),
        next_offset=next_offset,
    )
    with path.open("rb") as f:
        for index in itertools.count():
            data = f.read(chunk_bytes)
            if not data:
                return
            digest = hashlib.sha256(data).digest()
            if index < len(have) and have[index] == digest:
                continue
            yield api_pb2.BackupChunk(index=index, sha256=digest, data=data)
