"""What a stream carries: synchronous readers of the event table, one per kind of stream.

A feed keeps the stream's cursor and turns the events after it into SSE frames. Its methods
run on a stream DB thread (messaging.stream.db) — or, in a WSGI process, in the request
thread — and read only the database: the hub decides *when* to read, the feed *what*.

- `InboxFeed` — `GET /api/v1/subscribe`: `message` for a task delivered to the agent,
  `task-update` for any other event of a task it sent or received (docs/PROTOCOL.md §6).
- `TenantFeed` — the web UI's session stream: every event of a tenant, or of one agent.
- `TaskFeed` (messaging.stream.a2a) — A2A SendStreamingMessage / SubscribeToTask.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Max, Q

from agents.auth import AgentIdentity, identity_is_current
from agents.models import Agent
from hikyaku import rows as sql_rows
from tenants.models import Tenant

from .. import policy
from ..a2a.wire import Dialect, render_task, task_v1
from ..models import Task, TaskEvent
from . import sse

PAGE = 500  # events read per query; a full page is followed by another read at once
Kind = TaskEvent.Kind


@dataclass
class Batch:
    frames: list[bytes] = field(default_factory=list)
    closed: str | None = None  # set: write the frames, then end the stream for this reason
    more: bool = False  # a full page was read: read again without waiting


class Feed:
    """The interface the stream drivers (messaging.stream.serve) use."""

    keys: tuple[str, ...] = ()  # what the hub wakes this feed for
    exact: bool = True  # whether event ids for our keys commit in order (see hub)
    identity: AgentIdentity | None = None  # re-validated in batches by the hub
    check_seconds: float | None = None  # re-validate itself this often (web sessions)
    # (agent id, needs public) of the agent whose own endpoint serves the stream: the hub
    # closes it ("callee") once that agent is gone, or unpublished for outside callers.
    callee: tuple[uuid.UUID, bool] | None = None
    cursor = 0

    def open(self) -> Batch:
        """Called once the stream is registered with the hub: the first frames."""
        raise NotImplementedError

    def fetch(self) -> Batch:
        """Whatever happened after the cursor."""
        raise NotImplementedError

    def check(self) -> str | None:
        """A reason to close the stream, or None while it may go on."""
        return None

    def closing_frames(self, reason: str) -> list[bytes]:
        return []


CLOSE_MESSAGES = {
    "credentials": "The credentials of this stream were revoked, expired or rotated, or its "
    "agent is no longer active.",
    "session": "The web session ended or lost access to this tenant.",
    "shutdown": "The server is restarting; reconnect with Last-Event-ID.",
    "slow": "The client did not read the stream in time; reconnect with Last-Event-ID.",
}


def closed_frame(reason: str) -> bytes:
    code = "UNAUTHORIZED" if reason in ("credentials", "session") else "UNAVAILABLE"
    return sse.event(
        {"code": code, "reason": reason, "message": CLOSE_MESSAGES.get(reason, reason)},
        name="closed",
    )


def parse_event_id(value: str | None, field_name: str) -> int | None:
    from hikyaku.errors import InvalidRequest

    if value is None or value.strip() == "":
        return None
    try:
        number = int(value.strip())
    except ValueError:
        raise InvalidRequest(
            f"{field_name} must be an event id (an integer).", details={"field": field_name}
        ) from None
    if number < 0:
        raise InvalidRequest(f"{field_name} must not be negative.", details={"field": field_name})
    return number


class InboxFeed(Feed):
    """One agent's inbox stream. Because every transaction writing an event for an agent holds
    that agent's row lock, its events commit in id order and `id > cursor` never skips one."""

    def __init__(self, identity: AgentIdentity, dialect: Dialect, since: int | None) -> None:
        self.identity = identity
        self.dialect = dialect
        self.agent_id = identity.agent.pk
        self.tenant_id = identity.tenant.pk
        self.keys = (str(self.agent_id),)
        self.since = since

    def _events(self):
        mine = Q(recipient_agent_id=self.agent_id) | (
            Q(sender_agent_id=self.agent_id) & ~Q(kind=Kind.CREATED)
        )
        return TaskEvent.objects.filter(mine, tenant_id=self.tenant_id)

    def open(self) -> Batch:
        if self.since is None:
            self.cursor = self._events().aggregate(last=Max("id"))["last"] or 0
        else:
            self.cursor = self.since
        ready = sse.event(
            {"agent_id": str(self.agent_id), "last_event_id": self.cursor},
            name="ready",
            event_id=self.cursor,
        )
        # `retry` asks EventSource clients to reconnect after 1 s rather than their default.
        # The first page of the replay comes in the same call: one trip to a DB thread less
        # per connection, which matters when a thousand clients reconnect at once.
        replay = self.fetch()
        return Batch([b"retry: 1000\n\n", ready, *replay.frames], replay.closed, replay.more)

    def fetch(self) -> Batch:
        rows = _inbox_rows(self.tenant_id, self.agent_id, self.cursor)
        if not rows:
            return Batch()  # nothing to deliver; the hub re-checks credentials every 2 s
        # Nothing is sent on credentials that no longer hold, however recent the last check.
        if not identity_is_current(self.identity):
            return Batch(closed="credentials")
        frames = []
        rendered: dict[uuid.UUID, str] = {}
        for event_id, is_delivery, task in rows:
            self.cursor = event_id
            me = task.recipient if task.recipient_id == self.agent_id else task.sender
            if me is None or not policy.may_read(me, task):
                continue
            if task.pk not in rendered:
                rendered[task.pk] = sse.dumps(render_task(task, self.dialect))
            frames.append(
                sse.event(
                    rendered[task.pk],
                    name="message" if is_delivery else "task-update",
                    event_id=event_id,
                )
            )
        return Batch(frames, more=len(rows) == PAGE)

    def closing_frames(self, reason: str) -> list[bytes]:
        return [closed_frame(reason)]


