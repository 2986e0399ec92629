"""The partition state machine against a dumb list-based model (Hypothesis, rule-based).

Every step builds one command, applies it to a PartitionMachine over MemoryStore and over
SqliteStore (a real file), and to the model; the three must answer the same. After each run the
two stores' dumps must be equal, a replay of every command at its index must be skipped, and a
fresh replica replaying the whole log must end with an equal dump.

Seed: printed at the start; replay with RAFTQ_SEED=<seed> pytest
tests/unit/test_partition_model.py.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from raftq.partitions.machine import PartitionMachine, nack_backoff_ms
from raftq.partitions.sqlite_store import SqliteStore
from raftq.partitions.store import MemoryStore
from raftq.proto import common_pb2, partition_pb2
from raftq.proto.common_pb2 import ErrorCode

SEED = int(os.environ.get("RAFTQ_SEED", random.SystemRandom().randrange(2**32)))
MAX_RECORD_BYTES = 64
GROUPS = ("g1", "g2")
MEMBERS = ("m1", "m2")
PRODUCERS = ("p1", "p2")
IDEMPOTENCY_KEYS = ("", "", "", "k1", "k2", "k3")


# -- the model --------------------------------------------------------------------------------


@dataclass
class MRecord:
    offset: int
    ts: int
    value: bytes
    priority: int
    deliver_at: int
    idem: str
    size: int


@dataclass
class MState:
    """A group's view of one record it has been delivered (absent = never delivered)."""

    count: int
    owner: str | None
    available_at: int


@dataclass
class MGroup:
    start: int
    states: dict[int, MState] = field(default_factory=dict)
    acked: set[int] = field(default_factory=set)


