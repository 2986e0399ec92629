"""The HTTP/JSON API (broker/web/) with a real HTTP client (httpx) against a real ``raftq
console`` process in front of real brokers with tokens required: what a curl user of doq's or
DQueue's REST API does, the same ACLs and typed errors as gRPC, and bad input at its limits."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftq.proto import errors
from raftq.web import api, views
from raftq.web.gateway import Gateway
from tests.cluster import Cluster, ProcessCluster
from tests.helpers import wait_until
from tests.process.test_readme import README
from tests.web_harness import ConsoleProcess, secured_console, token

ADMIN = ConsoleProcess.auth("admin")
READER = ConsoleProcess.auth("reader")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ProcessCluster, Any]]:
    with secured_console(tmp_path_factory.mktemp("web")) as both:
        yield both


@pytest.fixture(scope="module")
def console(secured: tuple[ProcessCluster, ConsoleProcess]) -> ConsoleProcess:
    return secured[1]


@pytest.fixture(scope="module")
def web(console: ConsoleProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=console.url + "/api/v1", timeout=60) as client:
        yield client


def ok(response: httpx.Response, status: int = 200) -> Any:
    """The JSON answer (None when empty) of a request that must answer ``status``."""
    assert response.status_code == status, response.text
    return response.json() if response.content else None


def refused(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert body["message"] and isinstance(body["retriable"], bool)
    return body


def create(web: httpx.Client, name: str, **extra: Any) -> dict[str, Any]:
    body = {"name": name, "partitions": 1, **extra}
    return ok(web.post("/topics", json=body, headers=ADMIN), 201)


def enqueue(web: httpx.Client, topic: str, *records: dict[str, Any]) -> list[dict[str, Any]]:
    answer = ok(
        web.post(f"/topics/{topic}/records", json={"records": list(records)}, headers=ADMIN)
    )
    assert all(r["ok"] for r in answer["results"]), answer
    return answer["results"]


def dequeue(web: httpx.Client, group: str, topic: str, **extra: Any) -> list[dict[str, Any]]:
    body = {"topic": topic, **extra}
    return ok(web.post(f"/groups/{group}/dequeue", json=body, headers=ADMIN))["records"]


def test_every_error_kind_has_an_http_status() -> None:
    for kind in errors.CATALOGUE.values():
        assert kind.grpc_status in api.HTTP_STATUS, kind.name
    assert api.http_status(errors.UnknownTopic()) == 404
    assert api.http_status(errors.PermissionDenied()) == 403
    assert api.http_status(errors.ResourceExhausted()) == 429


def test_message_ids_round_trip_and_refuse_garbage() -> None:
    ref = views.parse_message_id(views.message_id("jobs.eu", 3, 41, 2))
    assert (ref.topic, ref.partition, ref.offset, ref.delivery_count) == ("jobs.eu", 3, 41, 2)
    for bad in ("", "jobs", "jobs/1/2", "jobs/1/2/x", "/1/2/3", "jobs/-1/2/3", "a/1/2/3/4"):
        with pytest.raises(errors.InvalidArgument):
            views.parse_message_id(bad)


def test_openapi_document_names_the_routes(web: httpx.Client) -> None:
    document = ok(web.get("/openapi.json"))
    paths = document["paths"]
    for path in (
        "/api/v1/topics",
        "/api/v1/topics/{topic}/records",
        "/api/v1/groups/{group}/dequeue",
        "/api/v1/groups/{group}/ack",
        "/api/v1/groups/{group}/nack",
        "/api/v1/topics/{topic}/partitions/{partition}/records/{offset}",
        "/api/v1/topics/{topic}/dead-letters/redrive",
    ):
        assert path in paths, sorted(paths)
    assert not any(p.startswith("/topics") or p == "/" for p in paths)  # console pages hidden


def test_auth_is_the_brokers(web: httpx.Client) -> None:
    refused(web.get("/topics"), 401, "UNAUTHENTICATED")
    refused(web.get("/topics", headers={"Authorization": "Bearer nope"}), 401, "UNAUTHENTICATED")
    refused(web.get("/topics", headers={"Authorization": "Basic eDp5"}), 401, "UNAUTHENTICATED")
    body = refused(
        web.post("/topics", json={"name": "web.denied"}, headers=READER), 403, "PERMISSION_DENIED"
    )
    assert "admin" in body["message"]
    refused(web.get("/topics/web.denied", headers=ADMIN), 404, "UNKNOWN_TOPIC")  # nothing made
    create(web, "web.ro")
    refused(
        web.post("/topics/web.ro/records", json={"records": [{"value": "x"}]}, headers=READER),
        403,
        "PERMISSION_DENIED",
    )
    refused(web.delete("/topics/web.ro", headers=READER), 403, "PERMISSION_DENIED")
    assert ok(web.get("/topics/web.ro", headers=READER))["name"] == "web.ro"  # reading is allowed
    browsed = ok(web.get("/topics/web.ro/partitions/0/records", headers=ADMIN))
    assert browsed["records"] == [] and browsed["end"] == 0  # the refused enqueue wrote nothing


def test_topic_lifecycle_and_bad_input(web: httpx.Client) -> None:
    created = create(web, "web.life", partitions=2, config={"ordering": "priority"})
    assert created["config"]["ordering"] == "PRIORITY" and len(created["partitions"]) == 2
    refused(web.post("/topics", json={"name": "web.life"}, headers=ADMIN), 409, "TOPIC_EXISTS")
    refused(web.post("/topics", json={"name": "bad/name"}, headers=ADMIN), 400, "INVALID_ARGUMENT")
    refused(
        web.post("/topics", json={"name": "web.x", "partitions": 0}, headers=ADMIN),
        400,
        "INVALID_ARGUMENT",
    )
    refused(
        web.post("/topics", json={"name": "web.x", "config": {"colour": 1}}, headers=ADMIN),
        400,
        "INVALID_ARGUMENT",
    )
    refused(web.post("/topics", content=b"{not json", headers=ADMIN), 400, "INVALID_ARGUMENT")
    names = [t["name"] for t in ok(web.get("/topics", headers=ADMIN))]
    assert "web.life" in names and "web.x" not in names
    assert ok(web.delete("/topics/web.life", headers=ADMIN), 204) is None
    refused(web.get("/topics/web.life", headers=ADMIN), 404, "UNKNOWN_TOPIC")
    refused(web.delete("/topics/web.life", headers=ADMIN), 404, "UNKNOWN_TOPIC")


def test_enqueue_with_priority_delay_and_key_then_dequeue_and_ack(web: httpx.Client) -> None:
    create(web, "web.jobs", config={"ordering": "priority", "lease_ms": 60_000})
    results = enqueue(
        web,
        "web.jobs",
        {"value": "low", "priority": 5, "key": "k1", "headers": {"trace": "t-1"}},
        {"value": "high", "priority": -3},
        {"value": "later", "priority": -10, "delay_ms": 3_000},
        {"value_b64": "AP8=", "priority": 9},
    )
    assert [r["offset"] for r in results] == [0, 1, 2, 3]
    got = dequeue(web, "g1", "web.jobs", max_records=10)
    assert [m["value"] for m in got] == ["high", "low", None]  # "later" is not due yet
    assert got[2]["value_b64"] == "AP8="
    low = got[1]
    assert low["key"] == "k1" and low["headers"] == {"trace": "t-1"} and low["priority"] == 5
    assert low["delivery_count"] == 1 and low["id"] == "web.jobs/0/0/1"
    acked = ok(web.post("/groups/g1/ack", json={"ids": [m["id"] for m in got]}, headers=ADMIN))
    assert [r["ok"] for r in acked["results"]] == [True, True, True]
    again = ok(web.post("/groups/g1/ack", json={"ids": [low["id"]]}, headers=ADMIN))
    assert again["results"][0]["ok"]  # acks are idempotent, as over gRPC
    later = wait_until(
        lambda: dequeue(web, "g1", "web.jobs", wait_ms=1_000), 15, "the delayed record"
    )
    assert [m["value"] for m in later] == ["later"]
    assert later[0]["deliver_at_ms"] >= results[2]["timestamp_ms"] + 2_900
    ok(web.post("/groups/g1/ack", json={"ids": [later[0]["id"]]}, headers=ADMIN))
    described = ok(web.get("/groups/g1", headers=ADMIN))
    assert described["lag"] == 0 and described["partitions"][0]["committed"] == 4


def test_ack_refusals_are_typed_per_id(web: httpx.Client) -> None:
    create(web, "web.acks", config={"lease_ms": 60_000})
    enqueue(web, "web.acks", {"value": "a"}, {"value": "b"})
    (first,) = dequeue(web, "g2", "web.acks")
    stale = first["id"][:-1] + "7"  # a delivery that never happened
    other = "web.other/0/0/1"  # a topic this caller never dequeued here
    answer = ok(web.post("/groups/g2/ack", json={"ids": [stale, other]}, headers=ADMIN))
    codes = [r.get("code") if not r["ok"] else "OK" for r in answer["results"]]
    assert codes[0] in ("LEASE_EXPIRED", "NOT_LEASED") and codes[1] == "UNKNOWN_MEMBER"
    answer = ok(web.post("/groups/g2/ack", json={"ids": [first["id"]]}, headers=ADMIN))
    assert answer["results"] == [{"id": first["id"], "ok": True}]
    # another principal cannot settle what the admin dequeued (its member is not theirs)
    (second,) = dequeue(web, "g2", "web.acks")
    theirs = ok(web.post("/groups/g2/ack", json={"ids": [second["id"]]}, headers=READER))
    assert theirs["results"][0]["code"] == "UNKNOWN_MEMBER"
    bodies: list[dict[str, Any]] = [{"ids": []}, {"ids": ["nope"]}, {"ids": ["x/1/2/3"] * 1001}]
    bodies.append({"ids": [second["id"], second["id"][:-1] + "9"]})  # one record named twice
    for body in [*bodies, {}]:
        refused(web.post("/groups/g2/ack", json=body, headers=ADMIN), 400, "INVALID_ARGUMENT")
    nacked = ok(
        web.post("/groups/g2/nack", json={"ids": [second["id"]], "delay_ms": 0}, headers=ADMIN)
    )
    assert nacked["results"][0]["ok"]
    (redelivered,) = wait_until(lambda: dequeue(web, "g2", "web.acks"), 10, "redelivery")
    assert redelivered["offset"] == second["offset"] and redelivered["delivery_count"] == 2


def test_dequeue_auto_ack_and_limits(web: httpx.Client) -> None:
    create(web, "web.auto")
    enqueue(web, "web.auto", *({"value": str(i)} for i in range(3)))
    got = dequeue(web, "g3", "web.auto", max_records=1_000, auto_ack=True)
    assert [m["value"] for m in got] == ["0", "1", "2"] and all(m["acked"] for m in got)
    assert dequeue(web, "g3", "web.auto", wait_ms=0) == []
    assert ok(web.get("/groups/g3", headers=ADMIN))["lag"] == 0
    for body in (
        {"topic": "web.auto", "max_records": 1_001},
        {"topic": "web.auto", "max_records": 0},
        {"topic": "web.auto", "wait_ms": 30_001},
        {"topic": "web.auto", "wait_ms": -1},
        {"max_records": 1},
    ):
        refused(web.post("/groups/g3/dequeue", json=body, headers=ADMIN), 400, "INVALID_ARGUMENT")
    refused(
        web.post("/groups/g3/dequeue", json={"topic": "web.none"}, headers=ADMIN),
        404,
        "UNKNOWN_TOPIC",
    )


def test_enqueue_bad_input_changes_nothing(web: httpx.Client) -> None:
    create(web, "web.bad", config={"max_record_bytes": 1_000})
    top = 2**31 - 1
    enqueue(web, "web.bad", {"value": "edge", "priority": top}, {"value": "x" * 1_000})
    bad_bodies = [
        {"records": []},
        {"records": [{"value": "x"}] * 1_001},
        {"records": [{"value": "x", "priority": top + 1}]},
        {"records": [{"value": "x", "priority": -top - 2}]},
        {"records": [{"value": "x", "delay_ms": -1}]},
        {"records": [{"value": "x", "value_b64": "eA=="}]},
        {"records": [{"value_b64": "not base64!"}]},
        {"records": [{"value": "x", "delay_ms": 5, "deliver_at_ms": 5}]},
        {"records": [{"value": "x", "partition": -1}]},
    ]
    for body in bad_bodies:
        refused(
            web.post("/topics/web.bad/records", json=body, headers=ADMIN), 400, "INVALID_ARGUMENT"
        )
    refused(
        web.post("/topics/web.none/records", json={"records": [{"value": "x"}]}, headers=ADMIN),
        404,
        "UNKNOWN_TOPIC",
    )
    # per record: one too large or on a missing partition fails alone
    answer = ok(
        web.post(
            "/topics/web.bad/records",
            json={"records": [{"value": "x" * 1_001}, {"value": "y", "partition": 7}]},
            headers=ADMIN,
        )
    )
    assert [r["code"] for r in answer["results"]] == ["RECORD_TOO_LARGE", "UNKNOWN_PARTITION"]
    browsed = ok(web.get("/topics/web.bad/partitions/0/records", headers=ADMIN))
    assert [r["offset"] for r in browsed["records"]] == [0, 1] and browsed["end"] == 2


def test_change_a_pending_records_priority(web: httpx.Client) -> None:
    create(web, "web.prio", config={"ordering": "priority"})
    enqueue(web, "web.prio", {"value": "a", "priority": 1}, {"value": "b", "priority": 2})
    path = "/topics/web.prio/partitions/0/records/"
    ok(web.patch(path + "1", json={"priority": 0}, headers=ADMIN), 204)
    assert [m["value"] for m in dequeue(web, "g4", "web.prio", max_records=2)] == ["b", "a"]
    browsed = ok(web.get("/topics/web.prio/partitions/0/records?offset=1&limit=1", headers=ADMIN))
    assert browsed["records"][0]["priority"] == 0
    refused(web.patch(path + "1", json={}, headers=ADMIN), 400, "INVALID_ARGUMENT")
    refused(web.patch(path + "1", json={"priority": 2**31}, headers=ADMIN), 400, "INVALID_ARGUMENT")
    refused(web.patch(path + "9", json={"priority": 1}, headers=ADMIN), 404, "RECORD_NOT_FOUND")
    refused(web.patch(path + "1", json={"priority": 1}, headers=READER), 403, "PERMISSION_DENIED")
    refused(web.patch(path + "-1", json={"priority": 1}, headers=ADMIN), 400, "INVALID_ARGUMENT")


def test_lists_browse_and_cluster(web: httpx.Client) -> None:
    create(web, "web.browse")
    enqueue(web, "web.browse", *({"value": f"v{i}", "key": f"k{i}"} for i in range(5)))
    last = ok(web.get("/topics/web.browse/partitions/0/records?limit=2", headers=READER))
    assert [r["value"] for r in last["records"]] == ["v3", "v4"] and last["end"] == 5
    page = ok(web.get("/topics/web.browse/partitions/0/records?offset=1&limit=2", headers=READER))
    assert [r["key"] for r in page["records"]] == ["k1", "k2"]
    refused(
        web.get("/topics/web.browse/partitions/3/records", headers=READER), 404, "UNKNOWN_PARTITION"
    )
    refused(
        web.get("/topics/web.browse/partitions/0/records?limit=1001", headers=READER),
        400,
        "INVALID_ARGUMENT",
    )
    cluster = ok(web.get("/cluster", headers=READER))
    assert cluster["health"] in ("HEALTHY", "DEGRADED") and len(cluster["brokers"]) == 3
    brokers = ok(web.get("/brokers", headers=READER))
    assert sorted(b["id"] for b in brokers) == [1, 2, 3] and all(b["alive"] for b in brokers)
    dequeue(web, "g5", "web.browse", auto_ack=True)
    groups = {g["group"]: g for g in ok(web.get("/groups", headers=ADMIN))}
    assert groups["g5"]["topics"] == ["web.browse"]
    refused(web.get("/groups/none", headers=ADMIN), 404, "UNKNOWN_GROUP")


def test_dead_letters_listed_with_reason_and_redriven(web: httpx.Client) -> None:
    create(web, "web.dl", config={"max_deliveries": 1})
    enqueue(web, "web.dl", {"value": "poison", "key": "p"}, {"value": "fine"})
    got = dequeue(web, "g6", "web.dl", max_records=2)
    ok(web.post("/groups/g6/ack", json={"ids": [got[1]["id"]]}, headers=ADMIN))
    nacked = ok(web.post("/groups/g6/nack", json={"ids": [got[0]["id"]]}, headers=ADMIN))
    assert nacked["results"][0]["ok"]

    def listed() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = ok(web.get("/topics/web.dl/dead-letters", headers=ADMIN))[
            "records"
        ]
        return rows

    (row,) = wait_until(listed, 20, "the dead letter")
    assert row["value"] == "poison" and row["origin_topic"] == "web.dl"
    assert row["origin_partition"] == 0 and row["origin_offset"] == 0
    assert row["reason"] and row["origin_group"] == "g6" and not row["redriven"]
    refused(
        web.post("/topics/web.dl/dead-letters/redrive", headers=READER), 403, "PERMISSION_DENIED"
    )
    refused(
        web.post("/topics/web.dl/dead-letters/redrive", json={"limit": 0}, headers=ADMIN),
        400,
        "INVALID_ARGUMENT",
    )
    moved = ok(web.post("/topics/web.dl/dead-letters/redrive", headers=ADMIN))
    assert moved["moved"] == 1 and moved["by_origin"] == {"web.dl/0": 1}
    (back,) = ok(web.get("/topics/web.dl/dead-letters", headers=ADMIN))["records"]
    assert back["redriven"]
    origin = ok(web.get("/topics/web.dl/partitions/0/records?offset=2", headers=ADMIN))
    (copy,) = origin["records"]
    assert copy["value"] == "poison" and copy["key"] == "p"
    assert copy["headers"]["raftq.redrive.from"].startswith("web.dl.dlq/")
    again = ok(web.post("/topics/web.dl/dead-letters/redrive", headers=ADMIN))
    assert again["moved"] == 0  # nothing moved twice


def test_readme_curl_examples_run_as_written(console: ConsoleProcess) -> None:
    """The README's HTTP API examples, run by bash and curl against the console: each call is
    well formed (no INVALID_ARGUMENT); the topic is made, fed, dequeued and deleted."""
    start = README.index("API=http://127.0.0.1:8080/api/v1")
    script = README[start : README.index("```", start)].replace(
        "http://127.0.0.1:8080", console.url
    )
    lines = [line for line in script.replace("\\\n", "").splitlines() if line.strip()]
    outputs = []
    for line in lines[1:]:
        done = subprocess.run(
            ["bash", "-e", "-c", lines[0] + "\n" + line + " -sS -w ' HTTP %{http_code}\\n'"],
            env={**os.environ, "RAFTQ_TOKEN": token("admin")},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (line, done.stderr)
        assert "INVALID_ARGUMENT" not in done.stdout and "HTTP 5" not in done.stdout, (line, done)
        outputs.append(done.stdout)
    assert '"name":"jobs"' in outputs[0] and "HTTP 201" in outputs[0]
    assert '"ok":true' in outputs[1]
    assert "HTTP 204" in outputs[-1]  # the last line ends with the topic's deletion


def test_idle_dequeue_members_leave_and_members_are_bounded(
    secured: tuple[ProcessCluster, ConsoleProcess], web: httpx.Client
) -> None:
    """The gateway in this process, with a manual clock: a member unused for consumer_idle_s
    is closed (it leaves its group: its leases go back), and at members_max a new one is
    refused RESOURCE_EXHAUSTED."""
    cluster, _ = secured
    create(web, "web.idle", config={"lease_ms": 600_000})
    enqueue(web, "web.idle", {"value": "held"})
    now = [0.0]
    gw = Gateway(
        cluster.bootstrap, consumer_idle_s=60, members_max=1, clock=lambda: now[0], reap=False
    )
    try:
        (held,) = gw.dequeue(token("admin"), "g7", "web.idle", 1, 0, auto_ack=False)
        assert gw.statistics()["members"] == 1
        assert ok(web.get("/groups/g7", headers=ADMIN))["partitions"][0]["leased"] == 1
        with pytest.raises(errors.ResourceExhausted):  # a second (token, group, topic)
            gw.dequeue(token("admin"), "g8", "web.idle", 1, 0, auto_ack=False)
        now[0] += 61
        gw._close_idle()
        assert gw.statistics()["members"] == 0
        described = ok(web.get("/groups/g7", headers=ADMIN))
        assert described["members"] == []  # it left: its lease is released

        def redelivered() -> list[dict[str, Any]]:
            return gw.dequeue(token("admin"), "g7", "web.idle", 1, 1_000, auto_ack=False)

        (again,) = wait_until(redelivered, 30, "the released lease redelivered")
        assert again["offset"] == held["offset"] and again["delivery_count"] == 2
        (answer,) = gw.settle(token("admin"), "g7", [held["id"]], "ack")
        assert answer["code"] in ("LEASE_EXPIRED", "NOT_LEASED")  # the old delivery is gone
        assert gw.settle(token("admin"), "g7", [again["id"]], "ack") == [
            {"id": again["id"], "ok": True}
        ]
    finally:
        gw.close()


def test_console_pages_escape_record_contents(console: ConsoleProcess, web: httpx.Client) -> None:
    create(web, "web.html")
    enqueue(web, "web.html", {"value": "<script>alert(1)</script>", "key": "<b>k</b>"})
    cookies = {"raftq_token": token("admin")}
    with httpx.Client(base_url=console.url, cookies=cookies, timeout=60) as browser:
        page = browser.get("/topics/web.html/partitions/0")
        assert page.status_code == 200, page.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
        assert "<script>alert" not in page.text
        assert "&lt;b&gt;k&lt;/b&gt;" in page.text
        refused_page = browser.get("/topics/web.nothing")
        assert refused_page.status_code == 404 and "UNKNOWN_TOPIC" in refused_page.text
        fair = {"name": "web.fair", "ordering": "fair"}
        made = browser.post("/topics", data=fair, follow_redirects=True)
        assert made.status_code == 200 and "ordering FAIR (fair key: the record key)" in made.text
        bad_form = browser.post("/topics", data={"name": "web.zero", "partitions": "0"})
        assert bad_form.status_code == 400 and bad_form.headers["content-type"].startswith(
            "text/html"
        )
        assert "INVALID_ARGUMENT" in bad_form.text and "partitions" in bad_form.text
    anonymous = httpx.get(console.url + "/", follow_redirects=False, timeout=60)
    assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/login")


def test_without_auth_every_caller_is_anonymous(cluster: Cluster, tmp_path: Path) -> None:
    """A cluster without auth_required: no header, or an empty Bearer (an unset $RAFTQ_TOKEN
    in the README's curl lines), is the anonymous principal with every right."""
    console = ConsoleProcess(tmp_path, cluster.bootstrap)
    try:
        console.wait_ready()
        with httpx.Client(base_url=console.url + "/api/v1", timeout=60) as client:
            ok(client.post("/topics", json={"name": "open"}), 201)
            empty = {"Authorization": "Bearer"}  # curl trims "Bearer $UNSET"
            sent = ok(client.post("/topics/open/records", json={"records": [{"value": "v"}]}))
            assert sent["results"][0]["offset"] == 0
            body = {"topic": "open", "auto_ack": True, "wait_ms": 5_000}
            got = ok(client.post("/groups/anon/dequeue", json=body, headers=empty))
            assert [r["value"] for r in got["records"]] == ["v"]
            assert got["records"][0]["acked"]
    finally:
        console.stop()


def test_operator_verbs_alter_grow_purge_seek_and_delete(web: httpx.Client) -> None:
    create(web, "web.ops", config={"lease_ms": 60_000})
    altered = ok(
        web.patch("/topics/web.ops", json={"config": {"max_deliveries": 9}}, headers=ADMIN)
    )
    assert altered["config"]["max_deliveries"] == 9
    refused(
        web.patch("/topics/web.ops", json={"config": {"colour": 1}}, headers=ADMIN),
        400,
        "INVALID_ARGUMENT",
    )
    grown = ok(web.post("/topics/web.ops/partitions", json={"partitions": 2}, headers=ADMIN))
    assert len(grown["partitions"]) == 2
    refused(
        web.post("/topics/web.ops/partitions", json={"partitions": 2}, headers=ADMIN),
        400,
        "INVALID_ARGUMENT",
    )
    enqueue(web, "web.ops", *({"value": str(i), "partition": 0} for i in range(4)))
    got = dequeue(web, "g9", "web.ops", max_records=2)
    seek = {"topic": "web.ops", "partition": 0, "offset": 3}
    refused(web.post("/groups/g9/seek", json=seek, headers=ADMIN), 409, "GROUP_NOT_EMPTY")
    refused(web.delete("/groups/g9", headers=ADMIN), 409, "GROUP_NOT_EMPTY")
    refused(
        web.post("/groups/g9/seek", json={**seek, "latest": True}, headers=ADMIN),
        400,
        "INVALID_ARGUMENT",
    )
    moved = ok(web.post("/groups/g9/seek", json={**seek, "force": True}, headers=ADMIN))
    assert [(p["partition"], p["offset"]) for p in moved["partitions"]] == [(0, 3)]
    assert len(got) == 2  # held by g9's member, then acknowledged by the seek
    assert [m["value"] for m in dequeue(web, "g9", "web.ops", max_records=10)] == ["3"]
    refused(web.post("/topics/web.ops/purge", headers=READER), 403, "PERMISSION_DENIED")
    purged = ok(web.post("/topics/web.ops/purge", json={"partition": 0}, headers=ADMIN))
    assert purged["partitions"] == [{"partition": 0, "log_start": 4, "deleted": 4}]
    assert ok(web.get("/topics/web.ops/partitions/0/records", headers=ADMIN))["records"] == []
    refused(web.delete("/groups/nobody", headers=ADMIN), 404, "UNKNOWN_GROUP")


def test_dequeues_at_once_are_bounded(
    secured: tuple[ProcessCluster, ConsoleProcess], web: httpx.Client
) -> None:
    """Waiting dequeues hold server threads: past dequeues_max one is refused
    RESOURCE_EXHAUSTED (429 with Retry-After over HTTP) instead of starving other requests."""
    cluster, _ = secured
    create(web, "web.waits")
    gw = Gateway(cluster.bootstrap, dequeues_max=1, reap=False)
    try:
        gw.dequeue(token("admin"), "g10", "web.waits", 1, 0, auto_ack=False)  # joined
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(gw.dequeue, token("admin"), "g10", "web.waits", 1, 10_000, False)
            wait_until(lambda: gw.statistics()["dequeues"] == 1, 10, "the first one waiting")
            with pytest.raises(errors.ResourceExhausted) as refused_one:
                gw.dequeue(token("admin"), "g10", "web.waits", 1, 0, auto_ack=False)
            assert refused_one.value.retry_after_ms > 0
            enqueue(web, "web.waits", {"value": "wake"})
            assert [m["value"] for m in waiting.result(timeout=30)] == ["wake"]
        assert gw.dequeue(token("admin"), "g10", "web.waits", 1, 0, auto_ack=False) == []
    finally:
        gw.close()
    answer = api.error_response(errors.ResourceExhausted("busy", retry_after_ms=1_500))
    assert answer.status_code == 429 and answer.headers["retry-after"] == "2"


def test_move_a_partition_and_rebalance_leaders(web: httpx.Client) -> None:
    made = create(web, "web.move")
    replicas = made["partitions"][0]["replicas"]
    path = "/topics/web.move/partitions/0/move"
    bads: list[dict[str, list[int]]] = [
        {"replicas": []},
        {"replicas": [99]},
        {"replicas": [replicas[0]] * 2},
    ]
    for bad in bads:
        refused(web.post(path, json=bad, headers=ADMIN), 400, "INVALID_ARGUMENT")
    refused(web.post(path, json={"replicas": replicas}, headers=READER), 403, "PERMISSION_DENIED")
    moved = ok(web.post(path, json={"replicas": replicas[::-1]}, headers=ADMIN))
    assert moved["replicas"] == replicas[::-1]
    described = ok(web.get("/topics/web.move", headers=ADMIN))
    assert described["partitions"][0]["replicas"] == replicas[::-1]
    refused(web.post("/cluster/rebalance-leaders", headers=READER), 403, "PERMISSION_DENIED")
    answer = ok(web.post("/cluster/rebalance-leaders", headers=ADMIN))
    assert answer["moved"] >= 0 and answer["remaining"] >= 0


def test_console_never_takes_the_operators_token_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """$RAFTQ_TOKEN serves the operator's CLI commands; the console would hand it to every
    visitor, so only an explicit --token stands in for them."""
    monkeypatch.setenv("RAFTQ_TOKEN", "operator-secret")
    from raftq.cli import build_parser

    assert build_parser().parse_args(["console"]).token is None
    assert build_parser().parse_args(["console", "--token", "t"]).token == "t"
    assert build_parser().parse_args(["topic", "list"]).token == "operator-secret"


def test_recurring_records_over_http_and_in_the_console(
    console: ConsoleProcess, web: httpx.Client
) -> None:
    """Schedules (issue 19) through the HTTP API and the console's topic page: create, list,
    pause, resume, delete, each refusal typed and changing nothing; the records fire."""
    create(web, "web.cron")
    path = "/topics/web.cron/schedules"
    every = {"name": "tick", "interval_ms": 1000, "value": "tick", "key": "k"}
    made = ok(web.post(path, json=every, headers=ADMIN), 201)
    assert made["name"] == "tick" and made["interval_ms"] == 1000 and not made["paused"]
    for body, code in (
        ({"name": "c1", "cron": "61 * * * *"}, "INVALID_ARGUMENT"),
        ({"name": "c2", "cron": "* * * * *", "time_zone": "Mars/Olympus"}, "INVALID_ARGUMENT"),
        ({"name": "c3", "interval_ms": 999}, "INVALID_ARGUMENT"),
        ({"name": "c4"}, "INVALID_ARGUMENT"),  # neither cron nor interval
        ({"name": "c5", "interval_ms": 0}, "INVALID_ARGUMENT"),
        ({"name": "c6", "interval_ms": 1000, "catch_up": "twice"}, "INVALID_ARGUMENT"),
        ({"name": "tick", "interval_ms": 5000}, "SCHEDULE_EXISTS"),
    ):
        status = 409 if code == "SCHEDULE_EXISTS" else 400
        refused(web.post(path, json=body, headers=ADMIN), status, code)
    refused(web.post(path, json={"name": "r", "interval_ms": 1000}, headers=READER), 403,
            "PERMISSION_DENIED")  # fmt: skip
    refused(web.post("/topics/web.none/schedules", json=every, headers=ADMIN), 404, "UNKNOWN_TOPIC")
    listed = ok(web.get(path, headers=READER))
    assert [s["name"] for s in listed] == ["tick"]  # the refusals created nothing

    wait_until(lambda: ok(web.get(path, headers=ADMIN))[0]["fired"] >= 2, 60, "two slots fired")
    records = ok(web.get("/topics/web.cron/partitions/0/records", headers=ADMIN))["records"]
    assert records and {r["value"] for r in records} == {"tick"}

    refused(web.post(f"{path}/tick/pause", headers=READER), 403, "PERMISSION_DENIED")
    assert ok(web.post(f"{path}/tick/pause", headers=ADMIN))["paused"] is True
    refused(web.post(f"{path}/tick/resume", headers=READER), 403, "PERMISSION_DENIED")
    assert ok(web.post(f"{path}/tick/resume", headers=ADMIN))["paused"] is False
    refused(web.delete(f"{path}/tick", headers=READER), 403, "PERMISSION_DENIED")
    refused(web.post(f"{path}/nope/pause", headers=ADMIN), 404, "UNKNOWN_SCHEDULE")

    cookies = {"raftq_token": token("admin")}
    with httpx.Client(base_url=console.url, cookies=cookies, timeout=60) as browser:
        page = browser.get("/topics/web.cron")
        assert page.status_code == 200 and 'id="schedules"' in page.text
        assert "tick" in page.text and "every 1000 ms" in page.text
        form = {"name": "nightly", "cron": "0 3 * * *", "time_zone": "Europe/Berlin",
                "interval_ms": "", "value": "run", "catch_up": "skip"}  # fmt: skip
        created = browser.post("/topics/web.cron/schedules", data=form, follow_redirects=True)
        assert created.status_code == 200, created.text
        assert (
            "schedule nightly created" in created.text
            and "0 3 * * * (Europe/Berlin)" in created.text
        )
        bad = browser.post("/topics/web.cron/schedules", data={"name": "x", "cron": "nope"})
        assert bad.status_code == 400 and "INVALID_ARGUMENT" in bad.text
        paused = browser.post("/topics/web.cron/schedules/nightly/pause", follow_redirects=True)
        assert "schedule nightly paused" in paused.text and "paused" in paused.text
        gone = browser.post("/topics/web.cron/schedules/nightly/delete", follow_redirects=True)
        assert "schedule nightly deleted" in gone.text
        odd = browser.post("/topics/web.cron/schedules/tick/explode")
        assert odd.status_code == 400 and "INVALID_ARGUMENT" in odd.text
    with httpx.Client(base_url=console.url, cookies={"raftq_token": token("reader")}) as reader:
        denied = reader.post("/topics/web.cron/schedules/tick/delete")
        assert denied.status_code == 403 and "PERMISSION_DENIED" in denied.text

    ok(web.delete(f"{path}/tick", headers=ADMIN), 204)
    assert ok(web.get(path, headers=ADMIN)) == []
