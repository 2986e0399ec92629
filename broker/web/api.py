"""The HTTP/JSON API, ``/api/v1``: what doq's and DQueue's REST APIs do, over the Python client.

Authentication is the gRPC API's: ``Authorization: Bearer <token>`` is passed on as the
caller's token, so every request is authorised by the brokers on the same ACLs. Errors are
the typed errors of ``proto/errors.py``: the HTTP status follows the error's gRPC status
(:data:`HTTP_STATUS`) and the body is ``{"code": "UNKNOWN_TOPIC", "message": ...,
"retriable": false}``; a request that does not validate is 400 ``INVALID_ARGUMENT`` and
reaches no broker. Per-item outcomes (enqueue, ack, nack) are in a 200 answer's ``results``,
as gRPC's Send and Ack answer them. The OpenAPI document is ``/api/v1/openapi.json``.
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from raftq.proto import errors
from raftq.web import views
from raftq.web.gateway import (
    BROWSE_RECORDS_MAX,
    DEQUEUE_RECORDS_MAX,
    DEQUEUE_WAIT_MS_MAX,
    ENQUEUE_RECORDS_MAX,
    Gateway,
    OutgoingRecord,
)

# gRPC status (proto/errors.py's ErrorKind.grpc_status) -> HTTP status.
HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "FAILED_PRECONDITION": 409,
    "ABORTED": 409,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
INT32 = 2**31 - 1
INT64 = 2**63 - 1


def http_status(error: errors.RaftqError) -> int:
    return HTTP_STATUS.get(error.kind.grpc_status, 500)


def error_response(error: errors.RaftqError) -> JSONResponse:
    headers = {}
    if error.retry_after_ms > 0:
        headers["Retry-After"] = str(max(1, -(-error.retry_after_ms // 1000)))
    if error.leader_hint:
        headers["X-Raftq-Leader"] = error.leader_hint
    return JSONResponse(views.error_dict(error), status_code=http_status(error), headers=headers)


def bearer_token(request: Request) -> str | None:
    """The caller's token from ``Authorization: Bearer``; None without the header or with an
    empty one. Any other scheme is Unauthenticated."""
    value = request.headers.get("authorization")
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise errors.Unauthenticated("use Authorization: Bearer <token>")
    return token.strip() or None  # "Bearer " with no token (an unset variable): anonymous


Token = Annotated[str | None, Depends(bearer_token)]


def gateway(request: Request) -> Gateway:
    gw: Gateway = request.app.state.gateway
    return gw


GatewayDep = Annotated[Gateway, Depends(gateway)]


# -- request bodies ------------------------------------------------------------------------


class TopicIn(BaseModel):
    name: str = Field(description="[A-Za-z0-9._-], 1..249 characters")
    partitions: int | None = Field(default=None, ge=1, le=INT32)
    replication_factor: int | None = Field(default=None, ge=1, le=INT32)
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="topic settings by name: ordering (fifo|priority|fair), fair_key, lease_ms, "
        "max_deliveries, dead_letter_topic, retention_ms, ttl_ms, ...",
    )


class RecordIn(BaseModel):
    value: str | None = Field(default=None, description="UTF-8 text (or value_b64)")
    value_b64: str | None = Field(default=None, description="base64 bytes (or value)")
    key: str | None = Field(
        default=None, description="UTF-8 text (or key_b64); chooses the partition"
    )
    key_b64: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    partition: int | None = Field(default=None, ge=0, le=INT32)
    priority: int = Field(
        default=0, ge=-INT32 - 1, le=INT32, description="lower is delivered first"
    )
    delay_ms: int = Field(default=0, ge=0, le=INT64 // 2, description="deliver no sooner than this")
    deliver_at_ms: int = Field(default=0, ge=0, le=INT64, description="Unix ms; or delay_ms")
    idempotency_key: str = ""
    ttl_ms: int = Field(default=0, ge=0, le=INT64)


class EnqueueIn(BaseModel):
    records: list[RecordIn] = Field(min_length=1, max_length=ENQUEUE_RECORDS_MAX)


class DequeueIn(BaseModel):
    topic: str
    max_records: int = Field(default=1, ge=1, le=DEQUEUE_RECORDS_MAX)
    wait_ms: int = Field(default=0, ge=0, le=DEQUEUE_WAIT_MS_MAX)
    auto_ack: bool = False


class SettleIn(BaseModel):
    ids: list[str] = Field(min_length=1, max_length=DEQUEUE_RECORDS_MAX)


class NackIn(SettleIn):
    delay_ms: int | None = Field(default=None, ge=0, le=INT64)


class RecordUpdateIn(BaseModel):
    priority: int | None = Field(default=None, ge=-INT32 - 1, le=INT32)
    deliver_at_ms: int | None = Field(default=None, ge=0, le=INT64)


class TopicConfigIn(BaseModel):
    config: dict[str, Any] = Field(description="the settings to change, by name")


class PartitionsIn(BaseModel):
    partitions: int = Field(ge=1, le=INT32, description="the new total count")


class MoveIn(BaseModel):
    replicas: list[int] = Field(
        min_length=1, max_length=16, description="broker ids, the first the preferred leader"
    )


class PurgeIn(BaseModel):
    partition: int | None = Field(default=None, ge=0, le=INT32, description="absent: all")


class SeekIn(BaseModel):
    topic: str
    partition: int | None = Field(default=None, ge=0, le=INT32, description="absent: all")
    offset: int | None = Field(default=None, ge=0, le=INT64)
    timestamp_ms: int | None = Field(default=None, ge=0, le=INT64)
    earliest: bool = False
    latest: bool = False
    force: bool = Field(default=False, description="even while members live")


class RedriveIn(BaseModel):
    rate: float = Field(default=0.0, ge=0, description="records/s; 0: no cap")
    limit: int | None = Field(default=None, ge=1, description="move at most this many")


class ScheduleIn(BaseModel):
    name: str = Field(description="unique in the topic")
    cron: str | None = Field(
        default=None, description="5 fields or @hourly...; or interval_ms (one of the two)"
    )
    time_zone: str = Field(default="", description="IANA zone of the cron fields; UTC if empty")
    interval_ms: int | None = Field(default=None, ge=1, le=INT64, description=">= 1000")
    catch_up: Literal["once", "skip"] = Field(
        default="once", description="slots an outage missed: one record for all, or none"
    )
    value: str | None = Field(default=None, description="UTF-8 text (or value_b64)")
    value_b64: str | None = None
    key: str | None = Field(default=None, description="UTF-8 text (or key_b64)")
    key_b64: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    priority: int | None = Field(default=None, ge=-INT32 - 1, le=INT32)
    ttl_ms: int | None = Field(default=None, ge=0, le=INT64)
    partition: int | None = Field(default=None, ge=0, le=INT32)


def _bytes(text: str | None, b64: str | None, name: str) -> bytes | None:
    if text is not None and b64 is not None:
        raise errors.InvalidArgument(f"give {name} or {name}_b64, not both")
    if b64 is not None:
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise errors.InvalidArgument(f"{name}_b64 is not base64") from None
    return None if text is None else text.encode("utf-8")


def outgoing(record: RecordIn, now_ms: int) -> OutgoingRecord:
    """A request record as the gateway sends it; ``delay_ms`` becomes ``deliver_at_ms``."""
    if record.delay_ms and record.deliver_at_ms:
        raise errors.InvalidArgument("give delay_ms or deliver_at_ms, not both")
    value = _bytes(record.value, record.value_b64, "value")
    return OutgoingRecord(
        value=b"" if value is None else value,
        key=_bytes(record.key, record.key_b64, "key"),
        headers={k: v.encode("utf-8") for k, v in record.headers.items()},
        partition=record.partition,
        priority=record.priority,
        deliver_at_ms=now_ms + record.delay_ms if record.delay_ms else record.deliver_at_ms,
        idempotency_key=record.idempotency_key,
        ttl_ms=record.ttl_ms,
    )


# -- routes --------------------------------------------------------------------------------

router = APIRouter(prefix="/api/v1")


@router.get("/cluster", tags=["cluster"], summary="cluster health, brokers, problems")
def get_cluster(gw: GatewayDep, token: Token) -> dict[str, Any]:
    return views.answer_dict(gw.admin(token).describe_cluster())


@router.get("/brokers", tags=["cluster"], summary="the brokers and their liveness")
def list_brokers(gw: GatewayDep, token: Token) -> list[dict[str, Any]]:
    return [views.answer_dict(b) for b in gw.admin(token).describe_cluster().brokers]


@router.post(
    "/cluster/rebalance-leaders",
    tags=["cluster"],
    summary="move leaderships to their preferred replicas",
)
def rebalance_leaders(gw: GatewayDep, token: Token) -> dict[str, Any]:
    return views.answer_dict(gw.admin(token).rebalance_leaders())


@router.get("/topics", tags=["topics"], summary="topics the caller has a right on")
def list_topics(gw: GatewayDep, token: Token) -> list[dict[str, Any]]:
    return [views.answer_dict(t) for t in gw.admin(token).list_topics()]


@router.post("/topics", tags=["topics"], status_code=201, summary="create a topic")
def create_topic(body: TopicIn, gw: GatewayDep, token: Token) -> dict[str, Any]:
    created = gw.admin(token).create_topic(
        body.name, body.partitions, body.replication_factor, **body.config
    )
    return views.answer_dict(created)


@router.get("/topics/{topic}", tags=["topics"], summary="partitions, leaders, offsets, config")
def describe_topic(topic: str, gw: GatewayDep, token: Token) -> dict[str, Any]:
    return views.answer_dict(gw.admin(token).describe_topic(topic))


@router.delete("/topics/{topic}", tags=["topics"], status_code=204, summary="delete a topic")
def delete_topic(topic: str, gw: GatewayDep, token: Token) -> None:
    gw.admin(token).delete_topic(topic)


@router.patch("/topics/{topic}", tags=["topics"], summary="change topic settings")
def alter_topic(topic: str, body: TopicConfigIn, gw: GatewayDep, token: Token) -> dict[str, Any]:
    return views.answer_dict(gw.admin(token).alter_topic_config(topic, **body.config))


@router.post("/topics/{topic}/partitions", tags=["topics"], summary="grow the partition count")
def add_partitions(topic: str, body: PartitionsIn, gw: GatewayDep, token: Token) -> dict[str, Any]:
    """Keyed records go to murmur2(key) mod the new count from then on (README)."""
    return views.answer_dict(gw.admin(token).add_partitions(topic, body.partitions))


@router.post(
    "/topics/{topic}/partitions/{partition}/move",
    tags=["topics"],
    summary="move a partition's replicas (under load; returns when done)",
)
def move_partition(
    topic: str,
    partition: Annotated[int, Path(ge=0, le=INT32)],
    body: MoveIn,
    gw: GatewayDep,
    token: Token,
) -> dict[str, Any]:
    """TIMEOUT (504) while still moving after the request timeout: call again, it resumes."""
    return views.answer_dict(gw.admin(token).move_partition(topic, partition, body.replicas))


@router.post("/topics/{topic}/purge", tags=["topics"], summary="delete every record now in it")
def purge_topic(
    topic: str, gw: GatewayDep, token: Token, body: Annotated[PurgeIn | None, Body()] = None
) -> dict[str, Any]:
    purged = gw.admin(token).purge_topic(topic, (body or PurgeIn()).partition)
    return {"partitions": [views.answer_dict(p) for p in purged]}


@router.post("/topics/{topic}/records", tags=["queue"], summary="enqueue records")
def enqueue(topic: str, body: EnqueueIn, gw: GatewayDep, token: Token) -> dict[str, Any]:
    """Each record's key, priority, delay (``delay_ms`` or ``deliver_at_ms``), headers and
    time to live; answered when stored on a majority of replicas, one result per record."""
    now_ms = int(time.time() * 1000)
    records = [outgoing(r, now_ms) for r in body.records]
    return {"results": gw.enqueue(token, topic, records)}


@router.get(
    "/topics/{topic}/partitions/{partition}/records",
    tags=["topics"],
    summary="browse a partition's records (no group state is touched)",
)
def browse(
    topic: str,
    partition: Annotated[int, Path(ge=0, le=INT32)],
    gw: GatewayDep,
    token: Token,
    offset: Annotated[int | None, Query(ge=0, le=INT64)] = None,
    limit: Annotated[int, Query(ge=1, le=BROWSE_RECORDS_MAX)] = 50,
) -> dict[str, Any]:
    return gw.browse(token, topic, partition, offset, limit)


@router.patch(
    "/topics/{topic}/partitions/{partition}/records/{offset}",
    tags=["queue"],
    status_code=204,
    summary="change a stored record's priority and/or deliver_at_ms",
)
def update_record(
    topic: str,
    partition: Annotated[int, Path(ge=0, le=INT32)],
    offset: Annotated[int, Path(ge=0, le=INT64)],
    body: RecordUpdateIn,
    gw: GatewayDep,
    token: Token,
) -> None:
    if body.priority is None and body.deliver_at_ms is None:
        raise errors.InvalidArgument("set priority and/or deliver_at_ms")
    gw.admin(token).update_record(
        topic, partition, offset, priority=body.priority, deliver_at_ms=body.deliver_at_ms
    )


@router.delete(
    "/topics/{topic}/partitions/{partition}/records/{offset}",
    tags=["queue"],
    status_code=204,
    summary="cancel a record (from the log and every group)",
)
def cancel_record(
    topic: str,
    partition: Annotated[int, Path(ge=0, le=INT32)],
    offset: Annotated[int, Path(ge=0, le=INT64)],
    gw: GatewayDep,
    token: Token,
) -> None:
    gw.admin(token).cancel_record(topic, partition, offset)


@router.get("/topics/{topic}/dead-letters", tags=["dead letters"], summary="list dead letters")
def dead_letters(
    topic: str,
    gw: GatewayDep,
    token: Token,
    limit: Annotated[int, Query(ge=1, le=BROWSE_RECORDS_MAX)] = 100,
) -> dict[str, Any]:
    """The records of ``topic``'s dead-letter topic, each with its reason and origin."""
    dlq = gw.dead_letter_topic(token, topic)
    return {"dead_letter_topic": dlq, "records": gw.dead_letters(token, dlq, limit)}


