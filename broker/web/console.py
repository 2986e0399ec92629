"""The web console: server-rendered pages (Jinja2, ``templates/``) over the gateway.

Pages: the cluster (health, problems, brokers, topics, groups, dead letters, a form to create
a topic), a topic (partitions with leaders, replicas and offsets; a form to produce a test
record; its recurring records with pause/resume/delete buttons and a form to create one), a
partition's records (key, value preview, headers, priority, deliver_at), a group
(members, lag per partition, total lag over time, refreshed every 2 s by a few lines of
script) and a topic's dead letters (reason and origin per record, a redrive button).

Login: a page that takes a token and keeps it in an HttpOnly, SameSite=Strict cookie (so no
other site can make the browser act with it); every call is made with it, so the brokers
decide what the visitor may see and do, and a refusal (PERMISSION_DENIED) is shown as such,
nothing done. A call refused UNAUTHENTICATED sends the visitor to the login page. Actions are
POST forms answered by a redirect (post/redirect/get).
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from raftq.proto import errors
from raftq.web import views
from raftq.web.api import INT32, INT64, RecordIn, http_status, outgoing
from raftq.web.gateway import Gateway

COOKIE = "raftq_token"
TEMPLATES = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))
BROWSE_PAGE = 50


def _iso_ms(ms: int) -> str:
    if not ms:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _preview(value: str | None, size: int = 80) -> str:
    if value is None:
        return "(binary)"
    return value if len(value) <= size else value[:size] + "…"


TEMPLATES.env.filters["iso_ms"] = _iso_ms
TEMPLATES.env.filters["preview"] = _preview

router = APIRouter(include_in_schema=False)


def _token(request: Request) -> str | None:
    return request.cookies.get(COOKIE) or None


def _gw(request: Request) -> Gateway:
    gw: Gateway = request.app.state.gateway
    return gw


def page(request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
    context.setdefault("notice", request.query_params.get("notice", ""))
    context["logged_in"] = _token(request) is not None
    return TEMPLATES.TemplateResponse(request, name, context, status_code=status_code)


def failure(request: Request, error: errors.RaftqError) -> Response:
    """An error page for a refused call; UNAUTHENTICATED goes to the login page instead."""
    if isinstance(error, errors.Unauthenticated):
        return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
    return page(request, "error.html", status_code=http_status(error), error=error)


def back(path: str, notice: str) -> Response:
    return RedirectResponse(f"{path}?notice={quote(notice)}", status_code=303)


@router.get("/login")
def login_form(request: Request, next: str = "/") -> Response:
    return page(request, "login.html", next=next if next.startswith("/") else "/")


@router.post("/login")
def login(
    request: Request, token: Annotated[str, Form()], next: Annotated[str, Form()] = "/"
) -> Response:
    target = next if next.startswith("/") and not next.startswith("//") else "/"
    response = RedirectResponse(target, status_code=303)
    secure = request.url.scheme == "https"  # served over TLS: never send it in clear
    response.set_cookie(COOKIE, token.strip(), httponly=True, samesite="strict", secure=secure)
    return response


@router.post("/logout")
def logout() -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response


@router.get("/", response_class=HTMLResponse)
def overview(request: Request) -> Response:
    gw, token = _gw(request), _token(request)
    try:
        admin = gw.admin(token)
        cluster = admin.describe_cluster()
        topics = admin.list_topics()
        groups = admin.list_groups()
    except errors.RaftqError as error:
        return failure(request, error)
    dead = [t for t in topics if t.name.endswith(".dlq")]
    return page(
        request,
        "overview.html",
        cluster=cluster,
        health=cluster.health,
        topics=topics,
        groups=groups,
        dead=dead,
    )


@router.post("/topics")
def create_topic(
    request: Request,
    name: Annotated[str, Form()],
    partitions: Annotated[int, Form(ge=1, le=INT32)] = 1,
    replication_factor: Annotated[int | None, Form(ge=1, le=INT32)] = None,
    ordering: Annotated[str, Form()] = "fifo",
    max_deliveries: Annotated[int | None, Form(ge=0, le=INT32)] = None,
) -> Response:
    try:
        _gw(request).admin(_token(request)).create_topic(
            name.strip(),
            partitions,
            replication_factor,
            ordering=ordering,
            max_deliveries=max_deliveries,
        )
    except errors.RaftqError as error:
        return failure(request, error)
    return back(f"/topics/{quote(name.strip())}", f"topic {name.strip()} created")


@router.get("/topics/{topic}", response_class=HTMLResponse)
def topic_page(request: Request, topic: str) -> Response:
    try:
        admin = _gw(request).admin(_token(request))
        described = admin.describe_topic(topic)
        schedules = admin.list_schedules(topic)
    except errors.RaftqError as error:
        return failure(request, error)
    return page(
        request,
        "topic.html",
        topic=described,
        config=views.answer_dict(described.config),
        schedules=[views.answer_dict(s) for s in schedules],
    )


@router.post("/topics/{topic}/schedules")
def create_schedule(
    request: Request,
    topic: str,
    name: Annotated[str, Form()],
    value: Annotated[str, Form()] = "",
    key: Annotated[str, Form()] = "",
    cron: Annotated[str, Form()] = "",
    time_zone: Annotated[str, Form()] = "",
    interval_ms: Annotated[str, Form()] = "",
    catch_up: Annotated[str, Form()] = "once",
) -> Response:
    """A recurring record: a cron expression (in a time zone) or a fixed interval (an empty
    field is none: a form sends every input)."""
    try:
        interval = _whole(interval_ms, "interval_ms")
        _gw(request).admin(_token(request)).create_schedule(
            topic,
            name.strip(),
            value.encode(),
            cron=cron.strip() or None,
            time_zone=time_zone.strip(),
            interval_ms=interval,
            key=key.encode() or None,
            catch_up=catch_up,
        )
    except errors.RaftqError as error:
        return failure(request, error)
    return back(f"/topics/{quote(topic)}", f"schedule {name.strip()} created")


@router.post("/topics/{topic}/schedules/{name}/{action}")
def change_schedule(request: Request, topic: str, name: str, action: str) -> Response:
    """Pause, resume or delete a schedule (the buttons of the topic page)."""
    admin = _gw(request).admin(_token(request))
    verbs = {
        "pause": admin.pause_schedule,
        "resume": admin.resume_schedule,
        "delete": admin.delete_schedule,
    }
    if action not in verbs:
        return failure(request, errors.InvalidArgument(f"no schedule action {action!r}"))
    try:
        verbs[action](topic, name)
    except errors.RaftqError as error:
        return failure(request, error)
    done = {"pause": "paused", "resume": "resumed", "delete": "deleted"}[action]
    return back(f"/topics/{quote(topic)}", f"schedule {name} {done}")


@router.post("/topics/{topic}/produce")
def produce(
    request: Request,
    topic: str,
    value: Annotated[str, Form()] = "",
    key: Annotated[str, Form()] = "",
    priority: Annotated[int, Form(ge=-INT32 - 1, le=INT32)] = 0,
    delay_ms: Annotated[int, Form(ge=0, le=INT64 // 2)] = 0,
    headers: Annotated[str, Form(description="name=value per line")] = "",
) -> Response:
    try:
        parsed = _headers(headers)
        record = RecordIn(
            value=value, key=key or None, priority=priority, delay_ms=delay_ms, headers=parsed
        )
        (result,) = _gw(request).enqueue(
            _token(request), topic, [outgoing(record, int(time.time() * 1000))]
        )
    except errors.RaftqError as error:
        return failure(request, error)
    if not result["ok"]:
        code = errors.ErrorCode.Value(result["code"])
        return failure(request, errors.error_for(code, result["message"]))
    where = f"partition {result['partition']} offset {result['offset']}"
    return back(f"/topics/{quote(topic)}", f"record stored at {where}")


def _whole(text: str, name: str) -> int | None:
    """A form's optional whole number: None when empty, else 1..INT64."""
    if not text.strip():
        return None
    try:
        number = int(text.strip())
    except ValueError:
        raise errors.InvalidArgument(f"{name} ({text!r}) is not a whole number") from None
    if not 1 <= number <= INT64:
        raise errors.InvalidArgument(f"{name} ({number}) must be 1..{INT64}")
    return number


