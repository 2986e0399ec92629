"""The key partitioner agrees with Kafka's murmur2 and spreads unkeyed records evenly."""

from __future__ import annotations

import pytest

from raftq.assignors.partitioner import murmur2, partition_for

# Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java testMurmur2.
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafkas_test_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_a_keyed_record_goes_to_positive_murmur2_mod_partitions() -> None:
    for key, hashed in KAFKA_VECTORS:
        for partitions in (1, 3, 7, 64):
            assert partition_for(key, partitions, counter=99) == (hashed & 0x7FFFFFFF) % partitions


def test_the_same_key_ignores_the_counter_and_an_empty_key_is_a_key() -> None:
    assert {partition_for(b"k", 12, c) for c in range(50)} == {partition_for(b"k", 12, 0)}
    assert {partition_for(b"", 12, c) for c in range(50)} == {(murmur2(b"") & 0x7FFFFFFF) % 12}


def test_no_key_goes_round_robin() -> None:
    assert [partition_for(None, 3, c) for c in range(7)] == [0, 1, 2, 0, 1, 2, 0]
