"""Property-based fuzzing of every RPC in proto/api.proto against real broker processes.

Strategies are derived from the message descriptors, generically: every field of every request
message may be unset or set to a random value of its type — boundary and random integers of
the field's width (negative ones included), unknown enum numbers, empty, long, non-ASCII and
huge strings and bytes, names of existing and unknown topics and groups, nested messages,
repeated fields and maps. The streaming RPCs get 1-3 such requests on one stream.

A few values are *tamed* (`tame`) so that a valid-looking request cannot make the cluster do
unbounded work or destroy the fixture it is judged by (at most 4 partitions per new or grown
topic, no RemoveBroker of a live broker, no DeleteTopic/AlterTopicConfig/AddPartitions of the
round-trip topics, long polls of at most 200 ms); invalid values of those fields are still sent.

What counts as a failure (`Outcome.failure`): an answer with gRPC status UNKNOWN or INTERNAL,
an error status without the ``raftq-code`` trailer, or a ``raftq-code`` of INTERNAL. Not a
failure: success, any typed raftq error, the client's own DEADLINE_EXCEEDED (a long poll) and
gRPC's RESOURCE_EXHAUSTED for a message over the server's size limit.

    python -m tests.rpc_fuzz --requests 10000 [--seed N] [--methods Send,Poll]   (make fuzz)
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import HypothesisException

from raftq.proto import api_pb2, errors
from raftq.transport.grpc_errors import CODE_KEY, from_rpc_error

TOPIC, PRIO_TOPIC, SCRATCH_TOPIC = "fz", "fzp", "fzscratch"
PROTECTED_TOPICS = (TOPIC, PRIO_TOPIC, f"{TOPIC}.dlq", f"{PRIO_TOPIC}.dlq")
GROUP = "fzg"
CALL_TIMEOUT_S = 5.0
HUGE_CHARS = (300, 1000, 70_000)
HUGE_BYTES = (1 << 16, (1 << 20) + 1)  # over the default max_record_bytes (1 MiB)

NAMES = [
    TOPIC,
    PRIO_TOPIC,
    SCRATCH_TOPIC,
    GROUP,
    "nope",
    "no-such-topic",
    "a",
    "",
    " ",
    "..",
    "fz.dlq",
    "Ω≈ç√",
    "a/b",
    "x" * 249,
    "x" * 250,
    "\x00",
    "member-1",
    "-",
    "_",
]
LIVE: dict[str, Any] = {"member_id": "m-nope", "generation": 1}  # FuzzCluster.refresh()
INT_EDGES = [
    0,
    1,
    -1,
    2,
    3,
    7,
    100,
    255,
    256,
    1000,
    10_000,
    100_000,
    300_000,
    43_200_000,
    2**31 - 1,
    -(2**31),
    2**53,
    2**63 - 1,
    -(2**63),
]


def services() -> list[tuple[str, MethodDescriptor]]:
    """(service full name, method) for every method of every service in proto/api.proto."""
    out: list[tuple[str, MethodDescriptor]] = []
    for service in api_pb2.DESCRIPTOR.services_by_name.values():
        out.extend((service.full_name, method) for method in service.methods)
    return out


# -- strategies from descriptors ----------------------------------------------------------------

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def _int(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = [v for v in INT_EDGES if lo <= v <= hi]
    small = st.integers(max(lo, 0), min(hi, 5))
    return st.one_of(
        small,
        small,
        st.sampled_from(edges),
        st.integers(-5, 20).filter(lambda v: lo <= v <= hi),
        st.integers(lo, hi),
    )


def _string() -> st.SearchStrategy[str]:
    names = st.sampled_from(NAMES)  # drawn when the strategy is built: LIVE_NAMES included
    return st.one_of(
        names,
        names,
        names,
        st.text(max_size=20),
        st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True),
        st.sampled_from(HUGE_CHARS).map(lambda n: "y" * n),
    )


def _bytes() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=32),
        st.sampled_from(HUGE_BYTES).map(lambda n: b"\xff" * n),
    )


def scalar(fd: FieldDescriptor) -> st.SearchStrategy[Any]:
    t = fd.type
    if t in _INT_RANGES:
        return _int(*_INT_RANGES[t])
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=32)
    if t == FieldDescriptor.TYPE_STRING:
        return _string()
    if t == FieldDescriptor.TYPE_BYTES:
        return _bytes()
    if t == FieldDescriptor.TYPE_ENUM:
        assert fd.enum_type is not None
        known = [v.number for v in fd.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-3, 1000))
    raise AssertionError(f"no strategy for field type {t} ({fd.full_name})")


def message(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """A dict of field values for ``descriptor`` (build with `build`)."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for fd in descriptor.fields:
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            key_fd = fd.message_type.fields_by_name["key"]
            value_fd = fd.message_type.fields_by_name["value"]
            if value_fd.message_type is not None:
                continue  # no map of messages in api.proto requests
            value: st.SearchStrategy[Any] = st.dictionaries(
                scalar(key_fd), scalar(value_fd), max_size=3
            )
        elif fd.message_type is not None:
            if depth >= 3:
                continue
            inner = message(fd.message_type, depth + 1)
            value = st.lists(inner, max_size=4) if _repeated(fd) else inner
        elif _repeated(fd):
            value = st.lists(scalar(fd), max_size=5)
        else:
            value = scalar(fd)
        fields[fd.name] = st.one_of(st.none(), value)
    return st.fixed_dictionaries(fields).map(
        lambda d: {k: v for k, v in d.items() if v is not None}
    )


