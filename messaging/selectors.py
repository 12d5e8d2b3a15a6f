"""Reads of tasks and events, always tenant first, always through policy."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Count, Q, QuerySet

from agents.auth import Unverified
from agents.models import Agent
from agents.selectors import decode_cursor, encode_cursor
from hikyaku import rows
from hikyaku.errors import InvalidRequest, TaskNotFound

from . import lifecycle, policy
from .models import Task, TaskEvent
from .parties import Sender, party_roles


def party_task(*, sender: Sender, task_id: Any) -> Task:
    """A task the caller sent or received (broadcast summaries: the sender only), with both
    parties' rows. One hand-written statement (hikyaku/rows.py), which also checks an
    identity recalled from the cache (`sender.check`): when it no longer holds, `Unverified`
    (authenticate afresh) — whether or not the task exists."""
    try:
        pk = uuid.UUID(str(task_id))
    except ValueError:
        pk = None
    task = None
    if pk is not None or sender.check is not None:
        check, check_params = sender.check or ("1 = 1", [])
        row = rows.one(
            _party_task_sql(check),
            [
                *check_params,
                rows.prep(Task, "id", pk) if pk is not None else None,
                rows.prep(Task, "tenant", sender.tenant.pk),
            ],
        )
        if not row[0]:
            raise Unverified
        task = _task_with_parties(row[1:])
    if task is None or not party_roles(sender, task) or not policy.may_read(sender.agent, task):
        raise TaskNotFound(f"Task not found: {task_id}")
    return task


# Every column of a task and of an agent: what the ORM loaded (with select_related), so
# rendering and policy see the same instances.
_TASK_FIELDS = tuple(f.name for f in Task._meta.concrete_fields)
_AGENT_FIELDS = tuple(f.name for f in Agent._meta.concrete_fields)
_PARTIES = (("sender", Agent, _AGENT_FIELDS), ("recipient", Agent, _AGENT_FIELDS))


@cache
def _party_task_sql(check: str) -> str:
    """The task (or a row of NULLs) with its sender's and recipient's rows, after `check`.
    Cached per check text: there are two (none, and a recalled identity's)."""
    return (
        f"SELECT ({check}), {rows.columns('t', Task, _TASK_FIELDS)},"
        f" {rows.columns('s', Agent, _AGENT_FIELDS)},"
        f" {rows.columns('r', Agent, _AGENT_FIELDS)}"
        " FROM (SELECT 1 AS one) o LEFT JOIN messaging_task t ON t.id = %s AND t.tenant_id = %s"
        " LEFT JOIN agents_agent s ON s.id = t.sender_id"
        " LEFT JOIN agents_agent r ON r.id = t.recipient_id"
    )


def _task_with_parties(values: tuple) -> Task | None:
    if values[0] is None:
        return None
    return rows.build_joined(Task, _TASK_FIELDS, values, _PARTIES)


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
    change first, keyset-paged. One statement per page whatever its size: the count, the page
    and, for an identity recalled from the cache (`sender.check`), whether it still holds —
    when it does not, `Unverified` (authenticate afresh). `awaiting` narrows `states` to tasks
    waiting for that party; `context_id` keeps the tasks whose original message named that
    A2A contextId (the per-agent endpoints' conversations).

    Hand-written (hikyaku/rows.py): through the ORM an empty inbox's queries cost ~2.5 ms of
    CPU to build and compile (docs/MEASUREMENTS.md, "ListTasks"). Policy is `policy.READ`
    rendered for this statement (`policy.sql`), so totalSize and paging never count or skip
    what the caller cannot see."""
    where, params = _list_where(
        sender,
        box=box,
        peer_id=peer_id,
        states=states,
        awaiting=awaiting,
        context_id=context_id,
        status_after=status_after,
    )
    keyset, keyset_params = "", []
    if page_token:
        stamp, last_id = decode_cursor(page_token, length=2)
        try:
            stamp_dt = datetime.fromisoformat(stamp).astimezone(UTC)
            last_pk = uuid.UUID(last_id)
        except (TypeError, ValueError, OverflowError):
            raise InvalidRequest("Invalid pageToken.", details={"field": "pageToken"}) from None
        at = rows.prep(Task, "status_at", stamp_dt)
        keyset = " AND (m.status_at < %s OR (m.status_at = %s AND m.id < %s))"
        keyset_params = [at, at, rows.prep(Task, "id", last_pk)]
    check, check_params = sender.check or ("1 = 1", [])
    sql = (
        f"SELECT n.total, ({check}) AS ok, pg.* FROM (SELECT COUNT(*) AS total FROM {_LIST_FROM}"
        f" WHERE {where}) n LEFT JOIN (SELECT {rows.columns('m', Task, _TASK_FIELDS)}"
        f" FROM {_LIST_FROM}"
        f" WHERE {where}{keyset} ORDER BY m.status_at DESC, m.id DESC LIMIT %s) pg ON 1 = 1"
        " ORDER BY pg.status_at DESC, pg.id DESC"
    )
    fetched = rows.many(sql, [*check_params, *params, *params, *keyset_params, page_size + 1])
    total, ok = fetched[0][0], fetched[0][1]
    if not ok:
        raise Unverified
    page = [rows.build(Task, _TASK_FIELDS, row[2:]) for row in fetched if row[2] is not None]
    token = ""
    if len(page) > page_size:
        page = page[:page_size]
        token = encode_cursor([page[-1].status_at.isoformat(), str(page[-1].id)])
    return TaskPage(tasks=page, next_page_token=token, total_size=total)


# The task and both parties' rows, which `policy.READ` may read (their allow-lists).
_LIST_FROM = (
    "messaging_task m LEFT JOIN agents_agent ps ON ps.id = m.sender_id"
    " LEFT JOIN agents_agent pr ON pr.id = m.recipient_id"
)


def _list_where(
    sender: Sender,
    *,
    box: str,
    peer_id: str | None,
    states: list[str] | None,
    awaiting: str | None,
    context_id: str | None,
    status_after: datetime | None,
) -> tuple[str, list[Any]]:
    """`list_tasks`'s condition on `m` (the task), `ps` and `pr` (its parties' rows)."""
    me = sender.agent
    me_id = rows.prep(Task, "recipient", me.pk) if me is not None else None
    terms, params = ["m.tenant_id = %s"], [rows.prep(Task, "tenant", sender.tenant.pk)]
    if box == "outbox":
        if me is not None:
            terms.append("m.sender_id = %s")
            params.append(me_id)
        else:
            terms.append("m.sender_id IS NULL AND m.caller_id = %s")
            params.append(sender.caller_id)
        if peer_id:
            peer = _uuid_or_none(peer_id)
            if peer is None:  # no agent has that id: the caller sent it nothing
                terms.append("1 = 0")
            else:
                terms.append("m.recipient_id = %s")
                params.append(rows.prep(Task, "recipient", peer))
    elif me is not None:
        terms.append("m.recipient_id = %s")
        params.append(me_id)
    else:  # only agents have an inbox
        terms.append("1 = 0")
    if states:
        terms.append(f"m.state IN ({', '.join(['%s'] * len(states))})")
        params += states
    if awaiting is not None:
        terms.append("m.awaiting = %s")
        params.append(awaiting)
    if context_id is not None:
        # As the ORM's message__contextId=… renders it on each database.
        if connection.vendor == "postgresql":
            terms.append("m.message -> 'contextId' = %s")
        else:
            terms.append("JSON_EXTRACT(m.message, '$.\"contextId\"') = JSON_EXTRACT(%s, '$')")
        params.append(rows.prep(Task, "message", context_id))
    if status_after is not None:
        terms.append("m.status_at >= %s")
        params.append(rows.prep(Task, "status_at", status_after))
    if me is not None:
        # READ for either role the agent holds on the task (a self-sent task is readable as
        # either), with the peer's allow-lists read from its row.
        sensitivity = policy.Column("m.sensitivity")
        either = []
        for own, parties in (
            ("m.recipient_id", {"sender": policy.Row("ps", key="m.sender_id"), "recipient": me}),
            ("m.sender_id", {"sender": me, "recipient": policy.Row("pr", key="m.recipient_id")}),
        ):
            readable, readable_params = policy.sql(
                policy.READ, **parties, reader=me, sensitivity=sensitivity
            )
            either.append(f"({own} = %s AND ({readable}))")
            params += [me_id, *readable_params]
        terms.append(f"({' OR '.join(either)})")
    return " AND ".join(terms), params


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