class Model:
    def __init__(self, config: common_pb2.TopicConfig) -> None:
        self.config = config
        self.records: dict[int, MRecord] = {}
        self.next_offset = 0
        self.log_start = 0
        self.log_bytes = 0
        self.clock = 0
        self.idem: dict[str, tuple[int, int]] = {}
        self.producers: dict[str, dict[int, tuple[list[int], int]]] = {}
        self.groups: dict[str, MGroup] = {}
        self.outbox: list[tuple[int, str, int, str, int]] = []
        self.outbox_seq = 0

    def tick(self, now: int) -> int:
        self.clock = max(self.clock, now)
        return self.clock

    def view(self, g: MGroup) -> list[int]:
        return sorted(
            o for o in self.records if o >= max(g.start, self.log_start) and o not in g.acked
        )

    def available_at(self, g: MGroup, o: int) -> int:
        state = g.states.get(o)
        return self.records[o].deliver_at if state is None else state.available_at

    def sort_key(self, o: int) -> tuple[int, int, int]:
        r = self.records[o]
        if self.config.ordering == common_pb2.PRIORITY:
            return (r.priority, r.deliver_at, o)
        return (0, 0, o)

    def dead_letter(self, name: str, g: MGroup, offsets: list[int], now: int) -> None:
        for o in sorted(offsets):
            self.outbox_seq += 1
            self.outbox.append((self.outbox_seq, name, o, "max_deliveries", g.states[o].count))
            g.acked.add(o)
            del g.states[o]

    # commands: each returns what the machine must answer, as plain data

    def append(self, records: list[tuple[bytes, int, int, str]], pid: str, seq: int, now: int):
        if not records:
            return ("error", ErrorCode.INVALID_ARGUMENT)
        for value, _, deliver_at, _ in records:
            if len(value) > MAX_RECORD_BYTES:
                return ("error", ErrorCode.RECORD_TOO_LARGE)
            if deliver_at < 0:
                return ("error", ErrorCode.INVALID_ARGUMENT)
        if pid:
            batches = self.producers.get(pid, {})
            last = max(batches) if batches else None
            if not (last is None or seq == last + 1):
                if seq in batches:
                    self.tick(now)
                    return ("records", [(o, True) for o in batches[seq][0]])
                return ("error", ErrorCode.OUT_OF_ORDER_SEQUENCE)
        now = self.tick(now)
        window = now - self.config.dedup_window_ms
        results = []
        for value, priority, deliver_at, key in records:
            if key and key in self.idem and self.idem[key][1] >= window:
                results.append((self.idem[key][0], True))
                continue
            o = self.next_offset
            self.next_offset += 1
            self.records[o] = MRecord(o, now, value, priority, deliver_at, key, len(value))
            self.log_bytes += len(value)
            if key:
                self.idem[key] = (o, now)
            results.append((o, False))
        if pid:
            batches = self.producers.setdefault(pid, {})
            batches[seq] = ([o for o, _ in results], now)
            for old in [s for s in batches if s <= seq - 5]:
                del batches[old]
        return ("records", results)

    def lease(self, name: str, member: str, max_records: int, lease_ms: int, now: int):
        now = self.tick(now)
        g = self.groups.setdefault(name, MGroup(start=self.log_start))
        view = self.view(g)
        limit = self.config.max_deliveries
        due = [o for o in view if self.available_at(g, o) <= now]
        spent = [o for o in due if o in g.states and limit and g.states[o].count >= limit]
        self.dead_letter(name, g, spent, now)
        for o in due:  # promotion: an expired lease no longer names an owner
            if o in g.states:
                g.states[o].owner = None
        ready = sorted((o for o in due if o not in spent), key=self.sort_key)[:max_records]
        deadline = now + (lease_ms or self.config.lease_ms)
        out = []
        for o in ready:
            state = g.states.setdefault(o, MState(0, None, 0))
            state.count += 1
            state.owner, state.available_at = member, deadline
            out.append((o, state.count, deadline, self.records[o].value))
        return ("deliveries", out)

    def _check(self, name: str, member: str, refs: list[tuple[int, int]], now: int):
        g = self.groups.get(name)
        if g is None:
            return None, None, ErrorCode.UNKNOWN_GROUP
        now = self.tick(now)
        view = set(self.view(g))
        results = []
        held: list[int] = []
        for o, count in refs:
            state = g.states.get(o)
            if o not in view or state is None:
                code = ErrorCode.RECORD_NOT_FOUND
            elif state.count != count or state.available_at <= now:
                code = ErrorCode.LEASE_EXPIRED
            elif state.owner != member:
                code = ErrorCode.NOT_LEASED
            elif o in held:
                code = ErrorCode.INVALID_ARGUMENT
            else:
                code = ErrorCode.OK
                held.append(o)
            results.append([o, code, False])
        return g, held, results

    def ack(self, name: str, member: str, refs: list[tuple[int, int]], now: int):
        now = max(self.clock, now)
        g, held, results = self._check(name, member, refs, now)
        if g is None or held is None:
            return ("error", results)
        for o in held:
            g.acked.add(o)
            del g.states[o]
        for r in results:  # idempotent: a record the group finished (or seeked past) acks again
            finished = r[0] in g.acked or r[0] < g.start
            if r[1] == ErrorCode.RECORD_NOT_FOUND and finished and r[0] in self.records:
                r[1] = ErrorCode.OK
        return ("refs", results)

    def nack(self, name: str, member: str, refs: list[tuple[int, int]], delay, now: int):
        now = max(self.clock, now)
        g, held, results = self._check(name, member, refs, now)
        if g is None or held is None:
            return ("error", results)
        limit = self.config.max_deliveries
        spent = [o for o in held if limit and g.states[o].count >= limit]
        self.dead_letter(name, g, spent, now)
        for r in results:
            r[2] = r[0] in spent and r[1] == ErrorCode.OK
        for o in held:
            if o in spent:
                continue
            state = g.states[o]
            wait = delay if delay is not None else nack_backoff_ms(self.config, state.count)
            state.owner, state.available_at = None, now + wait
        return ("refs", results)

    def extend(self, name: str, member: str, refs: list[tuple[int, int]], lease_ms: int, now):
        now = max(self.clock, now)
        g, held, results = self._check(name, member, refs, now)
        if g is None or held is None:
            return ("error", results)
        for o in held:
            g.states[o].available_at = now + lease_ms
        return ("refs", results)

    def release(self, name: str, member: str, now: int):
        now = self.tick(now)
        g = self.groups.get(name)
        count = 0
        if g is not None:
            for state in g.states.values():
                if state.owner is not None and (not member or state.owner == member):
                    state.owner, state.available_at = None, now
                    count += 1
        return ("count", count)

    def forget(self, name: str, now: int):
        self.tick(now)
        self.groups.pop(name, None)  # a later lease starts the group afresh at the log start
        return ("ok", None)

    def seek(self, name: str, to: int, offset: int, timestamp_ms: int, now: int):
        if (to == partition_pb2.SEEK_OFFSET and offset < 0) or (
            to == partition_pb2.SEEK_TIMESTAMP and timestamp_ms < 0
        ):
            return ("error", ErrorCode.INVALID_ARGUMENT)
        self.tick(now)
        start, end = self.log_start, self.next_offset
        if to == partition_pb2.SEEK_EARLIEST:
            target = start
        elif to == partition_pb2.SEEK_LATEST:
            target = end
        elif to == partition_pb2.SEEK_OFFSET:
            target = min(max(offset, start), end)
        else:
            found = [o for o, r in self.records.items() if r.ts >= timestamp_ms]
            target = max(min(found), start) if found else end
        self.groups[name] = MGroup(start=target)  # below: acked; from it: pending afresh
        return ("offset", target)

    def purge(self, now: int):
        self.tick(now)
        gone = list(self.records)
        self.records.clear()
        self.log_bytes = 0
        for g in self.groups.values():
            g.states.clear()
        self.log_start = self.next_offset
        return ("count", len(gone))

    def update(self, o: int, priority: int | None, deliver_at: int | None, now: int):
        if (priority is None and deliver_at is None) or (deliver_at or 0) < 0:
            return ("error", ErrorCode.INVALID_ARGUMENT)
        if o not in self.records:
            return ("error", ErrorCode.RECORD_NOT_FOUND)
        now = self.tick(now)
        r = self.records[o]
        if priority is not None:
            r.priority = priority
        if deliver_at is not None:
            r.deliver_at = deliver_at
            for g in self.groups.values():
                state = g.states.get(o)
                if state is not None and not (state.owner and state.available_at > now):
                    state.owner, state.available_at = None, deliver_at
        return ("ok", None)

    def cancel(self, o: int, now: int):
        if o not in self.records:
            return ("error", ErrorCode.RECORD_NOT_FOUND)
        self.tick(now)
        self.log_bytes -= self.records.pop(o).size
        for g in self.groups.values():
            g.states.pop(o, None)
        return ("ok", None)

    def configure(self, config: common_pb2.TopicConfig, now: int):
        self.tick(now)
        self.config = config
        return ("ok", None)

    def retain(self, now: int):
        now = self.tick(now)
        start = self.log_start
        if self.config.retention_ms:
            since = [o for o, r in self.records.items() if r.ts >= now - self.config.retention_ms]
            start = max(start, min(since) if since else self.next_offset)
        if self.config.retention_bytes and self.log_bytes > self.config.retention_bytes:
            excess, dropped, cursor = self.log_bytes - self.config.retention_bytes, 0, start
            for o in sorted(self.records):
                if dropped >= excess:
                    break
                dropped += self.records[o].size
                cursor = o + 1
            start = max(start, cursor)
        gone = [o for o in self.records if o < start]
        for o in gone:
            self.log_bytes -= self.records.pop(o).size
        for g in self.groups.values():
            for o in [o for o in g.states if o < start]:
                del g.states[o]
        self.log_start = max(self.log_start, start)
        window = now - self.config.dedup_window_ms
        self.idem = {k: v for k, v in self.idem.items() if v[1] >= window}
        self.producers = {
            p: b for p, b in self.producers.items() if max(t for _, t in b.values()) >= window
        }
        return ("count", len(gone))

    def dead_letter_done(self, up_to: int, now: int):
        self.tick(now)
        before = len(self.outbox)
        self.outbox = [e for e in self.outbox if e[0] > up_to]
        return ("count", before - len(self.outbox))