def _repeated(fd: Any) -> bool:
    """``fd``: a FieldDescriptor (python's or upb's, distinct classes to the type stubs)."""
    return bool(fd.is_repeated)


def build(cls: type[Message], values: dict[str, Any]) -> Message:
    msg = cls()
    fill(msg, values)
    return msg


def fill(msg: Message, values: dict[str, Any]) -> None:
    d = msg.DESCRIPTOR
    for name, value in values.items():
        fd = d.fields_by_name[name]
        target = getattr(msg, name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            for k, v in value.items():
                target[k] = v
        elif fd.message_type is not None and _repeated(fd):
            for item in value:
                fill(target.add(), item)
        elif fd.message_type is not None:
            fill(target, value)
            target.SetInParent()
        elif _repeated(fd):
            target.extend(value)
        else:
            setattr(msg, name, value)


# -- taming --------------------------------------------------------------------------------------


def tame(method: str, msg: Message) -> None:
    """Keep a request from doing unbounded work or destroying the fixture; see the module doc."""
    if method == "CreateTopic":
        assert isinstance(msg, api_pb2.CreateTopicRequest)
        if msg.HasField("partitions") and 4 < msg.partitions <= 10_000:
            msg.partitions = 4
        if not msg.HasField("partitions"):
            msg.partitions = 1
        if msg.name in PROTECTED_TOPICS:
            msg.name = SCRATCH_TOPIC
    elif method in ("DeleteTopic", "AlterTopicConfig"):
        assert isinstance(msg, (api_pb2.DeleteTopicRequest, api_pb2.AlterTopicConfigRequest))
        if msg.name in PROTECTED_TOPICS:
            msg.name = SCRATCH_TOPIC
    elif method == "AddPartitions":
        assert isinstance(msg, api_pb2.AddPartitionsRequest)
        if msg.name in PROTECTED_TOPICS:
            msg.name = SCRATCH_TOPIC
        if 4 < msg.partitions <= 10_000:
            msg.partitions = 4
    elif method == "MovePartition":
        assert isinstance(msg, api_pb2.MovePartitionRequest)
        if msg.topic in PROTECTED_TOPICS:
            msg.topic = SCRATCH_TOPIC
    elif method in ("CreateSchedule", "PauseSchedule", "DeleteSchedule"):
        # schedules fire into the scratch topic only, and at most once a minute
        assert isinstance(
            msg,
            (
                api_pb2.CreateScheduleRequest,
                api_pb2.PauseScheduleRequest,
                api_pb2.DeleteScheduleRequest,
            ),
        )
        if msg.topic in PROTECTED_TOPICS:
            msg.topic = SCRATCH_TOPIC
        if isinstance(msg, api_pb2.CreateScheduleRequest) and msg.schedule.interval_ms:
            msg.schedule.interval_ms = max(msg.schedule.interval_ms, 60_000)
    elif method == "RemoveBroker":
        assert isinstance(msg, api_pb2.RemoveBrokerRequest)
        if 1 <= msg.broker_id <= 16:
            msg.broker_id = 1000 + msg.broker_id
    elif method == "Poll":
        assert isinstance(msg, api_pb2.PollRequest)
        if 200 < msg.max_wait_ms <= 300_000:
            msg.max_wait_ms = 200


def tame_bytes(method: str, cls: type[Message], payload: bytes) -> bytes:
    """``payload`` unchanged unless it parses as a request that `tame` would change."""
    try:
        parsed = cls.FromString(payload)
    except Exception:  # DecodeError: malformed, as intended
        return payload
    tamed = cls.FromString(payload)
    tame(method, tamed)
    return payload if tamed == parsed else tamed.SerializeToString()


# -- calling --------------------------------------------------------------------------------------


@dataclass
class Outcome:
    status: str  # "OK" or the gRPC status name
    raftq: str  # the raftq error kind ("" when none)
    failure: str  # why this is a failure ("" when it is not)


def classify(exc: grpc.RpcError) -> Outcome:
    code = exc.code()
    trailers = dict(exc.trailing_metadata() or ())
    typed = from_rpc_error(exc)
    if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED) and (
        CODE_KEY not in trailers
    ):
        return Outcome(code.name, "", "")
    if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
        return Outcome(code.name, typed.kind.name, f"{code.name}: {exc.details()}")
    if CODE_KEY not in trailers:
        return Outcome(code.name, "", f"{code.name} without {CODE_KEY}: {exc.details()}")
    if isinstance(typed, errors.Internal):
        return Outcome(code.name, "INTERNAL", f"raftq INTERNAL: {exc.details()}")
    return Outcome(code.name, typed.kind.name, "")


