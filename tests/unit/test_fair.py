"""ordering=fair topics (issue 19): round robin across fair keys, as replicated state.

- A Hypothesis rule-based test drives a fair partition over MemoryStore and SqliteStore (a real
  file) and a simple queue model: the rotation is a list of keys; a Lease serves one record at
  a time from the key at the front, which goes to the back while it has ready records; keys
  that gain ready records at a Lease's catch-up join at the back in key order; a key left
  without ready records leaves. Every Lease must deliver what the model does, every rotation
  must equal the model's queue, and at the end both stores, a reopened file and a replica
  replaying the log must hold equal state.
- The acceptance case: one key with 100,000 ready records and 99 keys with 10 each.
- Fair keys from a header; keyless records share the key b""; a file from before fair
  ordering opens; the rotation survives a snapshot; bad settings are refused.

Seed: printed at the start; replay with RAFTQ_SEED=<seed> pytest tests/unit/test_fair.py.
"""

from __future__ import annotations

import collections
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
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

from raftq.metadata.frontend import MetadataFrontend
from raftq.partitions.machine import PartitionMachine, check_config, nack_backoff_ms
from raftq.partitions.sqlite_store import SqliteStore
from raftq.partitions.store import MemoryStore, fair_key_of, fair_plan
from raftq.proto import common_pb2, errors, partition_pb2
from raftq.proto.common_pb2 import ErrorCode

SEED = int(os.environ.get("RAFTQ_SEED", random.SystemRandom().randrange(2**32)))
KEYS = (None, b"", b"a", b"b", b"c")
TENANTS = (None, "x", "y")
GROUPS = ("g1", "g2")
MEMBERS = ("m1", "m2")
HEADER = "tenant"


def fair_config(fair_key: str = "", max_deliveries: int = 3) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        ordering=common_pb2.FAIR,
        fair_key=fair_key,
        lease_ms=1_000,
        max_deliveries=max_deliveries,
        max_record_bytes=64,
        dedup_window_ms=20_000,
        nack_backoff_base_ms=100,
        nack_backoff_max_ms=800,
    )


# -- the model ----------------------------------------------------------------------------


@dataclass
class MRecord:
    key: bytes | None
    tenant: str | None
    priority: int
    deliver_at: int


@dataclass
class MRow:
    count: int
    owner: str | None
    visible_at: int
    ready: bool


@dataclass
class MGroup:
    upto: int
    rows: dict[int, MRow] = field(default_factory=dict)
    queue: list[bytes] = field(default_factory=list)  # the rotation, front first
    # re-keyed (a new fair_key) since the last Lease: the whole queue joined at once, so keys
    # joining at the next catch-up line up with it in key order
    rekeyed: bool = False


class FairModel:
    def __init__(self, config: common_pb2.TopicConfig) -> None:
        self.config = config
        self.records: dict[int, MRecord] = {}
        self.next_offset = 0
        self.groups: dict[str, MGroup] = {}

    def fkey(self, o: int) -> bytes:
        r = self.records[o]
        if not self.config.fair_key:
            return r.key or b""
        return (r.tenant or "").encode()

    def ready_keys(self, g: MGroup) -> set[bytes]:
        return {self.fkey(o) for o, row in g.rows.items() if row.ready}

    def settle_queues(self) -> None:
        """A key without ready records leaves its rotation."""
        for g in self.groups.values():
            ready = self.ready_keys(g)
            g.queue = [k for k in g.queue if k in ready]

    def append(self, records: list[MRecord]) -> None:
        for r in records:
            self.records[self.next_offset] = r
            self.next_offset += 1

    def lease(self, name: str, member: str, n: int, now: int) -> list[tuple[int, int]]:
        g = self.groups.setdefault(name, MGroup(upto=min(self.records, default=self.next_offset)))
        for o in self.records:  # catch-up: materialize, dead-letter, promote
            if o >= g.upto:
                r = self.records[o]
                g.rows[o] = MRow(0, None, r.deliver_at, r.deliver_at <= now)
        g.upto = self.next_offset
        limit = self.config.max_deliveries
        for o, row in list(g.rows.items()):
            if not row.ready and row.visible_at <= now:
                if limit and row.count >= limit:
                    del g.rows[o]
                else:
                    row.ready, row.owner = True, None
        self.settle_queues()
        joining = sorted(self.ready_keys(g) - set(g.queue))
        g.queue = sorted(g.queue + joining) if g.rekeyed else g.queue + joining
        g.rekeyed = False
        out = []
        for _ in range(n):
            if not g.queue:
                break
            key = g.queue.pop(0)
            o = min(
                (o for o, row in g.rows.items() if row.ready and self.fkey(o) == key),
                key=lambda o: (self.records[o].priority, self.records[o].deliver_at, o),
            )
            row = g.rows[o]
            row.ready, row.owner, row.visible_at = False, member, now + self.config.lease_ms
            row.count += 1
            out.append((o, row.count))
            if key in self.ready_keys(g):
                g.queue.append(key)
        return out


