"""gRPC health follows readiness: SERVING only while the broker hears a metadata leader, has
links to a majority of the metadata voters and is registered; NOT_SERVING otherwise."""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.cluster import ProcessCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(240)
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def status(address: str, service: str = "") -> int | None:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=5
            )
        except grpc.RpcError:
            return None
        return int(reply.status)


def test_health_is_not_serving_without_metadata_quorum_and_serving_again_after(
    tmp_path: Path,
) -> None:
    with ProcessCluster(tmp_path, brokers=3) as cluster:
        cluster.wait_ready()
        addrs = [cluster.client_addr(i) for i in (1, 2, 3)]
        wait_until(lambda: all(status(a) == SERVING for a in addrs), 30, "all SERVING")
        assert all(status(a, "raftq.v1.Producer") == SERVING for a in addrs)
        cluster.kill(2)
        cluster.kill(3, signal.SIGKILL)
        alone = cluster.client_addr(1)
        wait_until(lambda: status(alone) == NOT_SERVING, 30, "the lone broker NOT_SERVING")
        assert status(alone, "raftq.v1.Consumer") == NOT_SERVING
        cluster.start(2)
        wait_until(lambda: status(alone) == SERVING, 60, "quorum back: SERVING")
        wait_until(lambda: status(cluster.client_addr(2)) == SERVING, 60, "broker 2 SERVING")
        assert status(cluster.client_addr(2), "raftq.v1.Admin") == SERVING