class RpcClient:
    """Generic callables for every method (the request types come from the descriptors)."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(
            address,
            options=[
                ("grpc.max_send_message_length", 64 << 20),
                ("grpc.max_receive_message_length", 64 << 20),
            ],
        )
        self.calls: dict[str, Callable[..., Any]] = {}
        self.types: dict[str, type[Message]] = {}
        for service, method in services():
            path = f"/{service}/{method.name}"
            req = _message_class(method.input_type)
            resp = _message_class(method.output_type)
            self.types[method.name] = req
            kind = (method.client_streaming, method.server_streaming)
            factory = {
                (False, False): self.channel.unary_unary,
                (True, True): self.channel.stream_stream,
                (False, True): self.channel.unary_stream,
                (True, False): self.channel.stream_unary,
            }[kind]
            self.calls[method.name] = factory(
                path,
                request_serializer=req.SerializeToString,
                response_deserializer=resp.FromString,
            )
        self.streaming = {m.name for _, m in services() if m.client_streaming or m.server_streaming}
        # server streams take one request (BackupPartition), not a stream of them
        self.one_request = {m.name for _, m in services() if not m.client_streaming}

    def call(self, method: str, requests: list[Message]) -> Outcome:
        fn = self.calls[method]
        try:
            if method in self.streaming:
                sent = requests[0] if method in self.one_request else iter(requests)
                for response in fn(sent, timeout=CALL_TIMEOUT_S / 2):
                    if method == "SendStream" and response.error == errors.Internal.kind.code:
                        return Outcome("OK", "INTERNAL", f"in-band INTERNAL: {response.message}")
            else:
                fn(requests[0], timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            return classify(exc)
        return Outcome("OK", "", "")

    def raw(self, method: str, payloads: list[bytes]) -> Outcome:
        """Send arbitrary bytes as the request(s) of ``method`` (malformed protobuf)."""
        service = next(s for s, m in services() if m.name == method)
        path = f"/{service}/{method}"
        try:
            if method in self.streaming and method in self.one_request:
                for _ in self.channel.unary_stream(path)(payloads[0], timeout=CALL_TIMEOUT_S / 2):
                    pass
            elif method in self.streaming:
                for _ in self.channel.stream_stream(path)(
                    iter(payloads), timeout=CALL_TIMEOUT_S / 2
                ):
                    pass
            else:
                self.channel.unary_unary(path)(payloads[0], timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            return classify(exc)
        return Outcome("OK", "", "")

    def close(self) -> None:
        self.channel.close()


def _message_class(descriptor: Descriptor) -> type[Message]:
    cls: type[Message] = getattr(api_pb2, descriptor.name, None) or _lookup(descriptor)
    return cls


def _lookup(descriptor: Descriptor) -> type[Message]:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(descriptor)


@dataclass
class MethodReport:
    method: str
    requests: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


def templates() -> dict[str, dict[str, Any]]:
    """A plausible request per method (the fuzzer's seed corpus): half of the generated
    requests are one of these with up to 3 fields replaced by random values or removed, so
    the fuzz reaches past shape validation into topics, groups, leases and the Raft log."""
    member = {"group": GROUP, "member_id": LIVE["member_id"], "generation": LIVE["generation"]}
    ref = {"topic": TOPIC, "partition": 0, "offset": 0, "delivery_count": 1}
    record = {"value": b"v", "key": b"k"}
    return {
        "Send": {"topic": TOPIC, "records": [record]},
        "SendStream": {"topic": TOPIC, "records": [record], "request_id": 1},
        "JoinGroup": {"group": GROUP, "topics": [TOPIC], "session_timeout_ms": 10_000},
        "Heartbeat": dict(member),
        "LeaveGroup": {"group": GROUP, "member_id": "m-nope"},
        "Poll": {**member, "max_records": 5, "max_wait_ms": 0},
        "PollStream": {"start": member},
        "Ack": {**member, "refs": [ref]},
        "Nack": {**member, "refs": [ref], "delay_ms": 10},
        "ExtendLease": {**member, "refs": [ref], "lease_ms": 1000},
        "Fetch": {"topic": TOPIC, "partition": 0, "offset": 0, "max_records": 10},
        "ListOffsets": {"topic": TOPIC},
        "ProducerState": {"topic": TOPIC, "producer_id": "p1", "partitions": [0]},
        "CreateTopic": {"name": SCRATCH_TOPIC, "partitions": 1, "replication_factor": 3},
        "DeleteTopic": {"name": SCRATCH_TOPIC},
        "DescribeTopic": {"name": TOPIC},
        "AlterTopicConfig": {"name": SCRATCH_TOPIC, "config": {"lease_ms": 5000}},
        "DescribeGroup": {"group": GROUP},
        "DeleteGroup": {"group": GROUP},  # the live member keeps it: GROUP_NOT_EMPTY
        "SeekGroup": {"group": GROUP, "topic": TOPIC, "to": 2},  # GROUP_NOT_EMPTY unless force
        "PurgeTopic": {"topic": SCRATCH_TOPIC},
        "UpdateRecord": {"topic": TOPIC, "partition": 0, "offset": 0, "priority": 1},
        "CancelRecord": {"topic": TOPIC, "partition": 1, "offset": 0},
        "RemoveBroker": {"broker_id": 99},
        "AddPartitions": {"name": SCRATCH_TOPIC, "partitions": 2},
        "CommitTxn": {"app_id": "fz-app", "version": 1},
        "GetTxn": {"app_id": "fz-app"},
        "BackupPartition": {"topic": TOPIC, "partition": 0},
        "MovePartition": {"topic": SCRATCH_TOPIC, "partition": 0, "replicas": [1, 2, 3]},
        "CreateSchedule": {
            "topic": SCRATCH_TOPIC,
            "schedule": {"name": "fz", "interval_ms": 60_000, "template": record},
        },
        "ListSchedules": {"topic": SCRATCH_TOPIC},
        "PauseSchedule": {"topic": SCRATCH_TOPIC, "name": "fz", "paused": True},
        "DeleteSchedule": {"topic": SCRATCH_TOPIC, "name": "fz"},
    }


def _mutate(
    base: dict[str, Any], random_values: dict[str, Any], names: list[str]
) -> dict[str, Any]:
    out = dict(base)
    for name in names:
        if name in random_values:
            out[name] = random_values[name]
        else:
            out.pop(name, None)
    return out


def request_strategy(method: str, descriptor: Any) -> st.SearchStrategy[dict[str, Any]]:
    """Random requests of ``descriptor`` (a Descriptor, python's or upb's) and mutations of
    the method's template."""
    anything = message(descriptor)
    base = templates().get(method)
    if base is None:  # no fields worth a template (ListTopics...)
        return anything
    names = st.lists(st.sampled_from([f.name for f in descriptor.fields]), max_size=3)
    mutated = st.builds(_mutate, st.just(base), anything, names)
    return st.one_of(anything, mutated)


def fuzz_method(
    client: RpcClient, method: str, n: int, seed: int, concurrency: int = 16
) -> MethodReport:
    """Send ``n`` generated requests of ``method``, up to ``concurrency`` at a time (a request
    the broker holds, e.g. a Poll naming a future generation, does not stall the fuzz);
    failures are recorded, not raised."""
    report = MethodReport(method)
    cls = client.types[method]
    one = request_strategy(method, cls.DESCRIPTOR)
    strategy = (
        st.lists(one, min_size=1, max_size=3)
        if method in client.streaming
        else one.map(lambda d: [d])
    )
    # a third of the requests are bytes: random, or a generated request cut short
    cut = st.builds(
        lambda values, at: build(cls, values).SerializeToString()[:at],
        one,
        st.integers(0, 64),
    )
    garbage = st.lists(st.one_of(st.binary(max_size=64), cut), min_size=1, max_size=2)
    strategy = st.one_of(strategy, strategy, garbage)
    lock = threading.Lock()
    slots = threading.Semaphore(concurrency)
    pool = ThreadPoolExecutor(concurrency, thread_name_prefix=f"fuzz-{method}")

    def call(requests: list[Any]) -> None:
        try:
            if isinstance(requests[0], bytes):
                outcome = client.raw(method, requests)
            else:
                outcome = client.call(method, requests)
        finally:
            slots.release()
        with lock:
            report.requests += 1
            report.statuses[outcome.raftq or outcome.status] += 1
            if outcome.failure and len(report.failures) < 20:
                shown = " | ".join(repr(r)[:300].replace("\n", " ") for r in requests)
                report.failures.append(f"{method}: {outcome.failure[:300]} <- {shown}")

    @hypothesis_seed(seed)
    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        derandomize=False,
    )
    @given(strategy)
    def run(values: list[Any]) -> None:
        requests: list[Any] = list(values)
        if not isinstance(values[0], bytes):
            requests = [build(cls, v) for v in values]
            for r in requests:
                tame(method, r)
        else:  # bytes that happen to parse are tamed too (a cut DeleteTopic may name "fz")
            requests = [tame_bytes(method, cls, b) for b in requests]
        slots.acquire()
        pool.submit(call, requests)

    start = time.monotonic()
    try:
        run()
    except HypothesisException as exc:  # e.g. an exhausted search space of an empty message
        report.failures.append(f"{method}: hypothesis stopped: {exc!r}")
    finally:
        pool.shutdown(wait=True)
    report.seconds = time.monotonic() - start
    return report


