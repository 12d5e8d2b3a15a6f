"""A2A streaming over JSON-RPC (docs/PROTOCOL.md §4.2): SendStreamingMessage and SubscribeToTask.

The response is an SSE stream whose `data:` lines are JSON-RPC responses, as a2a-sdk's server
writes them and its client transport reads them:

- A2A 1.0 (`A2A-Version: 1.x`): each `result` is a StreamResponse — `{"task": Task}` first,
  then `{"artifactUpdate": …}` (a result artifact) and `{"statusUpdate": …}` per event.
- 0.3 (no header, compat): the same events in 0.3 shapes — a Task with `"kind": "task"`, then
  `"kind": "status-update"` (with `final`) / `"kind": "artifact-update"`.

The stream ends after the update that puts the task in a terminal state. Errors found before
the stream starts (bad params, unknown task, a terminal task for SubscribeToTask → -32004)
are a plain JSON-RPC error response; errors after it are an `event: error` frame carrying a
JSON-RPC error, then the end of the stream.

Served by the lean ASGI handler in stream processes (`jsonrpc_stream`); a WSGI web process
answers the same requests by polling the database (messaging/a2a/views.py, with `begin`).
Both answer errors before the first frame through messaging/a2a/jsonrpc.py.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from django.db import DatabaseError
from django.db.models import Max

from agents.auth import AgentIdentity, authenticate_agent, identity_is_current
from hikyaku.errors import (
    HikyakuError,
    ServiceUnavailable,
    TaskNotFound,
    Unauthenticated,
    UnsupportedOperation,
)

from .. import policy, selectors
from ..a2a import jsonrpc
from ..a2a.methods import deliver, send_params, task_id_param
from ..a2a.wire import Dialect, dialect_for, render_task, stream_response_v03, update_results
from ..models import TERMINAL_STATES, Task, TaskEvent
from ..parties import Sender
from . import sse
from .batch import Batch
from .db import run_db
from .feeds import PAGE, Feed
from .serve import serve

log = logging.getLogger(__name__)

SEND, SUBSCRIBE = "send", "subscribe"
# What each streaming method does, by both its names (messaging/a2a/jsonrpc.py).
STREAMING_METHODS = jsonrpc.method_table(
    {"SendStreamingMessage": SEND, "SubscribeToTask": SUBSCRIBE}
)


class TaskFeed(Feed):
    """One task's updates for one of its parties, until it reaches a terminal state."""

    def __init__(
        self,
        *,
        identity: AgentIdentity | None,
        dialect: Dialect,
        request_id: Any,
        task: Task,
        cursor: int,
        history_length: int | None = None,
    ) -> None:
        self.identity = identity
        self.dialect = dialect
        self.request_id = request_id
        self.task = task
        self.cursor = cursor
        self.history_length = history_length
        self.keys = tuple(str(i) for i in {task.sender_id, task.recipient_id} if i is not None)

    def _response(self, result: dict[str, Any]) -> bytes:
        if self.dialect is Dialect.V1_0:
            return sse.event(jsonrpc.result(self.request_id, result))
        return sse.event(stream_response_v03(result, self.request_id))

    def _error(self, error: HikyakuError) -> bytes:
        body = jsonrpc.response(self.request_id, jsonrpc.from_domain(error))
        return sse.event(body, name="error")

    def render(self, task: Task) -> dict[str, Any]:
        """The task as the first event shows it."""
        return render_task(task, self.dialect, history_length=self.history_length)

    def updates(self, row: TaskEvent, task: Task) -> tuple[list[dict[str, Any]], bool]:
        """The A2A 1.0 StreamResponses for one event, and whether the stream ends after it."""
        return update_results(row, task), row.to_state in TERMINAL_STATES

    def open(self) -> Batch:
        task = self.task
        body = self.render(task)
        if self.dialect is Dialect.V1_0:
            first = sse.event(jsonrpc.result(self.request_id, {"task": body}))
        else:
            first = sse.event(jsonrpc.result(self.request_id, body))
        return Batch([first], closed="terminal" if task.is_terminal else None, more=True)

    def fetch(self) -> Batch:
        rows = list(
            TaskEvent.objects.filter(task_id=self.task.pk, id__gt=self.cursor)
            .select_related("task__sender", "task__recipient")
            .order_by("id")[:PAGE]
        )
        if not rows:
            return Batch()  # the hub re-checks the credentials of idle streams
        if self.identity is not None and not identity_is_current(self.identity):
            return Batch(closed="credentials")
        frames = []
        for row in rows:
            self.cursor = row.id
            task = row.task
            agent = self.identity.agent if self.identity else None
            if agent is not None:
                agent = task.sender if task.sender_id == agent.pk else task.recipient
            if not policy.may_read(agent, task):
                return Batch(frames, closed="policy")
            results, ends = self.updates(row, task)
            frames.extend(self._response(result) for result in results)
            if ends:
                return Batch(frames, closed="terminal")
        return Batch(frames, more=len(rows) == PAGE)

    def closing_frames(self, reason: str) -> list[bytes]:
        if reason == "credentials":
            return [self._error(Unauthenticated("The credentials of this stream were revoked."))]
        if reason == "policy":
            return [self._error(TaskNotFound(f"Task not found: {self.task.pk}"))]
        if reason == "shutdown":
            return [self._error(ServiceUnavailable())]
        return []


