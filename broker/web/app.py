"""The ASGI app of ``raftq console``: the HTTP/JSON API (``/api/v1``) and the web console.

``create_app`` composes them over one :class:`~raftq.web.gateway.Gateway`; ``serve`` runs it
with uvicorn until interrupted, then closes the gateway's clients (its dequeue members leave
their groups).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError

from raftq.web import api, console
from raftq.web.gateway import THREADS_MAX, Gateway

API_DOC = """The HTTP/JSON API of raftq beside its gRPC API: topics, enqueue and dequeue, ack and
nack by id, a record's priority, groups, the cluster, dead letters and their redrive.

Authenticate with `Authorization: Bearer <token>` (the gRPC API's tokens and ACLs). Errors
answer `{"code", "message", "retriable"}` with the HTTP status of the error's kind."""


def create_app(gateway: Gateway) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Routes run on anyio's worker threads (40 by default); dequeues hold at most
        # gateway.dequeues_max of them, so other requests always find one.
        anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS_MAX
        yield
        gateway.close()

    app = FastAPI(
        title="raftq",
        version="1",
        description=API_DOC,
        openapi_url="/api/v1/openapi.json",
        docs_url="/api/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    api.install(app)
    console.install(app)

    @app.exception_handler(RequestValidationError)
    async def on_bad_request(request: Request, exc: RequestValidationError) -> Response:
        """400 INVALID_ARGUMENT: JSON for the API, the console's error page for its forms."""
        if request.url.path.startswith("/api/"):
            return api.error_response(api.invalid(exc))
        return console.failure(request, api.invalid(exc))

    return app


def serve(
    bootstrap: str,
    host: str,
    port: int,
    client_options: Mapping[str, Any] | None = None,
    *,
    default_token: str | None = None,
    consumer_idle_s: float = 300.0,
) -> None:
    """Serve the console and API on ``host:port`` until interrupted."""
    gateway = Gateway(
        bootstrap, client_options, default_token=default_token, consumer_idle_s=consumer_idle_s
    )
    uvicorn.run(create_app(gateway), host=host, port=port, log_level="info", access_log=False)
