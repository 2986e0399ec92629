"""``raftq serve`` whose client port binds a different address than it advertises.

    RAFTQ_TEST_CLIENT_BIND=127.0.0.1:41001 python -m tests.client_bind_shim serve ...

Like tests/chaos/broker_shim.py for the raft port: a test puts a fault-injecting TCP proxy on
a broker's *advertised* client address (``broker.client_addr``: the metadata table, leader
hints and other brokers' forwarded calls use it) and needs the broker to listen elsewhere. The
broker settings do not expose a separate bind address, so this shim passes one to the gRPC
server and then runs the unmodified ``raftq.cli`` entry point.
"""

from __future__ import annotations

import functools
import os
import sys

import raftq.server
from raftq import cli
from raftq.transport.grpc_server import serve

BIND_ENV = "RAFTQ_TEST_CLIENT_BIND"


def _serve_on(bind: str, facade: object, _address: str, **options: object) -> object:
    return serve(facade, bind, **options)  # type: ignore[arg-type]


def main() -> int:
    bind = os.environ.get(BIND_ENV, "")
    if bind:
        raftq.server.serve = functools.partial(_serve_on, bind)
    return cli.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
