"""A broker's gRPC port is its own: a second broker on a port in use fails to start.

gRPC turns SO_REUSEPORT on by default, so two servers could bind one port and the kernel would
split connections between them: a client of one broker reached another (seen as "connection
refused" from a broker that was serving, once the other process exited).
"""

from __future__ import annotations

from pathlib import Path

from tests.cluster import Cluster, ProcessCluster


def test_a_second_broker_on_a_client_port_in_use_exits_and_the_first_serves_on(
    cluster: Cluster, tmp_path: Path
) -> None:
    second = ProcessCluster(tmp_path / "second", brokers=1)
    second.client_ports[1] = cluster.client_ports[1]  # its own raft port, the same client port
    second.start()
    try:
        assert second.procs[1].wait(timeout=60) == 1, second.logs()
    finally:
        second.stop()
    assert "cannot listen on " + cluster.client_addr(1) in second.logs()
    admin = cluster.admin()
    admin.create_topic("still-mine", partitions=1)
    assert [t.name for t in admin.list_topics()] == ["still-mine"]
