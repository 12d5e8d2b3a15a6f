"""A blocking SendMessage on an agent's own endpoint, `POST /a2a/agents/<agent_id>/`
(docs/PROTOCOL.md §8, docs/PEERS.md), served without a thread.

hikyaku.asgi routes here the sends that would wait for the agent's answer
(`peer.waits_for_answer`: A2A 1.0 unless `returnImmediately`, 0.3 with `blocking`); the
others, like every other method, go to Django. The send itself is the endpoint's own
(`peer.deliver`, on a stream DB thread); then the request waits on the hub
(messaging/waiting.py) and answers with the task, or the agent's message-only reply, exactly
as the Django view answers a send that does not wait. Errors before the send committed are
the endpoint's JSON-RPC errors; nothing after it turns the delivered send into an error.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from hikyaku import metrics
from hikyaku.errors import AgentNotFound

from .. import waiting
from ..a2a import errors
from ..a2a.peer import (
    SEND_METHODS,
    ContentTypeNotSupported,
    Delivered,
    PeerCall,
    agent_not_found,
    deliver,
    is_json,
    open_call,
    send_result,
    waits_for_answer,
)
from ..a2a.views import EnvelopeError, parse_request
from . import sse
from .a2a import open_or_answer
from .db import run_db
from .peer import _address

# Cheap pre-check before decoding a body: both send methods' names contain one of these.
MARKERS = tuple(name.encode() for name in SEND_METHODS)


def waiting_send(body: bytes, scope: sse.Scope) -> dict[str, Any] | None:
    """The decoded body when it is a SendMessage that would wait for the agent, else None."""
    if not any(marker in body for marker in MARKERS):
        return None
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict):
        return None
    method, params = payload.get("method"), payload.get("params")
    if not isinstance(method, str) or not isinstance(params, dict):
        return None
    if waits_for_answer(method, params, sse.header(scope, b"a2a-version")):
        return payload
    return None


async def agent_send(
    scope: sse.Scope, receive: sse.Receive, send: sse.Send, payload: dict, agent_id: str
) -> None:
    """A blocking SendMessage, already read and decoded by the dispatcher (hikyaku.asgi)."""
    if not is_json(sse.header(scope, b"content-type") or ""):
        error = ContentTypeNotSupported("Send JSON-RPC requests as application/json.")
        await sse.send_json(send, 200, errors.response(None, errors.from_domain(error)))
        return
    try:
        request_id, method, params = parse_request(payload)
    except EnvelopeError as exc:
        await sse.send_json(send, 200, exc.response)
        return

    async def delivered() -> tuple[PeerCall, Delivered]:
        call = await run_db(
            partial(
                open_call,
                agent_id=agent_id,
                version=sse.header(scope, b"a2a-version"),
                authorization=sse.header(scope, b"authorization"),
                x_agent_id=sse.header(scope, b"x-agent-id"),
                address=_address(scope),
                params=params,
            )
        )
        return call, await run_db(deliver, call, retry=False)

    def unknown_agent(request_id: Any, exc: Exception) -> tuple[int, dict] | None:
        return (404, agent_not_found(request_id, exc)) if isinstance(exc, AgentNotFound) else None

    opened = await open_or_answer(send, request_id, method, delivered, unknown_agent)
    if opened is None:
        return
    call, sent = opened
    task = sent.task
    if sent.blocking:
        with metrics.stream_open("wait"):
            task = await waiting.await_answer(task, receive=receive)
    result = await run_db(send_result, call, task, sent.history_length)
    await sse.send_json(send, 200, {"jsonrpc": "2.0", "id": request_id, "result": result})