# -- what the machine answered, in the model's terms ----------------------------------------


def observe(result: partition_pb2.CommandResult, kind: str) -> tuple[str, Any]:
    if result.error:
        if kind in ("refs",) and result.error == ErrorCode.UNKNOWN_GROUP:
            return ("error", ErrorCode.UNKNOWN_GROUP)
        return ("error", result.error)
    if kind == "records":
        span = result.range  # an Append of values: one range (duplicate or not)
        expanded = [(span.first_offset + i, span.duplicate) for i in range(span.count)]
        return ("records", [(r.offset, r.duplicate) for r in result.records] + expanded)
    if kind == "deliveries":
        return (
            "deliveries",
            [
                (d.record.offset, d.delivery_count, d.lease_deadline_ms, d.record.record.value)
                for d in result.deliveries
            ],
        )
    if kind == "refs":
        return ("refs", [[r.offset, r.error, r.dead_lettered] for r in result.refs])
    if kind == "count":
        return ("count", result.count)
    if kind == "offset":
        return ("offset", result.offset)
    return ("ok", None)


def normalize(expected: tuple[str, Any]) -> tuple[str, Any]:
    kind, value = expected
    if kind == "error" and not isinstance(value, int):
        return ("error", ErrorCode.UNKNOWN_GROUP)
    return expected


