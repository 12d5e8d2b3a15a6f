"""The store on Postgres: every write is one autocommit statement (data-modifying CTEs).

A send or a transition is a single round trip without BEGIN/COMMIT, its dominant cost
(docs/ARCHITECTURE.md, "Write paths and what they cost"). The statements' conditions come
from the policy (`policy.sql`) and the fan-out (`push.fanout`); a send's rows are built by
Postgres from the message, encoded once. What they store is what PortableStore stores
(tests/messaging/test_store_contract.py runs both here).
"""

from __future__ import annotations

from contextlib import nullcontext
from datetime import datetime
from functools import cache
from typing import Any

from django.db import connection, transaction
from psycopg.types.json import Jsonb

from agents.models import Agent
from hikyaku import parsers, rows

from .. import lifecycle, policy
from ..lifecycle import Role, Transition
from ..models import Task, TaskEvent
from ..parties import Sender, actor_label
from ..push import delivery, fanout
from .base import (
    CHANGED,
    TASK_FIELDS,
    Broadcast,
    BroadcastResult,
    Check,
    Expected,
    checked,
    party_ids,
)

_TASK_COLUMNS = (
    "id, tenant_id, sender_id, caller_id, recipient_id, context_id, type, state, awaiting,"
    " broadcast_id, parent_id, thread_root_id, depth, message, history, artifacts, metadata,"
    " sensitivity, search_text, push_configured, message_id, content_hash, created_at,"
    " updated_at, status_at"
)
_EVENT_COLUMNS = (
    "tenant_id, task_id, sender_agent_id, recipient_agent_id, actor_id, actor_label, kind,"
    " from_state, to_state, payload, created_at"
)
_ACTIVE = Agent.Status.ACTIVE.value


def _jsonb(value: Any) -> Jsonb:
    """A jsonb parameter, encoded by orjson (hikyaku.parsers.dumps) rather than `json`."""
    return Jsonb(value, dumps=parsers.dumps)


def _one_statement(sql: str, params: list) -> tuple | None:
    """Run a single-statement write and return its one row, if any. Inside a caller's
    transaction a savepoint keeps that transaction usable when the statement fails (a
    replayed messageId hitting the unique constraint); at the top of a request the statement
    stands alone, in autocommit."""
    guard = transaction.atomic() if connection.in_atomic_block else nullcontext()
    with guard:
        return rows.one(sql, params)


