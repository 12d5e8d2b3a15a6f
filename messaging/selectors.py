"""Reads of tasks and events, always tenant first, always through policy."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Q, QuerySet

from agents.selectors import decode_cursor, encode_cursor
from hikyaku.errors import InvalidRequest, TaskNotFound

from . import policy
from .models import Task, TaskEvent
from .services import Sender, party_roles


def party_task(*, sender: Sender, task_id: Any) -> Task:
    """A task the caller sent or received (broadcast summaries: the sender only)."""
    try:
        pk = uuid.UUID(str(task_id))
    except ValueError:
        pk = None
    task = (
        Task.objects.select_related("sender", "recipient")
        .filter(tenant=sender.tenant, pk=pk)
        .first()
        if pk
        else None
    )
    if task is None or not party_roles(sender, task) or not policy.may_read(sender.agent, task):
        raise TaskNotFound(f"Task not found: {task_id}")
    return task


@dataclass(frozen=True)
class TaskPage:
    tasks: list[Task]
    next_page_token: str
    total_size: int


def list_tasks(
    *,
    sender: Sender,
    box: str = "inbox",
    peer_id: str | None = None,
    states: list[str] | None = None,
    status_after: datetime | None = None,
    page_size: int = 50,
    page_token: str = "",
) -> TaskPage:
    """The caller's inbox (tasks delivered to it) or outbox (tasks it sent), newest status
    change first, keyset-paged. Two queries per page whatever its size."""
    tasks: QuerySet[Task] = Task.objects.filter(tenant=sender.tenant)
    if box == "outbox":
        tasks = (
            tasks.filter(sender=sender.agent)
            if sender.agent
            else tasks.filter(sender__isnull=True, caller_id=sender.caller_id)
        )
        if peer_id:
            tasks = tasks.filter(recipient_id=_uuid_or_none(peer_id))
    else:
        tasks = tasks.filter(recipient=sender.agent)
    if states:
        tasks = tasks.filter(state__in=states)
    if status_after is not None:
        tasks = tasks.filter(status_at__gte=status_after)
    tasks = _visible(tasks, sender)
    total = tasks.count()
    if page_token:
        stamp, last_id = decode_cursor(page_token, length=2)
        try:
            stamp_dt = datetime.fromisoformat(stamp).astimezone(UTC)
            last_pk = uuid.UUID(last_id)
        except (TypeError, ValueError, OverflowError):
            raise InvalidRequest("Invalid pageToken.", details={"field": "pageToken"}) from None
        tasks = tasks.filter(Q(status_at__lt=stamp_dt) | Q(status_at=stamp_dt, id__lt=last_pk))
    page = list(
        tasks.select_related("sender", "recipient").order_by("-status_at", "-id")[: page_size + 1]
    )
    page = [t for t in page if policy.may_read(sender.agent, t)]
    token = ""
    if len(page) > page_size:
        page = page[:page_size]
        token = encode_cursor([page[-1].status_at.isoformat(), str(page[-1].id)])
    return TaskPage(tasks=page, next_page_token=token, total_size=total)


def _visible(tasks: QuerySet[Task], sender: Sender) -> QuerySet[Task]:
    """Filters the cheap, common part of policy in SQL (the disclosure ceiling)."""
    from agents.models import SENSITIVITY_RANK

    if sender.agent is None:
        return tasks
    ceiling = SENSITIVITY_RANK.get(sender.agent.disclosure_ceiling, 1)
    allowed = [level for level, rank in SENSITIVITY_RANK.items() if rank <= ceiling]
    return tasks.filter(sensitivity__in=allowed)


def _uuid_or_none(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def task_events(
    *, sender: Sender, task_id: Any, limit: int = 100, cursor: str | None = None
) -> tuple[Task, list[TaskEvent], str | None]:
    """A task's timeline in order, for its parties, keyset-paged by event id."""
    task = party_task(sender=sender, task_id=task_id)
    events = TaskEvent.objects.filter(tenant=sender.tenant, task=task).select_related("actor")
    if cursor:
        (after,) = decode_cursor(cursor, length=1)
        if not isinstance(after, int):
            raise InvalidRequest("Invalid cursor.", details={"cursor": ["invalid"]})
        events = events.filter(id__gt=after)
    page = list(events.order_by("id")[: limit + 1])
    next_cursor = None
    if len(page) > limit:
        page = page[:limit]
        next_cursor = encode_cursor([page[-1].id])
    return task, page, next_cursor
