"""Every write of the messaging core: sends, broadcasts and the task lifecycle (docs/PROTOCOL.md
§4, docs/ARCHITECTURE.md "One write path").

The services decide and a store writes (messaging/store). A send builds its rows and lets the
store insert them where the delivery policy (messaging/policy.py) lets it reach the recipient.
A lifecycle action reads the task, decides from the lifecycle table (messaging/lifecycle.py)
— refusal, or the change and its event — and asks the store to compare-and-set it; when
another change came first it reads again and decides again, so the loser of a race gets the
refusal that now applies.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone

from agents import selectors as agent_selectors
from agents.auth import Unverified
from agents.models import Sensitivity
from hikyaku import metrics, rows
from hikyaku.errors import DestinationNotFound, InvalidRequest, ServiceUnavailable, TaskNotFound

from . import events, lifecycle, messages, policy, store
from .lifecycle import EventKind, Transition
from .models import Task, TaskEvent
from .parties import Sender, actor_label, party_roles
from .store.base import Broadcast, Expected, party_ids, read_for_transition

# Sending -------------------------------------------------------------------------------------


def send_message(*, sender: Sender, message: dict[str, Any], to: str | None = None) -> Task:
    """SendMessage: unicast (`to` = agent id), broadcast (`to` = "*"), or — with no `to` and
    `message.taskId` — a lifecycle action on an existing task (`message.metadata.action`).

    `message` is an A2A 1.0 ProtoJSON Message already parsed by the wire layer. Returns the
    delivery task, the broadcast summary, or the task acted on."""
    messages.check_limits(message)
    metadata = message.get("metadata") or {}
    if to is None:
        to = metadata.get("destination")
    if to is None or to == "":
        if message.get("taskId"):
            action = metadata.get("action", lifecycle.DEFAULT_ACTION)
            return act_on_task(
                sender=sender, task_id=message["taskId"], action=action, message=message
            )
        raise InvalidRequest(
            "message.metadata.destination is required (an agent id, or '*' to broadcast), "
            "or message.taskId for a follow-up.",
            details={"field": "message.metadata.destination"},
        )
    if not isinstance(to, str):
        raise InvalidRequest(
            "message.metadata.destination must be a string.",
            details={"field": "message.metadata.destination"},
        )
    if message.get("taskId"):
        raise InvalidRequest(
            "A new message cannot name both a destination and a taskId.",
            details={"field": "message.taskId"},
        )
    to = agent_selectors.resolve_destination(tenant=sender.tenant, to=to)  # a name → its id
    if to == "*":
        return deliver_broadcast(sender=sender, message=message)
    return deliver_unicast(sender=sender, message=message, to=to)


def _verified(sender: Sender) -> None:
    """Refuse, before anything is written, a sender whose identity was recalled from the
    identity cache (`Sender.check`) on a write that does not check it in its own statement:
    the caller authenticates afresh and tries again (agents/auth.py)."""
    if sender.check is not None:
        raise Unverified


def _existing(sender: Sender, message_id: str | None) -> Task | None:
    if not message_id:
        return None
    tasks = Task.objects.filter(tenant=sender.tenant, message_id=message_id)
    if sender.agent is not None:
        existing = tasks.select_related("recipient").filter(sender=sender.agent).first()
    else:
        existing = tasks.filter(sender__isnull=True, caller_id=sender.caller_id).first()
    if existing is not None and existing.recipient_id is not None:
        # A retry after the policy closed the relationship gets what a new send would get.
        existing.sender = sender.agent
        if not policy.may_read(sender.agent, existing):
            raise DestinationNotFound(
                f"Destination agent not found: {existing.recipient_id}",
                details={"field": "message.metadata.destination"},
            )
    return existing


def _replay(existing: Task, digest: str) -> Task:
    if existing.content_hash != digest:
        raise InvalidRequest(
            "messageId was already used for a different message.",
            details={"field": "message.messageId"},
        )
    return existing


def _thread(sender: Sender, message: dict[str, Any]) -> tuple[Task | None, uuid.UUID | None, int]:
    refs = message.get("referenceTaskIds") or []
    if not refs:
        return None, None, 0
    parent = _party_task(sender, refs[0])
    depth = parent.depth + 1
    if depth > settings.HIKYAKU_MAX_THREAD_DEPTH:
        raise InvalidRequest(
            f"Thread depth limit reached ({settings.HIKYAKU_MAX_THREAD_DEPTH}).",
            details={"field": "message.referenceTaskIds"},
        )
    return parent, parent.thread_root_id or parent.id, depth


def deliver_unicast(
    *, sender: Sender, message: dict[str, Any], to: str, idempotent: bool = True
) -> Task:
    """One task in `to`'s inbox. With `idempotent` (the broker endpoint) the messageId is the
    sender's idempotency key; the per-agent A2A endpoints pass False because A2A does not
    make messageId one (the A2A TCK reuses ids for distinct sends), so every send is new."""
    message_id = message.get("messageId")
    digest = messages.content_hash(message, to)
    sensitivity = messages.sensitivity_of(message)
    recipient_id = _agent_pk(to)
    try:
        if recipient_id is None:
            raise _destination_not_found(to)
        parent, root, depth = _thread(sender, message)
        now = timezone.now()
        parts = message["parts"]
        task = _new_task(
            sender,
            message,
            now,
            recipient_id=recipient_id,
            context_id=str(recipient_id),
            type=Task.Type.UNICAST,
            artifacts=[lifecycle.artifact("message", parts)],
            metadata=messages.task_metadata(
                sender,
                recipient_id,
                Task.Type.UNICAST,
                parentTaskId=str(parent.id) if parent else None,
                threadId=str(root) if root else None,
                sensitivity=sensitivity if sensitivity != Sensitivity.INTERNAL else None,
            ),
            sensitivity=sensitivity,
            parent=parent,
            thread_root_id=root,
            depth=depth,
            message_id=message_id if idempotent else None,
            content_hash=digest,
        )
        event = event_row(task, sender, EventKind.CREATED, "", {"messageId": message_id})
        if not store.current().insert_unicast(task, event, sender=sender.agent, check=sender.check):
            if sender.check is not None:
                raise Unverified  # the recalled identity, not the destination, may be wrong
            raise _destination_not_found(to)
        metrics.events_written(1)
        events.ring_after_commit(
            agent_ids=[recipient_id], event_id=event.id, tenant_id=task.tenant_id
        )
    except (IntegrityError, DestinationNotFound):
        # The messageId was used before (a retry): the unique constraint finds it, so the
        # common path pays no extra query for idempotency. A retry whose recipient has left
        # since still gets the original delivery back.
        existing = _existing(sender, message_id) if idempotent else None
        if existing is None:
            raise
        return _replay(existing, digest)
    metrics.sent("unicast", 1)
    return task


def _new_task(sender: Sender, message: dict[str, Any], now, **fields: Any) -> Task:
    """A task as the sender creates it: in the lifecycle's first phase (a broadcast summary
    says otherwise)."""
    defaults = {
        "tenant": sender.tenant,
        "sender": sender.agent,
        "caller_id": sender.caller_id,
        "state": lifecycle.CREATED_PHASE.state,
        "awaiting": lifecycle.CREATED_PHASE.awaiting,
        "message": message,
        "history": [message],
        "search_text": messages.search_text(message["parts"]),
        "created_at": now,
        "updated_at": now,
        "status_at": now,
    }
    return rows.new(Task, **{**defaults, **fields})


def _agent_pk(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        return None


def _destination_not_found(to: str) -> DestinationNotFound:
    return DestinationNotFound(
        f"Destination agent not found: {to}", details={"field": "message.metadata.destination"}
    )


def deliver_broadcast(*, sender: Sender, message: dict[str, Any]) -> Task:
    """One task per other active agent of the tenant that policy lets us reach, and a summary
    task (COMPLETED) for the sender, in one transaction."""
    message_id = message.get("messageId")
    digest = messages.content_hash(message, "*")
    sensitivity = messages.sensitivity_of(message)
    broadcast_id = uuid.uuid4()
    now = timezone.now()
    delivery = _new_task(
        sender,
        message,
        now,
        type=Task.Type.BROADCAST,
        broadcast_id=broadcast_id,
        metadata=messages.task_metadata(
            sender, None, Task.Type.BROADCAST, broadcastId=str(broadcast_id)
        ),
        sensitivity=sensitivity,
    )
    summary = _new_task(
        sender,
        message,
        now,
        recipient=None,
        context_id=str(sender.agent.id) if sender.agent else sender.caller_id,
        type=Task.Type.BROADCAST_SUMMARY,
        state=lifecycle.SUMMARY_PHASE.state,
        awaiting=lifecycle.SUMMARY_PHASE.awaiting,
        broadcast_id=broadcast_id,
        artifacts=[lifecycle.artifact("deliveries", [])],
        metadata=messages.task_metadata(
            sender, None, Task.Type.BROADCAST_SUMMARY, broadcastId=str(broadcast_id)
        ),
        sensitivity=sensitivity,
        message_id=message_id,
        content_hash=digest,
    )
    broadcast = Broadcast(
        summary=summary,
        delivery=delivery,
        summary_event=event_row(summary, sender, EventKind.CREATED, "", {"messageId": message_id}),
        delivery_event=event_row(delivery, sender, EventKind.CREATED, "", {}),
    )
    try:
        result = store.current().insert_broadcast(
            broadcast, sender=sender.agent, check=sender.check
        )
    except IntegrityError:
        existing = _existing(sender, message_id)
        if existing is None:
            raise
        return _replay(existing, digest)
    if result is None:
        raise Unverified  # the recalled identity no longer holds: nothing was written
    metrics.events_written(len(result.recipient_ids) + 1)
    if result.recipient_ids:
        events.ring_after_commit(
            agent_ids=result.recipient_ids,
            event_id=result.last_event_id,
            tenant_id=sender.tenant.pk,
        )
    metrics.sent("broadcast", len(result.recipient_ids))
    return result.summary


# The lifecycle ----------------------------------------------------------------------------


def act_on_task(*, sender: Sender, task_id: str, action: str, message: dict[str, Any]) -> Task:
    """A lifecycle action (docs/PROTOCOL.md §4.4) by a party of the task, as a compare-and-set."""
    transition = lifecycle.TRANSITIONS.get(action) if isinstance(action, str) else None
    if transition is None or not transition.carries_message:
        raise InvalidRequest(
            f"Unknown action {action!r}; expected one of: {', '.join(lifecycle.ACTIONS)}.",
            details={"field": "message.metadata.action"},
        )
    task = _transition(sender, task_id, transition, message)
    metrics.transition(action)
    return task


def cancel_task(*, sender: Sender, task_id: str, while_live: bool = False) -> Task:
    """CancelTask: the sender withdraws a task the recipient has not read yet (compat).

    With `while_live` (the per-agent A2A endpoints, where the caller owns the task the way
    A2A means it) the sender may cancel any non-terminal task: unread, working, or waiting
    for the sender's reply; the recipient sees the `cancel` event on its stream."""
    transition = (
        lifecycle.CANCEL_WHILE_LIVE if while_live else lifecycle.TRANSITIONS[EventKind.CANCEL]
    )
    task = _transition(sender, task_id, transition, None)
    metrics.transition(EventKind.CANCEL)
    return task


