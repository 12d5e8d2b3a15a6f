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

from agents.auth import authenticate_agent
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
    try:
        dialect = dialect_for(header("A2A-Version"))
        identity = authenticate_agent(
            authorization=header("Authorization"), agent_id=header("X-Agent-Id")
        )
        log = {
            "tenant_id": str(identity.tenant.id),
            "agent_id": str(identity.agent.id),
            "rpc_method": method,
        }
        call = jsonrpc.Call(
            sender=Sender(tenant=identity.tenant, agent=identity.agent),
            dialect=dialect,
            params=envelope.params,
        )
        handler = METHODS.get(method)
        if handler is None:
            return reply(jsonrpc.method_not_found(request_id, method), log=log)
        result = handler(call)
    except (HikyakuError, DatabaseError) as exc:
        answer = jsonrpc.error_answer(request_id, exc, method=method)
        return reply(answer.body, answer.status, answer.headers, log)
    return reply(jsonrpc.result(request_id, result), log=log)
