"""What a stream carries: synchronous readers of the event table, one per kind of stream.

A feed keeps the stream's cursor and turns the events after it into SSE frames. Its methods
run on a stream DB thread (messaging.stream.db) and read only the database: the hub decides
*when* to read, the feed *what*.

- `InboxFeed` — `GET /api/v1/subscribe`: `message` for a task delivered to the agent,
  `task-update` for any other event of a task it sent or received (docs/PROTOCOL.md §6).
- `TenantFeed` — the web UI's session stream: every event of a tenant, or of one agent.
- `TaskFeed` (messaging.stream.a2a) — A2A SendStreamingMessage / SubscribeToTask.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from django.db.models import Max, Q

from agents.auth import AgentIdentity
from tenants.models import Tenant

from ..a2a.wire import Dialect, task_v1
from ..models import Task, TaskEvent
from ..parties import person_of
from . import snapshot, sse
from .batch import Batch
from .reads import PAGE, read_inboxes, read_inboxes_on_loop

Kind = TaskEvent.Kind


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
    # `fetch` for many feeds of this kind in one go (feeds -> their batches, in order), which
    # the hub awaits on the event loop for the feeds woken together; None: each feed fetches
    # on its own, on a DB thread.
    read_many: Callable[[list[Any]], Awaitable[list[Batch]]] | None = None

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


MAX_EVENT_ID = 2**63 - 1  # event ids are bigints


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
    if number > MAX_EVENT_ID:
        # Beyond a bigint no event can ever follow it, and the databases refuse the value
        # (SQLite raises OverflowError) instead of answering "nothing yet".
        raise InvalidRequest(
            f"{field_name} must be at most {MAX_EVENT_ID}.", details={"field": field_name}
        )
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

    read_many = staticmethod(read_inboxes_on_loop)

    def fetch(self) -> Batch:
        """What happened after the cursor (the hub reads the streams woken together at once:
        `read_many`)."""
        return read_inboxes([self])[0]

    def closing_frames(self, reason: str) -> list[bytes]:
        return [closed_frame(reason)]


def _moments(rows: list[TaskEvent]) -> dict[int, Task]:
    """Each event's task as of that event (messaging/stream/snapshot.py), by event id, for
    the events that are not their task's latest; one query for the page. The events were
    read with their tasks in one statement, so an event that is the latest one committed
    when the timelines are read was the latest when its task was read."""
    if not rows:
        return {}
    steps = snapshot.timelines({r.task_id for r in rows})
    moments = {}
    for row in rows:
        timeline = steps.get(row.task_id, [])
        if timeline and timeline[-1].id == row.id:
            continue  # the task as read is this event's moment
        upto = snapshot.up_to(timeline, row.id)
        if upto is not None:
            moments[row.id] = snapshot.as_of(row.task, upto)
    return moments


def web_event(row: TaskEvent, task: Task) -> dict[str, Any]:
    """The data of a web UI stream event (documented in docs/ARCHITECTURE.md); `task` as of
    the event."""
    return {
        "eventId": row.id,
        "kind": row.kind,
        "taskId": str(row.task_id),
        "senderAgentId": str(row.sender_agent_id) if row.sender_agent_id else None,
        "recipientAgentId": str(row.recipient_agent_id) if row.recipient_agent_id else None,
        "actor": row.actor.name if row.actor_id and row.actor else row.actor_label,
        "person": person_of(row.actor_label) or None,
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
        events = [*rows, *fresh]
        moments = _moments(events)
        for row in events:
            self.cursor = max(self.cursor, row.id)
            if not self.exact:
                self._sent.add(row.id)
            name = "message" if row.kind == Kind.CREATED else "task-update"
            task = moments.get(row.id, row.task)
            frames.append(sse.event(web_event(row, task), name=name, event_id=row.id))
        if not self.exact:
            self._marks.append((time.monotonic(), self.cursor))
        return Batch(frames, more=len(fresh) == PAGE)

    def check(self) -> str | None:
        return self._validate()

    def closing_frames(self, reason: str) -> list[bytes]:
        return [closed_frame(reason)]