class FairModelTest(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="raftq-fair-")
        self.sqlite = SqliteStore(os.path.join(self.dir, "p.db"), synchronous="OFF")
        self.machines = [PartitionMachine(MemoryStore()), PartitionMachine(self.sqlite)]
        self.log: list[bytes] = []
        self.model = FairModel(fair_config())
        self.now = 1_000_000
        self.deliveries: list[tuple[str, str, int, int]] = []

    def step(self, **op: Any) -> partition_pb2.CommandResult:
        data = partition_pb2.PartitionCommand(now_ms=self.now, **op).SerializeToString()
        self.log.append(data)
        results = [m.apply(data, len(self.log)) for m in self.machines]
        assert results[0] == results[1], f"the stores answered differently: {op}"
        return results[0]

    @initialize(fair_key=st.sampled_from(["", HEADER]), max_deliveries=st.sampled_from([0, 3]))
    def configure(self, fair_key: str, max_deliveries: int) -> None:
        config = fair_config(fair_key, max_deliveries)
        self.model.config = config
        assert not self.step(configure=partition_pb2.Configure(config=config)).error

    @rule(ms=st.sampled_from([0, 50, 300, 1_000, 3_000]))
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule(
        records=st.lists(
            st.tuples(
                st.sampled_from(KEYS),
                st.sampled_from(TENANTS),
                st.integers(0, 2),
                st.sampled_from([0, 0, 0, 500]),
            ),
            min_size=1,
            max_size=6,
        )
    )
    def append(self, records: list[tuple[bytes | None, str | None, int, int]]) -> None:
        protos, model = [], []
        for key, tenant, priority, delay in records:
            deliver_at = self.now + delay if delay else 0
            record = common_pb2.Record(value=b"v", priority=priority, deliver_at_ms=deliver_at)
            if key is not None:
                record.key = key
            if tenant is not None:
                record.headers[HEADER] = tenant.encode()
            protos.append(record)
            model.append(MRecord(key, tenant, priority, deliver_at))
        assert not self.step(append=partition_pb2.Append(records=protos)).error
        self.model.append(model)

    @rule(
        group=st.sampled_from(GROUPS),
        member=st.sampled_from(MEMBERS),
        n=st.integers(1, 7),
        budget=st.sampled_from([0, 0, 1]),
    )
    def lease(self, group: str, member: str, n: int, budget: int) -> None:
        """``budget`` 1: a one-byte max_bytes, so one record (the rotation's front) goes."""
        expected = self.model.lease(group, member, 1 if budget else n, self.now)
        result = self.step(
            lease=partition_pb2.Lease(group=group, member=member, max_records=n, max_bytes=budget)
        )
        got = [(d.record.offset, d.delivery_count) for d in result.deliveries]
        assert got == expected
        self.deliveries += [(group, member, o, c) for o, c in got]

    def _refs(self, data: st.DataObject) -> tuple[str, str, list[partition_pb2.DeliveryRef]]:
        picked = data.draw(st.lists(st.sampled_from(self.deliveries[-8:]), min_size=1, max_size=3))
        group, member = picked[0][0], picked[0][1]
        refs = {o: partition_pb2.DeliveryRef(offset=o, delivery_count=c) for _, _, o, c in picked}
        return group, member, list(refs.values())

    @precondition(lambda self: self.deliveries)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        group, member, refs = self._refs(data)
        result = self.step(ack=partition_pb2.Settle(group=group, member=member, refs=refs))
        g = self.model.groups.get(group)
        for r in result.refs:
            if r.error == ErrorCode.OK and g is not None:
                g.rows.pop(r.offset, None)
        self.model.settle_queues()

    @precondition(lambda self: self.deliveries)
    @rule(data=st.data(), delay=st.sampled_from([None, 0, 100, 2_000]))
    def nack(self, data: st.DataObject, delay: int | None) -> None:
        group, member, refs = self._refs(data)
        nack = partition_pb2.Nack(group=group, member=member, refs=refs)
        if delay is not None:
            nack.delay_ms = delay
        result = self.step(nack=nack)
        g = self.model.groups.get(group)
        for r in result.refs:
            if r.error != ErrorCode.OK or g is None:
                continue
            row = g.rows[r.offset]
            if r.dead_lettered:
                del g.rows[r.offset]
                continue
            wait = delay if delay is not None else nack_backoff_ms(self.model.config, row.count)
            row.owner, row.visible_at = None, self.now + wait

    @rule(group=st.sampled_from(GROUPS), member=st.sampled_from(["", *MEMBERS]))
    def release(self, group: str, member: str) -> None:
        self.step(release=partition_pb2.Release(group=group, member=member))
        g = self.model.groups.get(group)
        for row in g.rows.values() if g is not None else ():
            if row.owner is not None and not row.ready and (not member or row.owner == member):
                row.owner, row.visible_at = None, self.now

    @rule(offset=st.integers(0, 30))
    def cancel(self, offset: int) -> None:
        self.step(cancel_record=partition_pb2.CancelRecord(offset=offset))
        if self.model.records.pop(offset, None) is not None:
            for g in self.model.groups.values():
                g.rows.pop(offset, None)
            self.model.settle_queues()

    @rule(
        offset=st.integers(0, 30),
        priority=st.one_of(st.none(), st.integers(0, 2)),
        delay=st.one_of(st.none(), st.sampled_from([0, 400])),
    )
    def update(self, offset: int, priority: int | None, delay: int | None) -> None:
        if priority is None and delay is None:
            return
        cmd = partition_pb2.UpdateRecord(offset=offset)
        if priority is not None:
            cmd.priority = priority
        if delay is not None:
            cmd.deliver_at_ms = self.now + delay
        self.step(update_record=cmd)
        r = self.model.records.get(offset)
        if r is None:
            return
        r.priority = r.priority if priority is None else priority
        if delay is not None:
            r.deliver_at = self.now + delay
            for g in self.model.groups.values():
                row = g.rows.get(offset)
                if row is not None and not (row.owner and row.visible_at > self.now):
                    row.owner, row.visible_at, row.ready = None, r.deliver_at, False
        self.model.settle_queues()

    @rule(group=st.sampled_from(GROUPS))
    def forget(self, group: str) -> None:
        self.step(forget_group=partition_pb2.ForgetGroup(group=group))
        self.model.groups.pop(group, None)

    @rule(fair_key=st.sampled_from(["", HEADER]))
    def refair(self, fair_key: str) -> None:
        """A new fair_key re-keys every pending row: each rotation starts again."""
        config = fair_config(fair_key, self.model.config.max_deliveries)
        self.step(configure=partition_pb2.Configure(config=config))
        rekeyed = fair_key != self.model.config.fair_key
        self.model.config = config
        for g in self.model.groups.values() if rekeyed else ():
            g.queue, g.rekeyed = sorted(self.model.ready_keys(g)), True

    @invariant()
    def rotations_agree(self) -> None:
        for name, g in self.model.groups.items():
            for machine in self.machines:
                row = machine.store.group_get(name)
                assert row is not None
                rotation, _ = machine.store.fair_rotation(row.gid)
                assert [k for k, _, _ in rotation] == g.queue, type(machine.store).__name__

    def teardown(self) -> None:
        try:
            memory, sqlite = (m.store.dump() for m in self.machines)
            assert memory == sqlite, "the two stores hold different state"
            self.sqlite.close()
            reopened = SqliteStore(os.path.join(self.dir, "p.db"))
            assert reopened.dump() == sqlite
            reopened.close()
            fresh = PartitionMachine(MemoryStore())  # a follower: nobody reads its results
            for index, data in enumerate(self.log, start=1):
                fresh.apply(data, index, respond=False)
            assert fresh.store.dump() == sqlite, "a replica replaying the log diverged"
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def test_fair_delivery_matches_the_queue_model() -> None:
    print(f"fair model seed: {SEED} (replay: RAFTQ_SEED={SEED})")
    run_state_machine_as_test(
        hypothesis_seed(SEED)(FairModelTest),
        settings=settings(
            max_examples=int(os.environ.get("RAFTQ_MODEL_EXAMPLES", "80")),
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


# -- the acceptance case and direct checks ------------------------------------------------


class Partition:
    def __init__(self, store: Any) -> None:
        self.machine = PartitionMachine(store)
        self.log: list[bytes] = []

    def apply(self, now_ms: int = 1_000, **op: Any) -> partition_pb2.CommandResult:
        data = partition_pb2.PartitionCommand(now_ms=now_ms, **op).SerializeToString()
        self.log.append(data)
        result = self.machine.apply(data, len(self.log))
        assert not result.error, result
        return result

    def send(self, records: list[common_pb2.Record]) -> None:
        for i in range(0, len(records), 10_000):
            self.apply(append=partition_pb2.Append(records=records[i : i + 10_000]))

    def lease(self, n: int, group: str = "g") -> list[common_pb2.Delivery]:
        result = self.apply(lease=partition_pb2.Lease(group=group, member="m", max_records=n))
        return list(result.deliveries)


def test_a_backlog_of_one_key_does_not_starve_99_small_keys(tmp_path: Path) -> None:
    """100,000 ready records of one key, then 10 of each of 99 keys: the first 1,000
    deliveries hold all 10 of every small key (>= 9 asked), the big key 10 (one per round)."""
    p = Partition(SqliteStore(str(tmp_path / "p.db"), synchronous="OFF"))
    p.apply(configure=partition_pb2.Configure(config=fair_config(max_deliveries=5)))
    p.send([common_pb2.Record(key=b"big", value=b"b") for _ in range(100_000)])
    p.send([common_pb2.Record(key=b"k%02d" % (i % 99), value=b"s") for i in range(990)])
    got: list[common_pb2.Delivery] = []
    for n in (1, 99, 400, 500):  # Leases of any size take turns the same way
        got += p.lease(n)
    keys = collections.Counter(d.record.record.key for d in got)
    assert len(got) == 1_000
    assert {k: v for k, v in keys.items() if k != b"big"} == {b"k%02d" % i: 10 for i in range(99)}
    assert keys[b"big"] == 10
    big = [d.record.offset for d in got if d.record.record.key == b"big"]
    assert big == list(range(10)), "within a key, offset order"
    follower = PartitionMachine(SqliteStore(str(tmp_path / "f.db"), synchronous="OFF"))
    for index, data in enumerate(p.log, start=1):
        follower.apply(data, index, respond=False)
    assert follower.store.dump()["fair"] == p.machine.store.dump()["fair"]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_fair_key_from_a_header_and_keyless_records_share_one_key(
    store: str, tmp_path: Path
) -> None:
    p = Partition(MemoryStore() if store == "memory" else SqliteStore(str(tmp_path / "p.db")))
    p.apply(configure=partition_pb2.Configure(config=fair_config(HEADER, 0)))

    def record(tenant: bytes | None, priority: int = 0) -> common_pb2.Record:
        r = common_pb2.Record(key=b"routing", value=tenant or b"-", priority=priority)
        if tenant is not None:
            r.headers[HEADER] = tenant
        return r

    # offsets: 0-3 tenant a (3 at priority -1: first within a), 4-5 b, 6-7 no header
    p.send([record(b"a"), record(b"a"), record(b"a"), record(b"a", -1)])
    p.send([record(b"b"), record(b"b"), record(None), record(None)])
    order = [(d.record.offset, d.record.record.value) for d in p.lease(8)]
    # joined together: in key order b"" (no header), b"a", b"b"
    assert order == [
        (6, b"-"),
        (3, b"a"),
        (4, b"b"),
        (7, b"-"),
        (0, b"a"),
        (5, b"b"),
        (1, b"a"),
        (2, b"a"),
    ]
    assert fair_key_of(b"k", None, "") == b"k" and fair_key_of(None, None, "") == b""


def test_fair_plan_is_round_robin_in_rotation_order() -> None:
    assert fair_plan([3, 1, 2], 10) == [0, 1, 2, 0, 2, 0]
    assert fair_plan([3, 1, 2], 4) == [0, 1, 2, 0]
    assert fair_plan([0, 2], 5) == [1, 1]
    assert fair_plan([], 5) == [] and fair_plan([4], 0) == []


def test_the_rotation_survives_a_snapshot_and_a_restart(tmp_path: Path) -> None:
    p = Partition(SqliteStore(str(tmp_path / "p.db")))
    p.apply(configure=partition_pb2.Configure(config=fair_config()))
    p.send([common_pb2.Record(key=k, value=b"v") for k in (b"a", b"a", b"b", b"b", b"c", b"c")])
    assert [d.record.record.key for d in p.lease(2)] == [b"a", b"b"]
    p.machine.snapshot(str(tmp_path / "snap.db"))
    restored = PartitionMachine(SqliteStore(str(tmp_path / "other.db")))
    restored.restore(str(tmp_path / "snap.db"))
    assert restored.store.dump() == p.machine.store.dump()
    data = partition_pb2.PartitionCommand(
        now_ms=1_000, lease=partition_pb2.Lease(group="g", member="m", max_records=4)
    ).SerializeToString()
    on_restored = restored.apply(data, len(p.log) + 1)
    assert [d.record.record.key for d in on_restored.deliveries] == [b"c", b"a", b"b", b"c"]


def test_a_file_from_before_fair_ordering_opens_and_serves(tmp_path: Path) -> None:
    """A partition file whose pending table has no fkey column gets it at open."""
    path = str(tmp_path / "old.db")
    old = SqliteStore(path)
    old.close()
    conn = apsw.Connection(path)
    for name in ("fair_join_insert", "fair_join_update", "fair_leave_update", "fair_leave_delete"):
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("DROP INDEX pending_fair")
    conn.execute("ALTER TABLE pending DROP COLUMN fkey")
    conn.close()
    p = Partition(SqliteStore(path))
    p.apply(configure=partition_pb2.Configure(config=fair_config()))
    p.send([common_pb2.Record(key=k, value=b"v") for k in (b"a", b"a", b"b")])
    assert [d.record.record.key for d in p.lease(3)] == [b"a", b"b", b"a"]


def test_switching_a_topic_to_fair_and_back(tmp_path: Path) -> None:
    p = Partition(SqliteStore(str(tmp_path / "p.db")))
    p.send([common_pb2.Record(key=k, value=b"v") for k in (b"a", b"a", b"a", b"b")])
    assert [d.record.offset for d in p.lease(1)] == [0]  # fifo
    p.apply(configure=partition_pb2.Configure(config=fair_config()))
    assert [d.record.offset for d in p.lease(2)] == [1, 3]  # a, then b
    p.apply(
        configure=partition_pb2.Configure(
            config=common_pb2.TopicConfig(
                ordering=common_pb2.FIFO, lease_ms=1_000, max_record_bytes=64
            )
        )
    )
    assert p.machine.store.dump()["fair"][:2] == ([], [])
    assert [d.record.offset for d in p.lease(5)] == [2]


def test_bad_fair_settings_are_refused_and_change_nothing() -> None:
    unknown = common_pb2.TopicConfig(lease_ms=1, max_record_bytes=1)
    unknown.ordering = 7  # type: ignore[assignment]
    problem = check_config(unknown)
    assert problem is not None and "fifo, priority or fair" in problem.message
    problem = check_config(common_pb2.TopicConfig(lease_ms=1, max_record_bytes=1, fair_key="t"))
    assert problem is not None and problem.code == ErrorCode.INVALID_ARGUMENT
    assert "fair_key applies to ordering=fair only" in problem.message
    long_key = fair_config("h" * 256)
    assert check_config(long_key) is not None

    p = Partition(MemoryStore())
    p.apply(configure=partition_pb2.Configure(config=fair_config()))
    before = p.machine.store.dump()
    for bad in (unknown, fair_config("h" * 256)):
        data = partition_pb2.PartitionCommand(
            now_ms=1_000, configure=partition_pb2.Configure(config=bad)
        ).SerializeToString()
        assert p.machine.apply(data, 99).error == ErrorCode.INVALID_ARGUMENT
    assert p.machine.store.dump() == before

    frontend = MetadataFrontend()
    cases: list[tuple[dict[str, int | str], str]] = [
        ({"ordering": "random"}, "must be fifo, priority or fair"),
        ({"fair_key": "tenant"}, "fair_key applies to ordering=fair only"),
        ({"ordering": "fair", "fair_key": 5}, "must be a header name"),
    ]
    for config, says in cases:
        with pytest.raises(errors.InvalidArgument, match=says):
            frontend._configured("t", frontend.topic_defaults.config(), config)
    good = frontend._configured("t", frontend.topic_defaults.config(), {"ordering": "fair"})
    assert good.ordering == common_pb2.FAIR and good.fair_key == ""
