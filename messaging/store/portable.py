"""The store as short transactions of plain statements: SQLite (the embedded default), and
any database Django speaks (the contract tests run it on Postgres beside PostgresStore).

SQLite serialises writers, so its transactions commit in event-id order by themselves; on a
database with row locks the agents' rows are locked first, in id order, as the contract says.
"""

from __future__ import annotations

import copy
import uuid

from django.db import connection, transaction

from agents.models import Agent
from hikyaku import rows

from .. import lifecycle, policy
from ..models import Task, TaskEvent
from ..push import delivery, fanout
from .base import CHANGED, Broadcast, BroadcastResult, Check, Expected, checked, party_ids


class PortableStore:
    def insert_unicast(
        self, task: Task, event: TaskEvent, *, sender: Agent | None, check: Check = None
    ) -> bool:
        reach, params = policy.sql(
            policy.DELIVER, sender=sender, recipient=policy.Row("d"), sensitivity=task.sensitivity
        )
        reach, params = checked(reach, params, check)
        recipient = [
            rows.prep(Agent, "id", task.recipient_id),
            rows.prep(Agent, "tenant", task.tenant_id),
            Agent.Status.ACTIVE.value,
            *params,
        ]
        # Everything but the statements is prepared before the write transaction begins.
        task_row, event_row = rows.Insert(task), rows.Insert(event)
        with transaction.atomic():
            found = _recipients(
                f"d.id = %s AND d.tenant_id = %s AND d.status = %s AND {reach}", recipient
            )
            if not found:
                return False
            task_row.run()
            event_row.run()
            _deliver_new_tasks(task.tenant_id, [(event, found[0])])
        return True

    def insert_broadcast(
        self, broadcast: Broadcast, *, sender: Agent | None, check: Check = None
    ) -> BroadcastResult | None:
        template, summary = broadcast.delivery, broadcast.summary
        reach, params = policy.sql(
            policy.DELIVER,
            sender=sender,
            recipient=policy.Row("d"),
            sensitivity=template.sensitivity,
        )
        others, others_params = "TRUE", []
        if sender is not None:
            others, others_params = "d.id <> %s", [rows.prep(Agent, "id", sender.pk)]
        with transaction.atomic():
            if check is not None and rows.one(f"SELECT 1 WHERE {check[0]}", check[1]) is None:
                return None  # in the write transaction (BEGIN IMMEDIATE): it holds until commit
            recipients = _recipients(
                f"d.tenant_id = %s AND d.status = %s AND {others} AND {reach}",
                [
                    rows.prep(Agent, "tenant", summary.tenant_id),
                    Agent.Status.ACTIVE.value,
                    *others_params,
                    *params,
                ],
            )
            deliveries = [_delivery(template, r.id) for r in recipients]
            _fill_summary(summary, deliveries)
            rows.insert(summary)  # first: a replayed messageId fails before anything else
            Task.objects.bulk_create(deliveries)
            events = [_delivery_event(broadcast.delivery_event, task) for task in deliveries]
            events.append(broadcast.summary_event)
            TaskEvent.objects.bulk_create(events)
            _deliver_new_tasks(summary.tenant_id, list(zip(events, recipients, strict=False)))
        return BroadcastResult(
            summary=summary,
            recipient_ids=[r.id for r in recipients],
            last_event_id=events[-1].pk,
        )

    def take(self, transition, **_: object) -> None:
        """No one-statement form: SQLite's statements cannot chain writes."""
        return None

    def compare_and_set(
        self, task: Task, expected: Expected, event: TaskEvent, *, check: Check = None
    ) -> bool:
        fields = [Task._meta.get_field(name) for name in CHANGED]
        assignments = ", ".join(f"{f.column} = %s" for f in fields)
        condition, condition_params = checked("TRUE", [], check)
        # Everything but the statements is prepared before the write transaction begins.
        params = [
            *rows.save_params(task, fields),
            rows.prep(Task, "id", task.pk),
            expected.state,
            expected.awaiting,
            rows.prep(Task, "updated_at", expected.updated_at),
            expected.push_configured,
            *condition_params,
        ]
        event_row = rows.Insert(event)
        with transaction.atomic():
            _lock_agents(party_ids(task))
            with connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE messaging_task SET {assignments} WHERE id = %s AND state = %s"
                    " AND awaiting = %s AND updated_at = %s AND push_configured = %s"
                    f" AND {condition}",
                    params,
                )
                if cursor.rowcount != 1:
                    return False
            event_row.run()
            owed = fanout.for_event(
                task, event.kind, event="ev", source=f"(SELECT {int(event.pk)} AS id) ev"
            )
            if owed is not None:
                _insert_deliveries(*owed)
        return True