# The inbox read is the hottest query of a stream process (one per woken stream with news), so
# it is one hand-written statement (hikyaku/rows.py) instead of a select_related queryset:
# compiling that cost ~1.4 ms of CPU per read here, several times the statement itself. Column
# names, parameter adapters and value converters still come from the models.
def _in_model_order(model: type, names: set[str]) -> tuple[str, ...]:
    """Field names in the model's concrete order: Model.from_db (under hikyaku.rows.build)
    matches values to fields by that order, whatever order the names are given in."""
    return tuple(f.name for f in model._meta.concrete_fields if f.name in names)


# What rendering (messaging.a2a.wire.task_v1) and policy (messaging.policy) read.
_TASK_FIELDS = _in_model_order(
    Task,
    {
        "id",
        "sender",
        "recipient",
        "context_id",
        "state",
        "awaiting",
        "status_at",
        "artifacts",
        "history",
        "metadata",
        "sensitivity",
    },
)
_AGENT_FIELDS = _in_model_order(
    Agent, {"id", "tenant", "status", "send_to", "receive_from", "disclosure_ceiling"}
)


def _columns(alias: str, model: type, fields: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(model._meta.get_field(f).column)}" for f in fields)


@cache
def _inbox_statement(vendor: str) -> str:
    quote = connection.ops.quote_name
    event = {f: quote(TaskEvent._meta.get_field(f).column) for f in ("tenant", "task", "kind")}
    agents = quote(Agent._meta.db_table)
    task_pk = quote(Task._meta.pk.column)
    agent_pk = quote(Agent._meta.pk.column)
    return (
        f"SELECT e.id, CASE WHEN e.{event['kind']} = %s AND e.recipient_agent_id = %s "
        f"THEN 1 ELSE 0 END, {_columns('t', Task, _TASK_FIELDS)}, "
        f"{_columns('s', Agent, _AGENT_FIELDS)}, {_columns('r', Agent, _AGENT_FIELDS)} "
        f"FROM {quote(TaskEvent._meta.db_table)} e "
        f"JOIN {quote(Task._meta.db_table)} t ON t.{task_pk} = e.{event['task']} "
        f"LEFT JOIN {agents} s ON s.{agent_pk} = t.{quote(Task._meta.get_field('sender').column)} "
        f"LEFT JOIN {agents} r ON r.{agent_pk} = t."
        f"{quote(Task._meta.get_field('recipient').column)} "
        f"WHERE e.{event['tenant']} = %s AND e.id > %s AND (e.recipient_agent_id = %s "
        f"OR (e.sender_agent_id = %s AND e.{event['kind']} <> %s)) "
        f"ORDER BY e.id LIMIT {PAGE}"
    )


def _inbox_rows(tenant_id: Any, agent_id: Any, after: int) -> list[tuple[int, bool, Task]]:
    """(event id, is a `message`, the task with fresh `sender`/`recipient` rows) for each of
    the agent's events after `after`, in id order."""
    me = sql_rows.prep(TaskEvent, "recipient_agent_id", agent_id)
    params = [
        Kind.CREATED,
        me,
        sql_rows.prep(TaskEvent, "tenant", tenant_id),
        after,
        me,
        me,
        Kind.CREATED,
    ]
    with connection.cursor() as cursor:
        cursor.execute(_inbox_statement(connection.vendor), params)
        fetched = cursor.fetchall()
    n_task, n_agent = len(_TASK_FIELDS), len(_AGENT_FIELDS)
    out = []
    for row in fetched:
        task = sql_rows.build(Task, _TASK_FIELDS, row[2 : 2 + n_task])
        sender = row[2 + n_task : 2 + n_task + n_agent]
        recipient = row[2 + n_task + n_agent :]
        task.sender = sql_rows.build(Agent, _AGENT_FIELDS, sender) if sender[0] else None
        task.recipient = sql_rows.build(Agent, _AGENT_FIELDS, recipient) if recipient[0] else None
        out.append((row[0], bool(row[1]), task))
    return out


