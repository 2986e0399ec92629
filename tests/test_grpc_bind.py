"""A broker's gRPC port is its own: a second server on a port in use fails to start.

gRPC turns SO_REUSEPORT on by default, so two servers could bind one port and the kernel would
split connections between them: a client of one broker reached another (seen as "connection
refused" from a broker that was serving, once the other process exited).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from raftq.proto import errors
from raftq.transport.grpc_server import serve
from tests.api_facade import ApiFacade
from tests.helpers import free_port


def test_a_second_server_on_a_port_in_use_is_refused(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    first_facade, second_facade = ApiFacade(tmp_path / "a"), ApiFacade(tmp_path / "b")
    first = serve(first_facade, address, max_workers=2)
    try:
        with pytest.raises(errors.Unavailable, match="cannot listen on"):
            serve(second_facade, address, max_workers=2).stop(None)
    finally:
        first.stop(None).wait(5)
        first_facade.close()
        second_facade.close()