@router.post(
    "/topics/{topic}/dead-letters/redrive",
    tags=["dead letters"],
    summary="move dead letters back to their origin topic/partition",
)
def redrive_dead_letters(
    topic: str, gw: GatewayDep, token: Token, body: Annotated[RedriveIn | None, Body()] = None
) -> dict[str, Any]:
    body = body or RedriveIn()
    dlq = gw.dead_letter_topic(token, topic)
    return gw.redrive(token, dlq, body.rate, body.limit)


@router.get("/topics/{topic}/schedules", tags=["schedules"], summary="recurring records")
def list_schedules(topic: str, gw: GatewayDep, token: Token) -> list[dict[str, Any]]:
    return [views.answer_dict(s) for s in gw.admin(token).list_schedules(topic)]


@router.post(
    "/topics/{topic}/schedules",
    tags=["schedules"],
    status_code=201,
    summary="fire a record at every slot of a cron expression or interval",
)
def create_schedule(topic: str, body: ScheduleIn, gw: GatewayDep, token: Token) -> dict[str, Any]:
    """Exactly one record per slot, never early, fired by the partition's replicated state."""
    value = _bytes(body.value, body.value_b64, "value")
    created = gw.admin(token).create_schedule(
        topic,
        body.name,
        value if value is not None else b"",
        cron=body.cron,
        time_zone=body.time_zone,
        interval_ms=body.interval_ms,
        key=_bytes(body.key, body.key_b64, "key"),
        headers={k: v.encode() for k, v in body.headers.items()} or None,
        priority=body.priority,
        ttl_ms=body.ttl_ms,
        partition=body.partition,
        catch_up=body.catch_up,
    )
    return views.answer_dict(created)


