"""A2A streaming on an agent's own endpoint (docs/PROTOCOL.md §8, docs/PEERS.md):
SendStreamingMessage and SubscribeToTask on `POST /a2a/agents/<agent_id>/`.

The same SSE stream as the broker endpoint's (messaging/stream/a2a.py: the task first, then
`statusUpdate` / `artifactUpdate` events as JSON-RPC responses), with two differences:

- every event shows the task in the caller's view (messaging/a2a/peer_view.py): an unread
  task is SUBMITTED, INPUT_REQUIRED means the agent asked the caller;
- the stream ends, as A2A says, when the task is terminal *or interrupted*: after the event
  in which the agent asks the caller something (`block`). A caller that subscribes to a task
  already waiting for it is answering, so that stream runs until the next interruption.

The caller is named as on the rest of the endpoint (messaging/a2a/peer.py) and sees only its
own tasks with this agent; anything else is TaskNotFound (-32001). A stream of a tenant agent
re-checks that agent's credentials (the hub, in batches); every stream re-checks that the
callee is still active, and still public for callers from outside its tenant (the hub, for
all such streams in one query).
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from agents.auth import AgentIdentity
from agents.models import Agent
from hikyaku import client_address
from hikyaku.errors import (
    TaskNotFound,
)

from ..a2a import jsonrpc, peer_view
from ..a2a.peer import (
    PeerCall,
    content_type_refused,
    deliver,
    is_json,
    open_call,
    subscribed_task,
)
from ..a2a.wire import Dialect
from ..models import Task, TaskEvent
from ..parties import Sender
from . import sse
from .a2a import SEND, STREAMING_METHODS, TaskFeed, open_or_answer, snapshot
from .db import run_db
from .serve import serve

# `/a2a/agents/<agent_id>/` (and without the trailing slash, as Django's route allows).
PATH = re.compile(r"^/a2a/agents/(?P<agent_id>[^/]+)/?$")


class PeerTaskFeed(TaskFeed):
    """One task's updates for its caller on the agent's endpoint, until it is terminal or
    interrupted."""

    def __init__(
        self,
        *,
        callee: Agent,
        sender: Sender,
        identity: AgentIdentity | None,
        dialect: Dialect,
        request_id: Any,
        task: Task,
        cursor: int,
        history_length: int | None = None,
    ) -> None:
        super().__init__(
            identity=identity,
            dialect=dialect,
            request_id=request_id,
            task=task,
            cursor=cursor,
            history_length=history_length,
        )
        # Callers from outside the callee's tenant reach it only while it is public; the hub
        # checks that for all such streams at once.
        self.callee = (callee.pk, sender.agent is None and sender.caller_id != "tenant-key")
        self.awaiting = task.awaiting  # whom the task waits for, as of the cursor

    def render(self, task: Task) -> dict[str, Any]:
        return peer_view.render_task(task, self.dialect, history_length=self.history_length)

    def updates(self, row: TaskEvent, task: Task) -> tuple[list[dict[str, Any]], bool]:
        self.awaiting = peer_view.awaiting_after(row, self.awaiting)
        results = peer_view.caller_updates(row, task, awaiting=self.awaiting)
        return results, peer_view.interrupts(row)

    def closing_frames(self, reason: str) -> list[bytes]:
        if reason == "callee":
            return [self._error(TaskNotFound(f"Task not found: {self.task.pk}"))]
        return super().closing_frames(reason)


def begin_stream(call: PeerCall, request_id: Any, method: str) -> PeerTaskFeed:
    """Everything before the first frame of SendStreamingMessage (the send, never waiting)
    or SubscribeToTask (the checks). Raises HikyakuError for what must be answered as a plain
    JSON-RPC error."""
    history_length = None
    if STREAMING_METHODS[method] == SEND:
        sent = deliver(call)
        task, history_length = sent.task, sent.history_length
    else:
        task = subscribed_task(call)
    task, cursor = snapshot(task)
    return PeerTaskFeed(
        callee=call.agent,
        sender=call.sender,
        identity=call.identity,
        dialect=call.dialect,
        request_id=request_id,
        task=task,
        cursor=cursor,
        history_length=history_length,
    )


def call_opener(scope: sse.Scope, envelope: jsonrpc.Envelope, agent_id: str):
    """`open_call` for a request to an agent's endpoint, to run on a stream DB thread."""
    return partial(
        open_call,
        agent_id=agent_id,
        version=sse.header(scope, b"a2a-version"),
        authorization=sse.header(scope, b"authorization"),
        x_agent_id=sse.header(scope, b"x-agent-id"),
        address=client_address.from_scope(scope),
        params=envelope.params,
    )


async def refused_content_type(
    scope: sse.Scope, send: sse.Send, envelope: jsonrpc.Envelope
) -> bool:
    """Answer a request to an agent's endpoint whose Content-Type is not JSON, as the view
    does; False when it is JSON."""
    if is_json(sse.header(scope, b"content-type") or ""):
        return False
    answer = jsonrpc.error_answer(None, content_type_refused(), method=envelope.method)
    await sse.send_json(send, answer.status, answer.body, answer.headers)
    return True


async def agent_stream(
    scope: sse.Scope,
    receive: sse.Receive,
    send: sse.Send,
    envelope: jsonrpc.Envelope,
    agent_id: str,
) -> None:
    """A streaming JSON-RPC request to an agent's endpoint, already read and parsed by the
    dispatcher (hikyaku.asgi)."""
    if await refused_content_type(scope, send, envelope):
        return

    async def opened():
        call = await run_db(call_opener(scope, envelope, agent_id))
        return await run_db(begin_stream, call, envelope.request_id, envelope.method, retry=False)

    feed = await open_or_answer(send, envelope, opened)
    if feed is not None:
        await serve(feed, receive, send, kind="a2a")
