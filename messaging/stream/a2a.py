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

Served by the lean ASGI handler in stream processes (`jsonrpc_stream`); a web (WSGI) process
hands these requests to them (messaging/stream/handoff.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from a2a.compat.v0_3 import conversions
from a2a.types import StreamResponse
from django.db import DatabaseError, DataError
from django.db.models import Max
from google.protobuf.json_format import ParseDict

from agents.auth import AgentIdentity, authenticate_agent, identity_is_current
from hikyaku.errors import (
    HikyakuError,
    InvalidRequest,
    RateLimited,
    ServiceUnavailable,
    TaskNotFound,
    Unauthenticated,
    UnsupportedOperation,
)

from .. import policy, selectors, services
from ..a2a import errors
from ..a2a.methods import _int_param
from ..a2a.wire import Dialect, dialect_for, parse_message, render_task, update_results
from ..models import TERMINAL_STATES, Task, TaskEvent
from ..parties import Sender
from . import sse
from .db import run_db
from .feeds import PAGE, Batch, Feed
from .serve import serve

log = logging.getLogger(__name__)

SEND, SUBSCRIBE = "send", "subscribe"
STREAMING_METHODS = {
    "SendStreamingMessage": SEND,
    "message/stream": SEND,
    "SubscribeToTask": SUBSCRIBE,
    "tasks/resubscribe": SUBSCRIBE,
}


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
            return sse.event({"jsonrpc": "2.0", "id": self.request_id, "result": result})
        compat = conversions.to_compat_stream_response(
            ParseDict(result, StreamResponse()), self.request_id
        ).model_dump(mode="json", by_alias=True, exclude_none=True)
        body = result.get("statusUpdate") or result.get("artifactUpdate")
        if body and "metadata" in body:
            compat["result"]["metadata"] = body["metadata"]  # keep integers integers
        return sse.event(compat)

    def _error(self, error: HikyakuError) -> bytes:
        return sse.event(errors.response(self.request_id, errors.from_domain(error)), name="error")

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
            first = sse.event({"jsonrpc": "2.0", "id": self.request_id, "result": {"task": body}})
        else:
            first = sse.event({"jsonrpc": "2.0", "id": self.request_id, "result": body})
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


def begin(
    identity: AgentIdentity, dialect: Dialect, request_id: Any, method: str, params: dict
) -> TaskFeed:
    """Everything before the first frame: the send (or the subscription checks). Raises
    HikyakuError for what must be answered as a plain JSON-RPC error."""
    sender = Sender(tenant=identity.tenant, agent=identity.agent)
    history_length = None
    if STREAMING_METHODS[method] == SEND:
        message = parse_message(params.get("message"), dialect)
        history_length = _int_param(
            params.get("configuration") or {}, "historyLength", low=0, high=10_000, default=None
        )
        task = services.send_message(sender=sender, message=message)
    else:
        task_id = params.get("id")
        if not isinstance(task_id, str) or not task_id:
            raise InvalidRequest("params.id (the task id) is required.", details={"field": "id"})
        task = selectors.party_task(sender=sender, task_id=task_id)
        if task.is_terminal:
            raise UnsupportedOperation(
                f"Task {task.pk} is {task.state}: a terminal task has no updates to stream."
            )
    task, cursor = snapshot(task)
    return TaskFeed(
        identity=identity,
        dialect=dialect,
        request_id=request_id,
        task=task,
        cursor=cursor,
        history_length=history_length,
    )


async def jsonrpc_stream(
    scope: sse.Scope, receive: sse.Receive, send: sse.Send, payload: dict
) -> None:
    """A streaming JSON-RPC request, already read and decoded by the dispatcher."""
    from ..a2a.views import EnvelopeError, parse_request

    try:
        request_id, method, params = parse_request(payload)
    except EnvelopeError as exc:
        await sse.send_json(send, 200, exc.response)
        return

    async def opened() -> Feed:
        dialect = dialect_for(sse.header(scope, b"a2a-version"))
        identity = await run_db(
            partial(
                authenticate_agent,
                authorization=sse.header(scope, b"authorization"),
                agent_id=sse.header(scope, b"x-agent-id"),
            )
        )
        return await run_db(begin, identity, dialect, request_id, method, params, retry=False)

    feed = await open_or_answer(send, request_id, method, opened)
    if feed is not None:
        await serve(feed, receive, send, kind="a2a")


async def open_or_answer(
    send: sse.Send,
    request_id: Any,
    method: str,
    opened: Callable[[], Awaitable[Feed]],
    special: Callable[[Any, HikyakuError], tuple[int, dict] | None] = lambda *_: None,
) -> Feed | None:
    """Authenticate and open a streaming method's feed (`opened`); when that fails, answer
    in the JSON-RPC envelope instead of a stream — with the HTTP status of the error, or
    what `special` makes of it — and return None."""
    try:
        return await opened()
    except HikyakuError as exc:
        answer = special(request_id, exc)
        if answer is not None:
            await sse.send_json(send, *answer)
        elif isinstance(exc, Unauthenticated | RateLimited):
            body = errors.response(request_id, errors.from_domain(exc))
            await sse.send_json(send, exc.status, body, sse.error_headers(exc))
        else:
            await sse.send_json(send, 200, errors.response(request_id, errors.from_domain(exc)))
    except DataError as exc:
        # A value the database refuses is the request's fault (as in messaging/a2a/views.py).
        log.warning("database refused a value during %s: %s", method, exc)
        error = InvalidRequest(
            "A value in the request cannot be stored (too long or out of range)."
        )
        await sse.send_json(send, 200, errors.response(request_id, errors.from_domain(error)))
    except DatabaseError as exc:
        log.warning("%s: database unavailable (%s)", method, exc.__class__.__name__)
        body = errors.response(request_id, errors.from_domain(ServiceUnavailable()))
        await sse.send_json(send, 503, body)
    return None