@router.post("/topics/{topic}/schedules/{name}/pause", tags=["schedules"], summary="pause")
def pause_schedule(topic: str, name: str, gw: GatewayDep, token: Token) -> dict[str, Any]:
    return views.answer_dict(gw.admin(token).pause_schedule(topic, name))


@router.post(
    "/topics/{topic}/schedules/{name}/resume",
    tags=["schedules"],
    summary="resume at the next slot (the paused time is not caught up)",
)
def resume_schedule(topic: str, name: str, gw: GatewayDep, token: Token) -> dict[str, Any]:
    return views.answer_dict(gw.admin(token).resume_schedule(topic, name))


@router.delete(
    "/topics/{topic}/schedules/{name}",
    tags=["schedules"],
    status_code=204,
    summary="delete (records already fired stay)",
)
def delete_schedule(topic: str, name: str, gw: GatewayDep, token: Token) -> None:
    gw.admin(token).delete_schedule(topic, name)


@router.get("/groups", tags=["groups"], summary="consumer groups the caller has a right on")
def list_groups(gw: GatewayDep, token: Token) -> list[dict[str, Any]]:
    return [views.answer_dict(g) for g in gw.admin(token).list_groups()]


@router.get("/groups/{group}", tags=["groups"], summary="members and lag per partition")
def describe_group(group: str, gw: GatewayDep, token: Token) -> dict[str, Any]:
    described, lag = gw.group_lag(token, group)
    return {**views.answer_dict(described), "lag": lag}


