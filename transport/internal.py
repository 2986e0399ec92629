"""Broker-to-broker gRPC: partition commands and reads forwarded to the partition's leader.

Every call carries ``raftq-internal`` metadata: a per-broker, per-call credential bound to the
method, a timestamp and a never-repeated counter (transport/internal_auth.py), checked before
the request reaches the broker; a missing, forged, stale or replayed one is refused with
UNAUTHENTICATED. A broker that does not lead the partition answers NOT_LEADER with a leader
hint; forwarded calls are never forwarded again, so a stale view cannot loop. A forwarded
Lease whose caller is gone by the time it applied is taken back (``undeliver_local``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import grpc
from google.protobuf.message import DecodeError

from raftq.proto import errors, internal_pb2, internal_pb2_grpc, metadata_pb2, partition_pb2
from raftq.transport.grpc_errors import abort, raise_from_rpc_error
from raftq.transport.internal_auth import UNBOUND_METHODS, CredentialSigner, CredentialVerifier
from raftq.transport.propose_checks import CheckedPropose, check_propose

logger = logging.getLogger("raftq.transport.internal")

AUTH_KEY = "raftq-internal"


class PartitionHost(Protocol):
    """What the internal servicer needs from a broker. Methods raise raftq.proto.errors types."""

    def propose_local(
        self, request: CheckedPropose, *, timeout_s: float
    ) -> internal_pb2.ProposeResponse: ...

    def undeliver_local(
        self,
        topic: str,
        partition: int,
        lease: partition_pb2.Lease,
        answer: internal_pb2.ProposeResponse,
    ) -> None: ...

    def read_local(self, request: internal_pb2.ReadRequest) -> internal_pb2.ReadResponse: ...

    def meta_propose_local(
        self, command: metadata_pb2.MetaCommand, *, timeout_s: float
    ) -> metadata_pb2.MetaResult: ...

    def forward_local(
        self, method: str, request: bytes, *, timeout_s: float, principal: str = ""
    ) -> bytes: ...

    def report_local(self, report: internal_pb2.BrokerReport) -> internal_pb2.ReportAck: ...

    def meta_members_local(self) -> internal_pb2.MetaMembersResponse: ...

    def join_cluster_local(
        self, request: internal_pb2.JoinClusterRequest, *, timeout_s: float
    ) -> internal_pb2.MetaMembersResponse: ...


class InternalServicer(internal_pb2_grpc.InternalServicer):
    def __init__(
        self,
        host: PartitionHost,
        secret: str,
        *,
        default_timeout_s: float,
        own_addresses: tuple[str, ...] = (),
    ) -> None:
        """``own_addresses``: the broker's client addresses, which credentials must name."""
        self._host = host
        self._verifier = CredentialVerifier(secret, own_addresses=own_addresses)
        self._timeout_s = default_timeout_s

    def _authenticate(
        self, context: grpc.ServicerContext, method: str, request: Any = None
    ) -> None:
        """Refuse a call whose credential does not verify (UNAUTHENTICATED), then one whose
        bytes did not decode (MALFORMED_COMMAND: see ``Undecodable``)."""
        shown = dict(context.invocation_metadata()).get(AUTH_KEY, "")
        refused = self._verifier.check(method, shown)
        if refused is not None:
            logger.warning("internal %s from %s refused: %s", method, context.peer(), refused)
            abort(context, errors.Unauthenticated(refused))
        if isinstance(request, Undecodable):
            logger.warning("internal %s from %s refused: %s", method, context.peer(), request)
            abort(context, errors.MalformedCommand(f"the {method} request does not decode"))

    def _timeout(self, context: grpc.ServicerContext) -> float:
        remaining = context.time_remaining()
        return self._timeout_s if remaining is None else max(0.0, min(remaining, self._timeout_s))

    def Propose(
        self, request: internal_pb2.ProposeRequest, context: grpc.ServicerContext
    ) -> internal_pb2.ProposeResponse:
        self._authenticate(context, "Propose", request)
        try:
            checked = check_propose(request)  # bytes from another process: checked as a client's
            answer = self._host.propose_local(checked, timeout_s=self._timeout(context))
        except errors.RaftqError as exc:
            abort(context, exc)
        if request.command.WhichOneof("op") == "lease" and not context.is_active():
            # The forwarding broker gave up (deadline, cancelled) while the Lease applied:
            # nothing may stay leased that is not delivered.
            self._host.undeliver_local(
                request.topic, request.partition, request.command.lease, answer
            )
        return answer

    def Read(
        self, request: internal_pb2.ReadRequest, context: grpc.ServicerContext
    ) -> internal_pb2.ReadResponse:
        self._authenticate(context, "Read", request)
        try:
            return self._host.read_local(request)
        except errors.RaftqError as exc:
            abort(context, exc)

    def MetaPropose(
        self, request: internal_pb2.MetaProposeRequest, context: grpc.ServicerContext
    ) -> internal_pb2.MetaProposeResponse:
        self._authenticate(context, "MetaPropose", request)
        try:
            result = self._host.meta_propose_local(
                request.command, timeout_s=self._timeout(context)
            )
        except errors.RaftqError as exc:
            abort(context, exc)
        return internal_pb2.MetaProposeResponse(result=result)

    def Forward(
        self, request: internal_pb2.ForwardRequest, context: grpc.ServicerContext
    ) -> internal_pb2.ForwardResponse:
        self._authenticate(context, "Forward", request)
        try:
            response = self._host.forward_local(
                request.method,
                request.request,
                timeout_s=self._timeout(context),
                principal=request.principal,
            )
        except errors.RaftqError as exc:
            abort(context, exc)
        return internal_pb2.ForwardResponse(response=response)

    def Report(
        self, request: internal_pb2.BrokerReport, context: grpc.ServicerContext
    ) -> internal_pb2.ReportAck:
        self._authenticate(context, "Report", request)
        try:
            return self._host.report_local(request)
        except errors.RaftqError as exc:
            abort(context, exc)

    def MetaMembers(
        self, request: internal_pb2.MetaMembersRequest, context: grpc.ServicerContext
    ) -> internal_pb2.MetaMembersResponse:
        self._authenticate(context, "MetaMembers", request)
        try:
            return self._host.meta_members_local()
        except errors.RaftqError as exc:
            abort(context, exc)

    def JoinCluster(
        self, request: internal_pb2.JoinClusterRequest, context: grpc.ServicerContext
    ) -> internal_pb2.MetaMembersResponse:
        self._authenticate(context, "JoinCluster", request)
        try:
            return self._host.join_cluster_local(request, timeout_s=self._timeout(context))
        except errors.RaftqError as exc:
            abort(context, exc)


