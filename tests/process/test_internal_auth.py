"""Broker-to-broker credentials: per broker, bound to the method, fresh, never accepted twice.

The pure signer/verifier is driven with a manual clock; then a real broker process is called
over real gRPC with credentials as an eavesdropper would have read them off the wire.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import grpc
import pytest

from raftq.config import DEV_CLUSTER_SECRET
from raftq.proto import internal_pb2, internal_pb2_grpc
from raftq.transport.internal import AUTH_KEY, InternalClient
from raftq.transport.internal_auth import FRESHNESS_S, CredentialSigner, CredentialVerifier
from tests.cluster import ProcessCluster

SECRET = "a-cluster-secret-for-these-tests"


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_credential_is_good_once_for_its_method_broker_and_time() -> None:
    clock = Clock()
    signer = CredentialSigner(SECRET, 7, clock=clock)
    verifier = CredentialVerifier(SECRET, clock=clock, window_calls=8)
    first = signer.credential("Report")
    assert verifier.check("Report", first) is None
    assert "replay" in str(verifier.check("Report", first))  # the same bytes again
    assert "does not verify" in str(verifier.check("Propose", signer.credential("Report")))
    # another broker's id on this broker's MAC
    version, _broker, rest = signer.credential("Report").split(".", 2)
    assert "does not verify" in str(verifier.check("Report", f"{version}.8.{rest}"))
    wrong = CredentialSigner("not-the-cluster-secret", 7, clock=clock)
    assert "does not verify" in str(verifier.check("Report", wrong.credential("Report")))
    huge = "2.7." + "a" * 100 + ".1.1.00"
    for bad in ["", "x", None, 42, "1.7.ab.1.1.00", "2.7.ab.x.1.00", "2.-7.ab.1.1.00", huge]:
        assert verifier.check("Report", bad) is not None
    # out of order within the window is fine, each still once
    late = [signer.credential("Read") for _ in range(5)]
    for credential in reversed(late):
        assert verifier.check("Read", credential) is None
    for credential in late:
        assert verifier.check("Read", credential) is not None
    # far behind the highest counter seen: refused (it cannot be told from a replay)
    old = signer.credential("Read")
    for _ in range(9):
        assert verifier.check("Read", signer.credential("Read")) is None
    assert "replay" in str(verifier.check("Read", old))


@pytest.mark.parametrize("skew_s", [FRESHNESS_S - 1, -(FRESHNESS_S - 1)])
def test_a_clock_within_the_window_is_accepted(skew_s: float) -> None:
    clock = Clock()
    verifier = CredentialVerifier(SECRET, clock=clock)
    signer = CredentialSigner(SECRET, 1, clock=Clock(clock.now + skew_s))
    assert verifier.check("Report", signer.credential("Report")) is None


@pytest.mark.parametrize("skew_s", [FRESHNESS_S + 1, -(FRESHNESS_S + 1), 86_400 * 3])
def test_a_stale_or_future_credential_is_refused(skew_s: float) -> None:
    """A credential replayed after the window (say, to a broker that restarted and forgot
    what it saw) is refused, and so is one from a clock far off."""
    clock = Clock()
    signer = CredentialSigner(SECRET, 1, clock=clock)
    captured = signer.credential("Report")
    clock.now += skew_s
    verifier = CredentialVerifier(SECRET, clock=clock)
    assert "off this broker's clock" in str(verifier.check("Report", captured))


def test_a_restarted_broker_forgets_callers_only_once_their_credentials_are_stale() -> None:
    clock = Clock()
    signer = CredentialSigner(SECRET, 1, clock=clock)
    verifier = CredentialVerifier(SECRET, clock=clock, freshness_s=10)
    captured = signer.credential("Report")
    assert verifier.check("Report", captured) is None
    clock.now += 15  # pruning runs; the caller's window may be forgotten only when stale
    assert verifier.check("Report", signer.credential("Report")) is None
    assert verifier.check("Report", captured) is not None
    clock.now += 30
    assert verifier.check("Report", signer.credential("Report")) is None
    assert verifier.check("Report", captured) is not None


def _raw_call(address: str, credential: str) -> grpc.StatusCode:
    with grpc.insecure_channel(address) as channel:
        stub = internal_pb2_grpc.InternalStub(channel)
        try:
            stub.MetaMembers(
                internal_pb2.MetaMembersRequest(), timeout=10, metadata=((AUTH_KEY, credential),)
            )
        except grpc.RpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK


def test_a_broker_refuses_replayed_and_fixed_internal_credentials(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, brokers=1) as cluster:
        cluster.wait_ready()
        address = cluster.client_addr(1)
        # what main sent on every call: one fixed HMAC of a constant label
        fixed = hmac.new(DEV_CLUSTER_SECRET.encode(), b"raftq-internal-v1", hashlib.sha256)
        assert _raw_call(address, fixed.hexdigest()) == grpc.StatusCode.UNAUTHENTICATED
        # a credential read off the wire works once, for the call it was made for
        signer = CredentialSigner(DEV_CLUSTER_SECRET, 1)
        seen = signer.credential("MetaMembers")
        assert _raw_call(address, seen) == grpc.StatusCode.OK
        assert _raw_call(address, seen) == grpc.StatusCode.UNAUTHENTICATED
        assert _raw_call(address, "") == grpc.StatusCode.UNAUTHENTICATED
        client = InternalClient(DEV_CLUSTER_SECRET, broker_id=9)
        try:  # a real client signs every call afresh
            for _ in range(3):
                assert client.meta_members(address, 10).members == [cluster.raft_addr(1)]
        finally:
            client.close()


def test_a_credential_is_good_only_at_the_broker_it_was_made_for() -> None:
    clock = Clock()
    signer = CredentialSigner(SECRET, 7, clock=clock)
    at_a = CredentialVerifier(SECRET, clock=clock, own_addresses=("127.0.0.1:7001",))
    at_b = CredentialVerifier(SECRET, clock=clock, own_addresses=("127.0.0.1:7002",))
    for_a = signer.credential("Forward", "127.0.0.1:7001")
    assert "does not verify" in str(at_b.check("Forward", for_a))  # read off A's link, shown to B
    assert at_a.check("Forward", for_a) is None
    assert "not bound" in str(at_a.check("Forward", signer.credential("Forward")))
    # the calls made to the operator's join_addrs before a broker knows the cluster
    assert at_a.check("JoinCluster", signer.credential("JoinCluster")) is None
    assert at_b.check("MetaMembers", signer.credential("MetaMembers")) is None


def _raw_read(address: str, credential: str) -> grpc.StatusCode:
    with grpc.insecure_channel(address) as channel:
        stub = internal_pb2_grpc.InternalStub(channel)
        try:
            stub.Read(internal_pb2.ReadRequest(), timeout=10, metadata=((AUTH_KEY, credential),))
        except grpc.RpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK


def test_a_credential_read_off_one_brokers_link_is_refused_by_another(tmp_path: Path) -> None:
    with ProcessCluster(tmp_path, brokers=2) as cluster:
        cluster.wait_ready()
        signer = CredentialSigner(DEV_CLUSTER_SECRET, 1)
        first, second = cluster.client_addr(1), cluster.client_addr(2)
        captured = signer.credential("Read", first)  # made for broker 1, never sent there
        assert _raw_read(second, captured) == grpc.StatusCode.UNAUTHENTICATED
        assert _raw_read(second, signer.credential("Read")) == grpc.StatusCode.UNAUTHENTICATED
        answered = _raw_read(second, signer.credential("Read", second))
        assert answered != grpc.StatusCode.UNAUTHENTICATED  # past authentication
