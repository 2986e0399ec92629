"""The key partitioner: which partition a record goes to when the producer names none.

Kafka's default partitioner for keyed records: ``positive(murmur2(key)) % partitions``, with
Kafka's murmur2 (seed 0x9747b28c) and ``positive(n) = n & 0x7fffffff``, so a key lands on the
same partition in every raftq process and in a Kafka client with the same partition count.
Never Python's ``hash()``, which is salted per process. A record without a key goes round-robin
by the caller's counter. Pure: no I/O, clock or randomness.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the signed 32-bit hash Java computes."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail = length & ~3
    for i in range(0, tail, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes | None, partitions: int, counter: int) -> int:
    """The partition of a record with ``key`` in a topic of ``partitions`` partitions.

    A key hashes with murmur2 (Kafka-compatible); ``None`` goes round-robin: ``counter %
    partitions`` (the caller increments its counter per record). An empty key is a key.
    """
    assert partitions > 0, f"a topic has at least one partition, not {partitions}"
    if key is None:
        return counter % partitions
    return (murmur2(key) & 0x7FFFFFFF) % partitions