class PostgresStore:
    def insert_unicast(
        self, task: Task, event: TaskEvent, *, sender: Agent | None, check: Check = None
    ) -> bool:
        """The recipient is locked and checked, the task and its event inserted. The message
        is encoded once: Postgres builds `history` and the message artifact from it."""
        reach, reach_params = policy.sql(
            policy.DELIVER, sender=sender, recipient=policy.Row("d"), sensitivity=task.sensitivity
        )
        reach, reach_params = checked(reach, reach_params, check)
        webhook_sql, webhook_params = fanout.for_new_tasks(
            task.tenant_id,
            source="(SELECT ev.id AS event_id, ins.id AS task_id, dest.id AS agent_id,"
            f" dest.webhook_url AS url FROM dest, ins, ev WHERE {fanout.subscribes_sql('dest')})"
            " AS new",
        )
        (artifact,) = task.artifacts
        sql = (
            "WITH v AS (SELECT %s::jsonb AS m, %s::timestamptz AS now),"
            " dest AS (SELECT d.id, d.webhook_url, d.status FROM agents_agent d"
            f" WHERE d.id = %s AND d.tenant_id = %s AND d.status = %s AND {reach}"
            " FOR NO KEY UPDATE),"
            f" ins AS (INSERT INTO messaging_task ({_TASK_COLUMNS})"
            " SELECT %s, %s, %s, %s, dest.id, %s, %s, %s, %s, NULL, %s, %s, %s, v.m,"
            " jsonb_build_array(v.m), jsonb_build_array(jsonb_build_object('artifactId',"
            " %s::text, 'name', %s::text, 'parts', v.m->'parts')), %s, %s, %s, false, %s, %s,"
            " v.now, v.now, v.now FROM dest, v"
            " RETURNING id, tenant_id, sender_id, recipient_id, created_at),"
            f" ev AS (INSERT INTO messaging_taskevent ({_EVENT_COLUMNS})"
            " SELECT tenant_id, id, sender_id, recipient_id, sender_id, %s, %s, %s, %s, %s,"
            " created_at FROM ins RETURNING id),"
            f" dl AS ({webhook_sql} RETURNING id)"
            " SELECT ev.id, (SELECT id FROM dl) FROM ev"
        )
        params = [
            _jsonb(task.message),
            task.created_at,
            task.recipient_id,
            task.tenant_id,
            _ACTIVE,
            *reach_params,
            task.id,
            task.tenant_id,
            task.sender_id,
            task.caller_id,
            task.context_id,
            task.type,
            task.state,
            task.awaiting,
            task.parent_id,
            task.thread_root_id,
            task.depth,
            artifact["artifactId"],
            artifact["name"],
            _jsonb(task.metadata),
            task.sensitivity,
            task.search_text,
            task.message_id,
            task.content_hash,
            event.actor_label,
            event.kind,
            event.from_state,
            event.to_state,
            _jsonb(event.payload),
            *webhook_params,
        ]
        row = _one_statement(sql, params)
        if row is None:
            return False
        event.pk = row[0]
        if row[1] is not None:
            delivery.enqueue_after_commit([row[1]])
        return True

    def insert_broadcast(
        self, broadcast: Broadcast, *, sender: Agent | None, check: Check = None
    ) -> BroadcastResult | None:
        """Recipients chosen and locked in id order, their tasks, the summary, every event
        and the webhook deliveries, with Postgres building the per-recipient rows, so the
        cost in Python does not grow with the tenant. Every row is built from `v`, which is
        empty when `check` does not hold: then nothing is written."""
        template, summary = broadcast.delivery, broadcast.summary
        reach, reach_params = policy.sql(
            policy.DELIVER,
            sender=sender,
            recipient=policy.Row("d"),
            sensitivity=template.sensitivity,
        )
        others, others_params = ("d.id <> %s", [sender.pk]) if sender else ("TRUE", [])
        webhook_sql, webhook_params = fanout.for_new_tasks(
            summary.tenant_id,
            source="(SELECT ev.id AS event_id, ev.task_id, r.id AS agent_id,"
            " r.webhook_url AS url FROM ev JOIN r ON r.id = ev.recipient_agent_id"
            f" WHERE {fanout.subscribes_sql('r')}) AS new",
        )
        delivery_event, summary_event = broadcast.delivery_event, broadcast.summary_event
        (summary_artifact,) = summary.artifacts
        holds, holds_params = checked("TRUE", [], check)
        sql = (
            "WITH v AS (SELECT %s::jsonb AS m, %s::timestamptz AS now, %s::uuid AS bid,"
            " %s::uuid AS tenant, %s::uuid AS sender, %s::text AS caller,"
            f" %s::text AS sensitivity, %s::text AS search, %s::text AS label WHERE {holds}),"
            " r AS (SELECT d.id, d.webhook_url, d.status FROM agents_agent d"
            f" WHERE d.tenant_id = %s AND d.status = %s AND {others} AND {reach}"
            " ORDER BY d.id FOR NO KEY UPDATE),"
            f" ins AS (INSERT INTO messaging_task ({_TASK_COLUMNS})"
            " SELECT gen_random_uuid(), v.tenant, v.sender, v.caller, r.id, r.id::text,"
            " %s, %s, %s, v.bid, NULL, NULL, 0, v.m,"
            " jsonb_build_array(v.m), jsonb_build_array(jsonb_build_object('artifactId',"
            " 'message-' || left(replace(gen_random_uuid()::text, '-', ''), 12),"
            " 'name', 'message', 'parts', v.m->'parts')),"
            " %s::jsonb || jsonb_build_object('toAgentId', r.id::text), v.sensitivity, v.search,"
            " false, NULL, '', v.now, v.now, v.now FROM r, v ORDER BY r.id"
            " RETURNING id, tenant_id, sender_id, recipient_id, created_at),"
            f" ev AS (INSERT INTO messaging_taskevent ({_EVENT_COLUMNS})"
            " SELECT ins.tenant_id, ins.id, ins.sender_id, ins.recipient_id, ins.sender_id,"
            " v.label, %s, %s, %s, %s, ins.created_at FROM ins, v"
            " ORDER BY ins.recipient_id RETURNING id, task_id, recipient_agent_id),"
            " n AS (SELECT count(*) AS count,"
            " coalesce(jsonb_agg(id::text ORDER BY recipient_id), '[]') AS ids FROM ins),"
            f" summary AS (INSERT INTO messaging_task ({_TASK_COLUMNS})"
            " SELECT %s, v.tenant, v.sender, v.caller, NULL, %s, %s, %s, %s, v.bid, NULL, NULL,"
            " 0, v.m, jsonb_build_array(v.m),"
            " jsonb_build_array(jsonb_build_object('artifactId', %s::text, 'name', %s::text,"
            " 'parts', jsonb_build_array(jsonb_build_object('data', jsonb_build_object("
            " 'recipientCount', n.count, 'deliveryTaskIds', n.ids))))),"
            " %s::jsonb || jsonb_build_object('recipientCount', n.count), v.sensitivity,"
            " v.search, false, %s, %s, v.now, v.now, v.now FROM v, n"
            f" RETURNING {rows.select_list(Task, TASK_FIELDS)}),"
            # After every delivery event (it reads ev), so the summary's event comes last.
            f" sev AS (INSERT INTO messaging_taskevent ({_EVENT_COLUMNS})"
            " SELECT summary.tenant_id, summary.id, summary.sender_id, NULL, summary.sender_id,"
            " v.label, %s, %s, %s, %s, summary.created_at FROM summary, v"
            " WHERE (SELECT count(*) FROM ev) >= 0 RETURNING id),"
            f" dl AS ({webhook_sql} RETURNING id)"
            " SELECT summary.*, (SELECT max(id) FROM sev),"
            " (SELECT array_agg(recipient_agent_id) FROM ev), (SELECT array_agg(id) FROM dl)"
            " FROM summary"
        )
        params = [
            _jsonb(template.message),
            template.created_at,
            template.broadcast_id,
            template.tenant_id,
            template.sender_id,
            template.caller_id,
            template.sensitivity,
            template.search_text,
            delivery_event.actor_label,
            *holds_params,
            template.tenant_id,
            _ACTIVE,
            *others_params,
            *reach_params,
            template.type,
            template.state,
            template.awaiting,
            _jsonb(template.metadata),
            delivery_event.kind,
            delivery_event.from_state,
            delivery_event.to_state,
            _jsonb(delivery_event.payload),
            summary.id,
            summary.context_id,
            summary.type,
            summary.state,
            summary.awaiting,
            summary_artifact["artifactId"],
            summary_artifact["name"],
            _jsonb(summary.metadata),
            summary.message_id,
            summary.content_hash,
            summary_event.kind,
            summary_event.from_state,
            summary_event.to_state,
            _jsonb(summary_event.payload),
            *webhook_params,
        ]
        row = _one_statement(sql, params)
        if row is None:
            return None
        n = len(TASK_FIELDS)
        stored = rows.build(Task, TASK_FIELDS, row[:n])
        last_event, recipients, deliveries = row[n:]
        if deliveries:
            delivery.enqueue_after_commit(list(deliveries))
        return BroadcastResult(
            summary=stored, recipient_ids=list(recipients or []), last_event_id=last_event
        )

    def compare_and_set(
        self, task: Task, expected: Expected, event: TaskEvent, *, check: Check = None
    ) -> bool:
        """Lock the parties (id order), update the task if unchanged since it was read (and
        `check` holds), insert the event and its deliveries."""
        ids = party_ids(task)
        condition, condition_params = checked("TRUE", [], check)
        fields = [Task._meta.get_field(name) for name in CHANGED]
        assignments = ", ".join(f"{f.column} = %s" for f in fields)
        event_sql, event_params = rows.insert_select(event, source="upd")
        owed = fanout.for_event(task, event.kind, event="ev")
        webhook_sql, webhook_params = owed or ("", [])
        sql = (
            "WITH lk AS (SELECT id FROM agents_agent WHERE id IN ("
            + ", ".join(["%s"] * len(ids))
            + ") ORDER BY id FOR NO KEY UPDATE),"
            f" upd AS (UPDATE messaging_task SET {assignments}"
            " WHERE id = %s AND state = %s AND awaiting = %s AND updated_at = %s"
            f" AND push_configured = %s AND {condition} AND (SELECT count(*) FROM lk) > 0"
            " RETURNING id),"
            f" ev AS ({event_sql} RETURNING id)"
            + (f", dl AS ({webhook_sql} RETURNING id)" if owed else "")
            + " SELECT id, "
            + ("(SELECT array_agg(id) FROM dl)" if owed else "NULL")
            + " FROM ev"
        )
        params = [
            *ids,
            *rows.save_params(task, fields),
            task.pk,
            expected.state,
            expected.awaiting,
            expected.updated_at,
            expected.push_configured,
            *condition_params,
            *event_params,
            *webhook_params,
        ]
        row = _one_statement(sql, params)
        if row is None:
            return False
        event.pk = row[0]
        if row[1]:
            delivery.enqueue_after_commit(list(row[1]))
        return True

    def take(
        self,
        transition: Transition,
        *,
        actor: Sender,
        task_id: Any,
        message: dict[str, Any] | None,
        now: datetime,
    ) -> tuple[Task, int] | None:
        """The action in one statement, without reading the task first: the task changes
        if it is in one of the transition's source phases, the actor holds the transition's
        one role and the policy (`policy.READ`) lets it see the task, exactly as
        `lifecycle.apply` would change it after a read; the parties are locked, the event
        and its webhook deliveries inserted. Returns the task and its event id, or None when
        it matched nothing (or the transition may be taken by either party): the caller then
        reads, and gets the refusal or the compare-and-set that applies."""
        if len(transition.by) != 1:
            return None
        (role,) = transition.by
        own, peer_column = (
            ("recipient_id", "sender_id")
            if role == Role.RECIPIENT
            else ("sender_id", "recipient_id")
        )
        me = actor.agent
        if me is not None:
            mine, mine_params = f"m.{own} = %s", [me.pk]
        elif role == Role.SENDER:
            mine, mine_params = "m.sender_id IS NULL AND m.caller_id = %s", [actor.caller_id]
        else:
            return None
        peer = policy.Row("p", key=f"m.{peer_column}")
        parties = (
            {"sender": peer, "recipient": me}
            if role == Role.RECIPIENT
            else {
                "sender": me,
                "recipient": peer,
            }
        )
        readable, readable_params = policy.sql(
            policy.READ, **parties, reader=me, sensitivity=policy.Column("m.sensitivity")
        )
        readable, readable_params = checked(readable, readable_params, actor.check)
        phases = " OR ".join(["(m.state = %s AND m.awaiting = %s)"] * len(transition.sources))
        phase_params = [v for phase in transition.sources for v in (phase.state, phase.awaiting)]
        sets, set_params = _changes(transition, actor, task_id, message, now)
        webhook_sql, webhook_params = fanout.for_event_sql(actor.tenant.pk, event="ev", task="upd")
        sql = (
            "WITH t AS (SELECT m.id, m.state, m.awaiting, m.updated_at FROM messaging_task m"
            f" LEFT JOIN agents_agent p ON p.id = m.{peer_column}"
            f" WHERE m.id = %s AND m.tenant_id = %s AND m.type <> %s AND {mine}"
            f" AND ({phases}) AND ({readable})),"
            " lk AS (SELECT a.id FROM agents_agent a, messaging_task m, t"
            " WHERE m.id = t.id AND a.id IN (m.sender_id, m.recipient_id)"
            " ORDER BY a.id FOR NO KEY UPDATE OF a),"
            f" upd AS (UPDATE messaging_task SET {sets} FROM t"
            " WHERE messaging_task.id = t.id AND messaging_task.state = t.state"
            " AND messaging_task.awaiting = t.awaiting AND messaging_task.updated_at = t.updated_at"
            f" AND (SELECT count(*) FROM lk) > 0 RETURNING {_returning('messaging_task')},"
            " t.state AS from_state),"
            f" ev AS (INSERT INTO messaging_taskevent ({_EVENT_COLUMNS})"
            " SELECT tenant_id, id, sender_id, recipient_id, %s, %s, %s, from_state, state, %s,"
            " updated_at FROM upd RETURNING id),"
            f" dl AS ({webhook_sql} RETURNING id)"
            f" SELECT {_returning('upd')}, ev.id, (SELECT array_agg(id) FROM dl) FROM upd, ev"
        )
        params = [
            task_id,
            actor.tenant.pk,
            Task.Type.BROADCAST_SUMMARY,
            *mine_params,
            *phase_params,
            *readable_params,
            *set_params,
            me.pk if me else None,
            actor_label(actor),
            transition.action,
            _jsonb(lifecycle.payload_of(message)),
            *webhook_params,
        ]
        row = _one_statement(sql, params)
        if row is None:
            return None
        n = len(TASK_FIELDS)
        task = rows.build(Task, TASK_FIELDS, row[:n])
        if row[n + 1]:
            delivery.enqueue_after_commit(list(row[n + 1]))
        return task, row[n]


