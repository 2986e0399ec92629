"""The HTTP side of raftq: a JSON API beside gRPC and a web console, served by ``raftq console``.

Both are a gateway: every request becomes calls of the Python client (:mod:`raftq.client`)
made with the caller's own bearer token, so the brokers authorise it exactly as a gRPC call
(same principal, same ACLs) and the broker core knows nothing of HTTP.

- :mod:`raftq.web.gateway`: the clients held for callers (one ``Admin``/``Producer`` per
  token, one ``Consumer`` per token, group and topic for dequeues) and the operations.
- :mod:`raftq.web.views`: protobuf answers and records as JSON-ready dicts, message ids (pure).
- :mod:`raftq.web.api`: the ``/api/v1`` routes (FastAPI; OpenAPI at ``/api/v1/openapi.json``),
  typed errors as HTTP status + ``{code, message, retriable}``.
- :mod:`raftq.web.console`: the server-rendered console (Jinja2 templates in ``templates/``).
- :mod:`raftq.web.app`: the ASGI app composing both, and ``serve`` (uvicorn).

Only this package imports fastapi, starlette, jinja2 and uvicorn (the ``console`` extra): a
broker never needs them.
"""
