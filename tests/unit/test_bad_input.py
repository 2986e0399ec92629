"""Bad input against real broker processes: property-based fuzzing of every RPC in
proto/api.proto (tests/rpc_fuzz.py), malformed and oversized gRPC messages, and garbage and
truncated frames on the raft port. After each: every broker alive and SERVING; at the end a
produce/consume round trip through every partition (no Raft group wedged).

``RAFTQ_SEED`` replays the fuzz; ``RAFTQ_FUZZ_REQUESTS`` sets requests per RPC (default 150;
``make fuzz`` runs 10,000 per RPC).
"""

from __future__ import annotations

import os
import random
import socket
import struct
from collections.abc import Iterator

import grpc
import pytest

from raftq.config import (
    CLIENT_MESSAGE_BYTES_MAX,
    ClientSettings,
    RaftSettings,
    message_bytes_max,
)
from raftq.proto import api_pb2, api_pb2_grpc, common_pb2
from raftq.transport.raft import codec, handshake
from raftq.transport.tls import message_size_options
from tests.fuzz_cluster import FuzzCluster
from tests.rpc_fuzz import TOPIC, classify, fuzz_method, fuzz_seed, iter_methods

SEED = fuzz_seed()
REQUESTS = int(os.environ.get("RAFTQ_FUZZ_REQUESTS", "150"))


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzCluster]:
    print(f"fuzz seed={SEED} (replay: RAFTQ_SEED={SEED})")
    with FuzzCluster(tmp_path_factory.mktemp("fuzz")) as fc:
        yield fc


@pytest.mark.parametrize("method", list(iter_methods()))
def test_fuzzed_rpc_gets_typed_answers_and_crashes_nothing(
    fuzzed: FuzzCluster, method: str
) -> None:
    fuzzed.refresh()
    report = fuzz_method(fuzzed.client, method, REQUESTS, SEED)
    print(f"{method}: {report.requests} requests in {report.seconds:.1f} s {dict(report.statuses)}")
    assert report.requests >= 1
    assert not report.failures, f"seed={SEED}\n" + "\n".join(report.failures)
    assert not fuzzed.problems(), f"seed={SEED}"


def test_oversized_messages_are_refused_and_change_nothing(fuzzed: FuzzCluster) -> None:
    admin = fuzzed.cluster.admin()
    before = [(p.partition, p.end) for p in admin.list_offsets(TOPIC)]
    # the broker's configured message limit (broker/config.py message_bytes_max), not gRPC's
    # 4 MiB default: just past it (the request's framing) and far past it
    limit = message_bytes_max(RaftSettings().max_entry_bytes, ClientSettings().fetch_bytes_max)
    for size in (limit, limit * 3):
        request = api_pb2.SendRequest(topic=TOPIC)
        request.records.add(value=b"x" * size)
        outcome = fuzzed.client.call("Send", [request])
        assert outcome.status == "RESOURCE_EXHAUSTED", outcome
    # under the message limit but over max_record_bytes (1 MiB), just past it and past gRPC's
    # default 4 MiB: a typed per-record error
    channel = grpc.insecure_channel(
        fuzzed.cluster.client_addr(2), options=message_size_options(CLIENT_MESSAGE_BYTES_MAX)
    )
    for size in ((1 << 20) + 1, 5 << 20):
        request = api_pb2.SendRequest(topic=TOPIC)
        request.records.add(value=b"y" * size)
        response = api_pb2_grpc.ProducerStub(channel).Send(request, timeout=10)
        assert response.results[0].error == common_pb2.RECORD_TOO_LARGE, response
    channel.close()
    assert [(p.partition, p.end) for p in admin.list_offsets(TOPIC)] == before
    assert not fuzzed.problems()


def test_malformed_protobuf_is_a_typed_invalid_argument(fuzzed: FuzzCluster) -> None:
    rng = random.Random(SEED)
    for method in iter_methods():
        for payload in (b"\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f", rng.randbytes(40)):
            outcome = fuzzed.client.raw(method, [payload])
            assert not outcome.failure, (method, payload, outcome)
    bad = fuzzed.client.raw("Send", [b"\x0a\x80"])  # a length-delimited field cut short
    assert (bad.status, bad.raftq) == ("INVALID_ARGUMENT", "INVALID_ARGUMENT")


def _attack(addr: str, payload: bytes, linger: bool = False) -> None:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        try:
            s.sendall(payload)
            if linger:
                s.settimeout(2)
                s.recv(1 << 16)  # the broker answers or closes; either way it lives
        except OSError:
            pass  # the broker closed the connection on us: the right answer


def test_garbage_and_truncated_frames_on_the_raft_port(fuzzed: FuzzCluster) -> None:
    rng = random.Random(SEED)
    hello = codec.encode_frame(
        codec.KIND_HELLO, b"RQMX" + bytes([handshake.PROTOCOL_VERSION]) + b"\0" * 64
    )
    attacks = [
        rng.randbytes(64 * 1024),
        struct.pack("!I", 2**31) + b"\x01" * 100,  # oversized length
        struct.pack("!I", 0),  # zero length
        struct.pack("!I", 100) + b"\x05" + b"\x80" * 10,  # truncated frame, then hang up
        codec.encode_frame(codec.KIND_BATCH, b"\x80\x05garbage"),  # data before authentication
        codec.encode_frame(codec.KIND_SEALED, rng.randbytes(200)),
        hello,  # a plausible hello, then silence
        hello + rng.randbytes(300),
        codec.encode_frame(codec.KIND_AUTH, rng.randbytes(48)),
    ]
    for i in sorted(fuzzed.cluster.raft_ports):
        addr = fuzzed.cluster.raft_addr(i)
        for payload in attacks:
            _attack(addr, payload, linger=payload is hello)
        for _ in range(20):  # random frames of every kind
            kind = rng.randrange(256)
            _attack(addr, codec.encode_frame(kind, rng.randbytes(rng.randrange(600))))
        # many half-open connections at once
        host, port = addr.rsplit(":", 1)
        socks = [socket.create_connection((host, int(port)), timeout=5) for _ in range(80)]
        for s in socks:
            s.close()
    assert not fuzzed.problems()


def test_after_the_fuzz_every_partition_round_trips(fuzzed: FuzzCluster) -> None:
    problems = fuzzed.round_trip_problems()
    assert not problems, f"seed={SEED}\n" + "\n".join(problems)


def test_classify_calls_untyped_and_internal_statuses_failures() -> None:
    class Fake(grpc.RpcError):
        def __init__(self, code: grpc.StatusCode, trailers: tuple[tuple[str, str], ...]) -> None:
            self._code, self._trailers = code, trailers

        def code(self) -> grpc.StatusCode:
            return self._code

        def details(self) -> str:
            return "d"

        def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
            return self._trailers

    typed = (("raftq-code", "3"), ("raftq-retriable", "false"))
    assert not classify(Fake(grpc.StatusCode.INVALID_ARGUMENT, typed)).failure
    assert classify(Fake(grpc.StatusCode.INVALID_ARGUMENT, ())).failure
    assert classify(Fake(grpc.StatusCode.UNKNOWN, ())).failure
    assert classify(Fake(grpc.StatusCode.INTERNAL, ())).failure
    assert not classify(Fake(grpc.StatusCode.DEADLINE_EXCEEDED, ())).failure
