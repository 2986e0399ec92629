"""A large raft entry is copied as few times as its path needs (issue 16: 64 KiB records).

Each step a 1 MiB entry takes on the raft path (pickled into a batch frame, sealed, framed, read
back out of the byte stream, written to the journal) costs a copy of it where bytes are joined
or sliced; on this machine each copy of a MiB is 0.05-1 ms of the driver thread that every group
shares. These tests count the bytes each step allocates (tracemalloc's peak: every copy of the
entry is a new allocation of its size) against the size of the entry.
"""

from __future__ import annotations

import os
import pickle
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raftq.transport.raft import codec, handshake
from raftq.transport.raft.journal import DurableJournal

ENTRY_BYTES = 2 * 1024 * 1024
RECV_BYTES = 256 * 1024  # what MuxEndpoint._on_readable reads at a time


def _allocated(step: Callable[[], Any]) -> float:
    """Peak bytes allocated while ``step`` runs, in entries."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        step()
        return (tracemalloc.get_traced_memory()[1] - before) / ENTRY_BYTES
    finally:
        tracemalloc.stop()


def _batch(entry: bytes) -> list[tuple[str, dict[str, Any]]]:
    return [("topic-0", {"type": 3, "term": 2, "entries": [(entry, 7, 2)], "commit_index": 6})]


def test_a_batch_frame_is_pickled_once_and_reads_back() -> None:
    entry = os.urandom(ENTRY_BYTES)
    batch = _batch(entry)
    plain = codec.dumps_data(batch, bytes((codec.KIND_BATCH,)))
    assert plain[0] == codec.KIND_BATCH
    assert plain[1:] == pickle.dumps(batch, protocol=codec.PICKLE_PROTOCOL)  # the wire as before
    assert codec.loads_data(plain[1:]) == batch
    # pickle.dumps grows its own buffer around the entry: 1.5 entries at the peak
    assert _allocated(lambda: codec.dumps_data(batch, b"\x05")) < 1.3


def test_sealing_a_laid_out_frame_matches_sealing_kind_and_body() -> None:
    key = os.urandom(handshake.KEY_BYTES)
    body = os.urandom(70_000)
    one, other, reader = (handshake.FrameCipher(key) for _ in range(3))
    laid_out = one.seal_plain(bytes((codec.KIND_BATCH,)) + body)
    assert laid_out == other.seal(codec.KIND_BATCH, body)
    assert reader.open(laid_out) == (codec.KIND_BATCH, body)


def test_the_frame_decoder_copies_a_large_body_once() -> None:
    body = os.urandom(ENTRY_BYTES)
    frame = codec.encode_frame(codec.KIND_SEALED, body)
    decoder = codec.FrameDecoder(2 * ENTRY_BYTES)
    frames: list[tuple[int, bytes]] = []

    def feed_as_received() -> None:
        for at in range(0, len(frame), RECV_BYTES):
            frames.extend(decoder.feed(frame[at : at + RECV_BYTES]))

    # the buffered stream and the body; a bytearray slice, then bytes() of it: one more
    assert _allocated(feed_as_received) < 2.5
    assert frames == [(codec.KIND_SEALED, body)]
    assert decoder.buffered_bytes == 0


def test_the_journal_writes_an_entry_without_copying_it(tmp_path: Path) -> None:
    entry = os.urandom(ENTRY_BYTES)
    journal = DurableJournal(tmp_path / "journal", fsync=False)
    journal.add(b"first", 1, 1)
    # joining idx/term and the header to the entry: 2 entries
    assert _allocated(lambda: journal.add(entry, 2, 1)) < 0.25
    journal.add(b"last", 3, 2)
    journal.sync()
    reopened = DurableJournal(tmp_path / "journal", fsync=False)
    assert [tuple(e) for e in reopened] == [(b"first", 1, 1), (entry, 2, 1), (b"last", 3, 2)]