@router.delete("/groups/{group}", tags=["groups"], summary="delete an empty group")
def delete_group(group: str, gw: GatewayDep, token: Token) -> dict[str, Any]:
    """GROUP_NOT_EMPTY (409) while members live."""
    return views.answer_dict(gw.admin(token).delete_group(group))


@router.post("/groups/{group}/seek", tags=["groups"], summary="move a group's position")
def seek_group(group: str, body: SeekIn, gw: GatewayDep, token: Token) -> dict[str, Any]:
    """To exactly one of offset, timestamp_ms, earliest, latest (Kafka's --reset-offsets);
    GROUP_NOT_EMPTY (409) while members live unless force."""
    moved = gw.admin(token).seek_group(
        group,
        body.topic,
        partition=body.partition,
        offset=body.offset,
        timestamp_ms=body.timestamp_ms,
        earliest=body.earliest,
        latest=body.latest,
        force=body.force,
    )
    return {"partitions": [views.answer_dict(p) for p in moved]}


@router.post("/groups/{group}/dequeue", tags=["queue"], summary="lease ready records")
def dequeue(group: str, body: DequeueIn, gw: GatewayDep, token: Token) -> dict[str, Any]:
    """Lease up to ``max_records`` records for ``group`` (a member held by this console);
    ack or nack each by its ``id`` before ``lease_deadline_ms``, or set ``auto_ack``."""
    rows = gw.dequeue(token, group, body.topic, body.max_records, body.wait_ms, body.auto_ack)
    return {"records": rows}


@router.post("/groups/{group}/ack", tags=["queue"], summary="acknowledge dequeued records")
def ack(group: str, body: SettleIn, gw: GatewayDep, token: Token) -> dict[str, Any]:
    return {"results": gw.settle(token, group, body.ids, "ack")}


@router.post("/groups/{group}/nack", tags=["queue"], summary="give dequeued records back")
def nack(group: str, body: NackIn, gw: GatewayDep, token: Token) -> dict[str, Any]:
    return {"results": gw.settle(token, group, body.ids, "nack", body.delay_ms)}


def invalid(exc: RequestValidationError) -> errors.InvalidArgument:
    """A request that does not validate, as the catalogue's INVALID_ARGUMENT naming each field."""
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in exc.errors()
    )
    return errors.InvalidArgument(problems or "request does not validate")


def install(app: FastAPI) -> None:
    """Add the API's routes and its typed-error answers to ``app``."""
    app.include_router(router)

    @app.exception_handler(errors.RaftqError)
    async def on_raftq_error(_: Request, exc: errors.RaftqError) -> JSONResponse:
        return error_response(exc)