def _transition(
    sender: Sender, task_id: Any, transition: Transition, message: dict[str, Any] | None
) -> Task:
    """The action in the store's one statement where it has one; otherwise (or when that
    matched nothing) read, decide, compare-and-set, and again when another change won (a
    bounded number of times: a task cannot change faster than its parties act on it)."""
    writer = store.current()
    pk = _task_pk(task_id)
    taken = (
        writer.take(transition, actor=sender, task_id=pk, message=message, now=timezone.now())
        if pk is not None
        else None
    )
    if taken is not None:
        task, event_id = taken
        metrics.events_written(1)
        events.ring_after_commit(
            agent_ids=party_ids(task), event_id=event_id, tenant_id=task.tenant_id
        )
        return task
    for _attempt in range(5):
        task, roles = _read_party_task(sender, task_id)
        phase = lifecycle.phase_of(task.state, task.awaiting)
        refusal = transition.refusal(phase, roles, task.id)
        if refusal is not None:
            if message is not None and _already_applied(task, sender, message):
                _verified(sender)  # an answer that writes nothing checks nothing
                return task  # a retry of an action applied before: the task as it is now
            raise refusal
        expected = Expected.of(task)
        change = lifecycle.apply(
            transition, task=task, roles=roles, message=message, now=timezone.now()
        )
        for column in lifecycle.Change.COLUMNS:
            setattr(task, column, getattr(change, column))
        event = event_row(task, sender, transition.action, change.from_state, change.payload)
        if writer.compare_and_set(task, expected, event, check=sender.check):
            metrics.events_written(1)
            events.ring_after_commit(
                agent_ids=party_ids(task), event_id=event.id, tenant_id=task.tenant_id
            )
            return task
        # Another change won, or a recalled identity no longer holds: which one, only a
        # fresh authentication says (the request runs again after it).
        _verified(sender)
    raise ServiceUnavailable("The task is changing too fast; retry shortly.")