def web_event(row: TaskEvent, task: Task) -> dict[str, Any]:
    """The data of a web UI stream event (documented in docs/ARCHITECTURE.md)."""
    return {
        "eventId": row.id,
        "kind": row.kind,
        "taskId": str(row.task_id),
        "senderAgentId": str(row.sender_agent_id) if row.sender_agent_id else None,
        "recipientAgentId": str(row.recipient_agent_id) if row.recipient_agent_id else None,
        "actor": row.actor.name if row.actor_id and row.actor else row.actor_label,
        "fromState": row.from_state,
        "toState": row.to_state,
        "at": row.created_at.isoformat().replace("+00:00", "Z"),
        "task": task_v1(task),
    }


class TenantFeed(Feed):
    """A signed-in member's view of a tenant (the web UI), optionally narrowed to one agent.

    With an agent, the events are exactly those of the agent's tasks, in order (as for the
    inbox). Tenant-wide, events of different agents may commit out of id order, so besides
    reading after its cursor the feed re-reads the ids of the last LOOKBACK_SECONDS every
    few seconds and sends those it had not seen: such an event arrives late and out of id
    order, but never twice on one connection."""

    LOOKBACK_SECONDS = 10.0
    SWEEP_SECONDS = 2.0

    def __init__(
        self,
        *,
        tenant: Tenant,
        agent_id: uuid.UUID | None,
        since: int | None,
        validate: Any,
        check_seconds: float,
    ) -> None:
        self.tenant = tenant
        self.agent_id = agent_id
        self.since = since
        self.exact = agent_id is not None
        self.keys = (str(agent_id),) if agent_id else (f"tenant:{tenant.pk}",)
        self._validate = validate  # () -> reason | None, re-checks session and membership
        self.check_seconds = check_seconds
        self._sent: set[int] = set()  # tenant-wide: ids sent within the lookback window
        self._marks: deque[tuple[float, int]] = deque()  # (time, cursor) over the window
        self._last_sweep = time.monotonic()

    def _events(self):
        events = TaskEvent.objects.filter(tenant_id=self.tenant.pk)
        if self.agent_id:
            events = events.filter(
                Q(recipient_agent_id=self.agent_id) | Q(sender_agent_id=self.agent_id)
            )
        return events

    def open(self) -> Batch:
        if self.since is None:
            self.cursor = self._events().aggregate(last=Max("id"))["last"] or 0
        else:
            self.cursor = self.since
        self._marks.append((time.monotonic(), self.cursor))
        ready = sse.event(
            {
                "tenant": self.tenant.slug,
                "agentId": str(self.agent_id) if self.agent_id else None,
                "lastEventId": self.cursor,
            },
            name="ready",
            event_id=self.cursor,
        )
        replay = self.fetch()
        return Batch([b"retry: 2000\n\n", ready, *replay.frames], replay.closed, replay.more)

    def _late_rows(self) -> list[TaskEvent]:
        """Tenant-wide only: events that committed after later ids had been read."""
        now = time.monotonic()
        if self.exact or now - self._last_sweep < self.SWEEP_SECONDS:
            return []
        self._last_sweep = now
        while len(self._marks) > 1 and self._marks[1][0] <= now - self.LOOKBACK_SECONDS:
            self._marks.popleft()
        low = self._marks[0][1]
        self._sent = {i for i in self._sent if i > low}
        ids = set(
            self._events().filter(id__gt=low, id__lte=self.cursor).values_list("id", flat=True)
        )
        missing = ids - self._sent
        if not missing:
            return []
        return list(
            self._events().filter(id__in=missing).select_related("task", "actor").order_by("id")
        )

    def fetch(self) -> Batch:
        rows = self._late_rows()
        fresh = list(
            self._events()
            .filter(id__gt=self.cursor)
            .select_related("task", "actor")
            .order_by("id")[:PAGE]
        )
        frames = []
        for row in [*rows, *fresh]:
            self.cursor = max(self.cursor, row.id)
            if not self.exact:
                self._sent.add(row.id)
            name = "message" if row.kind == Kind.CREATED else "task-update"
            frames.append(sse.event(web_event(row, row.task), name=name, event_id=row.id))
        if not self.exact:
            self._marks.append((time.monotonic(), self.cursor))
        return Batch(frames, more=len(fresh) == PAGE)

    def check(self) -> str | None:
        return self._validate()

    def closing_frames(self, reason: str) -> list[bytes]:
        return [closed_frame(reason)]