def _lock_agents(ids) -> None:
    """Row-lock these agents in id order, where the database has row locks."""
    ids = sorted({i for i in ids if i is not None})
    if not ids or not rows.lock_clause():
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM agents_agent WHERE id IN ({', '.join(['%s'] * len(ids))})"
            " ORDER BY id" + rows.lock_clause(no_key=True),
            [rows.prep(Agent, "id", i) for i in ids],
        )


def _delivery(template: Task, recipient_id: uuid.UUID) -> Task:
    task = copy.copy(template)
    task._state = copy.copy(template._state)
    task.id = uuid.uuid4()
    task.recipient_id = recipient_id
    task.context_id = str(recipient_id)
    task.artifacts = [lifecycle.artifact("message", template.message["parts"])]
    task.metadata = {**template.metadata, "toAgentId": str(recipient_id)}
    return task


def _delivery_event(template: TaskEvent, task: Task) -> TaskEvent:
    event = copy.copy(template)
    event._state = copy.copy(template._state)
    event.task = task
    event.recipient_agent_id = task.recipient_id
    return event


def _fill_summary(summary: Task, deliveries: list[Task]) -> None:
    ids = [str(t.id) for t in deliveries]
    artifact = summary.artifacts[0]
    artifact["parts"] = [{"data": {"recipientCount": len(ids), "deliveryTaskIds": ids}}]
    summary.metadata = {**summary.metadata, "recipientCount": len(ids)}


_RECIPIENT_FIELDS = ("id", "status", "webhook_url")  # in model order (rows.build)


def _recipients(condition: str, params: list) -> list[Agent]:
    """The agents `d` matching `condition`, in id order, row-locked where rows lock, with what
    the fan-out needs of them."""
    columns = ", ".join(f"d.{name}" for name in _RECIPIENT_FIELDS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM agents_agent d WHERE {condition} ORDER BY d.id"
            + rows.lock_clause(no_key=True),
            params,
        )
        return [rows.build(Agent, _RECIPIENT_FIELDS, row) for row in cursor.fetchall()]


def _deliver_new_tasks(tenant_id, created: list[tuple[TaskEvent, Agent]]) -> None:
    """The webhook deliveries of these `created` events, for the recipients (their rows as
    just read) that take them."""
    owed = [(event, agent) for event, agent in created if fanout.subscribes(agent)]
    if not owed:
        return
    selects = " UNION ALL ".join(
        ["SELECT %s AS event_id, %s AS task_id, %s AS agent_id, %s AS url"] * len(owed)
    )
    values = [
        value
        for event, agent in owed
        for value in (
            event.pk,
            rows.prep(Task, "id", event.task_id),
            rows.prep(Agent, "id", agent.id),
            agent.webhook_url,
        )
    ]
    sql, params = fanout.for_new_tasks(tenant_id, source=f"({selects}) new")
    _insert_deliveries(sql, [*params, *values])


def _insert_deliveries(sql: str, params: list) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql + " RETURNING id", params)
        ids = [row[0] for row in cursor.fetchall()]
    if ids:
        delivery.enqueue_after_commit(ids)