def _read_party_task(sender: Sender, task_id: Any) -> tuple[Task, set[str]]:
    """The task with its parties' rows, and the caller's roles on it; anything the caller
    may not see is TaskNotFound, exactly like an unknown id."""
    pk = _task_pk(task_id)
    task = read_for_transition(tenant_id=sender.tenant.pk, task_id=pk) if pk else None
    roles = party_roles(sender, task) if task is not None else set()
    if task is None or not roles or not policy.may_read(sender.agent, task):
        raise TaskNotFound(f"Task not found: {task_id}")
    return task, roles


def _task_pk(task_id: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(task_id))
    except ValueError:
        return None


def _party_task(sender: Sender, task_id: Any) -> Task:
    """A task the sender is a party of (for referenceTaskIds); otherwise not found."""
    pk = _task_pk(task_id)
    task = Task.objects.filter(tenant=sender.tenant, pk=pk).first() if pk else None
    if task is None or not party_roles(sender, task) or not policy.may_read(sender.agent, task):
        raise InvalidRequest(
            f"Referenced task not found: {task_id}", details={"field": "message.referenceTaskIds"}
        )
    return task


def _already_applied(task: Task, sender: Sender, message: dict[str, Any]) -> bool:
    """Whether this follow-up (same messageId, same actor) was applied before: a client that
    retries after losing the response gets the current task, not an error. Only consulted
    when the action is refused, so the success path pays nothing for it."""
    message_id = message.get("messageId")
    if not message_id:
        return False
    return (
        TaskEvent.objects.filter(task=task, actor=sender.agent, actor_label=actor_label(sender))
        .filter(payload__messageId=message_id)
        .exclude(kind=EventKind.CREATED)
        .exists()
    )


def event_row(task: Task, sender: Sender, kind: str, from_state: str, payload: dict) -> TaskEvent:
    """The event of `kind` that leaves `task` as it now is: the one definition of an event row,
    which every write of the lifecycle appends (docs/ARCHITECTURE.md, "One write path")."""
    return rows.new(
        TaskEvent,
        tenant_id=task.tenant_id,
        task=task,
        sender_agent_id=task.sender_id,
        recipient_agent_id=task.recipient_id,
        actor=sender.agent,
        actor_label=actor_label(sender),
        kind=kind,
        from_state=from_state,
        to_state=task.state,
        payload={k: v for k, v in payload.items() if v not in (None, [], {})},
        created_at=task.updated_at,
    )
