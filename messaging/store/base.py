"""The store contract, and what every store shares: reading a task for a transition."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.db import connection

from agents.models import Agent
from hikyaku import rows

from ..lifecycle import Transition
from ..models import Task, TaskEvent
from ..parties import Sender

TASK_FIELDS = tuple(f.name for f in Task._meta.concrete_fields)
# What a transition needs of each party: its policy, and the webhook it may be owed. In the
# model's field order, which hikyaku.rows.build relies on.
PARTY_FIELDS = ("name", "status", "webhook_url", "send_to", "receive_from", "disclosure_ceiling")
# A condition a write must check in its own statement, and its parameters (`Sender.check`).
Check = tuple[str, list] | None


def checked(condition: str, params: list, check: Check) -> tuple[str, list]:
    """`condition` and, when there is one, `check` (a recalled identity's), with both their
    parameters in order: what a store's statement writes under."""
    if check is None:
        return condition, params
    return f"({condition}) AND {check[0]}", [*params, *check[1]]


# The columns a transition changes (the compare-and-set's SET).
CHANGED = ("state", "awaiting", "history", "artifacts", "metadata", "status_at", "updated_at")


@dataclass(frozen=True)
class Expected:
    """What a compare-and-set requires of the task row: unchanged since it was read."""

    state: str
    awaiting: str
    updated_at: datetime
    push_configured: bool

    @classmethod
    def of(cls, task: Task) -> Expected:
        return cls(task.state, task.awaiting, task.updated_at, task.push_configured)


@dataclass
class Broadcast:
    """What a broadcast writes, before its recipients are chosen: the sender's summary (its
    counts and delivery ids are the store's to fill in), and the delivery every recipient gets
    (its id, recipient, context, message artifact id and `metadata.toAgentId` are each
    recipient's own)."""

    summary: Task
    delivery: Task
    summary_event: TaskEvent
    delivery_event: TaskEvent


@dataclass(frozen=True)
class BroadcastResult:
    summary: Task
    recipient_ids: list[uuid.UUID]
    last_event_id: int  # the summary's event: written last


class Store(Protocol):
    """Writes a decision. Every method takes the rows the services built (unsaved model
    instances) and the sender's Agent (None for an external caller), and
    - writes all of it or nothing;
    - sets the ids the database assigns on the instances it was given;
    - records the webhook deliveries the events owe (messaging/push/fanout.py) and enqueues
      them after commit;
    - holds the row locks of the agents whose events it writes, in id order, while it
      writes them (docs/ARCHITECTURE.md, "Ordering guarantee");
    - raises IntegrityError when a messageId was used before (the caller replays)."""

    def insert_unicast(
        self, task: Task, event: TaskEvent, *, sender: Agent | None, check: Check = None
    ) -> bool:
        """Insert a new delivery and its `created` event if its recipient is an active agent
        of the task's tenant that the delivery policy (`policy.DELIVER`) lets the sender
        reach, and `check` (an SQL condition and its parameters: a recalled identity's,
        `Sender.check`) holds; False, writing nothing, otherwise."""

    def insert_broadcast(
        self, broadcast: Broadcast, *, sender: Agent | None, check: Check = None
    ) -> BroadcastResult | None:
        """One delivery for every other active agent of the tenant that the policy lets the
        sender reach (in id order), their events, then the summary and its event (last); None,
        writing nothing, when `check` (as for `insert_unicast`) does not hold."""

    def take(
        self,
        transition: Transition,
        *,
        actor: Sender,
        task_id: uuid.UUID,
        message: dict[str, Any] | None,
        now: datetime,
    ) -> tuple[Task, int] | None:
        """Apply `transition` in one step where the store can, checking in that step what
        the services would check after a read (source phase, role, policy) and, for a
        recalled identity, `actor.check`: the task as changed and its event id. None means
        "read and decide": the store has no such step, or it matched nothing."""

    def compare_and_set(
        self, task: Task, expected: Expected, event: TaskEvent, *, check: Check = None
    ) -> bool:
        """Write `task`'s CHANGED columns and insert `event` if the row still is as
        `expected` and `check` holds (a recalled identity's); False, writing nothing, when
        another change came first or the check failed."""


def read_for_transition(*, tenant_id: Any, task_id: uuid.UUID) -> Task | None:
    """A task that is not a broadcast summary, with the rows of its parties (PARTY_FIELDS)
    loaded on `sender` and `recipient`, in one unlocked read."""
    fields = ("id", *PARTY_FIELDS)
    party_columns = f"{rows.columns('s', Agent, fields)}, {rows.columns('r', Agent, fields)}"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {rows.select_list(Task, TASK_FIELDS)}, {party_columns}"
            " FROM messaging_task LEFT JOIN agents_agent s ON s.id = messaging_task.sender_id"
            " JOIN agents_agent r ON r.id = messaging_task.recipient_id"
            " WHERE messaging_task.id = %s AND messaging_task.tenant_id = %s"
            " AND messaging_task.type <> %s",
            [
                rows.prep(Task, "id", task_id),
                rows.prep(Task, "tenant", tenant_id),
                Task.Type.BROADCAST_SUMMARY,
            ],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return rows.build_joined(
        Task, TASK_FIELDS, row, (("sender", Agent, fields), ("recipient", Agent, fields))
    )


def party_ids(task: Task) -> list[uuid.UUID]:
    """The agents whose events a write of `task` produces, in lock order."""
    return sorted({i for i in (task.sender_id, task.recipient_id) if i is not None})
