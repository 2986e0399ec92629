"""Membership-change entries are protobuf and no log or journal entry is ever unpickled.

Stock pysyncobj runs ``pickle.loads`` on every MEMBERSHIP entry it appends or applies and on
every VERSION entry it applies: a crafted entry replicated by a leader, or written into a
journal file, ran code on every replica. Each crafted entry here would create a marker file
when unpickled; the tests check the marker never appears, the group's voters do not change and
the group keeps committing.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.node import TCPNode
from pysyncobj.syncobj import _COMMAND_TYPE

from raftq.proto import raft_pb2
from raftq.transport.raft import RaftNode
from raftq.transport.raft.entries import MEMBERSHIP, PROTO_V1, decode_membership, encode_membership
from raftq.transport.raft.journal import DurableJournal
from raftq.transport.raft.node import FailReason
from raftq.transport.raft.testing import free_addr, wait_until
from tests.unit.test_raft_node import FAST, Cluster


class _Exploit:
    """Unpickled, it runs ``touch marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def crafted(kind: int, marker: Path) -> bytes:
    return bytes([kind]) + pickle.dumps(["add", "127.0.0.9:1", _Exploit(marker)], protocol=2)


def test_membership_entries_are_protobuf_and_legacy_pickles_run_no_code(tmp_path: Path) -> None:
    entry = encode_membership("add", "127.0.0.1:7001")
    assert entry[:2] == MEMBERSHIP + PROTO_V1
    assert raft_pb2.MembershipChange.FromString(entry[2:]).addr == "127.0.0.1:7001"
    assert decode_membership(entry) == ["add", "127.0.0.1:7001"]
    assert decode_membership(encode_membership("rem", "h:1")) == ["rem", "h:1"]
    # A journal written by stock pysyncobj (before this encoding) still replays.
    legacy = MEMBERSHIP + pickle.dumps(["rem", "h:2", TCPNode("h:2")], protocol=2)
    assert decode_membership(legacy) == ["rem", "h:2"]
    # Refused, and nothing runs: a global other than TCPNode, garbage, bad addresses/ops.
    marker = tmp_path / "pwned"
    assert decode_membership(crafted(_COMMAND_TYPE.MEMBERSHIP, marker)) is None
    assert decode_membership(MEMBERSHIP + b"\x80\x02garbage") is None
    assert decode_membership(MEMBERSHIP + PROTO_V1 + b"\xff\xff") is None
    bad_addr = raft_pb2.MembershipChange(op=raft_pb2.MembershipChange.ADD, addr="nohost")
    assert decode_membership(MEMBERSHIP + PROTO_V1 + bad_addr.SerializeToString()) is None
    no_op = raft_pb2.MembershipChange(addr="h:1")
    assert decode_membership(MEMBERSHIP + PROTO_V1 + no_op.SerializeToString()) is None
    assert decode_membership(MEMBERSHIP + pickle.dumps(["boom", "h:1"])) is None
    assert decode_membership(b"\x00R data") is None  # not a membership entry
    assert not marker.exists()


@pytest.fixture
def three(tmp_path: Path) -> Any:
    c = Cluster(tmp_path)
    yield c
    c.close()


def test_crafted_membership_entry_in_the_log_runs_nothing_anywhere(
    three: Cluster, tmp_path: Path
) -> None:
    c = three
    c.propose(["before"])
    c.wait_converged()
    voters = {a: n.members() for a, n in c.nodes.items()}
    marker = tmp_path / "pwned-by-log"
    outcome: list[int] = []
    # As a leader holding the secret would: append the entry and replicate it to every replica.
    c.leader().syncobj._applyCommand(
        crafted(_COMMAND_TYPE.MEMBERSHIP, marker), lambda _r, err: outcome.append(err)
    )
    wait_until(lambda: outcome, 5, "the crafted entry's outcome")
    c.propose(["after"])
    c.wait_converged()
    assert not marker.exists(), "a pickled membership entry ran code"
    assert {a: n.members() for a, n in c.nodes.items()} == voters
    assert all(m.payloads() == ["before", "after"] for m in c.machines.values())


def test_crafted_entries_in_a_journal_file_run_nothing_on_restart(tmp_path: Path) -> None:
    addr = free_addr("127.0.0.1")
    applied: list[bytes] = []

    def start() -> RaftNode:
        return RaftNode(
            addr,
            [addr],
            apply=lambda data, index: applied.append(data),
            data_dir=tmp_path / "raft",
            name="g",
            timings=FAST,
        )

    node = start()
    wait_until(node.is_leader, 5, "a single-node leader")
    node.propose_sync(b"one", timeout=5)
    node.destroy()

    markers = [tmp_path / "pwned-membership", tmp_path / "pwned-version"]
    journal = DurableJournal(tmp_path / "raft" / "g.journal")
    last, term = journal[-1][1], journal[-1][2]
    journal.add(crafted(_COMMAND_TYPE.MEMBERSHIP, markers[0]), last + 1, term)
    journal.add(crafted(_COMMAND_TYPE.VERSION, markers[1]), last + 2, term)
    journal.sync()
    journal._destroy()

    node = start()
    try:
        wait_until(node.is_leader, 5, "the restarted leader")
        done: list[int] = []
        node.propose(b"two", lambda _r, err: done.append(err))
        wait_until(lambda: done, 5, "a commit after the crafted entries")
        assert done == [FailReason.SUCCESS]
        assert node.applied_index >= last + 3
        assert applied[-1] == b"two"
        assert node.members() == [addr]
        assert not any(m.exists() for m in markers), "a pickled journal entry ran code"
    finally:
        node.destroy()
