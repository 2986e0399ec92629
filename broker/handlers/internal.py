"""The Internal family: what other brokers ask of this one (transport/internal.py's servicer
calls it; each call was authenticated there). Partition work is answered only by the
partition's leader and forwarded calls are never forwarded again, so a stale view cannot loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from raftq.coordinator import BrokerReports
from raftq.handlers.common import ByteBudget
from raftq.handlers.leases import Releases
from raftq.proto import internal_pb2, metadata_pb2, partition_pb2
from raftq.router import Router, propose_on, read_on
from raftq.transport.propose_checks import CheckedPropose

if TYPE_CHECKING:
    from raftq.metadata_client import MetadataClient


class ClusterMembers(Protocol):
    """What Internal needs of broker/membership.py."""

    draining: set[int]

    def meta_members(self) -> internal_pb2.MetaMembersResponse: ...

    def join_cluster(
        self, request: internal_pb2.JoinClusterRequest, timeout_s: float
    ) -> internal_pb2.MetaMembersResponse: ...


class InternalHandler:
    """Implements transport/internal.py's PartitionHost. ``membership`` is set by the broker
    once it exists. Thread-safe."""

    def __init__(
        self,
        *,
        broker_id: int,
        metadata: MetadataClient,
        router: Router,
        releases: Releases,
        reports: BrokerReports,
        budget: ByteBudget,
    ) -> None:
        self._broker_id = broker_id
        self._metadata = metadata
        self._router = router
        self._releases = releases
        self._reports = reports
        self._budget = budget
        self.membership: ClusterMembers | None = None

    def propose_local(
        self, request: CheckedPropose, *, timeout_s: float
    ) -> internal_pb2.ProposeResponse:
        """Internal.Propose, its shape checked (transport/propose_checks.py): only the
        partition's leader answers; never forwarded again. A Lease is planned within this
        broker's byte budget, whatever the forwarder asked."""
        topic, partition, command = request.topic, request.partition, request.command
        self._router.check_partition(topic, partition)
        replica = self._router.local_leader(topic, partition)
        if replica is None:
            raise self._router.not_leader(topic, partition)
        if command.WhichOneof("op") == "lease":
            command.lease.max_bytes = self._budget(command.lease.max_bytes)
        return propose_on(replica, command, timeout_s, skip_if_idle=request.skip_if_idle)

    def undeliver_local(
        self, topic: str, partition: int, lease: partition_pb2.Lease, answer: Any
    ) -> None:
        """Internal.Propose could not send a Lease's ``answer`` (the forwarder gave up): take
        the deliveries back on this leader."""
        self._releases.undeliver(topic, partition, lease.group, lease.member, answer.result)

    def read_local(self, request: internal_pb2.ReadRequest) -> internal_pb2.ReadResponse:
        self._router.check_partition(request.topic, request.partition)
        replica = self._router.local_leader(request.topic, request.partition)
        if replica is None:
            raise self._router.not_leader(request.topic, request.partition)
        if request.WhichOneof("read") == "fetch":  # within this broker's budget too
            request.fetch.max_bytes = self._budget(request.fetch.max_bytes)
        return read_on(replica, request)

    def meta_propose_local(
        self, command: metadata_pb2.MetaCommand, *, timeout_s: float
    ) -> metadata_pb2.MetaResult:
        """Internal.MetaPropose: the result travels back with its error code in-band."""
        return self._metadata.propose_here(command, timeout_s)

    def forward_local(
        self, method: str, request: bytes, *, timeout_s: float, principal: str = ""
    ) -> bytes:
        """Internal.Forward: run a leader-only call here or refuse (never forward again)."""
        return self._metadata.run_forwarded(method, request, timeout_s, principal)

    def meta_members_local(self) -> internal_pb2.MetaMembersResponse:
        """Internal.MetaMembers: the metadata voters as this broker knows them."""
        assert self.membership is not None
        return self.membership.meta_members()

    def join_cluster_local(
        self, request: internal_pb2.JoinClusterRequest, *, timeout_s: float
    ) -> internal_pb2.MetaMembersResponse:
        """Internal.JoinCluster: add a broker to the metadata group (leader only)."""
        assert self.membership is not None
        return self.membership.join_cluster(request, timeout_s)

    def report_local(self, report: internal_pb2.BrokerReport) -> internal_pb2.ReportAck:
        if not self._metadata.is_leader():
            raise self._metadata.not_leader()
        self._reports.record(report)
        membership = self.membership
        draining = membership is not None and report.broker_id in membership.draining
        return internal_pb2.ReportAck(metadata_leader=self._broker_id, draining=draining)