class Undecodable(str):
    """What an Internal request's bytes became when they did not decode (a truncated or
    garbled message, a nesting too deep): the servicer refuses it MALFORMED_COMMAND after
    authenticating the call, where gRPC would have ended the call with an untyped INTERNAL."""


def _lenient(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def parse_or_refuse(data: bytes) -> Any:
        try:
            return parse(data)
        except (DecodeError, ValueError, RecursionError) as exc:
            return Undecodable(f"{len(data)} bytes that do not decode: {exc}")

    return parse_or_refuse


def add_internal_service(server: grpc.Server, servicer: InternalServicer) -> None:
    """The Internal service on ``server``, each request decoded leniently (``Undecodable``)."""
    handlers = {}
    for name, method in internal_pb2.DESCRIPTOR.services_by_name[
        "Internal"
    ].methods_by_name.items():
        request_class = getattr(internal_pb2, method.input_type.name)
        response_class = getattr(internal_pb2, method.output_type.name)
        handlers[name] = grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name),
            request_deserializer=_lenient(request_class.FromString),
            response_serializer=response_class.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("raftq.v1.Internal", handlers),)
    )


class InternalClient:
    """Calls other brokers' Internal service; one channel per address, created lazily."""

    def __init__(
        self,
        secret: str,
        *,
        broker_id: int = 0,
        channel_factory: Callable[[str], grpc.Channel] | None = None,
    ) -> None:
        """``broker_id`` names the caller in its credentials (0: a tool, not a broker)."""
        self._signer = CredentialSigner(secret, broker_id)
        self._factory = channel_factory or grpc.insecure_channel
        self._stubs: dict[str, internal_pb2_grpc.InternalStub] = {}
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()

    def _stub(self, address: str) -> internal_pb2_grpc.InternalStub:
        with self._lock:
            stub = self._stubs.get(address)
            if stub is None:
                channel = self._factory(address)
                self._channels[address] = channel
                stub = self._stubs[address] = internal_pb2_grpc.InternalStub(channel)
            return stub

    def _call(self, address: str, name: str, request: Any, timeout_s: float) -> Any:
        method = getattr(self._stub(address), name)
        target = None if name in UNBOUND_METHODS else address
        metadata = ((AUTH_KEY, self._signer.credential(name, target)),)
        try:
            return method(request, timeout=timeout_s, metadata=metadata)
        except grpc.RpcError as exc:
            raise_from_rpc_error(exc)

    def propose(
        self, address: str, request: internal_pb2.ProposeRequest, timeout_s: float
    ) -> internal_pb2.ProposeResponse:
        """Raises NotLeader (with hint), Unavailable, Timeout and the other catalogue errors."""
        return self._call(address, "Propose", request, timeout_s)

    def read(
        self, address: str, request: internal_pb2.ReadRequest, timeout_s: float
    ) -> internal_pb2.ReadResponse:
        return self._call(address, "Read", request, timeout_s)

    def meta_propose(
        self, address: str, command: metadata_pb2.MetaCommand, timeout_s: float
    ) -> metadata_pb2.MetaResult:
        request = internal_pb2.MetaProposeRequest(command=command)
        response: internal_pb2.MetaProposeResponse = self._call(
            address, "MetaPropose", request, timeout_s
        )
        return response.result

    def forward(
        self, address: str, method: str, request: bytes, timeout_s: float, principal: str = ""
    ) -> bytes:
        """Run a leader-only API call (or a per-broker one: broker/metadata_client.py
        LeaderCall.on_broker) at ``address`` on behalf of ``principal``."""
        message = internal_pb2.ForwardRequest(method=method, request=request, principal=principal)
        response: internal_pb2.ForwardResponse = self._call(address, "Forward", message, timeout_s)
        return response.response

    def report(
        self, address: str, report: internal_pb2.BrokerReport, timeout_s: float
    ) -> internal_pb2.ReportAck:
        ack: internal_pb2.ReportAck = self._call(address, "Report", report, timeout_s)
        return ack

    def meta_members(self, address: str, timeout_s: float) -> internal_pb2.MetaMembersResponse:
        response: internal_pb2.MetaMembersResponse = self._call(
            address, "MetaMembers", internal_pb2.MetaMembersRequest(), timeout_s
        )
        return response

    def join_cluster(
        self, address: str, request: internal_pb2.JoinClusterRequest, timeout_s: float
    ) -> internal_pb2.MetaMembersResponse:
        """Raises NotLeader (hint: the metadata leader's client address), Unavailable, Timeout."""
        response: internal_pb2.MetaMembersResponse = self._call(
            address, "JoinCluster", request, timeout_s
        )
        return response

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
            self._stubs.clear()
