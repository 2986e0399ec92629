"""``raftq serve`` whose raft listener binds a different address than it advertises.

    RAFTQ_CHAOS_RAFT_BIND=127.0.0.1:41001 python -m tests.chaos.broker_shim serve ...

The chaos harness (tests/chaos/) puts a fault-injecting proxy (tests/chaos/proxy.py) on each
broker's *advertised* raft address (``broker.raft_addr``: seeds, the metadata table, peers dial
it) and needs the broker itself to listen elsewhere. `MuxEndpoint` takes ``bind_address`` for
exactly this (transport/raft/mux.py); the broker settings do not expose it (yet), so this shim
passes it and then runs the unmodified ``raftq.cli`` entry point. Nothing else changes: the
broker, its config, its journals and its client port are the production ones.
"""

from __future__ import annotations

import functools
import os
import sys

import raftq.server
from raftq import cli
from raftq.transport.raft.mux import MuxEndpoint

BIND_ENV = "RAFTQ_CHAOS_RAFT_BIND"


def main() -> int:
    bind = os.environ.get(BIND_ENV, "")
    if bind:
        raftq.server.MuxEndpoint = functools.partial(  # type: ignore[misc,assignment]
            MuxEndpoint, bind_address=bind
        )
    return cli.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
