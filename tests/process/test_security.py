"""Security: TLS on the client port, tokens with per-topic ACLs, the encrypted raft port.

The acceptance tests run a real 3-broker cluster (tests/cluster.py) started as ``raftq dev up
--tls`` starts it: a dev CA (broker/devca.py), TLS on every client port, tokens and ACLs
required. Each refused call must fail with a clear typed error and leave the cluster's state
(topics, offsets, groups, leases) exactly as it was; the happy paths go end to end through the
Python client over TLS. The pure parts (auth file, settings, which RPC needs what) are tested
on their own first.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from raftq.client import Admin, Consumer, Producer
from raftq.config import (
    CLIENT_MESSAGE_BYTES_MAX,
    BrokerSettings,
    ConfigError,
    SecuritySettings,
    load_auth_policy,
)
from raftq.devca import DevPki, ensure_dev_pki
from raftq.proto import api_pb2, api_pb2_grpc, errors
from raftq.transport import auth
from raftq.transport.auth import AclRule, AuthPolicy, Need, Principal, requirements, token_digest
from raftq.transport.grpc_errors import from_rpc_error
from raftq.transport.raft import codec, handshake
from raftq.transport.tls import ChannelSecurity, open_channel
from tests.cluster import ProcessCluster
from tests.helpers import wait_until

TOPIC = "orders"

# --------------------------------------------------------------------------------------------
# Pure parts
# --------------------------------------------------------------------------------------------


Rule = tuple[tuple[str, ...], tuple[str, ...]] | tuple[tuple[str, ...], tuple[str, ...], str]
GROUPS: Rule = (("*",), ("consume",), auth.GROUP)


def _principal(name: str, *rules: Rule) -> Principal:
    return Principal(
        name,
        bytes.fromhex(token_digest(f"token-of-{name}")),
        tuple(AclRule(rule[0], frozenset(rule[1]), *rule[2:]) for rule in rules),
    )


POLICY = AuthPolicy(
    [
        _principal("admin", (("*",), ("produce", "consume", "admin")), GROUPS),
        _principal("writer", (("orders", "orders.*"), ("produce",))),
        _principal("reader", (("public.*",), ("consume",)), GROUPS),
    ]
)


def test_tokens_map_to_principals_and_bad_ones_are_unauthenticated() -> None:
    who = POLICY.principal_for([("authorization", "Bearer token-of-writer")])
    assert who.name == "writer"
    assert POLICY.authenticate("token-of-writer ") is None  # exact tokens only
    cases = {
        "no credentials": [],
        "must be one 'Bearer <token>'": [("authorization", "Basic dXNlcjpwYXNz")],
        "unknown token": [("authorization", "Bearer nope")],
    }
    for phrase, metadata in cases.items():
        with pytest.raises(errors.Unauthenticated, match=phrase):
            POLICY.principal_for(metadata)


@dataclass(frozen=True)
class _Member:
    topics: tuple[str, ...]
    principal: str


def test_every_client_rpc_has_a_need_and_acl_globs_decide() -> None:
    members = {("g", "m"): _Member(("orders", "public.news"), "reader")}

    def needs(method: str, request: Any, who: str = "admin") -> list[Need]:
        principal = next(p for p in POLICY.principals if p.name == who)
        return requirements(method, request, principal, lambda g, m, w: members.get((g, m)))

    writer = next(p for p in POLICY.principals if p.name == "writer")
    reader = next(p for p in POLICY.principals if p.name == "reader")
    send = api_pb2.SendRequest(topic="orders.eu")
    auth.check(writer, needs("/raftq.v1.Producer/Send", send, "writer"), "Send")
    with pytest.raises(errors.PermissionDenied, match="needs produce on topic 'orders'"):
        auth.check(reader, needs("/raftq.v1.Producer/Send", api_pb2.SendRequest(topic=TOPIC)), "")
    poll = api_pb2.PollRequest(group="g", member_id="m")
    # the member's topics: reader may consume public.news but not orders
    with pytest.raises(errors.PermissionDenied, match="consume on topic 'orders'"):
        auth.check(reader, needs("/raftq.v1.Consumer/Poll", poll, "reader"), "Poll")
    with pytest.raises(errors.PermissionDenied, match="issued that member id to another"):
        needs("/raftq.v1.Consumer/Poll", poll, "admin")  # admin, but not this member's owner
    with pytest.raises(errors.UnknownMember):
        needs("/raftq.v1.Consumer/Poll", api_pb2.PollRequest(group="g", member_id="x"), "reader")
    remove = needs("/raftq.v1.Admin/RemoveBroker", None)  # cluster-wide: no topic to read
    with pytest.raises(errors.PermissionDenied, match="every topic"):
        auth.check(writer, remove, "RemoveBroker")
    assert needs("/raftq.v1.NotYet/Invented", None) == [Need(frozenset({"admin"}), auth.CLUSTER)]


def test_auth_file_and_security_settings_are_validated(tmp_path: Path) -> None:
    good = tmp_path / "auth.yaml"
    good.write_text(
        "principals:\n  app:\n"
        f'    token_sha256: "{token_digest("t")}"\n'
        "    acls:\n      - topics: orders.*\n        operations: [produce, consume]\n"
    )
    policy = load_auth_policy(good)
    assert policy.principals[0].acls[0].allows("consume", "orders.x")
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text(
        "principals:\n  app:\n"
        f'    token_sha256: "{token_digest("t")}"\n'
        "    acls:\n"
        "      - groups: [workers, 'workers.*']\n        operations: [consume]\n"
        "      - txn_apps: etl\n        operations: [produce, admin]\n"
    )
    (app,) = load_auth_policy(kinds).principals
    assert app.may(frozenset({"consume"}), "workers.eu", auth.GROUP)
    assert not app.may(frozenset({"consume"}), "workers.eu", auth.TOPIC)  # kinds stay apart
    assert not app.may(frozenset({"admin"}), "workers", auth.GROUP)
    assert app.may(frozenset({"produce"}), "etl", auth.TXN_APP)
    assert not app.may(frozenset({"produce"}), "etl-2", auth.TXN_APP)
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(
        "principals:\n  app:\n"
        f'    token_sha256: "{token_digest("t")}"\n'
        "    acls:\n"
        "      - topics: [a]\n        groups: [b]\n        operations: [consume]\n"
        "      - groups: [b]\n        operations: [produce]\n"
        "      - txn_apps: [c]\n        operations: [consume]\n"
        "      - operations: [consume]\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_auth_policy(mixed)
    text = str(caught.value)
    assert "acls[0] must name exactly one of topics, groups, txn_apps" in text
    assert "acls[1].operations must list some of consume, admin for groups" in text
    assert "acls[2].operations must list some of produce, admin for txn_apps" in text
    assert "acls[3] must name exactly one of" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        'principals:\n  app:\n    token_sha256: "t0k3n"\n'
        "    acls:\n      - topics: ['*']\n        operations: [write]\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_auth_policy(bad)
    assert "token_sha256 must be 64 hex digits" in str(caught.value)
    assert "operations must list some of produce, consume, admin for topics" in str(caught.value)
    with pytest.raises(ConfigError, match=r"needs security\.auth_file"):
        SecuritySettings(auth_required=True)
    with pytest.raises(ConfigError, match="set together"):
        SecuritySettings(tls_cert_file=str(good))
    assert SecuritySettings(auth_required=True, auth_file=str(good)).auth_required
    from raftq.config import BrokerConfig

    public = BrokerSettings(
        client_addr="10.1.2.3:7070", raft_addr="10.1.2.3:9070", cluster_secret="s" * 32
    )
    with pytest.raises(ConfigError, match="tokens in clear text"):
        BrokerConfig(
            broker=public, security=SecuritySettings(auth_required=True, auth_file=str(good))
        )


# --------------------------------------------------------------------------------------------
# A real cluster with TLS and tokens on
# --------------------------------------------------------------------------------------------


class Secured:
    def __init__(self, cluster: ProcessCluster, pki: DevPki) -> None:
        self.cluster = cluster
        self.pki = pki
        self.tokens = pki.tokens()

    def client(self, principal: str | None, **extra: Any) -> dict[str, Any]:
        options: dict[str, Any] = {"tls_ca_file": str(self.pki.ca), "request_timeout_ms": 5000}
        if principal is not None:
            options["token"] = self.tokens[principal]
        return options | extra

    def admin(self, principal: str | None = "admin", **extra: Any) -> Admin:
        return Admin(self.cluster.bootstrap, **self.client(principal, **extra))

    def state(self) -> dict[str, Any]:
        """Everything a refused call might have changed, read as the admin."""
        with self.admin() as admin:
            topics = sorted(t.name for t in admin.list_topics())
            groups = sorted(g.group_id for g in admin.list_groups())
            offsets = {name: [str(o) for o in admin.list_offsets(name)] for name in topics}
            described = {g: str(admin.describe_group(g)) for g in groups}
        return {"topics": topics, "groups": groups, "offsets": offsets, "described": described}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root = tmp_path_factory.mktemp("secured")
    pki = ensure_dev_pki(root / "tls")  # what `raftq dev up --tls` does
    client = {"tls_ca_file": str(pki.ca), "token": pki.tokens()["admin"]}
    with ProcessCluster(root, brokers=3, env=pki.broker_env(), client=client) as cluster:
        cluster.wait_ready()
        cluster.admin().create_topic(TOPIC, partitions=2)
        cluster.wait_leaders(TOPIC)
        yield Secured(cluster, pki)


def test_tls_and_tokens_end_to_end(secured: Secured) -> None:
    """The happy path: produce and consume through the Python client over TLS with tokens."""
    with Producer(secured.cluster.bootstrap, **secured.client("producer")) as producer:
        futures = [producer.send(TOPIC, f"m{i}".encode(), key=f"k{i}".encode()) for i in range(20)]
        offsets = [f.result(timeout=30) for f in futures]
    assert len(offsets) == 20
    got: list[bytes] = []
    with Consumer(
        secured.cluster.bootstrap, "workers", [TOPIC], **secured.client("consumer")
    ) as consumer:

        def drained() -> bool:
            for message in consumer.poll(50, timeout_ms=500):
                got.append(message.value)
                message.ack()
            return len(got) >= 20

        wait_until(drained, 60, "20 records consumed over TLS")
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(20))


def test_unauthenticated_and_wrong_token_are_refused_and_change_nothing(secured: Secured) -> None:
    before = secured.state()
    for principal, phrase in ((None, "no credentials"), ("wrong", "unknown token")):
        options = secured.client(None)
        if principal == "wrong":
            options["token"] = "not-a-token-of-this-cluster"
        with Admin(secured.cluster.bootstrap, **options) as admin:
            for call in (
                lambda: admin.create_topic("intruder"),
                lambda: admin.list_topics(),
                lambda: admin.delete_topic(TOPIC),
                lambda: admin.fetch(TOPIC, 0, 0, 10),
            ):
                with pytest.raises(errors.Unauthenticated, match=phrase) as caught:
                    call()
                assert not caught.value.retriable
        with (
            Producer(secured.cluster.bootstrap, **options) as producer,
            pytest.raises(errors.Unauthenticated, match=phrase),
        ):
            producer.send(TOPIC, b"forged", partition=0).result(timeout=30)
        with pytest.raises(errors.Unauthenticated, match=phrase):
            Consumer(secured.cluster.bootstrap, "intruders", [TOPIC], **options)
    assert secured.state() == before


def test_tokens_without_the_acl_are_refused_and_change_nothing(secured: Secured) -> None:
    with Producer(secured.cluster.bootstrap, **secured.client("producer")) as producer:
        producer.send(TOPIC, b"leased", partition=0).result(timeout=30)
    with Consumer(
        secured.cluster.bootstrap, "acl-group", [TOPIC], **secured.client("consumer")
    ) as consumer:
        leased = wait_until(lambda: consumer.poll(1, timeout_ms=500), 30, "a leased record")[0]
        before = secured.state()
        # produce without the produce ACL
        with (
            Producer(secured.cluster.bootstrap, **secured.client("consumer")) as producer,
            pytest.raises(errors.PermissionDenied, match="needs produce on topic 'orders'"),
        ):
            producer.send(TOPIC, b"nope", partition=0).result(timeout=30)
        # consume without the consume ACL on that topic (reader: public.* only)
        with pytest.raises(errors.PermissionDenied, match="needs consume on topic 'orders'"):
            Consumer(secured.cluster.bootstrap, "readers", [TOPIC], **secured.client("reader"))
        with (
            secured.admin("reader") as admin,
            pytest.raises(errors.PermissionDenied, match="consume on topic 'orders'"),
        ):
            admin.fetch(TOPIC, 0, 0, 10)
        # ... nor ack someone else's lease with the member id and ref in hand
        ack = api_pb2.AckRequest(
            group="acl-group",
            member_id=consumer.member_id,
            generation=consumer.generation,
            refs=[leased.ref],
        )
        for principal in ("reader", "producer"):
            security = ChannelSecurity.from_files(
                tls_ca_file=str(secured.pki.ca), token=secured.tokens[principal]
            )
            channel = open_channel(
                secured.cluster.client_addr(1), security, message_bytes_max=CLIENT_MESSAGE_BYTES_MAX
            )
            try:
                with pytest.raises(grpc.RpcError) as caught:
                    api_pb2_grpc.ConsumerStub(channel).Ack(ack, timeout=10)
            finally:
                channel.close()
            error = from_rpc_error(caught.value)
            assert isinstance(error, errors.PermissionDenied), error
            assert f"principal '{principal}' may not call /raftq.v1.Consumer/Ack" in error.message
        # admin without the admin ACL
        with secured.admin("producer") as admin:
            for call in (
                lambda: admin.create_topic("orders.new"),
                lambda: admin.delete_topic(TOPIC),
                lambda: admin.alter_topic_config(TOPIC, lease_ms=1000),
                lambda: admin.cancel_record(TOPIC, 0, leased.offset),
            ):
                with pytest.raises(errors.PermissionDenied, match="needs admin on topic"):
                    call()
            assert admin.describe_topic(TOPIC).name == TOPIC  # producers may read metadata
        assert secured.state() == before
        leased.ack()  # the lease was untouched: its owner still settles it


def _raw(secured: Secured, principal: str, broker: int, rpc: str, request: Any) -> Any:
    """``rpc`` ("Service/Method") at one broker as ``principal``; raises the typed error."""
    service, method = rpc.split("/")
    security = ChannelSecurity.from_files(
        tls_ca_file=str(secured.pki.ca), token=secured.tokens[principal]
    )
    channel = open_channel(
        secured.cluster.client_addr(broker), security, message_bytes_max=CLIENT_MESSAGE_BYTES_MAX
    )
    try:
        stub = getattr(api_pb2_grpc, f"{service}Stub")(channel)
        return getattr(stub, method)(request, timeout=15)
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from None
    finally:
        channel.close()


def test_member_ids_are_issued_and_bound_to_the_principal_through_every_broker(
    secured: Secured,
) -> None:
    """A join forwarded to the metadata leader carries its principal: the member is bound to
    it, its own rejoins work through any broker, anyone else's use of the id is refused."""
    with secured.admin() as admin:
        leader = admin.describe_cluster().metadata_leader
    others = [b for b in (1, 2, 3) if b != leader]
    join = api_pb2.JoinGroupRequest(group="bound", topics=[TOPIC])
    joined = _raw(secured, "consumer", others[0], "Consumer/JoinGroup", join)
    mine = joined.member_id
    rejoin = api_pb2.JoinGroupRequest(group="bound", topics=[TOPIC], member_id=mine)
    for broker in (leader, *others):
        again = _raw(secured, "consumer", broker, "Consumer/JoinGroup", rejoin)
        assert again.member_id == mine
        with pytest.raises(errors.PermissionDenied, match="another principal"):
            _raw(secured, "admin", broker, "Consumer/JoinGroup", rejoin)
        heartbeat = api_pb2.HeartbeatRequest(
            group="bound", member_id=mine, generation=again.generation
        )
        with pytest.raises(errors.PermissionDenied, match="issued that member id"):
            _raw(secured, "admin", broker, "Consumer/Heartbeat", heartbeat)
        _raw(secured, "consumer", broker, "Consumer/Heartbeat", heartbeat)
    chosen = api_pb2.JoinGroupRequest(group="bound", topics=[TOPIC], member_id="m-chosen")
    with pytest.raises(errors.UnknownMember, match="issued by the broker"):
        _raw(secured, "consumer", others[1], "Consumer/JoinGroup", chosen)
    describe = api_pb2.DescribeGroupRequest(group="bound")
    as_reader = _raw(secured, "reader", others[0], "Admin/DescribeGroup", describe)
    assert mine not in str(as_reader) and auth.HIDDEN_MEMBER in str(as_reader)
    assert mine in str(_raw(secured, "admin", others[1], "Admin/DescribeGroup", describe))
    assert mine in str(_raw(secured, "consumer", leader, "Admin/DescribeGroup", describe))
    leave = api_pb2.LeaveGroupRequest(group="bound", member_id=mine)
    with pytest.raises(errors.PermissionDenied):
        _raw(secured, "admin", others[1], "Consumer/LeaveGroup", leave)
    _raw(secured, "consumer", others[1], "Consumer/LeaveGroup", leave)


