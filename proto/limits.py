"""The wire contract's sizes, shared by brokers and clients: how big an entry, a message and a
record may be, and how a record's size is counted. Pure; the broker's settings
(raftq.config) and the client (raftq.client) both read them from here."""

from __future__ import annotations

from raftq.proto import common_pb2

# pysyncobj 0.3.17 sends an entry of 64 KiB or more through a broken chunked path
# (../shared/PYSYNCOBJ.md, defect 3). transport/raft/node.py avoids it: appendEntriesBatchSizeBytes
# is set above the largest entry, so an entry always travels whole (one raft message, one mux
# frame: the frame limit grows with the entry limit, ``raft_frame_bytes_max``). This caps entries.
RAFT_ENTRY_BYTES_LIMIT = 32 * 1024 * 1024
# Room in a raft entry for the command around one record (topic, producer id, sequence,
# now_ms, lengths): a record of the largest max_record_bytes must fit one entry.
COMMAND_FRAMING_BYTES = 1024
# Bytes a record (or bare value) adds to a message beyond its own encoding: the tag and the
# length varint of one element of a repeated protobuf field (a message under 2**28 bytes).
RECORD_FRAMING_BYTES = 6
# The most client.fetch_bytes_max may be.
FETCH_BYTES_LIMIT = 64 * 1024 * 1024
# Room in a gRPC message beyond its record bytes: protobuf framing of up to 10,000 records
# (offsets, counts, deadlines, idempotency keys of up to 255 characters) and of the partitions
# and request around them.
MESSAGE_ENVELOPE_BYTES = 4 * 1024 * 1024


def message_bytes_max(max_entry_bytes: int, fetch_bytes_max: int) -> int:
    """The gRPC message-size limit of every hop (client channels, the client port, broker to
    broker): a Send carries at most one raft entry of records; a Poll/Fetch answer at most its
    byte budget plus one record over it (the one that crossed it, Kafka's rule) plus framing."""
    return max_entry_bytes + fetch_bytes_max + MESSAGE_ENVELOPE_BYTES


# What a Python client accepts from any broker, whatever that broker's limits are set to.
CLIENT_MESSAGE_BYTES_MAX = message_bytes_max(RAFT_ENTRY_BYTES_LIMIT, FETCH_BYTES_LIMIT)


def record_size(record: common_pb2.Record) -> int:
    """What counts toward max_record_bytes and retention_bytes: key + value + headers."""
    size = len(record.key) + len(record.value)
    headers = record.headers
    if headers:  # iterating an empty protobuf map costs more than the rest (leader, per record)
        for name, value in headers.items():
            size += len(name.encode()) + len(value)
    return size


# A partition backup's chunks (Admin.BackupPartition): chunk_bytes 0 takes the default, else a
# multiple of an SQLite page within the bounds.
BACKUP_CHUNK_BYTES_DEFAULT = 64 * 1024
BACKUP_CHUNK_BYTES_MIN = 4096
BACKUP_CHUNK_BYTES_MAX = 4 * 1024 * 1024
BACKUP_PAGE_BYTES = 4096
