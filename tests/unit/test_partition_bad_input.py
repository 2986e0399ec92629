"""Bad command bytes through PartitionMachine.apply, on both stores.

A command that reaches the Raft log can never crash or wedge a replica (DESIGN.md § Errors):
each bad command here must come back as an error result with the right ErrorCode, leave
``store.dump()`` exactly as it was (the applied index and the clock too), and leave the replica
working. The machine starts from a state with a little of everything, so "unchanged" means
something.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftq.partitions.machine import (
    MAX_APPEND_RECORDS,
    MAX_LEASE_RECORDS,
    MAX_REFS,
    PartitionMachine,
)
from raftq.partitions.sqlite_store import SqliteStore
from raftq.partitions.store import MemoryStore, PartitionStore
from raftq.proto import common_pb2, partition_pb2
from raftq.proto.common_pb2 import ErrorCode

NOW = 10_000
LATER = NOW + 1_000_000  # bad commands carry a later clock: it must not be taken
INT64_MAX = 2**63 - 1


def command(now_ms: int = LATER, **op: Any) -> bytes:
    return partition_pb2.PartitionCommand(now_ms=now_ms, **op).SerializeToString()


def record(value: bytes = b"v", **kw: Any) -> common_pb2.Record:
    return common_pb2.Record(value=value, **kw)


def config(**kw: Any) -> common_pb2.TopicConfig:
    base: dict[str, Any] = {
        "ordering": common_pb2.PRIORITY,
        "lease_ms": 30_000,
        "max_deliveries": 3,
        "max_record_bytes": 64,
        "dedup_window_ms": 60_000,
        "nack_backoff_base_ms": 100,
        "nack_backoff_max_ms": 1000,
    }
    base.update(kw)
    return common_pb2.TopicConfig(**base)


def ref(offset: int, count: int = 1) -> partition_pb2.DeliveryRef:
    return partition_pb2.DeliveryRef(offset=offset, delivery_count=count)


def make_store(kind: str, path: Path) -> PartitionStore:
    return MemoryStore() if kind == "memory" else SqliteStore(str(path / "p.db"))


def populated(store: PartitionStore) -> PartitionMachine:
    """Configured, five records (keys, headers, dedup keys, a producer), a lease, a nack."""
    machine = PartitionMachine(store)
    good = [
        command(NOW, configure=partition_pb2.Configure(config=config(), topic="t", partition=2)),
        command(
            NOW,
            append=partition_pb2.Append(
                records=[
                    record(b"a", key=b"k", priority=2),
                    record(b"b", headers={"h": b"1"}, idempotency_key="i-1"),
                    record(b"c", deliver_at_ms=NOW + 50_000),
                ],
                producer_id="p",
                sequence=0,
            ),
        ),
        command(NOW, append=partition_pb2.Append(records=[record(b"d"), record(b"e")])),
        command(NOW, lease=partition_pb2.Lease(group="g", member="m1", max_records=2)),
        command(NOW, nack=partition_pb2.Nack(group="g", member="m1", refs=[ref(1)], delay_ms=5)),
    ]
    for index, data in enumerate(good, start=1):
        result = machine.apply(data, index)
        assert result.error == ErrorCode.OK, result.message
    return machine


@pytest.fixture(params=["memory", "sqlite"])
def machine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PartitionMachine]:
    store = make_store(request.param, tmp_path)
    yield populated(store)
    store.close()


def assert_rejected(machine: PartitionMachine, data: bytes, code: int) -> None:
    """``data`` is refused with ``code`` and changes nothing; the replica keeps working."""
    before = machine.store.dump()
    applied = machine.applied_index
    result = machine.apply(data, applied + 1)
    assert ErrorCode.Name(result.error) == ErrorCode.Name(code), result.message
    assert result.message
    assert not (result.records or result.deliveries or result.refs or result.count)
    assert machine.failed is None
    assert machine.applied_index == applied
    assert machine.store.dump() == before
    assert machine.meta == machine.store.load_meta()
    # the index was not used up: the next good command takes it
    follow = machine.apply(command(NOW, retain=partition_pb2.Retain()), applied + 1)
    assert follow.error == ErrorCode.OK, follow.message
    assert machine.applied_index == applied + 1


def valid_append() -> bytes:
    return command(
        2**40,  # a multi-byte varint first: truncation can stop inside it
        append=partition_pb2.Append(
            records=[record(b"value", key=b"key", headers={"h": b"x"}, idempotency_key="i-9")],
            producer_id="p",
            sequence=1,
        ),
    )


# -- bytes that are not a command -------------------------------------------------------------

GARBAGE = {
    "empty": b"",
    "ff": b"\xff\xff\xff\xff",
    "text": b"hello world",
    "zero_tag": b"\x00\x01",
    "end_group_tag": b"\x0c",
    "length_past_the_end": b"\x52\xff\xff\xff\xff\x07",
    "ten_byte_varint": b"\x08" + b"\xff" * 10 + b"\x01",
    "bad_utf8_group": b"\x5a\x03\x0a\x01\xff",  # Lease.group = b"\xff"
    "unknown_fields_only": b"\xf8\x07\x01\xfa\x07\x00",  # fields 127 and 127 again, no op
    "now_only": partition_pb2.PartitionCommand(now_ms=5).SerializeToString(),
}


@pytest.mark.parametrize("data", list(GARBAGE.values()), ids=list(GARBAGE))
def test_garbage_is_malformed(machine: PartitionMachine, data: bytes) -> None:
    assert_rejected(machine, data, ErrorCode.MALFORMED_COMMAND)


def test_command_with_no_op_is_malformed(machine: PartitionMachine) -> None:
    assert_rejected(machine, command(LATER), ErrorCode.MALFORMED_COMMAND)
    assert_rejected(machine, b"", ErrorCode.MALFORMED_COMMAND)


def test_every_truncation_of_a_command_is_malformed(machine: PartitionMachine) -> None:
    data = valid_append()
    for cut in range(len(data)):
        assert_rejected(machine, data[:cut], ErrorCode.MALFORMED_COMMAND)
    result = machine.apply(data, machine.applied_index + 1)  # the whole command is good
    assert result.error == ErrorCode.OK, result.message


def test_random_bytes_never_break_a_replica(tmp_path: Path) -> None:
    seed = int(os.environ.get("RAFTQ_SEED", random.randrange(2**32)))
    print(f"seed={seed} (replay: RAFTQ_SEED={seed})")
    rng = random.Random(seed)
    machines = [populated(make_store(kind, tmp_path)) for kind in ("memory", "sqlite")]
    template = valid_append()
    for i in range(300):
        if i % 3 == 0:  # flip bytes of a good command: close to valid, the hard cases
            data = bytearray(template)
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            blob = bytes(data)
        else:
            blob = rng.randbytes(rng.randrange(0, 64))
        answers = []
        for m in machines:
            before, applied = m.store.dump(), m.applied_index
            result = m.apply(blob, applied + 1)
            assert m.failed is None, f"seed={seed} blob={blob.hex()}: {result.message}"
            if result.error != ErrorCode.OK:
                assert m.store.dump() == before, f"seed={seed} blob={blob.hex()}"
                assert m.applied_index == applied
            answers.append(result)
        assert answers[0] == answers[1], f"seed={seed} blob={blob.hex()}"
        assert machines[0].store.dump() == machines[1].store.dump(), f"seed={seed}"
    for m in machines:
        m.store.close()


def test_oversized_command_bytes(machine: PartitionMachine) -> None:
    many = partition_pb2.Append(records=[record(b"")] * (MAX_APPEND_RECORDS + 1))
    assert_rejected(machine, command(append=many), ErrorCode.INVALID_ARGUMENT)
    huge = record(b"x" * (2 << 20))  # 2 MiB: over max_record_bytes whatever it is
    assert_rejected(
        machine,
        command(append=partition_pb2.Append(records=[huge])),
        ErrorCode.RECORD_TOO_LARGE,
    )
    refs = [ref(o) for o in range(MAX_REFS + 1)]
    assert_rejected(
        machine,
        command(ack=partition_pb2.Settle(group="g", member="m1", refs=refs)),
        ErrorCode.INVALID_ARGUMENT,
    )


# -- well-formed commands with invalid fields -------------------------------------------------

INVALID: dict[str, tuple[bytes, int]] = {
    # append
    "append_no_records": (command(append=partition_pb2.Append()), ErrorCode.INVALID_ARGUMENT),
    "ack_refs_and_offsets_together": (
        command(
            ack=partition_pb2.Settle(
                group="g", member="m1", refs=[ref(0)], offsets=[1], delivery_counts=[1]
            )
        ),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "ack_offsets_without_counts": (
        command(
            ack=partition_pb2.Settle(group="g", member="m1", offsets=[0, 1], delivery_counts=[1])
        ),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "values_and_records_together": (
        command(append=partition_pb2.Append(records=[record(b"x")], values=[b"y"])),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "value_over_max_record_bytes": (
        command(append=partition_pb2.Append(values=[b"ok", b"x" * 65])),
        ErrorCode.RECORD_TOO_LARGE,
    ),
    "too_many_values": (
        command(append=partition_pb2.Append(values=[b""] * (MAX_APPEND_RECORDS + 1))),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "record_over_max_record_bytes": (
        command(append=partition_pb2.Append(records=[record(b"x" * 65)])),
        ErrorCode.RECORD_TOO_LARGE,
    ),
    "record_headers_count_toward_max": (
        command(append=partition_pb2.Append(records=[record(b"x" * 60, headers={"h": b"1234"})])),
        ErrorCode.RECORD_TOO_LARGE,
    ),
    "last_record_of_a_batch_too_large": (
        command(append=partition_pb2.Append(records=[record(b"ok"), record(b"x" * 65)])),
        ErrorCode.RECORD_TOO_LARGE,
    ),
    "negative_deliver_at": (
        command(append=partition_pb2.Append(records=[record(deliver_at_ms=-1)])),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "idempotency_key_too_long": (
        command(append=partition_pb2.Append(records=[record(idempotency_key="k" * 256)])),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "producer_sequence_gap": (
        command(append=partition_pb2.Append(records=[record()], producer_id="p", sequence=5)),
        ErrorCode.OUT_OF_ORDER_SEQUENCE,
    ),
    # lease
    "lease_negative_generation": (
        command(lease=partition_pb2.Lease(group="g", member="m2", max_records=1, generation=-1)),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "lease_negative_max_records": (
        command(lease=partition_pb2.Lease(group="g", member="m1", max_records=-1)),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "lease_zero_records": (
        command(lease=partition_pb2.Lease(group="g", member="m1", max_records=0)),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "lease_too_many_records": (
        command(
            lease=partition_pb2.Lease(group="g", member="m1", max_records=MAX_LEASE_RECORDS + 1)
        ),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "lease_empty_member": (
        command(lease=partition_pb2.Lease(group="g", member="", max_records=1)),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "lease_empty_group": (
        command(lease=partition_pb2.Lease(group="", member="m1", max_records=1)),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "lease_group_name_too_long": (
        command(lease=partition_pb2.Lease(group="g" * 256, member="m1", max_records=1)),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "lease_negative_lease_ms": (
        command(lease=partition_pb2.Lease(group="g", member="m1", max_records=1, lease_ms=-1)),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "lease_negative_max_bytes": (
        command(lease=partition_pb2.Lease(group="g", member="m1", max_records=1, max_bytes=-1)),
        ErrorCode.INVALID_ARGUMENT,
    ),
    # settle
    "ack_empty_member": (
        command(ack=partition_pb2.Settle(group="g", member="", refs=[ref(0)])),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "ack_no_refs": (
        command(ack=partition_pb2.Settle(group="g", member="m1")),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "ack_unknown_group": (
        command(ack=partition_pb2.Settle(group="nope", member="m1", refs=[ref(0)])),
        ErrorCode.UNKNOWN_GROUP,
    ),
    "nack_negative_delay": (
        command(nack=partition_pb2.Nack(group="g", member="m1", refs=[ref(0)], delay_ms=-1)),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "extend_lease_zero_ms": (
        command(extend_lease=partition_pb2.ExtendLease(group="g", member="m1", refs=[ref(0)])),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "extend_lease_negative_ms": (
        command(
            extend_lease=partition_pb2.ExtendLease(
                group="g", member="m1", refs=[ref(0)], lease_ms=-5
            )
        ),
        ErrorCode.INVALID_ARGUMENT,
    ),
    # timeline
    "update_nothing": (
        command(update_record=partition_pb2.UpdateRecord(offset=0)),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "update_negative_deliver_at": (
        command(update_record=partition_pb2.UpdateRecord(offset=0, deliver_at_ms=-1)),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "update_unknown_offset": (
        command(update_record=partition_pb2.UpdateRecord(offset=99, priority=1)),
        ErrorCode.RECORD_NOT_FOUND,
    ),
    "cancel_unknown_offset": (
        command(cancel_record=partition_pb2.CancelRecord(offset=-1)),
        ErrorCode.RECORD_NOT_FOUND,
    ),
    # configure
    "configure_without_config": (
        command(configure=partition_pb2.Configure()),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "configure_unknown_ordering": (
        command(configure=partition_pb2.Configure(config=config(ordering=7))),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "configure_zero_lease_ms": (
        command(configure=partition_pb2.Configure(config=config(lease_ms=0))),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "configure_negative_max_deliveries": (
        command(configure=partition_pb2.Configure(config=config(max_deliveries=-1))),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "configure_negative_retention_ms": (
        command(configure=partition_pb2.Configure(config=config(retention_ms=-1))),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "configure_negative_retention_bytes": (
        command(configure=partition_pb2.Configure(config=config(retention_bytes=-1))),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "configure_negative_dedup_window": (
        command(configure=partition_pb2.Configure(config=config(dedup_window_ms=-1))),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "configure_zero_max_record_bytes": (
        command(configure=partition_pb2.Configure(config=config(max_record_bytes=0))),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "configure_backoff_base_over_max": (
        command(
            configure=partition_pb2.Configure(
                config=config(nack_backoff_base_ms=2000, nack_backoff_max_ms=1000)
            )
        ),
        ErrorCode.INVALID_ARGUMENT,
    ),
    "configure_negative_backoff_base": (
        command(configure=partition_pb2.Configure(config=config(nack_backoff_base_ms=-1))),
        ErrorCode.INVALID_ARGUMENT,
    ),
}


@pytest.mark.parametrize("data,code", list(INVALID.values()), ids=list(INVALID))
def test_invalid_fields_are_rejected(machine: PartitionMachine, data: bytes, code: int) -> None:
    assert_rejected(machine, data, code)


def test_rejections_agree_across_stores(tmp_path: Path) -> None:
    """The same bad commands give the same answers on both stores (messages included)."""
    machines = [
        populated(make_store("memory", tmp_path)),
        populated(make_store("sqlite", tmp_path)),
    ]
    for data, _ in [*INVALID.values(), *((g, 0) for g in GARBAGE.values())]:
        results = [m.apply(data, m.applied_index + 1) for m in machines]
        assert results[0] == results[1]
    assert machines[0].store.dump() == machines[1].store.dump()


# -- a Lease from a generation a revoking Release fenced off ----------------------------------


def test_a_lease_older_than_the_fence_is_fenced_and_changes_nothing(
    machine: PartitionMachine,
) -> None:
    """A rebalance revokes the partition at generation 7 (Release with generation 7); a poll's
    Lease proposed under generation 6 that applies afterwards must not lease anything, or its
    records would wait out lease_ms held by a member that no longer owns the partition."""
    release = partition_pb2.Release(group="g", member="m1", generation=7)
    released = machine.apply(command(NOW, release=release), machine.applied_index + 1)
    assert released.error == ErrorCode.OK and released.count == 1  # m1's one live lease
    assert machine.store.fence_get("g") == 7
    stale = partition_pb2.Lease(group="g", member="m1", max_records=5, generation=6)
    assert_rejected(machine, command(NOW, lease=stale), ErrorCode.FENCED)
    lower = partition_pb2.Release(group="g", member="m1", generation=3)
    machine.apply(command(NOW, release=lower), machine.applied_index + 1)
    assert machine.store.fence_get("g") == 7  # fences only rise
    assert machine.store.fence_get("other") == 0  # per group
    current = partition_pb2.Lease(group="g", member="m2", max_records=5, generation=7)
    leased = machine.apply(command(NOW, lease=current), machine.applied_index + 1)
    assert leased.error == ErrorCode.OK and leased.deliveries
    unfenced = partition_pb2.Lease(group="g", member="m3", max_records=1)  # generation 0
    assert machine.apply(command(NOW, lease=unfenced), machine.applied_index + 1).error == 0


def test_the_fence_survives_reopening_the_sqlite_file(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "p.db"))
    machine = populated(store)
    release = partition_pb2.Release(group="g", member="", generation=4)
    machine.apply(command(NOW, release=release), machine.applied_index + 1)
    dump = store.dump()
    assert dump["fences"] == [("g", 4)]
    store.close()
    reopened = SqliteStore(str(tmp_path / "p.db"))
    try:
        assert reopened.fence_get("g") == 4
        assert reopened.dump() == dump
    finally:
        reopened.close()


# -- a lease far in the future is refused, never an overflow that fails the replica ----------

HUGE_LEASE = {
    "lease_ms_int64_max": [
        command(
            NOW,
            lease=partition_pb2.Lease(group="g", member="m2", max_records=1, lease_ms=INT64_MAX),
        ),
    ],
    "extend_lease_ms_int64_max": [
        command(
            NOW,
            extend_lease=partition_pb2.ExtendLease(
                group="g", member="m1", refs=[ref(3)], lease_ms=INT64_MAX
            ),
        ),
    ],
    "configured_lease_ms_int64_max": [
        command(NOW, configure=partition_pb2.Configure(config=config(lease_ms=INT64_MAX))),
        command(NOW, lease=partition_pb2.Lease(group="g", member="m2", max_records=1)),
    ],
}


@pytest.mark.parametrize("commands", list(HUGE_LEASE.values()), ids=list(HUGE_LEASE))
def test_a_huge_lease_never_fails_the_replica(
    machine: PartitionMachine, commands: list[bytes]
) -> None:
    for data in commands:
        result = machine.apply(data, machine.applied_index + 1)
        assert result.error != ErrorCode.INTERNAL, result.message
        assert machine.failed is None