def test_plaintext_and_untrusted_clients_cannot_reach_a_tls_port(
    secured: Secured, tmp_path: Path
) -> None:
    before = secured.state()
    with (
        Admin(
            secured.cluster.bootstrap, token=secured.tokens["admin"], request_timeout_ms=3000
        ) as plain,
        pytest.raises(errors.Unavailable),
    ):
        plain.create_topic("plaintext")
    other_ca = ensure_dev_pki(tmp_path / "other")  # a CA the brokers' certificates are not from
    with (
        Admin(
            secured.cluster.bootstrap,
            tls_ca_file=str(other_ca.ca),
            token=secured.tokens["admin"],
            request_timeout_ms=3000,
        ) as untrusting,
        pytest.raises(errors.Unavailable),
    ):
        untrusting.create_topic("untrusted")
    assert secured.state() == before


def _raft_frame(sock: socket.socket) -> tuple[int, bytes]:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    (length,) = struct.unpack("!I", head)
    body = b""
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            raise ConnectionError("closed")
        body += chunk
    return body[0], body[1:]


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


class _Payload:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def test_unauthenticated_raft_peers_are_refused_and_change_nothing(
    secured: Secured, tmp_path: Path
) -> None:
    before = secured.state()
    host, port = secured.cluster.raft_addr(1).rsplit(":", 1)
    marker = tmp_path / "pwned"
    bomb = pickle.dumps([("meta", {"type": "append_entries", "x": _Payload(marker)})], protocol=2)
    # 1. a peer with the wrong secret goes through the whole handshake: refused at AUTH
    sock = socket.create_connection((host, int(port)), timeout=10)
    nonce_c = os.urandom(handshake.NONCE_BYTES)
    _private, epk_c = handshake.new_key_pair()
    sock.sendall(codec.encode_frame(codec.KIND_HELLO, handshake.hello_body(nonce_c, epk_c)))
    kind, body = _raft_frame(sock)
    assert kind == codec.KIND_CHALLENGE
    head = len(handshake.MAGIC) + 1
    nonce_s = body[head : head + handshake.NONCE_BYTES]
    epk_s = body[
        head + handshake.NONCE_BYTES : head + handshake.NONCE_BYTES + handshake.PUBLIC_KEY_BYTES
    ]
    proof = handshake.client_proof(
        b"wrong-secret-wrong-secret", nonce_s, nonce_c, epk_s, epk_c, "1.2.3.4:1"
    )
    sock.sendall(codec.encode_frame(codec.KIND_AUTH, proof + b"1.2.3.4:1"))
    sock.sendall(codec.encode_frame(codec.KIND_BATCH, bomb))
    assert _closed(sock)
    sock.close()
    # 2. plaintext raft traffic (a stock pysyncobj peer, or anyone) at an encrypted port
    for attack in (bomb, codec.encode_frame(codec.KIND_BATCH, bomb), os.urandom(4096)):
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall(attack)
        assert _closed(sock)
        sock.close()
    log = (secured.cluster.root / "broker-1.log").read_text(errors="replace")
    assert "dialer failed authentication (wrong cluster secret?)" in log
    assert not marker.exists(), "raft bytes from an unauthenticated peer were unpickled"
    assert secured.state() == before
    # and the cluster carries on: every broker alive, writes still commit
    secured.cluster.wait_ready()
    with Producer(secured.cluster.bootstrap, **secured.client("producer")) as producer:
        producer.send(TOPIC, b"after the attacks", partition=1).result(timeout=30)


