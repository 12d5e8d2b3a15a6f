"""The broker's JSON-RPC endpoint (`POST /` and `POST /a2a/`) as a plain function of a request's
headers and body (docs/ARCHITECTURE.md, "The agents' hot path").

The calls agents make all day come here, so nothing on their way belongs to a browser
framework: every tier serves the same function — the lean WSGI and ASGI callables in front of
Django (hikyaku/wsgi.py, hikyaku/asgi.py) and the Django view (messaging/a2a/views.py) that
the test client and the rest of the site reach. A streaming method is not served here: it is
answered 421 at once, before authentication, for the proxy to hand it to the stream
processes (messaging/stream/handoff.py; in a stream process hikyaku.asgi routes it to its
handler before it could come here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError

from agents import auth
from hikyaku import parsers
from hikyaku.errors import HikyakuError

from ..parties import Sender
from ..stream import handoff
from . import jsonrpc
from .methods import METHODS
from .wire import dialect_for

Header = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Reply:
    """A JSON answer, and the fields it adds to the request's log line."""

    status: int
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)
    log: dict[str, Any] = field(default_factory=dict)


def reply(value: dict[str, Any], status: int = 200, headers=(), log=None) -> Reply:
    return Reply(status, parsers.dumps(value), list(headers), log or {})


def broker(*, header: Header, body: bytes) -> Reply:
    """Answer one POSTed JSON-RPC request; `header(name)` reads a request header."""
    try:
        envelope = jsonrpc.parse(body)
    except jsonrpc.EnvelopeError as exc:
        return reply(exc.response)
    request_id, method = envelope.request_id, envelope.method
    log: dict[str, Any] = {"rpc_method": method}
    if envelope.streaming:
        answer = handoff.call_answer(request_id, method)
        return reply(answer.body, answer.status, answer.headers, log)
    handler = METHODS.get(method)
    try:
        dialect = dialect_for(header("A2A-Version"))
        credentials = {"authorization": header("Authorization"), "agent_id": header("X-Agent-Id")}
        recalled = auth.recall_agent(**credentials) if method in RECALLED else None
        if recalled is not None:
            try:
                return _answer(request_id, method, handler, dialect, recalled, envelope.params)
            except (auth.Unverified, HikyakuError, DatabaseError):
                # Stale, not checkable by this operation, or failing for a reason a revoked
                # caller must not learn before its 401: authenticate afresh (which caches the
                # identity again if it holds) and answer as if it had not been cached.
                auth.forget(recalled)
        identity = auth.authenticate_agent(**credentials, counted=recalled is not None)
        return _answer(request_id, method, handler, dialect, identity, envelope.params)
    except (HikyakuError, DatabaseError) as exc:
        answer = jsonrpc.error_answer(request_id, exc, method=method)
        return reply(answer.body, answer.status, answer.headers, log)


# Methods that may use an identity recalled from the identity cache (agents/auth.py), by
# both names: their writes check it in their own statement (a new task's INSERT, a lifecycle
# action's one statement — a follow-up's or CancelTask's; messaging/services.py refuses a
# recalled identity on any other write), and GetTask and ListTasks check it in the
# statement that reads.
RECALLED = frozenset(
    name
    for method in ("SendMessage", "GetTask", "ListTasks", "CancelTask")
    for name in (method, jsonrpc.V03_NAMES[method])
)


def _answer(request_id, method: str, handler, dialect, identity, params) -> Reply:
    log = {
        "tenant_id": str(identity.tenant.id),
        "agent_id": str(identity.agent.id),
        "rpc_method": method,
    }
    if handler is None:
        return reply(jsonrpc.method_not_found(request_id, method), log=log)
    call = jsonrpc.Call(
        sender=Sender(
            tenant=identity.tenant,
            agent=identity.agent,
            check=auth.still_current_sql(identity) if identity.recalled else None,
        ),
        dialect=dialect,
        params=params,
    )
    try:
        result = handler(call)
    except (HikyakuError, DatabaseError) as exc:
        if identity.recalled:
            raise
        answer = jsonrpc.error_answer(request_id, exc, method=method)
        return reply(answer.body, answer.status, answer.headers, log)
    return reply(jsonrpc.result(request_id, result), log=log)
