"""Fixtures shared by every test. Helpers importable without pytest live in tests/helpers.py."""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Callable, Iterator

import pytest

from raftq.partitions.sqlite_store import SqliteStore
from raftq.partitions.store import MemoryStore, PartitionStore
from tests import helpers
from tests.cluster import Cluster, make_cluster

# A run started in the background by a shell (`make test &`) inherits SIGINT ignored, and so
# would every broker and CLI process it starts: an ignored signal stays ignored across exec,
# and Python then installs no KeyboardInterrupt handler. The tests that press Ctrl-C (dev up,
# produce, the README tour's cluster) need it delivered: a handled signal is reset to the
# default in a child, so this restores Ctrl-C for the processes the tests start.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def free_port() -> Callable[[], int]:
    """Call it for each port needed: ``port = free_port()``."""
    return helpers.free_port


@pytest.fixture(params=["memory", "sqlite"])
def new_store(request: pytest.FixtureRequest) -> Iterator[Callable[[], PartitionStore]]:
    """Call it for each partition store needed; every test runs on both kinds (SQLite files
    in a temporary directory, synchronous=OFF: these tests compare behaviour)."""
    made: list[PartitionStore] = []
    with tempfile.TemporaryDirectory() as tmp:

        def make() -> PartitionStore:
            store: PartitionStore
            if request.param == "memory":
                store = MemoryStore()
            else:
                store = SqliteStore(os.path.join(tmp, f"p{len(made)}.db"), synchronous="OFF")
            made.append(store)
            return store

        yield make
        for store in made:
            store.close()


@pytest.fixture
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """Real brokers for one test, started and ready, stopped after it: one broker in this
    process unless the test's closest ``@pytest.mark.cluster(...)`` sets the knobs of
    tests/cluster.py ``make_cluster`` (``brokers=3``, ``processes=True``, ``auth=POLICY``,
    ``env={...}``, ``metrics=True``, ``interceptors=[...]``). A module shares one cluster
    with a module-scoped fixture of its own calling ``make_cluster``."""
    marker = request.node.get_closest_marker("cluster")
    knobs = dict(marker.kwargs) if marker is not None else {}
    with make_cluster(tmp_path_factory.mktemp("cluster"), **knobs) as built:
        built.wait_ready()
        yield built
