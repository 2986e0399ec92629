"""Spark writers' committed-batch watermarks expire (Kafka's transactional.id.expiration.ms):
judged by the metadata leader's clock against the stamped time of the last raise, on real
broker processes with a short ``txns.expiration_ms``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from raftq.backend import expired_txns
from raftq.metadata.table import Table, frozen_map
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(180)

EXPIRATION_MS = 3000


def test_expired_txns_are_judged_by_the_leaders_time() -> None:
    a, b = ("a", ""), ("b", "orders")
    table = Table(txns=frozen_map({a: 3, b: 1}), txn_committed_ms=frozen_map({a: 1000, b: 2000}))
    assert expired_txns(table, 3000, 3999) == []
    assert expired_txns(table, 3000, 4000) == [a]  # at the limit
    assert expired_txns(table, 3000, 10**12) == [a, b]
    assert expired_txns(table, 0, 10**12) == []  # 0: never


def test_a_watermark_not_raised_for_the_window_is_forgotten_and_a_raised_one_kept(
    tmp_path: Path,
) -> None:
    env = {"RAFTQ_TXNS__EXPIRATION_MS": str(EXPIRATION_MS)}
    with ProcessCluster(tmp_path, 3, env=env) as cluster:
        cluster.wait_ready()
        admin = cluster.admin()
        assert admin.commit_txn("idle-app", 7) == 7
        committed = time.monotonic()
        raised = time.monotonic()
        assert admin.commit_txn("busy-app", 1) == 1
        version = 1
        while admin.get_txn("idle-app") is not None:  # keep busy-app raised meanwhile
            assert time.monotonic() - committed < 60, "idle-app never expired"
            version += 1
            raised = time.monotonic()
            assert admin.commit_txn("busy-app", version) == version
            time.sleep(0.2)  # pacing of the raises, not a wait for an outcome
        assert time.monotonic() - committed >= EXPIRATION_MS / 1000 - 0.5  # never early
        if time.monotonic() - raised < EXPIRATION_MS / 1000 - 0.5:  # (a stalled machine can
            assert admin.get_txn("busy-app") == version  # leave a gap of a whole window)
        assert admin.commit_txn("idle-app", 0) == 0  # starts afresh
        wait_until(lambda: admin.get_txn("busy-app") is None, 60, "busy-app expired once idle")