def snapshot(task: Task) -> tuple[Task, int]:
    """The task and the id of its last event, read in that order backwards: an event that
    commits in between is then both in the task and after the cursor (sent twice, harmless)
    rather than in neither."""
    cursor = TaskEvent.objects.filter(task_id=task.pk).aggregate(last=Max("id"))["last"] or 0
    return Task.objects.select_related("sender", "recipient").get(pk=task.pk), cursor


def begin(identity: AgentIdentity, call: jsonrpc.Call, request_id: Any, method: str) -> TaskFeed:
    """Everything before the first frame: the send, with every parameter checked as
    SendMessage checks them (messaging/a2a/methods.py), or the subscription checks. Raises
    HikyakuError for what must be answered as a plain JSON-RPC error."""
    history_length = None
    if STREAMING_METHODS[method] == SEND:
        params = send_params(call)
        history_length = params.history_length
        task = deliver(call, params)
    else:
        task = selectors.party_task(sender=call.sender, task_id=task_id_param(call.params))
        if task.is_terminal:
            raise UnsupportedOperation(
                f"Task {task.pk} is {task.state}: a terminal task has no updates to stream."
            )
    task, cursor = snapshot(task)
    return TaskFeed(
        identity=identity,
        dialect=call.dialect,
        request_id=request_id,
        task=task,
        cursor=cursor,
        history_length=history_length,
    )


async def jsonrpc_stream(
    scope: sse.Scope, receive: sse.Receive, send: sse.Send, envelope: jsonrpc.Envelope
) -> None:
    """A streaming JSON-RPC request, already read and parsed by the dispatcher
    (hikyaku.asgi)."""

    async def opened() -> Feed:
        dialect = dialect_for(sse.header(scope, b"a2a-version"))
        identity = await run_db(
            partial(
                authenticate_agent,
                authorization=sse.header(scope, b"authorization"),
                agent_id=sse.header(scope, b"x-agent-id"),
            )
        )
        call = jsonrpc.Call(
            sender=Sender(tenant=identity.tenant, agent=identity.agent),
            dialect=dialect,
            params=envelope.params,
        )
        return await run_db(
            begin, identity, call, envelope.request_id, envelope.method, retry=False
        )

    feed = await open_or_answer(send, envelope, opened)
    if feed is not None:
        await serve(feed, receive, send, kind="a2a")


async def open_or_answer(
    send: sse.Send, envelope: jsonrpc.Envelope, opened: Callable[[], Awaitable[Feed]]
) -> Feed | None:
    """Authenticate and open a streaming method's feed (`opened`); when that fails, send
    the JSON-RPC error answer instead of a stream (as the WSGI views do) and return None."""
    try:
        return await opened()
    except (HikyakuError, DatabaseError) as exc:
        answer = jsonrpc.error_answer(envelope.request_id, exc, method=envelope.method)
        await sse.send_json(send, answer.status, answer.body, answer.headers)
    return None
