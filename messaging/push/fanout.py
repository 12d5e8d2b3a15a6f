"""Which webhook deliveries an event owes (docs/WEBHOOKS.md), as statements the write path
runs in the transaction (or the single statement) that writes the event.

An event is owed to the parties whose stream carries it — the recipient for a new task's
`created` event (a `message`), both parties afterwards (a `task-update`) — when they have a
webhook and are active, and, after its creation, to the task's push configs. The stores
(messaging/store) embed these INSERTs; the delivery ids they return are enqueued after
commit (messaging/push/delivery.py).
"""

from __future__ import annotations

import functools

from django.db import connection
from django.utils import timezone

from agents.models import Agent

from ..lifecycle import EventKind
from ..models import PushConfig, Task, WebhookDelivery

Target = WebhookDelivery.Target
_ACTIVE = Agent.Status.ACTIVE.value


def subscribes(agent: Agent | None) -> bool:
    """Whether an agent (a loaded row) takes webhook deliveries."""
    return agent is not None and bool(agent.webhook_url) and agent.status == _ACTIVE


def subscribes_sql(alias: str) -> str:
    """`subscribes` for an agents_agent row of a statement, under `alias` (the value is a
    model constant, not user input)."""
    return f"{alias}.webhook_url <> '' AND {alias}.status = '{_ACTIVE}'"


def subscribers(task: Task, kind: str) -> list[Agent]:
    """The parties of `task` (its `sender` and `recipient` rows loaded) owed an event of
    `kind`, each once."""
    parties = [task.recipient] if kind == EventKind.CREATED else [task.sender, task.recipient]
    chosen: dict = {}
    for agent in parties:
        if subscribes(agent):
            chosen.setdefault(agent.pk, agent)
    return list(chosen.values())


_COLUMNS = (
    "tenant", "event_id", "task_id", "target", "agent", "push_config", "url", "attempts",
    "last_error", "next_attempt_at", "outcome", "created_at", "updated_at",
)  # fmt: skip


def _prep(field: str, value) -> object:
    return WebhookDelivery._meta.get_field(field).get_db_prep_save(value, connection)


def _insert() -> str:
    return _insert_for(connection.vendor)


@functools.cache
def _insert_for(vendor: str) -> str:
    meta = WebhookDelivery._meta
    quote = connection.ops.quote_name
    columns = ", ".join(quote(meta.get_field(f).column) for f in _COLUMNS)
    return f"INSERT INTO {quote(meta.db_table)} ({columns}) "


def _pending() -> list:
    """next_attempt_at, outcome, created_at, updated_at of a new delivery (three timestamps
    of one field type, so one value prepared once)."""
    now = _prep("created_at", timezone.now())
    return [now, WebhookDelivery.Outcome.PENDING.value, now, now]


def for_new_tasks(tenant_id, *, source: str) -> tuple[str, list]:
    """INSERT the deliveries of new tasks' `created` events. `source` is a FROM item yielding
    one row per owed delivery — recipients already filtered with `subscribes_sql` — with the
    columns `event_id`, `task_id`, `agent_id` and `url`."""
    sql = (
        _insert()
        + "SELECT %s, event_id, task_id, %s, agent_id, CAST(NULL AS bigint), url, 0, '',"
        + f" %s, %s, %s, %s FROM {source}"
    )
    return sql, [_prep("tenant", tenant_id), Target.AGENT.value, *_pending()]


def for_event(task: Task, kind: str, *, event: str, source: str | None = None):
    """INSERT the deliveries of one event of `task` (a transition): the `subscribers` and,
    when `task.push_configured`, the task's push configs. `event` names a FROM item (`source`,
    if given, else a CTE of that name) yielding the new event's `id`. None when nothing is
    owed. A compare-and-set using it must also require the `push_configured` it read, so a
    config attached meanwhile makes it read again."""
    agents = subscribers(task, kind)
    if not agents and not task.push_configured:
        return None
    from_event = source or event
    tenant, task_id = _prep("tenant", task.tenant_id), _prep("task_id", task.id)
    pending = _pending()
    selects: list[str] = []
    params: list = []
    # Typed NULLs: a UNION of untyped NULLs would resolve them to text on Postgres.
    for agent in agents:
        selects.append(
            f"SELECT %s, {event}.id, %s, %s, %s, CAST(NULL AS bigint), %s, 0, '', %s, %s, %s, %s"
            f" FROM {from_event}"
        )
        params += [tenant, task_id, Target.AGENT.value, _prep("agent", agent.pk)]
        params += [agent.webhook_url, *pending]
    if task.push_configured:
        selects.append(
            f"SELECT %s, {event}.id, %s, %s, CAST(NULL AS uuid), pc.id, pc.url, 0, '',"
            f" %s, %s, %s, %s FROM {from_event},"
            f" {connection.ops.quote_name(PushConfig._meta.db_table)} pc WHERE pc.task_id = %s"
        )
        params += [tenant, task_id, Target.PUSH_CONFIG.value, *pending]
        params.append(PushConfig._meta.get_field("task").get_db_prep_value(task.id, connection))
    return _insert() + " UNION ALL ".join(selects), params


def for_event_sql(tenant_id, *, event: str, task: str) -> tuple[str, list]:
    """`for_event` where the task's parties are rows of the statement: `event` yields the
    new event's `id`, `task` the task's `id`, `sender_id` and `recipient_id` (CTE names).
    The parties that `subscribes_sql` and the task's push configs, found by the statement."""
    tenant, pending = _prep("tenant", tenant_id), _pending()
    params = [tenant, Target.AGENT.value, *pending, tenant, Target.PUSH_CONFIG.value, *pending]
    return _for_event_text(connection.vendor, event, task), params


@functools.cache
def _for_event_text(vendor: str, event: str, task: str) -> str:
    agents = connection.ops.quote_name(Agent._meta.db_table)
    configs = connection.ops.quote_name(PushConfig._meta.db_table)
    return _insert_for(vendor) + (
        f"SELECT %s, {event}.id, {task}.id, %s, a.id, CAST(NULL AS bigint), a.webhook_url, 0,"
        f" '', %s, %s, %s, %s FROM {event}, {task}, {agents} a"
        f" WHERE a.id IN ({task}.sender_id, {task}.recipient_id) AND {subscribes_sql('a')}"
        f" UNION ALL SELECT %s, {event}.id, {task}.id, %s, CAST(NULL AS uuid), pc.id, pc.url, 0,"
        f" '', %s, %s, %s, %s FROM {event}, {task}, {configs} pc WHERE pc.task_id = {task}.id"
    )
