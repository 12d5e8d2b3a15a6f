"""The caller's view of a task on an agent's own endpoint (docs/PROTOCOL.md §8, docs/PEERS.md).

The broker keeps one task for both parties; a caller of `/a2a/agents/<id>/` sees it the way
A2A means it, in every answer, stream event and push notification:

- an unread task (INPUT_REQUIRED, awaiting the recipient) is SUBMITTED; INPUT_REQUIRED means
  the agent asked the caller something (awaiting the sender);
- the artifacts are the agent's results only (not the broker's compat copy of the caller's
  own message);
- the contextId is the one the caller's first message named, else the broker's (the agent's
  id).

Imports only the wire format and the models: push payloads render through it too.
"""

from __future__ import annotations

from typing import Any

from .. import lifecycle
from ..models import Task, TaskEvent, TaskState
from .wire import STATE_V1, Dialect, message_v03, task_v03, task_v1, update_results

SUBMITTED = "TASK_STATE_SUBMITTED"
Awaiting = Task.Awaiting


def context_id(task: Task) -> str:
    """The A2A contextId the caller sees: the one its first message named, else the
    broker's (the agent's id)."""
    return (task.message or {}).get("contextId") or task.context_id


def caller_state(state: str, awaiting: str) -> str:
    """A broker state as the caller sees it (A2A 1.0 name)."""
    if lifecycle.phase_of(state, awaiting) is lifecycle.UNREAD:
        return SUBMITTED
    return STATE_V1[state]


def render_task(
    task: Task, dialect: Dialect, *, history_length: int | None = None, **options: Any
) -> dict[str, Any]:
    body = task_v1(task, history_length=history_length, **options)
    body["status"]["state"] = caller_state(task.state, task.awaiting)
    # The broker's compat copy of the caller's own message is not a result of the agent.
    artifacts = [
        a for i, a in enumerate(body.pop("artifacts", [])) if i or a.get("name") != "message"
    ]
    if artifacts:
        body["artifacts"] = artifacts
    conversation = context_id(task)
    body["contextId"] = conversation
    for message in body.get("history", []):
        message["contextId"] = conversation
    status_message = body["status"].get("message")
    if status_message:
        body["status"]["message"] = {**status_message, "contextId": conversation}
    return body if dialect is Dialect.V1_0 else task_v03(body)


def message_reply(task: Task) -> dict[str, Any] | None:
    """The agent's answer as an A2A Message, when it completed the task with
    `metadata.replyAs = "message"` (a message-only reply)."""
    if task.state != TaskState.COMPLETED or not task.history:
        return None
    last = task.history[-1]
    if last.get("role") != "ROLE_AGENT" or (last.get("metadata") or {}).get("replyAs") != "message":
        return None
    return {**last, "taskId": str(task.id), "contextId": context_id(task)}


def render_message(message: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    return message if dialect is Dialect.V1_0 else message_v03(message)


# Updates ----------------------------------------------------------------------------------


def awaiting_after(row: TaskEvent, before: str) -> str:
    """Whom the task waits for after an event (messaging/lifecycle.py)."""
    return lifecycle.awaiting_after(row.kind, before)


def interrupts(row: TaskEvent) -> bool:
    """Whether an event leaves the task final or waiting for the caller: where an A2A
    stream ends."""
    return lifecycle.interrupts(row.kind, row.to_state)


def caller_updates(row: TaskEvent, task: Task, *, awaiting: str) -> list[dict[str, Any]]:
    """The A2A 1.0 StreamResponses for one event of the task in the caller's view; `awaiting`
    is whom the task waits for after the event (see `awaiting_after`)."""
    results = update_results(row, task)
    conversation = context_id(task)
    for result in results:
        body = result.get("statusUpdate") or result["artifactUpdate"]
        body["contextId"] = conversation
        status = body.get("status")
        if status is not None:
            status["state"] = caller_state(row.to_state or task.state, awaiting)
            if "message" in status:
                status["message"]["contextId"] = conversation
    return results


def push_payload(task: Task, event: TaskEvent, dialect: Dialect) -> dict[str, Any]:
    """A push notification for a config set on an agent's endpoint: the StreamResponse of
    the event in the caller's view (1.0), or the task itself (0.3, as 0.3 receivers expect).
    A comment keeps whom the task waits for: the event that last changed the state says
    (one query, for comments only)."""
    if dialect is Dialect.V0_3:
        return render_task(task, dialect)
    if event.kind == TaskEvent.Kind.CREATED:
        body = render_task(task, dialect)
        body.setdefault("metadata", {})["eventId"] = event.id
        return {"task": body}
    before = Awaiting.NOBODY
    if event.kind == TaskEvent.Kind.COMMENT:
        changed = (
            TaskEvent.objects.filter(task_id=task.pk, id__lt=event.id)
            .exclude(kind=TaskEvent.Kind.COMMENT)
            .order_by("-id")
            .first()
        )
        before = awaiting_after(changed, before) if changed else Awaiting.RECIPIENT
    return caller_updates(event, task, awaiting=awaiting_after(event, before))[-1]
