"""The journal's term and vote file (issue 12): written in place over the older of two
checksummed slots with one fdatasync, not through tmp, fsync, rename and directory fsync; a
torn write reads as the value before it; a file of the earlier format is read and replaced."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from raftq.transport.raft.journal import META_SLOT_BYTES, DurableJournal, read_meta


def journal(tmp_path: Path) -> DurableJournal:
    return DurableJournal(tmp_path / "g.journal", fsync=True, group="g")


def test_term_vote_and_commit_hint_survive_a_reopen_across_many_writes(tmp_path: Path) -> None:
    j = journal(tmp_path)
    for term in range(1, 8):
        j.setCurrentTerm(term, f"127.0.0.{term}:9")
    j.add(b"x", 1, 7)
    j.setRaftCommitIndex(1)
    j.onOneSecondTimer()
    j.sync()
    j._destroy()
    assert os.path.getsize(j.meta_path) == 2 * META_SLOT_BYTES

    again = journal(tmp_path)
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (7, "127.0.0.7:9")
    assert again.getRaftCommitIndex() == 1
    again._destroy()


def test_a_vote_is_one_flush_in_place_not_a_rename(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.setCurrentTerm(1, None)  # creates the file (tmp, fsync, rename, directory fsync)
    inode = os.stat(j.meta_path).st_ino
    flushes = j.fsync_count
    for term in range(2, 12):
        j.setCurrentTerm(term, "127.0.0.2:9")
    assert j.fsync_count - flushes == 10, "one flush per vote"
    assert os.stat(j.meta_path).st_ino == inode, "replaced by a rename"
    assert not list(tmp_path.glob("*.tmp"))
    j._destroy()


@pytest.mark.parametrize("torn", ["payload", "magic", "cut short"])
def test_a_torn_write_of_the_newer_slot_reads_as_the_value_before_it(
    tmp_path: Path, torn: str
) -> None:
    j = journal(tmp_path)
    j.setCurrentTerm(4, "127.0.0.4:9")
    j.setCurrentTerm(5, "127.0.0.5:9")  # the newest: its slot is torn below
    j._destroy()
    data = bytearray(j.meta_path.read_bytes())
    newest = max((0, META_SLOT_BYTES), key=lambda at: data[at + 8])  # sequence's low byte
    if torn == "payload":
        data[newest + 40] ^= 0xFF
    elif torn == "magic":
        data[newest] ^= 0xFF
    else:
        data[newest + 30 : newest + META_SLOT_BYTES] = bytes(META_SLOT_BYTES - 30)
    j.meta_path.write_bytes(bytes(data))

    again = journal(tmp_path)
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (4, "127.0.0.4:9")
    again.setCurrentTerm(6, None)  # over the torn slot, not the good one
    again._destroy()
    assert read_meta(j.meta_path.read_bytes()) is not None
    last = journal(tmp_path)
    assert (last.getCurrentTerm(), last.getVotedForNodeId()) == (6, None)
    last._destroy()


def test_neither_slot_whole_is_an_error_not_term_zero(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.setCurrentTerm(3, None)
    j._destroy()
    j.meta_path.write_bytes(bytes(2 * META_SLOT_BYTES))
    with pytest.raises(ValueError, match="no whole slot"):
        journal(tmp_path)


def test_a_meta_file_of_the_earlier_format_is_read_then_replaced_by_slots(
    tmp_path: Path,
) -> None:
    meta = tmp_path / "g.journal.meta"
    meta.write_text(json.dumps({"term": 9, "voted_for": "127.0.0.3:9", "commit_index": 1}))
    j = journal(tmp_path)
    assert (j.getCurrentTerm(), j.getVotedForNodeId()) == (9, "127.0.0.3:9")
    j.setCurrentTerm(10, None)
    j._destroy()
    found = read_meta(meta.read_bytes())
    assert found is not None and found[1]["term"] == 10
    again = journal(tmp_path)
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (10, None)
    again._destroy()