def base_config(ordering: int, max_deliveries: int) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        ordering=ordering,  # type: ignore[arg-type]
        lease_ms=1_000,
        max_deliveries=max_deliveries,
        max_record_bytes=MAX_RECORD_BYTES,
        dedup_window_ms=20_000,
        nack_backoff_base_ms=100,
        nack_backoff_max_ms=800,
    )


class PartitionModelTest(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="raftq-model-")
        self.sqlite = SqliteStore(os.path.join(self.dir, "p.db"), synchronous="OFF")
        self.machines = [PartitionMachine(MemoryStore()), PartitionMachine(self.sqlite)]
        self.log: list[bytes] = []
        self.model = Model(base_config(common_pb2.FIFO, 3))
        self.now = 1_000_000
        self.deliveries: list[tuple[str, str, int, int]] = []

    def step(self, kind: str, expected: tuple[str, Any], **op: Any) -> None:
        data = partition_pb2.PartitionCommand(now_ms=self.now, **op).SerializeToString()
        self.log.append(data)
        for machine in self.machines:
            got = observe(machine.apply(data, len(self.log)), kind)
            assert got == normalize(expected), f"{type(machine.store).__name__}: {op}"
        if expected[0] == "deliveries":
            group, member = op["lease"].group, op["lease"].member
            self.deliveries += [(group, member, o, c) for o, c, _, _ in expected[1]]

    @initialize(
        ordering=st.sampled_from([common_pb2.FIFO, common_pb2.PRIORITY]),
        max_deliveries=st.sampled_from([0, 2, 3]),
    )
    def configure_topic(self, ordering: int, max_deliveries: int) -> None:
        config = base_config(ordering, max_deliveries)
        self.step(
            "ok",
            self.model.configure(config, self.now),
            configure=partition_pb2.Configure(config=config, topic="t", partition=0),
        )

    @rule(ms=st.sampled_from([0, 1, 50, 300, 1_000, 5_000, 30_000]))
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule(ms=st.sampled_from([100, 1_000, 3_000]))
    def advance_more(self, ms: int) -> None:
        self.now += ms

    @rule()
    def clock_goes_back(self) -> None:  # a new leader whose clock is behind
        self.now -= 200

    @rule(
        records=st.lists(
            st.tuples(
                st.binary(max_size=MAX_RECORD_BYTES + 8),
                st.integers(0, 3),
                st.sampled_from([0, 0, 500, 3_000]),
                st.sampled_from(IDEMPOTENCY_KEYS),
            ),
            max_size=4,
        ),
        producer=st.sampled_from(["", "", *PRODUCERS]),
        seq_step=st.sampled_from([1, 1, 1, 0, -1, 2]),
    )
    def append(self, records: Any, producer: str, seq_step: int) -> None:
        self._append(records, producer, seq_step)

    def _append(self, records: Any, producer: str, seq_step: int) -> None:
        batches = self.model.producers.get(producer, {})
        seq = (max(batches) if batches else 0) + seq_step if producer else 0
        recs = [(v, p, self.now + d if d else 0, k) for v, p, d, k in records]
        expected = self.model.append(recs, producer, seq, self.now)
        self.step(
            "records",
            expected,
            append=partition_pb2.Append(
                records=[
                    common_pb2.Record(value=v, priority=p, deliver_at_ms=d, idempotency_key=k)
                    for v, p, d, k in recs
                ],
                producer_id=producer,
                sequence=seq,
            ),
        )

    @rule(
        values=st.lists(st.binary(max_size=MAX_RECORD_BYTES + 8), max_size=4),
        producer=st.sampled_from(["", "", *PRODUCERS]),
        seq_step=st.sampled_from([1, 1, 1, 0, -1, 2]),
    )
    def append_values(self, values: list[bytes], producer: str, seq_step: int) -> None:
        """The bare-value fast path must be the records path with only values set."""
        batches = self.model.producers.get(producer, {})
        seq = (max(batches) if batches else 0) + seq_step if producer else 0
        expected = self.model.append([(v, 0, 0, "") for v in values], producer, seq, self.now)
        self.step(
            "records",
            expected,
            append=partition_pb2.Append(values=values, producer_id=producer, sequence=seq),
        )

    @rule(
        group=st.sampled_from(GROUPS),
        member=st.sampled_from(MEMBERS),
        max_records=st.integers(1, 4),
        lease_ms=st.sampled_from([0, 200, 2_000]),
    )
    def lease(self, group: str, member: str, max_records: int, lease_ms: int) -> None:
        self._lease(group, member, max_records, lease_ms)

    def _lease(self, group: str, member: str, max_records: int, lease_ms: int) -> None:
        expected = self.model.lease(group, member, max_records, lease_ms, self.now)
        self.step(
            "deliveries",
            expected,
            lease=partition_pb2.Lease(
                group=group, member=member, max_records=max_records, lease_ms=lease_ms
            ),
        )

    def _refs(self, data: st.DataObject) -> tuple[str, str, list[tuple[int, int]]]:
        recent = self.deliveries[-6:]
        picked = data.draw(st.lists(st.sampled_from(recent), min_size=1, max_size=3))
        group, member = picked[0][0], picked[0][1]
        if data.draw(st.booleans()):
            member = data.draw(st.sampled_from(MEMBERS))
        refs = [(o, c + data.draw(st.sampled_from([0, 0, 0, -1]))) for _, _, o, c in picked]
        return group, member, refs

    @precondition(lambda self: self.deliveries)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        self._ack(data)

    @precondition(lambda self: self.deliveries)
    @rule(data=st.data())
    def ack_compact(self, data: st.DataObject) -> None:
        """Settle's compact form: the same state change, only the failed refs answered."""
        group, member, refs = self._refs(data)
        kind, outcome = self.model.ack(group, member, refs, self.now)
        expected = (
            (kind, [r for r in outcome if r[1] != ErrorCode.OK])
            if kind == "refs"
            else (
                kind,
                outcome,
            )
        )
        self.step(
            "refs",
            expected,
            ack=partition_pb2.Settle(
                group=group,
                member=member,
                offsets=[o for o, _ in refs],
                delivery_counts=[c for _, c in refs],
            ),
        )

    def _ack(self, data: st.DataObject) -> None:
        group, member, refs = self._refs(data)
        expected = self.model.ack(group, member, refs, self.now)
        self.step(
            "refs",
            expected,
            ack=partition_pb2.Settle(
                group=group,
                member=member,
                refs=[partition_pb2.DeliveryRef(offset=o, delivery_count=c) for o, c in refs],
            ),
        )

    @precondition(lambda self: self.deliveries)
    @rule(data=st.data(), delay=st.sampled_from([None, 0, 100, 2_000]))
    def nack(self, data: st.DataObject, delay: int | None) -> None:
        group, member, refs = self._refs(data)
        expected = self.model.nack(group, member, refs, delay, self.now)
        nack = partition_pb2.Nack(
            group=group,
            member=member,
            refs=[partition_pb2.DeliveryRef(offset=o, delivery_count=c) for o, c in refs],
        )
        if delay is not None:
            nack.delay_ms = delay
        self.step("refs", expected, nack=nack)

    @precondition(lambda self: self.deliveries)
    @rule(data=st.data(), lease_ms=st.sampled_from([100, 3_000]))
    def extend(self, data: st.DataObject, lease_ms: int) -> None:
        group, member, refs = self._refs(data)
        expected = self.model.extend(group, member, refs, lease_ms, self.now)
        self.step(
            "refs",
            expected,
            extend_lease=partition_pb2.ExtendLease(
                group=group,
                member=member,
                lease_ms=lease_ms,
                refs=[partition_pb2.DeliveryRef(offset=o, delivery_count=c) for o, c in refs],
            ),
        )

    @rule(group=st.sampled_from(GROUPS), member=st.sampled_from(["", *MEMBERS]))
    def release(self, group: str, member: str) -> None:
        expected = self.model.release(group, member, self.now)
        self.step("count", expected, release=partition_pb2.Release(group=group, member=member))

    @rule(group=st.sampled_from(GROUPS))
    def forget_group(self, group: str) -> None:
        self.step(
            "ok",
            self.model.forget(group, self.now),
            forget_group=partition_pb2.ForgetGroup(group=group),
        )

    @rule(
        group=st.sampled_from(GROUPS),
        to=st.sampled_from(
            [
                partition_pb2.SEEK_OFFSET,
                partition_pb2.SEEK_TIMESTAMP,
                partition_pb2.SEEK_EARLIEST,
                partition_pb2.SEEK_LATEST,
            ]
        ),
        offset=st.integers(-1, 14),
        back_ms=st.sampled_from([-1, 0, 500, 3_000, 30_000]),
    )
    def seek(self, group: str, to: partition_pb2.SeekTo, offset: int, back_ms: int) -> None:
        timestamp_ms = -1 if back_ms < 0 else max(0, self.now - back_ms)
        expected = self.model.seek(group, to, offset, timestamp_ms, self.now)
        cmd = partition_pb2.SeekGroup(group=group, to=to, offset=offset, timestamp_ms=timestamp_ms)
        self.step("offset", expected, seek_group=cmd)

    @rule()
    def purge(self) -> None:
        self.step("count", self.model.purge(self.now), purge=partition_pb2.Purge())

    @rule(
        offset=st.integers(0, 12),
        priority=st.one_of(st.none(), st.integers(0, 3)),
        delay=st.one_of(st.none(), st.sampled_from([0, 400, 4_000])),
    )
    def update(self, offset: int, priority: int | None, delay: int | None) -> None:
        deliver_at = None if delay is None else self.now + delay
        expected = self.model.update(offset, priority, deliver_at, self.now)
        cmd = partition_pb2.UpdateRecord(offset=offset)
        if priority is not None:
            cmd.priority = priority
        if deliver_at is not None:
            cmd.deliver_at_ms = deliver_at
        self.step("ok", expected, update_record=cmd)

    @rule(offset=st.integers(0, 24))
    def cancel(self, offset: int) -> None:
        expected = self.model.cancel(offset, self.now)
        self.step("ok", expected, cancel_record=partition_pb2.CancelRecord(offset=offset))

    @rule(
        ordering=st.sampled_from([common_pb2.FIFO, common_pb2.PRIORITY]),
        retention_ms=st.sampled_from([0, 0, 10_000, 60_000]),
        retention_bytes=st.sampled_from([0, 0, 100, 400]),
    )
    def reconfigure(self, ordering: int, retention_ms: int, retention_bytes: int) -> None:
        config = common_pb2.TopicConfig()
        config.CopyFrom(self.model.config)
        config.ordering = ordering  # type: ignore[assignment]
        config.retention_ms, config.retention_bytes = retention_ms, retention_bytes
        self.step(
            "ok",
            self.model.configure(config, self.now),
            configure=partition_pb2.Configure(config=config),
        )

    @rule()
    def retain(self) -> None:
        self.step("count", self.model.retain(self.now), retain=partition_pb2.Retain())

    @rule(up_to=st.integers(0, 6))
    def dead_letter_done(self, up_to: int) -> None:
        self.step(
            "count",
            self.model.dead_letter_done(up_to, self.now),
            dead_letter_done=partition_pb2.DeadLetterDone(up_to_seq=up_to),
        )

    # Hypothesis picks rules uniformly: the busy path of a queue gets extra entries.
    @rule(
        records=st.lists(
            st.tuples(
                st.binary(max_size=MAX_RECORD_BYTES),
                st.integers(0, 3),
                st.sampled_from([0, 0, 0, 500]),
                st.sampled_from(IDEMPOTENCY_KEYS),
            ),
            min_size=1,
            max_size=4,
        ),
        producer=st.sampled_from(["", "", *PRODUCERS]),
    )
    def append_more(self, records: Any, producer: str) -> None:
        self._append(records, producer, 1)

    @rule(
        group=st.sampled_from(GROUPS),
        member=st.sampled_from(MEMBERS),
        max_records=st.integers(1, 4),
        lease_ms=st.sampled_from([0, 200, 2_000]),
    )
    def lease_more(self, group: str, member: str, max_records: int, lease_ms: int) -> None:
        self._lease(group, member, max_records, lease_ms)

    @precondition(lambda self: self.deliveries)
    @rule(data=st.data())
    def ack_more(self, data: st.DataObject) -> None:
        self._ack(data)

    @invariant()
    def reads_agree(self) -> None:
        model = self.model
        expected = [(o, model.records[o].value) for o in sorted(model.records)]
        for machine in self.machines:
            offsets = machine.offsets()
            assert (offsets.log_start, offsets.end) == (model.log_start, model.next_offset)
            got = [(r.offset, r.record.value) for r in machine.fetch(0, 1_000)]
            assert got == expected
            outbox = [
                (e.seq, e.group, e.offset, e.reason, e.delivery_count)
                for e in machine.outbox(1_000)
            ]
            assert outbox == model.outbox
            for name, g in model.groups.items():
                lag = machine.lag(name)
                assert lag is not None
                unacked = model.view(g)
                # the committed offset never skips an unacknowledged record
                assert not unacked or lag.committed <= unacked[0]
                assert all(
                    o in g.acked or o not in model.records
                    for o in range(max(g.start, model.log_start), lag.committed)
                )

    def teardown(self) -> None:
        try:
            memory, sqlite = (m.store.dump() for m in self.machines)
            assert memory == sqlite, "the two stores hold different state"
            before = sqlite
            for index, data in enumerate(self.log, start=1):  # replay changes nothing
                replayed = self.machines[1].apply(data, index)
                assert replayed.skipped or replayed.error != ErrorCode.OK  # rejected again
            assert self.sqlite.dump() == before
            self.sqlite.close()
            reopened = PartitionMachine(SqliteStore(os.path.join(self.dir, "p.db")))
            assert reopened.store.dump() == before
            fresh = PartitionMachine(MemoryStore())  # a follower: nobody reads its results
            for index, data in enumerate(self.log, start=1):
                fresh.apply(data, index, respond=False)
            assert fresh.store.dump() == before, "a replica replaying the log diverged"
            reopened.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def test_partition_machine_matches_model() -> None:
    print(f"partition model seed: {SEED} (replay: RAFTQ_SEED={SEED})")
    run_state_machine_as_test(
        hypothesis_seed(SEED)(PartitionModelTest),
        settings=settings(
            max_examples=int(os.environ.get("RAFTQ_MODEL_EXAMPLES", "150")),
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_forget_group_drops_its_state_and_fence_and_keeps_other_groups(
    store: str, tmp_path: Any
) -> None:
    machine = PartitionMachine(
        MemoryStore() if store == "memory" else SqliteStore(str(tmp_path / "p.db"))
    )
    index = 0

    def apply(**op: Any) -> partition_pb2.CommandResult:
        nonlocal index
        index += 1
        data = partition_pb2.PartitionCommand(now_ms=1000, **op).SerializeToString()
        return machine.apply(data, index)

    def lease(group: str, generation: int) -> partition_pb2.CommandResult:
        return apply(
            lease=partition_pb2.Lease(
                group=group, member="m", max_records=10, generation=generation
            )
        )

    records = [common_pb2.Record(value=b"v%d" % i) for i in range(4)]
    assert not apply(append=partition_pb2.Append(records=records)).error
    assert len(lease("g", 5).deliveries) == 4 and len(lease("h", 0).deliveries) == 4
    settle = partition_pb2.Settle(
        group="g", member="m", refs=[partition_pb2.DeliveryRef(offset=0, delivery_count=1)]
    )
    assert not apply(ack=settle).error
    assert apply(release=partition_pb2.Release(group="g", member="m", generation=7)).count == 3
    assert lease("g", 6).error == ErrorCode.FENCED
    assert apply(forget_group=partition_pb2.ForgetGroup(group="")).error == (
        ErrorCode.INVALID_ARGUMENT
    )
    assert apply(forget_group=partition_pb2.ForgetGroup(group="g")).count == 3
    assert machine.lag("g") is None and machine.groups() == ["h"]
    assert apply(forget_group=partition_pb2.ForgetGroup(group="g")).count == 0
    again = lease("g", 1)  # a new group of that name: no fence, every record, first delivery
    assert [(d.record.offset, d.delivery_count) for d in again.deliveries] == [
        (0, 1),
        (1, 1),
        (2, 1),
        (3, 1),
    ]
    h = machine.lag("h")
    assert h is not None and h.pending == 4 and h.leased == 4  # the other group is untouched
