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

from hikyaku import metrics

from .. import waiting
from ..a2a import jsonrpc
from ..a2a.peer import SEND_METHODS, Delivered, PeerCall, deliver, send_result, waits_for_answer
from . import sse
from .a2a import open_or_answer
from .db import run_db
from .peer import call_opener, refused_content_type

# Cheap pre-check before parsing a body: both send methods' names contain one of these.
MARKERS = tuple(name.encode() for name in SEND_METHODS)


def waiting_send(body: bytes, scope: sse.Scope) -> jsonrpc.Envelope | None:
    """The request when it is a SendMessage that would wait for the agent, else None (for
    Django to answer, a body that does not parse included)."""
    if not any(marker in body for marker in MARKERS):
        return None
    try:
        envelope = jsonrpc.parse(body)
    except jsonrpc.EnvelopeError:
        return None
    if waits_for_answer(envelope.method, envelope.params, sse.header(scope, b"a2a-version")):
        return envelope
    return None


async def agent_send(
    scope: sse.Scope,
    receive: sse.Receive,
    send: sse.Send,
    envelope: jsonrpc.Envelope,
    agent_id: str,
) -> None:
    """A blocking SendMessage, already read and parsed by the dispatcher (hikyaku.asgi)."""
    if await refused_content_type(scope, send, envelope):
        return

    async def delivered() -> tuple[PeerCall, Delivered]:
        call = await run_db(call_opener(scope, envelope, agent_id))
        return call, await run_db(deliver, call, retry=False)

    opened = await open_or_answer(send, envelope, delivered)
    if opened is None:
        return
    call, sent = opened
    task = sent.task
    if sent.blocking:
        with metrics.stream_open("wait"):
            task = await waiting.await_answer(task, receive=receive)
    result = await run_db(send_result, call, task, sent.history_length)
    await sse.send_json(send, 200, jsonrpc.result(envelope.request_id, result))