def _headers(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise errors.InvalidArgument(f"header line {line!r} is not name=value")
        out[name.strip()] = value
    return out


@router.get("/topics/{topic}/partitions/{partition}", response_class=HTMLResponse)
def records_page(
    request: Request, topic: str, partition: int, offset: int | None = None
) -> Response:
    try:
        browsed = _gw(request).browse(_token(request), topic, partition, offset, BROWSE_PAGE)
    except errors.RaftqError as error:
        return failure(request, error)
    return page(request, "records.html", browsed=browsed, page_size=BROWSE_PAGE)


@router.get("/topics/{topic}/dead-letters", response_class=HTMLResponse)
def dead_letters_page(request: Request, topic: str) -> Response:
    gw, token = _gw(request), _token(request)
    try:
        dlq = topic if topic.endswith(".dlq") else gw.dead_letter_topic(token, topic)
        rows = gw.dead_letters(token, dlq, 200)
    except errors.RaftqError as error:
        return failure(request, error)
    waiting = sum(1 for r in rows if not r["redriven"])
    return page(request, "dead_letters.html", topic=topic, dlq=dlq, rows=rows, waiting=waiting)


@router.post("/topics/{topic}/dead-letters/redrive")
def redrive(request: Request, topic: str) -> Response:
    gw, token = _gw(request), _token(request)
    try:
        dlq = topic if topic.endswith(".dlq") else gw.dead_letter_topic(token, topic)
        progress = gw.redrive(token, dlq, 0.0, None)
    except errors.RaftqError as error:
        return failure(request, error)
    note = f"redrove {progress['moved']} dead letters ({progress['skipped']} without origin)"
    return back(f"/topics/{quote(topic)}/dead-letters", note)


@router.get("/groups/{group}", response_class=HTMLResponse)
def group_page(request: Request, group: str) -> Response:
    try:
        context = _group_context(request, group)
    except errors.RaftqError as error:
        return failure(request, error)
    return page(request, "group.html", **context)


@router.get("/groups/{group}/lag", response_class=HTMLResponse)
def group_lag_fragment(request: Request, group: str) -> Response:
    """The group page's members and lag, redrawn every 2 s by the page's script."""
    try:
        context = _group_context(request, group)
    except errors.RaftqError as error:
        return Response(f"<p class=error>{error.kind.name}</p>", status_code=http_status(error))
    return page(request, "group_lag.html", **context)


def _group_context(request: Request, group: str) -> dict[str, Any]:
    described, lag = _gw(request).group_lag(_token(request), group)
    history: views.LagHistory = request.app.state.lag_history
    history.record(group, int(time.time() * 1000), lag)
    samples = history.samples(group)
    return {
        "group": described,
        "lag": lag,
        "samples": samples,
        "points": views.sparkline_points(samples, 600, 120),
        "peak": max((s[1] for s in samples), default=0),
    }


def install(app: FastAPI) -> None:
    app.state.lag_history = views.LagHistory()
    app.include_router(router)