def test_cli_takes_tls_ca_and_token_from_flags_or_environment(
    secured: Secured, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from raftq import cli

    bootstrap = ["--bootstrap", secured.cluster.bootstrap, "--request-timeout-ms", "15000"]
    flags = ["--tls-ca", str(secured.pki.ca), "--token", secured.tokens["producer"]]

    def succeeds(argv: list[str]) -> bool:  # a command may meet an election: it does not retry
        return cli.main(argv) == 0

    wait_until(lambda: succeeds(["topic", "list", *bootstrap, *flags]), 60, "topic list")
    assert TOPIC in capsys.readouterr().out
    assert cli.main(["topic", "create", "cli-made", *bootstrap, *flags]) == 1
    assert "PERMISSION_DENIED" in capsys.readouterr().err
    monkeypatch.setenv(cli.TLS_CA_ENV, str(secured.pki.ca))
    monkeypatch.setenv(cli.TOKEN_ENV, secured.tokens["admin"])
    wait_until(lambda: succeeds(["topic", "describe", TOPIC, *bootstrap]), 60, "describe")
    monkeypatch.setenv(cli.TOKEN_ENV, "")
    assert cli.main(["topic", "list", *bootstrap]) == 1
    assert "UNAUTHENTICATED: no credentials" in capsys.readouterr().err
    assert "cli-made" not in [t.name for t in secured.admin().list_topics()]


def test_a_dev_ca_from_before_group_acls_gets_this_releases_dev_acls(tmp_path: Path) -> None:
    pki = ensure_dev_pki(tmp_path / "tls")
    tokens, ca = pki.tokens(), pki.ca.read_bytes()
    current = pki.auth_file.read_text()
    old = current.split("  producer:")[0]  # as an older release wrote it: topics rules only
    pki.auth_file.write_text(old.replace("groups", "topics").replace("txn_apps", "topics"))
    again = ensure_dev_pki(tmp_path / "tls")
    assert again.auth_file.read_text() == current  # rewritten from the same tokens
    assert again.tokens() == tokens and again.ca.read_bytes() == ca  # nothing else replaced
    consumer = next(p for p in load_auth_policy(again.auth_file).principals if p.name == "consumer")
    assert consumer.may(frozenset({"consume"}), "any-group", auth.GROUP)


def test_mutual_tls_refuses_clients_without_a_certificate(tmp_path: Path) -> None:
    pki = ensure_dev_pki(tmp_path / "tls")
    options: dict[str, Any] = {"tls_ca_file": str(pki.ca), "token": pki.tokens()["admin"]}
    certified = options | {
        "tls_cert_file": str(pki.client_cert),
        "tls_key_file": str(pki.client_key),
    }
    env = pki.broker_env(mutual=True) | {"RAFTQ_TOPIC_DEFAULTS__PARTITIONS": "1"}
    with ProcessCluster(tmp_path, brokers=1, env=env, client=certified) as cluster:
        cluster.wait_ready()
        with (
            Admin(cluster.bootstrap, request_timeout_ms=3000, **options) as anonymous,
            pytest.raises(errors.Unavailable),
        ):
            anonymous.create_topic("no-cert")
        with Admin(cluster.bootstrap, **certified) as admin:
            admin.create_topic("with-cert")
            assert [t.name for t in admin.list_topics()] == ["with-cert"]


def test_a_broker_joins_a_tls_cluster_over_tls(secured: Secured) -> None:
    """A non-seed broker asks the seeds to join over their TLS client ports (membership)."""
    cluster = secured.cluster
    joined = cluster.add_broker()
    cluster.start(joined)
    alive = cluster.wait_ready(timeout_s=90)
    assert joined in {b.id for b in alive.brokers if b.alive}


def test_the_spark_sink_writes_over_tls_with_a_token_and_is_refused_without(
    secured: Secured,
) -> None:
    """Spark executors reach a secured cluster through the writer's tlsCaFile/token options."""
    from raftq.spark import common, sink

    base = {
        "bootstrap": secured.cluster.bootstrap,
        "topic": TOPIC,
        "tlsCaFile": str(secured.pki.ca),
    }
    with secured.admin() as admin:
        before = sum(p.end for p in admin.list_offsets(TOPIC))
    opts = sink.SinkOptions.parse({**base, "token": secured.tokens["producer"]})
    task = sink.TaskSink(
        common.connection(opts.bootstrap, opts.request_timeout_ms, opts.security),
        opts,
        producer_id="spark:tls-test:0:0",
        spark_partition=0,
    )
    for i in range(30):
        task.add(b"spark-%d" % i, key=b"k%d" % i)
    task.finish()
    with secured.admin() as admin:
        assert sum(p.end for p in admin.list_offsets(TOPIC)) == before + 30
    refused = sink.SinkOptions.parse({**base, "token": "not-a-token", "requestTimeoutMs": "3000"})
    with pytest.raises(errors.Unauthenticated):
        task = sink.TaskSink(
            common.connection(refused.bootstrap, refused.request_timeout_ms, refused.security),
            refused,
            producer_id="spark:tls-test:1:0",
            spark_partition=0,
        )
        task.add(b"never", key=b"k")
        task.finish()
    with secured.admin() as admin:
        assert sum(p.end for p in admin.list_offsets(TOPIC)) == before + 30
