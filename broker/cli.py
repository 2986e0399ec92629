"""The ``raftq`` command line (console script ``raftq = raftq.cli:main``).

Client commands, each taking ``--bootstrap HOST:PORT[,HOST:PORT...]`` (default: the
``RAFTQ_BOOTSTRAP`` environment variable, else the three brokers of ``raftq dev up``) and
``--json``::

    raftq topic create NAME [--partitions N] [--replication-factor N] [--ordering priority]
                            [--lease-ms MS] [--max-deliveries N] ... (every topic setting)
    raftq topic list | describe NAME | alter NAME --SETTING VALUE... | delete NAME
    raftq produce TOPIC [--key K] [--partition P]          one record per stdin line
    raftq produce TOPIC --count N [--size BYTES]           N generated records, with a rate
    raftq consume TOPIC --group G [--count N] [--idle-exit-ms MS] [--no-ack]
    raftq group list | describe GROUP | delete GROUP
    raftq cluster status
    raftq dlq redrive DLQ_TOPIC [--rate N] [--max N]       dead letters back to their origin
    raftq console [--listen HOST:PORT]                     web console + HTTP/JSON API

Offline: ``raftq inspect DATA_DIR [summary|records|groups|producers|dlq] [--topic T]
[--partition N] [--offset O] [--limit N] [--json]`` reads a broker's partition files
read-only (broker/inspector.py), whether the broker runs or not.

Security options, on every client command: ``--tls-ca FILE`` (TLS; default
``$RAFTQ_TLS_CA``), ``--tls-cert FILE --tls-key FILE`` (mutual TLS), ``--token TOKEN``
(default ``$RAFTQ_TOKEN``; prefer the variable: arguments show in ``ps``).

Output is a human table, or JSON with ``--json``. A failure prints the error and the error
catalogue's hint (what to do) on stderr and exits 1; bad usage exits 2.

Adding commands: each command family is a ``register(subparsers)`` function that adds its
subparsers and sets ``handler=<function(args) -> int>`` on them; :data:`REGISTRARS` lists
them in help order. The broker's ``serve`` and ``dev up`` plug in the same way.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from raftq import backup, cli_schedule, cli_server, inspector
from raftq.client import (
    Admin,
    Consumer,
    GroupListing,
    Message,
    Producer,
    SendFuture,
    TopicInfo,
    types,
)
from raftq.client.redrive import REDRIVE_GROUP, RedriveProgress, redrive
from raftq.config import ClientSettings
from raftq.proto import api_pb2, errors
from raftq.spark import sink as spark_sink

DEFAULT_BOOTSTRAP = "127.0.0.1:7070,127.0.0.1:7071,127.0.0.1:7072"  # raftq dev up's brokers
BOOTSTRAP_ENV = "RAFTQ_BOOTSTRAP"
TOKEN_ENV = "RAFTQ_TOKEN"
TLS_CA_ENV = "RAFTQ_TLS_CA"
PROGRESS_INTERVAL_S = 0.5
CLIENT_DEFAULTS = ClientSettings()

Subparsers = Any  # argparse._SubParsersAction[argparse.ArgumentParser], private in typeshed
Handler = Callable[[argparse.Namespace], int]


# --- output ---------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO) -> None:
    """Left-aligned columns, two spaces apart."""
    text = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in text) for i in range(len(headers))]
    for row in text:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def to_dict(answer: Any) -> Any:
    """An Admin answer as JSON (the HTTP API's shape: :func:`raftq.client.types.to_dict`)."""
    return types.to_dict(answer)


def emit_json(value: Any, out: TextIO) -> None:
    out.write(json.dumps(value, sort_keys=True) + "\n")


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode("ascii")


def _ranges(partitions: Iterable[int]) -> str:
    return ",".join(str(p) for p in sorted(partitions)) or "-"


# --- common options -------------------------------------------------------------------------


def client_options() -> argparse.ArgumentParser:
    """--bootstrap, --json and --request-timeout-ms, shared by every client command."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--bootstrap",
        default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
        metavar="HOST:PORT[,HOST:PORT...]",
        help=f"brokers to contact (default: ${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP})",
    )
    parent.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parent.add_argument(
        "--request-timeout-ms",
        type=int,
        default=CLIENT_DEFAULTS.request_timeout_ms,
        help=f"per request, retries included (default {CLIENT_DEFAULTS.request_timeout_ms}, "
        "client.request_timeout_ms)",
    )
    parent.add_argument(
        "--tls-ca",
        default=os.environ.get(TLS_CA_ENV) or None,
        metavar="FILE",
        help=f"use TLS, trusting this CA's broker certificates (default: ${TLS_CA_ENV})",
    )
    parent.add_argument("--tls-cert", metavar="FILE", help="client certificate (mutual TLS)")
    parent.add_argument("--tls-key", metavar="FILE", help="client certificate's key")
    parent.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV) or None,
        help=f"bearer token for auth (default: ${TOKEN_ENV}, which ps does not show)",
    )
    return parent


def security(args: argparse.Namespace) -> dict[str, Any]:
    """The client keyword arguments for --tls-ca, --tls-cert, --tls-key and --token."""
    return {
        "tls_ca_file": args.tls_ca,
        "tls_cert_file": args.tls_cert,
        "tls_key_file": args.tls_key,
        "token": args.token,
    }


def _config_options(parser: argparse.ArgumentParser) -> None:
    """One --flag per topic setting (TopicConfigUpdate's fields, so new ones appear here)."""
    for field in api_pb2.TopicConfigUpdate.DESCRIPTOR.fields:
        flag = "--" + field.name.replace("_", "-")
        if field.name == "ordering":
            parser.add_argument(
                flag, choices=("fifo", "priority", "fair"), dest=f"config_{field.name}"
            )
        elif field.name == "ttl_action":
            parser.add_argument(flag, choices=("drop", "dead_letter"), dest=f"config_{field.name}")
        elif field.type == field.TYPE_STRING:
            parser.add_argument(flag, dest=f"config_{field.name}", metavar="NAME")
        else:
            parser.add_argument(flag, type=int, dest=f"config_{field.name}", metavar="N")


def _config_from(args: argparse.Namespace) -> dict[str, Any]:
    prefix = "config_"
    return {
        k[len(prefix) :]: v for k, v in vars(args).items() if k.startswith(prefix) and v is not None
    }


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(args.bootstrap, request_timeout_ms=args.request_timeout_ms, **security(args))


# --- topic ----------------------------------------------------------------------------------


def _print_topic(description: TopicInfo, args: argparse.Namespace) -> None:
    if args.json:
        emit_json(to_dict(description), sys.stdout)
        return
    config = description.config
    print(
        f"topic {description.name}: {len(description.partitions)} partitions, "
        f"replication factor {description.replication_factor}"
    )
    settings = to_dict(config)
    print("config: " + ", ".join(f"{k}={v}" for k, v in sorted(settings.items())))
    table(
        ("PARTITION", "LEADER", "LEADER_ADDR", "REPLICAS", "IN_SYNC", "LOG_START", "END"),
        (
            (
                p.partition,
                p.leader or "-",
                p.leader_addr or "-",
                _ranges(p.replicas),
                _ranges(p.isr),
                p.log_start,
                p.end,
            )
            for p in description.partitions
        ),
        sys.stdout,
    )


def topic_create(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        description = admin.create_topic(
            args.name, args.partitions, args.replication_factor, **_config_from(args)
        )
    _print_topic(description, args)
    return 0


def topic_add_partitions(args: argparse.Namespace) -> int:
    """``raftq topic add-partitions NAME --partitions N``: grow to N partitions."""
    with _admin(args) as admin:
        description = admin.add_partitions(args.name, args.partitions)
    _print_topic(description, args)
    return 0


def topic_list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        topics = admin.list_topics()
    if args.json:
        emit_json([to_dict(t) for t in topics], sys.stdout)
    else:
        rows = ((t.name, t.partitions, t.replication_factor) for t in topics)
        table(("TOPIC", "PARTITIONS", "REPLICATION"), rows, sys.stdout)
    return 0


def topic_describe(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        _print_topic(admin.describe_topic(args.name), args)
    return 0


def topic_alter(args: argparse.Namespace) -> int:
    config = _config_from(args)
    if not config:
        raise errors.InvalidArgument("name a setting to change, e.g. --lease-ms 60000")
    with _admin(args) as admin:
        _print_topic(admin.alter_topic_config(args.name, **config), args)
    return 0


def topic_delete(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        admin.delete_topic(args.name)
    if args.json:
        emit_json({"deleted": args.name}, sys.stdout)
    else:
        print(f"deleted topic {args.name}")
    return 0


# --- produce / consume ----------------------------------------------------------------------


class _Progress:
    """A progress line on stderr of acknowledged records, rewritten at most every
    PROGRESS_INTERVAL_S: ``acked/total records acknowledged (sent queued), rate``."""

    def __init__(self, total: int | None, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self.started = self.shown = time.monotonic()

    def rate(self, done: int) -> float:
        return done / max(time.monotonic() - self.started, 1e-9)

    def update(self, acked: int, sent: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self.shown < PROGRESS_INTERVAL_S):
            return
        self.shown = now
        of = f"/{self.total}" if self.total is not None else ""
        waiting = f" ({sent - acked} in flight)" if sent > acked else ""
        sys.stderr.write(
            f"\r{acked}{of} records acknowledged{waiting}, {self.rate(acked):,.0f} records/s "
        )
        sys.stderr.flush()


def _values(args: argparse.Namespace) -> Iterable[bytes]:
    if args.count is not None:
        pad = max(args.size, 0)
        for i in range(args.count):
            yield f"record-{i}".encode().ljust(pad, b".")
    else:
        for line in sys.stdin:
            yield line.rstrip("\r\n").encode()


class _Acks:
    """Counts the outcomes of sends (callbacks run on the Producer's threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acked = 0
        self.failures: list[errors.RaftqError] = []

    def on_done(self, future: SendFuture) -> None:
        error = future.exception()
        with self._lock:
            if error is None:
                self.acked += 1
            else:
                self.failures.append(error)


def produce(args: argparse.Namespace) -> int:
    """Send records; progress and the final line count ACKNOWLEDGED records. Ctrl-C stops
    sending, waits briefly for what is in flight and says how many were acknowledged."""
    key = args.key.encode() if args.key is not None else None
    progress = _Progress(args.count, enabled=args.count is not None and not args.json)
    acks = _Acks()
    sent = 0
    with Producer(
        args.bootstrap,
        linger_ms=args.linger_ms,
        request_timeout_ms=args.request_timeout_ms,
        delivery_timeout_ms=args.request_timeout_ms,  # the CLI's timeout covers retries too
        **security(args),
    ) as producer:
        try:
            for value in _values(args):
                future = producer.send(args.topic, value, key=key, partition=args.partition)
                future.add_done_callback(acks.on_done)
                sent += 1
                progress.update(acks.acked, sent)
                if acks.failures:  # stop at the first failure; it is reported below
                    break
            while True:  # the final flush, with the progress line moving
                try:
                    producer.flush(PROGRESS_INTERVAL_S)
                    break
                except errors.Timeout:
                    progress.update(acks.acked, sent, force=True)
        except KeyboardInterrupt:
            with contextlib.suppress(errors.RaftqError, KeyboardInterrupt):
                producer.flush(2.0)
            progress.update(acks.acked, sent, force=True)
            sys.stderr.write(
                f"\ninterrupted: {acks.acked} of {sent} records sent were acknowledged "
                f"({sent - acks.acked - len(acks.failures)} without an answer may or may not "
                "be stored)\n"
            )
            return 130
    progress.update(acks.acked, sent, force=True)
    if progress.enabled:
        sys.stderr.write("\n")
    if acks.failures:
        sys.stderr.write(f"{acks.acked} of {sent} records acknowledged before the failure\n")
        raise acks.failures[0]
    seconds = time.monotonic() - progress.started
    if args.json:
        emit_json(
            {"topic": args.topic, "records": acks.acked, "seconds": round(seconds, 3)}, sys.stdout
        )
    else:
        print(
            f"produced {acks.acked} records to {args.topic} in {seconds:.2f} s "
            f"({progress.rate(acks.acked):,.0f} records/s)"
        )
    return 0


def _print_message(message: Message, as_json: bool) -> None:
    if as_json:
        emit_json(
            {
                "topic": message.topic,
                "partition": message.partition,
                "offset": message.offset,
                "key": _text(message.key),
                "value": _text(message.value),
                "headers": {k: _text(v) for k, v in message.headers.items()},
                "priority": message.priority,
                "delivery_count": message.delivery_count,
                "timestamp_ms": message.timestamp_ms,
            },
            sys.stdout,
        )
    else:
        key = f" key={_text(message.key)}" if message.key is not None else ""
        print(
            f"{message.topic}/{message.partition}@{message.offset} "
            f"[delivery {message.delivery_count}]{key} {_text(message.value)}"
        )
    sys.stdout.flush()


def consume(args: argparse.Namespace) -> int:
    """Print (and ack) records of a group. A missing topic fails at once; an outage is ridden
    out with one status line until the brokers answer again; a rebalance that takes records
    away says so once per poll, not once per record."""
    with _admin(args) as admin:
        admin.describe_topic(args.topic)  # UnknownTopic now, not a silent wait
    received = 0
    idle_since = time.monotonic()
    with Consumer(
        args.bootstrap,
        args.group,
        [args.topic],
        request_timeout_ms=args.request_timeout_ms,
        lease_ms=args.lease_ms,
        **security(args),
    ) as consumer:
        outage = _Outage()
        while args.count is None or received < args.count:
            wanted = 500 if args.count is None else min(500, args.count - received)
            try:
                messages = consumer.poll(wanted, timeout_ms=1000)
            except errors.RaftqError as error:
                if not error.retriable:
                    raise
                outage.waiting(error)
                continue
            outage.over()
            if not messages:
                idle_ms = (time.monotonic() - idle_since) * 1000
                if args.idle_exit_ms and idle_ms >= args.idle_exit_ms:
                    break
                continue
            idle_since = time.monotonic()
            for message in messages:
                _print_message(message, args.json)
            if not args.no_ack:
                refused = [r for r in consumer.ack(messages) if r is not None]
                if refused:  # their leases moved on (a rebalance, expiry): redelivered
                    sys.stderr.write(
                        f"rebalance: {len(refused)} of {len(messages)} acks refused "
                        f"({refused[0].kind.name}); those records are redelivered\n"
                    )
            received += len(messages)
    return 0


class _Outage:
    """One status line while no broker answers a consumer, one when they do again."""

    def __init__(self) -> None:
        self.since: float | None = None

    def waiting(self, error: errors.RaftqError) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = now
            sys.stderr.write(f"brokers unavailable ({error.kind.name}): retrying...\n")
        time.sleep(min(1.0, 0.1 + (now - self.since) / 10))

    def over(self) -> None:
        if self.since is not None:
            sys.stderr.write(f"brokers back after {time.monotonic() - self.since:.1f} s\n")
            self.since = None


# --- group / cluster ------------------------------------------------------------------------


def group_list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        groups = admin.list_groups()
    if args.json:
        emit_json([to_dict(g) for g in groups], sys.stdout)
    else:
        rows = (
            (g.group_id, _group_state(g), g.generation, g.members, ",".join(g.topics) or "-")
            for g in groups
        )
        table(("GROUP", "STATE", "GENERATION", "MEMBERS", "TOPICS"), rows, sys.stdout)
    return 0


def _group_state(group: GroupListing) -> str:
    """Kafka's names: Stable (members), Empty (none: its offsets kept until
    groups.offsets_retention_ms), Deleting (a DeleteGroup under way)."""
    if group.deleting:
        return "Deleting"
    return "Stable" if group.members else "Empty"


def group_describe(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        group = admin.describe_group(args.group)
    if args.json:
        emit_json(to_dict(group), sys.stdout)
        return 0
    state = " (deleting)" if group.deleting else ""
    print(
        f"group {group.group_id}: generation {group.generation}, "
        f"{len(group.members)} members{state}"
    )
    table(
        ("MEMBER", "TOPICS", "ASSIGNMENT"),
        (
            (
                m.member_id,
                ",".join(m.topics),
                " ".join(f"{a.topic}:{_ranges(a.partitions)}" for a in m.assignment) or "-",
            )
            for m in group.members
        ),
        sys.stdout,
    )
    print()
    table(
        ("TOPIC", "PARTITION", "MEMBER", "COMMITTED", "END", "LAG", "PENDING", "LEASED"),
        (
            (
                p.topic,
                p.partition,
                p.member_id or "-",
                p.committed,
                p.end,
                p.lag,
                p.pending,
                p.leased,
            )
            for p in group.partitions
        ),
        sys.stdout,
    )
    return 0


def group_delete(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        deleted = admin.delete_group(args.group)
    if args.json:
        emit_json(to_dict(deleted), sys.stdout)
    else:
        print(
            f"deleted group {args.group}: {deleted.partitions} partitions forgot it "
            f"({deleted.pending} pending records)"
        )
    return 0


def group_seek(args: argparse.Namespace) -> int:
    """``raftq group seek``: move a group's committed offset (Kafka's --reset-offsets)."""
    with _admin(args) as admin:
        moved = admin.seek_group(
            args.group,
            args.topic,
            partition=args.partition,
            offset=args.to_offset,
            timestamp_ms=args.to_timestamp,
            earliest=args.to_earliest,
            latest=args.to_latest,
            force=args.force,
        )
    if args.json:
        emit_json(
            {"group": args.group, "topic": args.topic, "partitions": [to_dict(p) for p in moved]},
            sys.stdout,
        )
    else:
        for p in moved:
            print(
                f"group {args.group} {args.topic}/{p.partition}: committed offset {p.offset} "
                f"({p.dropped} pending records replaced)"
            )
    return 0


def topic_purge(args: argparse.Namespace) -> int:
    """``raftq topic purge``: delete every record now in a topic (or one partition)."""
    with _admin(args) as admin:
        purged = admin.purge_topic(args.name, args.partition)
    if args.json:
        emit_json({"topic": args.name, "partitions": [to_dict(p) for p in purged]}, sys.stdout)
    else:
        for p in purged:
            print(
                f"purged {args.name}/{p.partition}: {p.deleted} records deleted, "
                f"log start {p.log_start}"
            )
    return 0


def spark_recover(args: argparse.Namespace) -> int:
    """``raftq spark recover``: a Spark query stuck on NondeterministicInput (its retries make
    other rows than the attempt that failed) writes that batch at-least-once on its next
    attempt, instead of failing again (broker/spark/__init__.py)."""
    scope = args.topic or ""
    with _admin(args) as admin:
        committed = admin.get_txn(args.app, scope)
        if committed is not None and args.batch <= committed:
            print(
                f"batch {args.batch} of {args.app} is committed (up to {committed}): nothing to do"
            )
            return 0
        admin.commit_txn(args.app, args.batch, spark_sink.recovery_scope(scope))
    print(
        f"batch {args.batch} of {args.app}{f' (topic {scope})' if scope else ''} will be written "
        "at-least-once by its next attempt: restart the query"
    )
    return 0


def cluster_status(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        cluster = admin.describe_cluster()
    if args.json:
        emit_json(to_dict(cluster), sys.stdout)
        return 0
    print(
        f"cluster {cluster.health}: metadata leader {cluster.metadata_leader or 'none'}, "
        f"{cluster.topics} topics, {cluster.partitions} partitions "
        f"({cluster.partitions_without_leader} without leader, "
        f"{cluster.under_replicated_partitions} under-replicated)"
    )
    for problem in cluster.problems:
        print(f"  problem: {problem}")
    table(
        ("BROKER", "CLIENT_ADDR", "RAFT_ADDR", "RACK", "ALIVE", "METADATA"),
        (
            (
                b.id,
                b.client_addr,
                b.raft_addr or "-",
                b.rack or "-",
                "yes" if b.alive else "NO",
                "voter" if b.metadata_voter else "learner",
            )
            for b in cluster.brokers
        ),
        sys.stdout,
    )
    return 0


def cluster_remove_broker(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        moved = admin.remove_broker(args.broker_id, timeout_s=args.timeout_s)
    if args.json:
        emit_json({"broker_id": args.broker_id, "moved_partitions": moved}, sys.stdout)
    else:
        print(
            f"broker {args.broker_id} removed: {moved} replicas moved to other brokers; "
            "it can be stopped now"
        )
    return 0


def cluster_rebalance_leaders(args: argparse.Namespace) -> int:
    """``raftq cluster rebalance-leaders``: preferred leader election now."""
    with _admin(args) as admin:
        result = admin.rebalance_leaders()
    if args.json:
        emit_json(to_dict(result), sys.stdout)
    else:
        print(
            f"{result.moved} partitions moved to their preferred leader; "
            f"{result.remaining} still led elsewhere"
        )
    return 0


def partition_move(args: argparse.Namespace) -> int:
    """``raftq partition move TOPIC PARTITION --replicas 1,2,4``: Kafka's reassignment."""
    try:
        replicas = [int(b) for b in args.replicas.split(",") if b.strip()]
    except ValueError:
        sys.stderr.write(f"error: --replicas {args.replicas!r}: broker ids, comma-separated\n")
        return 2
    with _admin(args) as admin:
        result = admin.move_partition(args.topic, args.partition, replicas, args.timeout_s)
    if args.json:
        emit_json(to_dict(result), sys.stdout)
    else:
        print(
            f"{args.topic}/{args.partition} on brokers {list(result.replicas)}, "
            f"led by broker {result.leader}"
        )
    return 0


# --- wiring ---------------------------------------------------------------------------------


def _add(
    subparsers: Subparsers, name: str, handler: Handler, help_: str, parents: list[Any]
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help_, description=help_, parents=parents
    )
    parser.set_defaults(handler=handler)
    return parser


def register(subparsers: Subparsers) -> None:
    """The client commands: topic, produce, consume, group, spark, cluster."""
    common = [client_options()]

    topic = subparsers.add_parser(
        "topic", help="create, list, describe, alter, purge, delete topics, add partitions"
    )
    topics = topic.add_subparsers(dest="topic_command", required=True, metavar="ACTION")
    create = _add(topics, "create", topic_create, "create a topic", common)
    create.add_argument("name")
    create.add_argument("--partitions", type=int)
    create.add_argument("--replication-factor", type=int)
    _config_options(create)
    _add(topics, "list", topic_list, "list topics", common)
    _add(topics, "describe", topic_describe, "partitions, leaders, offsets", common).add_argument(
        "name"
    )
    alter = _add(topics, "alter", topic_alter, "change topic settings", common)
    alter.add_argument("name")
    _config_options(alter)
    _add(topics, "delete", topic_delete, "delete a topic", common).add_argument("name")
    purge = _add(topics, "purge", topic_purge, "delete every record now in a topic", common)
    purge.add_argument("name")
    purge.add_argument("--partition", type=int, help="only this partition (default: all)")
    grow = _add(
        topics,
        "add-partitions",
        topic_add_partitions,
        "grow a topic's partition count (keyed records map to the new count from then on)",
        common,
    )
    grow.add_argument("name")
    grow.add_argument("--partitions", type=int, required=True, help="the new total count")

    prod = _add(subparsers, "produce", produce, "send stdin lines (or --count N records)", common)
    prod.add_argument("topic")
    prod.add_argument("--key", help="the key of every record (default: none, spread)")
    prod.add_argument("--partition", type=int)
    prod.add_argument("--count", type=int, help="send N generated records instead of stdin")
    prod.add_argument("--size", type=int, default=0, help="pad generated records to BYTES")
    prod.add_argument("--linger-ms", type=int, default=5)

    cons = _add(subparsers, "consume", consume, "print, ack and count records of a group", common)
    cons.add_argument("topic")
    cons.add_argument("--group", required=True)
    cons.add_argument("--count", type=int, help="exit after N records (default: run on)")
    cons.add_argument("--idle-exit-ms", type=int, default=0, help="exit after this long idle")
    cons.add_argument("--lease-ms", type=int)
    cons.add_argument("--no-ack", action="store_true", help="leave records to be redelivered")

    group = subparsers.add_parser("group", help="list, describe, seek and delete consumer groups")
    groups = group.add_subparsers(dest="group_command", required=True, metavar="ACTION")
    _add(groups, "list", group_list, "list consumer groups", common)
    _add(groups, "describe", group_describe, "members, assignment, lag", common).add_argument(
        "group"
    )
    _add(
        groups, "delete", group_delete, "delete an empty group and its offsets", common
    ).add_argument("group")
    seek = _add(groups, "seek", group_seek, "move a group's committed offset", common)
    seek.add_argument("group")
    seek.add_argument("--topic", required=True)
    seek.add_argument("--partition", type=int, help="only this partition (default: all)")
    to = seek.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--to-timestamp", type=int, metavar="MS", help="first record at or after")
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    seek.add_argument(
        "--force", action="store_true", help="seek even while members live (their leases end)"
    )

    spark = subparsers.add_parser("spark", help="Spark writer operations")
    sparks = spark.add_subparsers(dest="spark_command", required=True, metavar="ACTION")
    recover = _add(
        sparks,
        "recover",
        spark_recover,
        "let a query stuck on NondeterministicInput write its batch at-least-once",
        common,
    )
    recover.add_argument("--app", required=True, help="txnAppId, or query-<id> for writeStream")
    recover.add_argument("--topic", help="the writer's topic option (none: column-routed)")
    recover.add_argument("--batch", type=int, required=True, help="the stuck batch id")

    partition = subparsers.add_parser("partition", help="move a partition's replicas")
    partitions = partition.add_subparsers(dest="partition_command", required=True, metavar="ACTION")
    move = _add(
        partitions,
        "move",
        partition_move,
        "move a partition's replicas to other brokers, under load (Kafka's reassignment)",
        common,
    )
    move.add_argument("topic")
    move.add_argument("partition", type=int)
    move.add_argument(
        "--replicas", required=True, help="broker ids, the first the preferred leader: 1,2,4"
    )
    move.add_argument(
        "--timeout-s", type=float, default=300.0, help="wait at most this long (default 300)"
    )

    cli_schedule.register(subparsers, common, _admin)

    cluster = subparsers.add_parser("cluster", help="cluster health")
    clusters = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    _add(clusters, "status", cluster_status, "brokers, leader, health", common)
    remove = _add(
        clusters,
        "remove-broker",
        cluster_remove_broker,
        "move a broker's replicas to the others, then take it out of the cluster",
        common,
    )
    remove.add_argument("broker_id", type=int, metavar="ID")
    remove.add_argument(
        "--timeout-s", type=float, default=300.0, help="wait at most this long (default 300)"
    )
    _add(
        clusters,
        "rebalance-leaders",
        cluster_rebalance_leaders,
        "move every partition's leadership to its preferred replica now",
        common,
    )


# --- dead letters ---------------------------------------------------------------------------


def dlq_redrive(args: argparse.Namespace) -> int:
    """``raftq dlq redrive DLQ_TOPIC``: move dead letters back to their origin partitions
    (broker/client/redrive.py: resumable, nothing lost or doubled), with progress."""
    show = not args.json

    def on_progress(progress: RedriveProgress) -> None:
        if show:
            rate = progress.moved / max(progress.seconds, 1e-9)
            sys.stderr.write(f"\r{progress.moved} dead letters moved back ({rate:,.0f}/s) ")
            sys.stderr.flush()

    progress = redrive(
        args.bootstrap,
        args.dlq_topic,
        rate=args.rate,
        limit=args.max,
        group=args.group,
        idle_exit_ms=args.idle_exit_ms,
        on_progress=on_progress,
        client={"request_timeout_ms": args.request_timeout_ms, **security(args)},
    )
    if args.json:
        emit_json(asdict(progress), sys.stdout)
        return 0
    if progress.moved:
        sys.stderr.write("\n")
    print(f"moved {progress.moved} dead letters from {args.dlq_topic} in {progress.seconds:.1f} s")
    for where, count in sorted(progress.by_origin.items()):
        print(f"  {count} to {where}")
    if progress.skipped:
        print(f"  {progress.skipped} skipped: no raftq.dlq.topic/partition headers")
    return 0


def register_dlq(subparsers: Subparsers) -> None:
    dlq = subparsers.add_parser("dlq", help="dead-letter topics")
    actions = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    redrive_parser = _add(
        actions,
        "redrive",
        dlq_redrive,
        "move dead letters back to their origin topic/partition (resumable, rate-limited)",
        [client_options()],
    )
    redrive_parser.add_argument("dlq_topic", metavar="DLQ_TOPIC", help="e.g. jobs.dlq")
    redrive_parser.add_argument("--rate", type=float, default=0.0, help="records/s (0: no cap)")
    redrive_parser.add_argument("--max", type=int, help="move at most N, then stop")
    redrive_parser.add_argument(
        "--group", default=REDRIVE_GROUP, help=f"progress group (default {REDRIVE_GROUP})"
    )
    redrive_parser.add_argument(
        "--idle-exit-ms", type=int, default=2_000, help="stop after this long with nothing new"
    )


# --- web console and HTTP API ----------------------------------------------------------------


def console_serve(args: argparse.Namespace) -> int:
    """``raftq console``: the web console and HTTP/JSON API (broker/web/) until interrupted."""
    host, sep, port = args.listen.rpartition(":")
    if not sep or not port.isdigit():
        sys.stderr.write(f"error: --listen {args.listen!r} is not host:port\n")
        return 2
    try:
        from raftq.web.app import serve
    except ImportError as exc:  # the console extra is not installed
        sys.stderr.write(f"error: {exc}: pip install 'raftq[console]'\n")
        return 1
    options = {k: v for k, v in security(args).items() if k != "token"}
    options["request_timeout_ms"] = args.request_timeout_ms
    print(f"raftq console on http://{args.listen}/ (API: /api/v1, OpenAPI: /api/v1/openapi.json)")
    serve(
        args.bootstrap,
        host.strip("[]") or "127.0.0.1",
        int(port),
        options,
        default_token=args.token,
        consumer_idle_s=args.consumer_idle_ms / 1000,
    )
    return 0


def register_console(subparsers: Subparsers) -> None:
    parser = _add(
        subparsers,
        "console",
        console_serve,
        "serve the web console and the HTTP/JSON API (gateway to the cluster)",
        [client_options()],
    )
    parser.add_argument(
        "--listen", default="127.0.0.1:8080", metavar="HOST:PORT", help="default 127.0.0.1:8080"
    )
    parser.add_argument(
        "--consumer-idle-ms",
        type=int,
        default=300_000,
        help="close a dequeue member unused this long (default 300000)",
    )
    # Not $RAFTQ_TOKEN, which an operator's shell often holds: only an explicit --token
    # stands in for visitors.
    parser.set_defaults(token=None)
    parser.epilog = (
        "Visitors log in with their own token; --token (never $RAFTQ_TOKEN), if given, is used "
        "for requests that carry none: whoever reaches the console then acts as it."
    )


# --- backup and restore --------------------------------------------------------------------


def backup_take(args: argparse.Namespace) -> int:
    """``raftq backup DIR``: an online backup, incremental to DIR's latest (broker/backup.py)."""

    def say(line: str) -> None:
        if not args.json:
            sys.stderr.write(line + "\n")

    with _admin(args) as admin:
        summary = backup.take_backup(
            admin, Path(args.directory), full=args.full, timeout_s=args.timeout_s, log=say
        )
    if args.json:
        emit_json(asdict(summary), sys.stdout)
    else:
        kind = f"incremental to {summary.base}" if summary.base else "full"
        print(
            f"backup {summary.backup} ({kind}): {summary.partitions} partitions, "
            f"{summary.total_bytes} bytes, {summary.copied_bytes} copied, "
            f"{summary.stored_bytes} stored"
        )
    return 0


def backup_restore(args: argparse.Namespace) -> int:
    """``raftq restore DIR --data-dir D --broker-id N --broker ID=RAFT_ADDR ...``."""
    summary = backup.restore(
        Path(args.directory),
        Path(args.data_dir),
        args.broker_id,
        backup.parse_brokers(args.broker),
        backup=args.backup or "",
    )
    if args.json:
        emit_json(asdict(summary), sys.stdout)
    else:
        print(
            f"broker {summary.broker_id}: {summary.partitions} replicas seeded from backup "
            f"{summary.backup} ({summary.topics} topics, {summary.groups} groups); start it"
        )
    return 0


def register_backup(subparsers: Subparsers) -> None:
    """``raftq backup`` (online) and ``raftq restore`` (offline, per broker)."""
    take = _add(
        subparsers,
        "backup",
        backup_take,
        "back the cluster up into DIR (incremental to DIR's latest backup)",
        [client_options()],
    )
    take.add_argument("directory", metavar="DIR")
    take.add_argument("--full", action="store_true", help="copy everything, not the changes")
    take.add_argument("--timeout-s", type=float, default=300.0, help="give up after (300)")
    put = subparsers.add_parser(
        "restore",
        help="seed a new broker's data directory from a backup (run once per broker)",
    )
    put.add_argument("directory", metavar="DIR")
    put.add_argument("--data-dir", required=True, help="the new broker's empty broker.data_dir")
    put.add_argument("--broker-id", type=int, required=True, help="its broker.id")
    put.add_argument(
        "--broker",
        action="append",
        default=[],
        metavar="ID=RAFT_ADDR",
        help="every broker's new raft address (repeat, or comma-separate)",
    )
    put.add_argument("--backup", help="which backup (default: the latest)")
    put.add_argument("--json", action="store_true", help="print JSON")
    put.set_defaults(handler=backup_restore)


# --- offline inspection ---------------------------------------------------------------------


def inspect_data_dir(args: argparse.Namespace) -> int:
    """``raftq inspect DATA_DIR [VIEW]``: partition files read offline (broker/inspector.py)."""
    try:
        chosen = inspector.select(Path(args.data_dir), args.topic, args.partition)
    except inspector.InspectError as error:
        sys.stderr.write(f"error: {error}\n")
        return 1
    out = sys.stdout
    view = args.view
    if view == "summary":
        if args.json:
            emit_json([r.as_json() for r in chosen], out)
            return 0
        table(inspector.SUMMARY_HEADERS, [r.summary_row() for r in chosen], out)
    elif view == "groups":
        found = [(r, g) for r in chosen for g in r.groups]
        if args.json:
            emit_json(
                [{"topic": r.topic, "partition": r.partition, **asdict(g)} for r, g in found], out
            )
            return 0
        table(
            ("TOPIC", "PART", "GROUP", "COMMITTED", "LAG", "READY", "LEASED", "WAITING"),
            [
                (
                    r.topic,
                    r.partition,
                    g.group,
                    g.committed,
                    g.lag,
                    g.ready + g.not_yet_materialized,
                    g.leased,
                    g.waiting,
                )
                for r, g in found
            ],
            out,
        )
    else:
        _inspect_rows(args, chosen, out)
    return 0


def _inspect_rows(
    args: argparse.Namespace, chosen: list[inspector.PartitionReport], out: TextIO
) -> None:
    """The views that list rows of each partition: records, producers, dlq."""
    found: list[dict[str, Any]] = []
    for r in chosen:
        path = Path(r.path)
        if args.view == "records":
            rows: list[Any] = list(inspector.records(path, args.offset, args.limit))
        elif args.view == "producers":
            rows = inspector.producers(path)
        else:
            rows = inspector.dead_letters(path, args.limit)
        found.extend({"topic": r.topic, "partition": r.partition, **asdict(x)} for x in rows)
    if args.json:
        emit_json(found, out)
        return
    if not found:
        out.write(f"no {args.view}\n")
        return
    columns = [c for c in found[0] if c not in ("headers",)] + (
        ["headers"] if "headers" in found[0] else []
    )
    table([c.upper() for c in columns], [[row[c] for c in columns] for row in found], out)


def register_inspect(subparsers: Subparsers) -> None:
    """``raftq inspect``: offline, read-only views of a broker's partition files."""
    parser = subparsers.add_parser(
        "inspect",
        help="read a broker's partition files offline (read-only; broker running or not)",
        description=inspector.__doc__.split("\n\n")[0] if inspector.__doc__ else None,
    )
    parser.add_argument("data_dir", metavar="DATA_DIR", help="a broker's broker.data_dir")
    parser.add_argument(
        "view",
        nargs="?",
        default="summary",
        choices=("summary", "records", "groups", "producers", "dlq"),
        help="what to show (default: summary)",
    )
    parser.add_argument("--topic", help="only this topic's partitions")
    parser.add_argument("--partition", type=int, help="only this partition number")
    parser.add_argument("--offset", type=int, default=0, help="records: from this offset")
    parser.add_argument("--limit", type=int, default=100, help="records/dlq: at most N each")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.set_defaults(handler=inspect_data_dir)


REGISTRARS: list[Callable[[Subparsers], None]] = [
    register,
    cli_server.register,
    register_dlq,
    register_console,
    register_inspect,
    register_backup,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftq", description="raftq: a replicated log and work queue."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for registrar in REGISTRARS:
        registrar(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (0 ok, 1 failed, 2 usage, 130 interrupted)."""
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except errors.RaftqError as error:
        sys.stderr.write(f"error: {error.kind.name}: {error.message}\n")
        if error.kind.hint != error.message:
            sys.stderr.write(f"hint: {error.kind.hint}\n")
        if error.leader_hint:
            sys.stderr.write(f"leader: {error.leader_hint}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `raftq consume ... | head`: the reader left; nothing to say
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


__all__ = ["REGISTRARS", "build_parser", "main", "register"]

if __name__ == "__main__":
    sys.exit(main())