def health_ok(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        except grpc.RpcError:
            return False
        return bool(response.status == health_pb2.HealthCheckResponse.SERVING)


def fuzz_seed() -> int:
    raw = os.environ.get("RAFTQ_SEED")
    return int(raw) if raw else random.SystemRandom().randrange(1 << 31)


def iter_methods(selected: str = "") -> Iterator[str]:
    wanted = {m for m in selected.split(",") if m}
    for _, method in services():
        if not wanted or method.name in wanted:
            yield method.name


def main(argv: list[str] | None = None) -> int:
    from tests.fuzz_cluster import FuzzCluster  # process helpers stay out of the pure parts

    parser = argparse.ArgumentParser(prog="python -m tests.rpc_fuzz")
    parser.add_argument("--requests", type=int, default=10_000, help="requests per RPC")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--methods", default="", help="comma-separated; default: every RPC")
    parser.add_argument("--root", type=Path, default=None)
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    args = parser.parse_args(argv)
    # SIGTERM (timeout, CI cancel) unwinds like Ctrl-C: the broker processes are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    seed = args.seed if args.seed is not None else fuzz_seed()
    root = args.root or Path(tempfile.mkdtemp(prefix=f"raftq-fuzz-{seed}-"))
    print(f"fuzz: seed={seed} (replay: RAFTQ_SEED={seed}) dir={root}", flush=True)
    failures = 0
    start = time.monotonic()
    with FuzzCluster(root) as fc:
        for method in iter_methods(args.methods):
            fc.refresh()
            report = fuzz_method(fc.client, method, args.requests, seed, args.concurrency)
            problems = fc.problems()
            failures += len(report.failures) + len(problems)
            top = ", ".join(f"{k}={v}" for k, v in report.statuses.most_common(4))
            print(
                f"fuzz: {method:18s} {report.requests:6d} requests {report.seconds:7.1f} s "
                f"failures={len(report.failures)} [{top}]",
                flush=True,
            )
            for line in report.failures + problems:
                print(f"  - {line}", flush=True)
        problems = fc.round_trip_problems()
        failures += len(problems)
        for line in problems:
            print(f"  - {line}", flush=True)
    print(
        f"fuzz: seed={seed} {time.monotonic() - start:.0f} s failures={failures} "
        f"{'PASS' if not failures else 'FAIL'}",
        flush=True,
    )
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
