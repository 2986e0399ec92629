"""Non-voting members (learners): replicated to, never counted, never campaign; promoted by a
single membership change. Real RaftNodes over TCP on 127.0.0.x."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from raftq.membership import Membership
from raftq.proto import errors
from raftq.transport.raft import RaftNode
from raftq.transport.raft.node import FailReason
from raftq.transport.raft.snapshot import read_snapshot, snapshot_learners, write_snapshot
from raftq.transport.raft.testing import free_addr, wait_until
from tests.unit.test_raft_node import FAST, Cluster, FileStateMachine


class LearnerCluster(Cluster):
    def start_learner(self, addr: str, peers: list[str]) -> RaftNode:
        directory = self.root / addr.replace(":", "_")
        machine = self.machines[addr] = FileStateMachine(directory / "sm")
        node = RaftNode(
            addr,
            peers,
            apply=machine.apply,
            snapshot=machine.snapshot,
            restore=machine.restore,
            data_dir=directory / "raft",
            name="p0",
            timings=self.timings,
            standby=True,
            learners=[addr],
        )
        self.nodes[addr] = node
        return node


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    c = LearnerCluster(tmp_path)
    yield c
    c.close()


def add_learners(c: LearnerCluster, count: int) -> list[str]:
    added: list[str] = []
    for i in range(count):
        addr = free_addr(f"127.0.0.{10 + i}")
        c.start_learner(addr, [*c.addrs, *added, addr])
        assert c.leader().change_membership("learner", addr, 10.0)
        added.append(addr)
    return added


def test_learners_replicate_but_neither_count_nor_campaign(cluster: LearnerCluster) -> None:
    c = cluster
    c.propose(["v0"])
    learners = add_learners(c, 2)
    c.propose(["v1"])
    wait_until(
        lambda: all(c.machines[a].payloads() == ["v0", "v1"] for a in learners), 10, "learner log"
    )
    leader = c.leader()
    assert leader.voters() == sorted(c.addrs)
    assert leader.learners() == sorted(learners)
    assert all(c.nodes[a].is_learner for a in learners)
    wait_until(
        lambda: all(c.nodes[a].learners() == sorted(learners) for a in learners),
        10,
        "the learners know one another as learners",
    )
    assert not leader.change_membership("learner", learners[0], 5.0)  # already one
    assert not leader.change_membership("promote", c.addrs[0], 5.0)  # a voter already

    # Two of three voters gone: one voter and two learners would be 3 of 5 if learners counted.
    survivor = leader.self_addr
    for addr in c.addrs:
        if addr != survivor:
            c.stop(addr)
    with pytest.raises((errors.Timeout, errors.NotLeader, errors.Unavailable)):
        c.nodes[survivor].propose_sync(b"no quorum", timeout=1.0)
    assert "no quorum" not in c.machines[learners[0]].payloads()
    c.stop(survivor)
    # No voter left: a learner never campaigns, so its term never moves.
    terms = {a: c.nodes[a].term for a in learners}
    deadline = time.monotonic() + 4 * FAST.election_timeout_max_s
    while time.monotonic() < deadline:
        assert all(not c.nodes[a].is_leader() for a in learners)
        time.sleep(0.05)
    assert {a: c.nodes[a].term for a in learners} == terms


def test_a_learner_is_promoted_only_by_its_entry_and_then_votes(cluster: LearnerCluster) -> None:
    c = cluster
    c.propose(["a"])
    (learner,) = add_learners(c, 1)
    wait_until(lambda: c.machines[learner].payloads() == ["a"], 10, "learner caught up")
    leader = c.leader()
    denied: list[int] = []
    leader.transfer_leadership(learner, lambda _r, err: denied.append(err))
    wait_until(lambda: denied, 5, "the transfer's answer")
    assert denied == [FailReason.REQUEST_DENIED]  # a learner would not campaign

    assert leader.caught_up(learner, index=leader.commit_index)
    assert leader.change_membership("promote", learner, 10.0)
    wait_until(lambda: not c.nodes[learner].is_learner, 10, "the learner knows it votes")
    assert leader.learners() == []
    assert leader.voters() == sorted([*c.addrs, learner])
    leader.transfer_leadership(learner)  # it campaigns and wins the votes of the others
    wait_until(lambda: c.nodes[learner].is_leader(), 10, "the promoted member leads")
    c.propose(["b"])
    wait_until(lambda: all(m.payloads() == ["a", "b"] for m in c.machines.values()), 10, "b")
    # Four voters: the promoted leader and one other are 2 of 4, no quorum.
    for addr in [a for a in c.addrs if a != leader.self_addr][:2]:
        c.stop(addr)
    with pytest.raises((errors.Timeout, errors.NotLeader, errors.Unavailable)):
        c.nodes[learner].propose_sync(b"no quorum", timeout=1.0)


def test_snapshots_carry_the_learners(tmp_path: Path) -> None:
    state = tmp_path / "state"

    def snapshot(path: str) -> None:
        Path(path).write_bytes(b"user")

    def restore(path: str) -> None:
        state.write_bytes(Path(path).read_bytes())

    last, prev = (b"\x01", 7, 2), (b"\x01", 6, 2)
    for learners in (["127.0.0.9:1"], []):
        path = str(tmp_path / f"snap{len(learners)}")
        write_snapshot(
            path,
            (last, prev, ["127.0.0.1:1", "127.0.0.9:1"]),
            snapshot,
            fsync=False,
            learners=learners,
        )
        assert snapshot_learners(path) == learners
        got = read_snapshot(path, restore, fsync=False)
        assert got == (last, prev, ["127.0.0.1:1", "127.0.0.9:1"])
        assert state.read_bytes() == b"user"


def test_the_metadata_leader_promotes_only_a_caught_up_learner(
    cluster: LearnerCluster, tmp_path: Path
) -> None:
    """Membership.promote_voters on a real group (the broker around it reduced to what it
    reads): a learner that has not acknowledged the committed log stays a learner."""
    c = cluster
    leader = c.leader()
    lagging = free_addr("127.0.0.20")
    assert leader.change_membership("learner", lagging, 10.0)  # not running: acknowledges nothing
    c.propose([f"e{i}" for i in range(20)])
    config = SimpleNamespace(
        broker=SimpleNamespace(data_dir=tmp_path / "broker"),
        raft=SimpleNamespace(
            metadata_voters=5,  # 3 voters now
            election_timeout_max_ms=FAST.election_timeout_max_s * 1000,
        ),
    )
    membership = Membership(
        broker_id=1,
        config=config,  # type: ignore[arg-type]
        meta=SimpleNamespace(node=leader),  # type: ignore[arg-type]
        metadata=None,  # type: ignore[arg-type]
        frontend=None,  # type: ignore[arg-type]
        internal=None,  # type: ignore[arg-type]
        reports=None,  # type: ignore[arg-type]
        live=None,  # type: ignore[arg-type]
        joining=False,
    )
    try:
        for _ in range(20):
            membership.promote_voters()
            time.sleep(0.05)
        assert leader.learners() == [lagging] and not leader.caught_up(lagging)
        c.start_learner(lagging, [*c.addrs, lagging])
        wait_until(lambda: leader.caught_up(lagging, index=leader.commit_index), 10, "caught up")

        def promoted() -> bool:
            membership.promote_voters()
            return leader.learners() == []

        wait_until(promoted, 10, "the caught-up learner promoted")
        assert lagging in leader.voters()
    finally:
        membership.stop()