@cache
def _returning(table: str) -> str:
    return ", ".join(f"{table}.{Task._meta.get_field(f).column}" for f in TASK_FIELDS)


def _changes(
    transition: Transition,
    actor: Sender,
    task_id: Any,
    message: dict[str, Any] | None,
    now: datetime,
) -> tuple[str, list]:
    """The SET of `take`: what `lifecycle.apply` computes, for the row in the database."""
    sets, params = ["updated_at = %s"], [now]
    target = transition.target
    if target is not None:
        sets += ["state = %s", "awaiting = %s", "status_at = %s"]
        params += [target.state, target.awaiting, now]
    metadata = "messaging_task.metadata - 'statusMessage'"
    if transition.carries_message:
        roles = set(transition.by)
        follow_up = lifecycle.follow_up_of(transition, roles, message or {}, task_id=task_id)
        entry = "(%s::jsonb || jsonb_build_object('contextId', messaging_task.context_id))"
        sets.append(f"history = messaging_task.history || jsonb_build_array{entry}")
        params.append(_jsonb(follow_up))
        result = lifecycle.result_of(transition, message or {})
        if result is not None:
            sets.append("artifacts = messaging_task.artifacts || jsonb_build_array(%s::jsonb)")
            params.append(_jsonb(result))
        if transition.parts_become == "status":
            metadata = f"jsonb_set({metadata}, '{{statusMessage}}', {entry})"
            params.append(_jsonb(follow_up))
    sets.append(f"metadata = {metadata}")
    return ", ".join(sets), params
