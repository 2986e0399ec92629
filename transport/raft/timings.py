"""RaftTimings: the timing and size knobs of one Raft group and the rules that tie them
together (``validate``). A value object: the node (node.py) reads it, the broker's config
(broker/config.py) and the tests build it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RaftTimings:
    """Timing and size knobs of one group; seconds and bytes, units last."""

    election_timeout_min_s: float = 0.4
    election_timeout_max_s: float = 1.4
    heartbeat_s: float = 0.1
    tick_s: float = 0.05
    connection_timeout_s: float = 3.5
    connection_retry_s: float = 1.0
    leader_fallback_s: float = 5.0
    max_entry_bytes: int = 2 << 20
    append_batch_bytes: int = (2 << 20) + 4096
    max_inflight: int = 10_000
    compaction_min_entries: int = 5000
    compaction_min_time_s: float = 300.0
    snapshot_chunk_bytes: int = 1 << 20
    # A commit the followers have not heard of rides on the leader's next append_entries (new
    # entries or a heartbeat), or goes alone once it is this old; 0 pushes it at once (stock
    # pysyncobj with appendEntriesUseBatch off). Only followers' apply waits for it.
    commit_push_s: float = 0.0
    # Idle groups stop heartbeating while their brokers' links are heard (quiescence.py);
    # only over a transport with link liveness (mux, hub) and only when the
    # election timeout exceeds the transport's silent_after_s.
    quiesce: bool = True

    @classmethod
    def fast(cls, **overrides: Any) -> RaftTimings:
        """Short timeouts (tests, local dev): ~0.2 s elections after a leader dies."""
        values: dict[str, Any] = {
            "election_timeout_min_s": 0.15,
            "election_timeout_max_s": 0.35,
            "heartbeat_s": 0.04,
            "tick_s": 0.02,
            "connection_timeout_s": 1.0,
            "connection_retry_s": 0.1,
            "leader_fallback_s": 2.0,
        }
        values.update(overrides)
        return cls(**values)

    def validate(self) -> None:
        """Raise ValueError when the knobs contradict each other."""
        checks = [
            (self.heartbeat_s > 0, "heartbeat_s > 0"),
            (
                self.election_timeout_min_s > 3 * self.heartbeat_s,
                "election_timeout_min_s > 3 * heartbeat_s",
            ),
            (
                self.election_timeout_max_s > self.election_timeout_min_s,
                "election_timeout_max_s > election_timeout_min_s",
            ),
            (
                self.connection_timeout_s >= self.election_timeout_max_s,
                "connection_timeout_s >= election_timeout_max_s",
            ),
            (self.leader_fallback_s > self.heartbeat_s, "leader_fallback_s > heartbeat_s"),
            (self.tick_s > 0, "tick_s > 0"),
            (
                0 <= self.commit_push_s <= self.heartbeat_s,
                "0 <= commit_push_s <= heartbeat_s",
            ),
            # pysyncobj chunks a single entry whose stored command (type byte + format byte +
            # data) reaches append_batch_bytes, and that path is broken: never let it happen.
            (
                self.append_batch_bytes > self.max_entry_bytes + 2,
                "append_batch_bytes > max_entry_bytes + 2",
            ),
            (self.max_inflight > 0, "max_inflight > 0"),
            (self.compaction_min_entries >= 2, "compaction_min_entries >= 2"),
        ]
        for ok, rule in checks:
            if not ok:
                raise ValueError(f"RaftTimings: {rule} does not hold: {self}")
