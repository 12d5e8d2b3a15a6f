"""Reads of tasks and events, always tenant first, always through policy."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Count, Q, QuerySet

from agents.selectors import decode_cursor, encode_cursor
from hikyaku.errors import InvalidRequest, TaskNotFound

from . import lifecycle, policy
from .models import Task, TaskEvent
from .parties import Sender, party_roles


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
    awaiting: str | None = None,
    context_id: str | None = None,
    status_after: datetime | None = None,
    page_size: int = 50,
    page_token: str = "",
) -> TaskPage:
    """The caller's inbox (tasks delivered to it) or outbox (tasks it sent), newest status
    change first, keyset-paged. Three queries per page whatever its size. `awaiting` narrows
    `states` to tasks waiting for that party; `context_id` keeps the tasks whose original
    message named that A2A contextId (the per-agent endpoints' conversations)."""
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
    if awaiting is not None:
        tasks = tasks.filter(awaiting=awaiting)
    if context_id is not None:
        tasks = tasks.filter(message__contextId=context_id)
    if status_after is not None:
        tasks = tasks.filter(status_at__gte=status_after)
    # Policy in SQL, so totalSize and paging never count or skip what the caller cannot see.
    tasks = tasks.filter(policy.readable_q(sender.agent))
    total = tasks.count()
    if page_token:
        stamp, last_id = decode_cursor(page_token, length=2)
        try:
            stamp_dt = datetime.fromisoformat(stamp).astimezone(UTC)
            last_pk = uuid.UUID(last_id)
        except (TypeError, ValueError, OverflowError):
            raise InvalidRequest("Invalid pageToken.", details={"field": "pageToken"}) from None
        tasks = tasks.filter(Q(status_at__lt=stamp_dt) | Q(status_at=stamp_dt, id__lt=last_pk))
    # Rendering a task needs only its own row: the parties' rows (three JSON columns each)
    # would be most of the page's decoding cost.
    page = list(tasks.order_by("-status_at", "-id")[: page_size + 1])
    token = ""
    if len(page) > page_size:
        page = page[:page_size]
        token = encode_cursor([page[-1].status_at.isoformat(), str(page[-1].id)])
    return TaskPage(tasks=page, next_page_token=token, total_size=total)


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


# Web UI reads -------------------------------------------------------------------------------
# People see every task of the agents of a tenant they belong to: agent policy (allow-lists,
# disclosure ceilings) governs what agents may read, not what the tenant's members may.


@dataclass(frozen=True)
class BoxPage:
    tasks: list[Task]
    next_cursor: str  # "" on the last page


def agent_box(
    *,
    tenant: Any,
    agent: Any,
    box: str,
    state: str = "",
    awaiting: str | None = None,
    q: str = "",
    cursor: str = "",
    page_size: int = 25,
) -> BoxPage:
    """One page of an agent's inbox (tasks delivered to it) or sent box (tasks it sent; a
    broadcast appears once, as its summary), newest status change first, keyset-paged.
    One query whatever the page size."""
    tasks = _box(tenant=tenant, agent=agent, box=box)
    if state:
        tasks = tasks.filter(state=state)
    if awaiting is not None:
        tasks = tasks.filter(awaiting=awaiting)
    if q:
        tasks = tasks.filter(search_text__icontains=q)
    if cursor:
        stamp, last_id = decode_cursor(cursor, length=2)
        try:
            stamp_dt, last_pk = datetime.fromisoformat(stamp), uuid.UUID(last_id)
        except (TypeError, ValueError):
            raise InvalidRequest("Invalid cursor.", details={"cursor": ["invalid"]}) from None
        tasks = tasks.filter(Q(status_at__lt=stamp_dt) | Q(status_at=stamp_dt, id__lt=last_pk))
    page = list(
        tasks.select_related("sender", "recipient").order_by("-status_at", "-id")[: page_size + 1]
    )
    next_cursor = ""
    if len(page) > page_size:
        page = page[:page_size]
        next_cursor = encode_cursor([page[-1].status_at.isoformat(), str(page[-1].id)])
    return BoxPage(tasks=page, next_cursor=next_cursor)


def agent_box_counts(*, tenant: Any, agent: Any, box: str) -> dict[str, int]:
    """How many tasks of the box are in each human state (messaging/lifecycle.py), in one query."""
    counts = {human.name: 0 for human in lifecycle.PHASES}
    rows = (
        _box(tenant=tenant, agent=agent, box=box)
        .values("state", "awaiting")
        .annotate(n=Count("id"))
    )
    for row in rows.order_by():
        counts[lifecycle.phase_of(row["state"], row["awaiting"]).name] += row["n"]
    return counts


def _box(*, tenant: Any, agent: Any, box: str) -> QuerySet[Task]:
    tasks = Task.objects.filter(tenant=tenant)
    if box == "sent":
        return tasks.filter(sender=agent).exclude(type=Task.Type.BROADCAST)
    return tasks.filter(recipient=agent)


def tenant_task(*, tenant: Any, task_id: Any) -> Task:
    """Any task of the tenant; malformed, unknown and other tenants' ids are TaskNotFound."""
    pk = _uuid_or_none(task_id)
    task = (
        Task.objects.select_related("sender", "recipient").filter(tenant=tenant, pk=pk).first()
        if pk
        else None
    )
    if task is None:
        raise TaskNotFound(f"Task not found: {task_id}")
    return task


@dataclass(frozen=True)
class ActingParty:
    """An agent of the tenant a person may act for on a task, and what it may do now."""

    agent: Any
    roles: frozenset[str]
    actions: list[lifecycle.Transition]


def acting_parties(*, tenant: Any, task: Task) -> list[ActingParty]:
    """The task's parties a person of the tenant may act for (`tenant_task` loaded their
    rows, so this costs no query): active agents the policy still lets see the task, with
    the actions the lifecycle leaves open to them now (none on a final task), the one whose
    turn it is first. The services decide when the person acts."""
    if task.type == Task.Type.BROADCAST_SUMMARY:
        return []
    phase = lifecycle.phase_of(task.state, task.awaiting)
    # Whose turn it is comes first: the sender's while it is asked a question.
    turn = (
        (task.sender, task.recipient)
        if phase is lifecycle.BLOCKED
        else (task.recipient, task.sender)
    )
    found = []
    for agent in dict.fromkeys(a for a in turn if a is not None):
        if agent.is_active and policy.may_read(agent, task):
            roles = party_roles(Sender(tenant=tenant, agent=agent), task)
            actions = lifecycle.open_to(phase, roles)
            found.append(ActingParty(agent=agent, roles=frozenset(roles), actions=actions))
    return found


def task_timeline(*, tenant: Any, task: Task) -> list[TaskEvent]:
    """Every event of the task, oldest first, with its acting agent."""
    return list(
        TaskEvent.objects.filter(tenant=tenant, task=task).select_related("actor").order_by("id")
    )


def broadcast_deliveries(*, tenant: Any, summary: Task) -> list[Task]:
    """The delivery tasks of a broadcast summary, by recipient name."""
    if summary.broadcast_id is None:
        return []
    return list(
        Task.objects.filter(tenant=tenant, broadcast_id=summary.broadcast_id)
        .exclude(pk=summary.pk)
        .select_related("recipient")
        .order_by("recipient__name", "id")
    )
