"""Every write of the messaging core: sends, broadcasts and the task lifecycle (docs/PROTOCOL.md §4).

Each service is one transaction that compare-and-sets the task and appends its event rows
(on Postgres, the hot ones are one statement each: docs/ARCHITECTURE.md, "Write paths").
Lock order: the agent rows of the parties in id order, then the task row (Postgres's
statements lock the parties before their UPDATE); the portable transactions lock the task
row first, on databases that serialise writers anyway. Holding the parties' agent rows
while writing an event makes every agent's events commit in event-id order, so a stream
that has seen event N never misses a later commit with a smaller id (docs/ARCHITECTURE.md,
"Ordering guarantee").
"""

from __future__ import annotations

import hashlib
import json
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from agents import selectors as agent_selectors
from agents.models import SENSITIVITY_RANK, Agent, Sensitivity
from hikyaku import metrics, rows
from hikyaku.errors import (
    DestinationNotFound,
    InvalidRequest,
    ServiceUnavailable,
    TaskNotCancelable,
    TaskNotFound,
    UnsupportedOperation,
)

from . import events, policy
from .models import TERMINAL_STATES, Task, TaskEvent, TaskState
from .parties import Sender, party_roles
from .push import delivery as push_delivery

Kind = TaskEvent.Kind
TASK_FIELDS = tuple(f.name for f in Task._meta.concrete_fields)
# What sends and transitions need of an agent: identity and policy.
# What the send and lifecycle paths lock and load of each party: policy, and the webhook URL
# the push fan-out needs (messaging/push/delivery.py). In the model's field order, which
# hikyaku.rows.build (Model.from_db with some fields deferred) relies on.
PARTY_FIELDS = (
    "id",
    "tenant",
    "name",
    "status",
    "webhook_url",
    "send_to",
    "receive_from",
    "disclosure_ceiling",
)
UNREAD = {"state": TaskState.INPUT_REQUIRED, "awaiting": Task.Awaiting.RECIPIENT}


@dataclass(frozen=True)
class Transition:
    """One row of the lifecycle table (docs/PROTOCOL.md §4.4)."""

    actor: str  # "recipient", "sender" or "either"
    sources: frozenset[str]
    target: str | None  # None: no state change (comment)
    awaiting_source: str | None = None  # required `awaiting` of the source state
    awaiting_target: str = Task.Awaiting.NOBODY
    parts_become: str = "history"  # "history", "artifact" (result) or "status" (reason/question)


_ANY_LIVE = frozenset({TaskState.INPUT_REQUIRED, TaskState.WORKING})
TRANSITIONS: dict[str, Transition] = {
    Kind.ACK: Transition(
        "recipient",
        frozenset({TaskState.INPUT_REQUIRED}),
        TaskState.COMPLETED,
        awaiting_source=Task.Awaiting.RECIPIENT,
    ),
    Kind.ACCEPT: Transition(
        "recipient",
        frozenset({TaskState.INPUT_REQUIRED}),
        TaskState.WORKING,
        awaiting_source=Task.Awaiting.RECIPIENT,
    ),
    Kind.COMPLETE: Transition("recipient", _ANY_LIVE, TaskState.COMPLETED, parts_become="artifact"),
    Kind.REJECT: Transition("recipient", _ANY_LIVE, TaskState.REJECTED, parts_become="status"),
    Kind.FAIL: Transition(
        "recipient", frozenset({TaskState.WORKING}), TaskState.FAILED, parts_become="status"
    ),
    Kind.BLOCK: Transition(
        "recipient",
        frozenset({TaskState.WORKING}),
        TaskState.INPUT_REQUIRED,
        awaiting_target=Task.Awaiting.SENDER,
        parts_become="status",
    ),
    Kind.REPLY: Transition(
        "sender",
        frozenset({TaskState.INPUT_REQUIRED}),
        TaskState.WORKING,
        awaiting_source=Task.Awaiting.SENDER,
    ),
    Kind.COMMENT: Transition("either", _ANY_LIVE, None),
}
ACTIONS = sorted(TRANSITIONS)


# Sending -------------------------------------------------------------------------------------


def send_message(*, sender: Sender, message: dict[str, Any], to: str | None = None) -> Task:
    """SendMessage: unicast (`to` = agent id), broadcast (`to` = "*"), or — with no `to` and
    `message.taskId` — a lifecycle action on an existing task (`message.metadata.action`).

    `message` is an A2A 1.0 ProtoJSON Message already parsed by the wire layer. Returns the
    delivery task, the broadcast summary, or the task acted on."""
    check_limits(message)
    metadata = message.get("metadata") or {}
    if to is None:
        to = metadata.get("destination")
    if to is None or to == "":
        if message.get("taskId"):
            action = metadata.get("action", Kind.ACK)
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


def check_limits(message: dict[str, Any]) -> None:
    parts = message.get("parts") or []
    if not parts:
        raise InvalidRequest(
            "message.parts must hold at least one part.", details={"field": "message.parts"}
        )
    if len(parts) > settings.HIKYAKU_MAX_PARTS:
        raise InvalidRequest(
            f"A message may have at most {settings.HIKYAKU_MAX_PARTS} parts.",
            details={"field": "message.parts"},
        )
    if len(_canonical(message.get("metadata") or {})) > settings.HIKYAKU_MAX_METADATA_BYTES:
        raise InvalidRequest(
            f"message.metadata exceeds {settings.HIKYAKU_MAX_METADATA_BYTES} bytes.",
            details={"field": "message.metadata"},
        )
    if len(_canonical(message)) > settings.HIKYAKU_MAX_MESSAGE_BYTES:
        raise InvalidRequest(
            f"The message exceeds {settings.HIKYAKU_MAX_MESSAGE_BYTES} bytes.",
            details={"field": "message"},
        )


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def content_hash(message: dict[str, Any], to: str) -> str:
    """What a retry with the same messageId must repeat exactly."""
    significant = {k: v for k, v in message.items() if k not in ("messageId", "contextId")}
    return hashlib.sha256(_canonical({"to": to, "message": significant})).hexdigest()


def _sensitivity(message: dict[str, Any]) -> str:
    value = (message.get("metadata") or {}).get("sensitivity", Sensitivity.INTERNAL)
    if value not in SENSITIVITY_RANK:
        raise InvalidRequest(
            "message.metadata.sensitivity must be one of public-safe, internal, restricted.",
            details={"field": "message.metadata.sensitivity"},
        )
    return value


def _search_text(parts: list[dict[str, Any]]) -> str:
    return "\n".join(p["text"] for p in parts if "text" in p)[:10_000]


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


def _task_metadata(
    sender: Sender, recipient_id: uuid.UUID | None, kind: str, **extra: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"type": kind}
    if sender.agent is not None:
        metadata["fromAgentId"] = str(sender.agent.id)
        metadata["fromAgentName"] = sender.agent.name
    else:
        metadata["fromCallerId"] = sender.caller_id
    if recipient_id is not None:
        metadata["toAgentId"] = str(recipient_id)
    metadata.update({k: v for k, v in extra.items() if v is not None})
    return metadata


def deliver_unicast(
    *, sender: Sender, message: dict[str, Any], to: str, idempotent: bool = True
) -> Task:
    """One task in `to`'s inbox. With `idempotent` (the broker endpoint) the messageId is the
    sender's idempotency key; the per-agent A2A endpoints pass False because A2A does not
    make messageId one (the A2A TCK reuses ids for distinct sends), so every send is new."""
    message_id = message.get("messageId")
    digest = content_hash(message, to)
    sensitivity = _sensitivity(message)
    recipient_id = _agent_pk(to)
    try:
        if recipient_id is None or not policy.sender_may_send(
            sender.agent, recipient_id, sensitivity
        ):
            raise _destination_not_found(to)
        parent, root, depth = _thread(sender, message)
        now = timezone.now()
        parts = message["parts"]
        task = Task(
            tenant=sender.tenant,
            sender=sender.agent,
            caller_id=sender.caller_id,
            recipient_id=recipient_id,
            context_id=str(recipient_id),
            type=Task.Type.UNICAST,
            message=message,
            history=[message],
            artifacts=[_artifact("message", parts)],
            metadata=_task_metadata(
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
            search_text=_search_text(parts),
            message_id=message_id if idempotent else None,
            content_hash=digest,
            created_at=now,
            updated_at=now,
            status_at=now,
        )
        event = _event_row(
            task, sender, Kind.CREATED, "", TaskState.INPUT_REQUIRED, {"messageId": message_id}
        )
        store = (
            _store_unicast_in_one_statement
            if connection.vendor == "postgresql"
            else _store_unicast_portably
        )
        store(task, event, sender, sensitivity, to)
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


def _store_unicast_in_one_statement(
    task: Task, event: TaskEvent, sender: Sender, sensitivity: str, to: str
) -> None:
    """Postgres: lock and check the recipient, insert the task and its event — one
    autocommit statement, so one round trip and no BEGIN/COMMIT (the send's dominant cost).
    The recipient's row lock is held until the statement commits, which keeps that agent's
    events in commit order like the transaction on other databases.

    Written out by hand rather than from the model (hikyaku/rows.py) because it is the
    hottest statement there is: constants are inlined, the message is encoded once and
    Postgres builds `history` and the message artifact from it, and the event takes its
    columns from the inserted task. What it stores is exactly what `task` and `event` hold
    (tests/messaging/test_one_statement_paths.py compares it with the portable path's rows)."""
    accepts, accepts_params = policy.recipient_accepts_sql("d", sender.agent, sensitivity)
    # The recipient's webhook delivery, when it has a webhook (messaging/push/delivery.py).
    webhook_sql, webhook_params = push_delivery.new_task_delivery_sql(
        task.tenant_id,
        source="(SELECT ev.id AS event_id, ins.id AS task_id, dest.id AS agent_id,"
        " dest.webhook_url AS url FROM dest, ins, ev WHERE dest.webhook_url <> '') AS new",
    )
    artifact = task.artifacts[0]
    sql = (
        "WITH v AS (SELECT %s::jsonb AS m, %s::timestamptz AS now),"
        " dest AS (SELECT d.id, d.webhook_url FROM agents_agent d"
        f" WHERE d.id = %s AND d.tenant_id = %s AND d.status = 'active' AND {accepts}"
        " FOR NO KEY UPDATE),"
        " ins AS (INSERT INTO messaging_task (id, tenant_id, sender_id, caller_id,"
        " recipient_id, context_id, type, state, awaiting, broadcast_id, parent_id,"
        " thread_root_id, depth, message, history, artifacts, metadata, sensitivity,"
        " search_text, push_configured, message_id, content_hash, created_at, updated_at,"
        " status_at)"
        " SELECT %s, %s, %s, %s, dest.id, %s, 'unicast', 'input_required', 'recipient', NULL,"
        " %s, %s, %s, v.m, jsonb_build_array(v.m),"
        " jsonb_build_array(jsonb_build_object('artifactId', %s::text, 'name', %s::text,"
        " 'parts', v.m->'parts')), %s, %s, %s, false, %s, %s, v.now, v.now, v.now"
        " FROM dest, v RETURNING id, tenant_id, sender_id, recipient_id, created_at),"
        " ev AS (INSERT INTO messaging_taskevent (tenant_id, task_id, sender_agent_id,"
        " recipient_agent_id, actor_id, actor_label, kind, from_state, to_state, payload,"
        " created_at)"
        " SELECT tenant_id, id, sender_id, recipient_id, sender_id, %s, 'created', '',"
        " 'input_required', %s, created_at FROM ins RETURNING id),"
        f" dl AS ({webhook_sql} RETURNING id)"
        " SELECT ev.id, (SELECT id FROM dl) FROM ev"
    )
    params = [
        Jsonb(task.message),
        task.created_at,
        task.recipient_id,
        task.tenant_id,
        *accepts_params,
        task.id,
        task.tenant_id,
        task.sender_id,
        task.caller_id,
        task.context_id,
        task.parent_id,
        task.thread_root_id,
        task.depth,
        artifact["artifactId"],
        artifact["name"],
        Jsonb(task.metadata),
        task.sensitivity,
        task.search_text,
        task.message_id,
        task.content_hash,
        event.actor_label,
        Jsonb(event.payload),
        *webhook_params,
    ]
    row = _one_statement(sql, params)
    if row is None:
        raise _destination_not_found(to)
    event.pk = row[0]
    if row[1] is not None:
        push_delivery.enqueue_after_commit([row[1]])


def _store_unicast_portably(
    task: Task, event: TaskEvent, sender: Sender, sensitivity: str, to: str
) -> None:
    """Any database: the same, as a transaction holding the recipient's row lock."""
    with transaction.atomic():
        task.recipient = _lock_destination(sender, to, sensitivity)
        rows.insert(task)
        rows.insert(event)
        push_delivery.schedule([event])  # webhooks, enqueued after commit


def _one_statement(sql: str, params: list) -> tuple | None:
    """Run a single-statement write (Postgres) and return its one row, if any. Inside a
    caller's transaction a savepoint keeps that transaction usable when the statement fails
    (a retried messageId hitting the unique constraint); at the top of a request the
    statement stands alone, in autocommit."""
    guard = transaction.atomic() if connection.in_atomic_block else nullcontext()
    with guard, connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _agent_pk(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        return None


def _destination_not_found(to: str) -> DestinationNotFound:
    return DestinationNotFound(
        f"Destination agent not found: {to}", details={"field": "message.metadata.destination"}
    )


def _lock_destination(sender: Sender, to: str, sensitivity: str) -> Agent:
    """The destination agent, row-locked; anything unreachable is the same not-found."""
    pk = _agent_pk(to)
    recipient = (
        rows.first(
            Agent,
            PARTY_FIELDS,
            f"SELECT {rows.select_list(Agent, PARTY_FIELDS)} FROM agents_agent"
            " WHERE id = %s AND tenant_id = %s AND status = %s" + rows.lock_clause(no_key=True),
            [rows.prep(Agent, "id", pk), rows.prep(Agent, "tenant", sender.tenant.pk), "active"],
        )
        if pk
        else None
    )
    if recipient is None or not policy.may_deliver(sender.agent, recipient, sensitivity):
        raise _destination_not_found(to)
    return recipient


def deliver_broadcast(*, sender: Sender, message: dict[str, Any]) -> Task:
    """One task per other active agent of the tenant that policy lets us reach, in one
    transaction, and a summary task (COMPLETED) for the sender."""
    message_id = message.get("messageId")
    digest = content_hash(message, "*")
    postgres = connection.vendor == "postgresql"
    # Elsewhere a replay is found before the transaction that would lock every recipient;
    # Postgres's single statement finds it as a unique violation and writes nothing.
    existing = None if postgres else _existing(sender, message_id)
    if existing is not None:
        return _replay(existing, digest)
    sensitivity = _sensitivity(message)
    broadcast_id = uuid.uuid4()
    store = _broadcast_in_one_statement if postgres else _broadcast_portably
    try:
        return store(sender, message, digest, sensitivity, broadcast_id)
    except IntegrityError:
        existing = _existing(sender, message_id)
        if existing is None:
            raise
        return _replay(existing, digest)


def _broadcast_portably(
    sender: Sender, message: dict[str, Any], digest: str, sensitivity: str, broadcast_id: uuid.UUID
) -> Task:
    """Any database: the broadcast as one transaction through the models."""
    message_id = message.get("messageId")
    parts = message["parts"]
    with transaction.atomic():
        candidates = Agent.objects.select_for_update(no_key=True).filter(
            tenant=sender.tenant, status=Agent.Status.ACTIVE
        )
        if sender.agent is not None:
            candidates = candidates.exclude(pk=sender.agent.pk)
        recipients = [
            r for r in candidates.order_by("id") if policy.may_deliver(sender.agent, r, sensitivity)
        ]
        now = timezone.now()
        search_text = _search_text(parts)
        deliveries = [
            Task(
                tenant=sender.tenant,
                sender=sender.agent,
                caller_id=sender.caller_id,
                recipient=recipient,
                context_id=str(recipient.id),
                type=Task.Type.BROADCAST,
                broadcast_id=broadcast_id,
                message=message,
                history=[message],
                artifacts=[_artifact("message", parts)],
                metadata=_task_metadata(
                    sender, recipient.id, Task.Type.BROADCAST, broadcastId=str(broadcast_id)
                ),
                sensitivity=sensitivity,
                search_text=search_text,
                created_at=now,
                updated_at=now,
                status_at=now,
            )
            for recipient in recipients
        ]
        Task.objects.bulk_create(deliveries)
        delivery_ids = [str(t.id) for t in deliveries]
        summary = Task.objects.create(
            tenant=sender.tenant,
            sender=sender.agent,
            caller_id=sender.caller_id,
            recipient=None,
            context_id=str(sender.agent.id) if sender.agent else sender.caller_id,
            type=Task.Type.BROADCAST_SUMMARY,
            state=TaskState.COMPLETED,
            awaiting=Task.Awaiting.NOBODY,
            broadcast_id=broadcast_id,
            message=message,
            history=[message],
            artifacts=[
                _artifact(
                    "deliveries",
                    [
                        {
                            "data": {
                                "recipientCount": len(deliveries),
                                "deliveryTaskIds": delivery_ids,
                            }
                        }
                    ],
                )
            ],
            metadata=_task_metadata(
                sender,
                None,
                Task.Type.BROADCAST_SUMMARY,
                recipientCount=len(deliveries),
                broadcastId=str(broadcast_id),
            ),
            sensitivity=sensitivity,
            search_text=search_text,
            message_id=message_id,
            content_hash=digest,
            created_at=now,
            updated_at=now,
            status_at=now,
        )
        event_rows = [
            _event_row(t, sender, Kind.CREATED, "", TaskState.INPUT_REQUIRED, {})
            for t in deliveries
        ]
        event_rows.append(
            _event_row(
                summary,
                sender,
                Kind.CREATED,
                "",
                TaskState.COMPLETED,
                {"messageId": message_id},
            )
        )
        written = TaskEvent.objects.bulk_create(event_rows)
        metrics.events_written(len(written))
        push_delivery.schedule(written)  # webhooks, enqueued after commit
        if deliveries:
            events.ring_after_commit(
                agent_ids=[r.id for r in recipients],
                event_id=max(e.id for e in written),
                tenant_id=sender.tenant.id,
            )
    metrics.sent("broadcast", len(deliveries))
    return summary


def _broadcast_in_one_statement(
    sender: Sender, message: dict[str, Any], digest: str, sensitivity: str, broadcast_id: uuid.UUID
) -> Task:
    """Postgres: the whole broadcast — recipients chosen and locked in id order, their
    tasks, the summary, every event and the recipients' webhook deliveries — as one
    statement in which Postgres builds the per-recipient rows, so the cost in Python does
    not grow with the tenant. It stores what the portable path below stores
    (tests/messaging/test_one_statement_paths.py)."""
    me = sender.agent
    now = timezone.now()
    accepts, accepts_params = policy.recipient_accepts_sql("d", me, sensitivity)
    reach, reach_params = "TRUE", []
    if me is not None:
        reach, reach_params = "d.id <> %s", [me.pk]
        if not policy.within_ceiling(me, sensitivity):
            reach = "FALSE"
        elif not policy.allows_anyone(me.send_to):
            reach += " AND d.id::text = ANY(%s::text[])"
            reach_params.append([str(i) for i in me.send_to or []])
    delivery_metadata = _task_metadata(
        sender, None, Task.Type.BROADCAST, broadcastId=str(broadcast_id)
    )
    summary_metadata = _task_metadata(
        sender, None, Task.Type.BROADCAST_SUMMARY, broadcastId=str(broadcast_id)
    )
    summary_artifact = _artifact("deliveries", [])
    # The recipients' webhook deliveries, for those with a webhook (messaging/push/delivery.py).
    webhook_sql, webhook_params = push_delivery.new_task_delivery_sql(
        sender.tenant.pk,
        source="(SELECT ev.id AS event_id, ev.task_id, r.id AS agent_id, r.webhook_url AS url"
        " FROM ev JOIN r ON r.id = ev.recipient_agent_id WHERE r.webhook_url <> '') AS new",
    )
    columns = (
        "id, tenant_id, sender_id, caller_id, recipient_id, context_id, type, state, awaiting,"
        " broadcast_id, parent_id, thread_root_id, depth, message, history, artifacts,"
        " metadata, sensitivity, search_text, push_configured, message_id, content_hash,"
        " created_at, updated_at, status_at"
    )
    event_columns = (
        "tenant_id, task_id, sender_agent_id, recipient_agent_id, actor_id, actor_label, kind,"
        " from_state, to_state, payload, created_at"
    )
    sql = (
        "WITH v AS (SELECT %s::jsonb AS m, %s::timestamptz AS now, %s::uuid AS bid,"
        " %s::uuid AS tenant, %s::uuid AS sender, %s::text AS caller, %s::text AS sensitivity,"
        " %s::text AS search, %s::text AS label),"
        " r AS (SELECT d.id, d.webhook_url FROM agents_agent d"
        f" WHERE d.tenant_id = %s AND d.status = 'active' AND {reach} AND {accepts}"
        " ORDER BY d.id FOR NO KEY UPDATE),"
        f" ins AS (INSERT INTO messaging_task ({columns})"
        " SELECT gen_random_uuid(), v.tenant, v.sender, v.caller, r.id, r.id::text,"
        " 'broadcast', 'input_required', 'recipient', v.bid, NULL, NULL, 0, v.m,"
        " jsonb_build_array(v.m), jsonb_build_array(jsonb_build_object('artifactId',"
        " 'message-' || left(replace(gen_random_uuid()::text, '-', ''), 12),"
        " 'name', 'message', 'parts', v.m->'parts')),"
        " %s::jsonb || jsonb_build_object('toAgentId', r.id::text), v.sensitivity, v.search,"
        " false, NULL, '', v.now, v.now, v.now FROM r, v ORDER BY r.id"
        " RETURNING id, tenant_id, sender_id, recipient_id, created_at),"
        f" ev AS (INSERT INTO messaging_taskevent ({event_columns})"
        " SELECT ins.tenant_id, ins.id, ins.sender_id, ins.recipient_id, ins.sender_id,"
        " v.label, 'created', '', 'input_required', '{}', ins.created_at FROM ins, v"
        " ORDER BY ins.recipient_id RETURNING id, task_id, recipient_agent_id),"
        " n AS (SELECT count(*) AS count, coalesce(jsonb_agg(id::text ORDER BY recipient_id),"
        " '[]') AS ids FROM ins),"
        f" summary AS (INSERT INTO messaging_task ({columns})"
        " SELECT %s, v.tenant, v.sender, v.caller, NULL, %s, 'broadcast_summary', 'completed',"
        " '', v.bid, NULL, NULL, 0, v.m, jsonb_build_array(v.m),"
        " jsonb_build_array(jsonb_build_object('artifactId', %s::text, 'name', 'deliveries',"
        " 'parts', jsonb_build_array(jsonb_build_object('data', jsonb_build_object("
        " 'recipientCount', n.count, 'deliveryTaskIds', n.ids))))),"
        " %s::jsonb || jsonb_build_object('recipientCount', n.count), v.sensitivity, v.search,"
        " false, %s, %s, v.now, v.now, v.now FROM v, n"
        f" RETURNING {rows.select_list(Task, TASK_FIELDS)}),"
        # After every delivery event (it reads ev), so the summary's event comes last.
        f" sev AS (INSERT INTO messaging_taskevent ({event_columns})"
        " SELECT summary.tenant_id, summary.id, summary.sender_id, NULL, summary.sender_id,"
        " v.label, 'created', '', 'completed', %s, summary.created_at FROM summary, v"
        " WHERE (SELECT count(*) FROM ev) >= 0 RETURNING id),"
        f" dl AS ({webhook_sql} RETURNING id)"
        " SELECT summary.*, (SELECT max(id) FROM sev),"
        " (SELECT array_agg(recipient_agent_id) FROM ev), (SELECT array_agg(id) FROM dl)"
        " FROM summary"
    )
    params = [
        Jsonb(message),
        now,
        broadcast_id,
        sender.tenant.pk,
        me.pk if me else None,
        sender.caller_id,
        sensitivity,
        _search_text(message["parts"]),
        _actor_label(sender),
        sender.tenant.pk,
        *reach_params,
        *accepts_params,
        Jsonb(delivery_metadata),
        uuid.uuid4(),
        str(me.id) if me else sender.caller_id,
        summary_artifact["artifactId"],
        Jsonb(summary_metadata),
        message.get("messageId"),
        digest,
        Jsonb({"messageId": message["messageId"]} if message.get("messageId") else {}),
        *webhook_params,
    ]
    row = _one_statement(sql, params)
    n = len(TASK_FIELDS)
    summary = rows.build(Task, TASK_FIELDS, row[:n])
    last_event, recipients, deliveries = row[n:]
    recipients = recipients or []
    if deliveries:
        push_delivery.enqueue_after_commit(list(deliveries))
    metrics.events_written(len(recipients) + 1)
    if recipients:
        events.ring_after_commit(
            agent_ids=recipients, event_id=last_event, tenant_id=sender.tenant.pk
        )
    metrics.sent("broadcast", len(recipients))
    return summary


def _artifact(name: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"artifactId": f"{name}-{uuid.uuid4().hex[:12]}", "name": name, "parts": parts}


# The lifecycle ----------------------------------------------------------------------------


def act_on_task(*, sender: Sender, task_id: str, action: str, message: dict[str, Any]) -> Task:
    """A lifecycle action (docs/PROTOCOL.md §4.4) by a party of the task, as a compare-and-set."""
    transition = TRANSITIONS.get(action) if isinstance(action, str) else None
    if transition is None:
        raise InvalidRequest(
            f"Unknown action {action!r}; expected one of: {', '.join(ACTIONS)}.",
            details={"field": "message.metadata.action"},
        )

    def decide(task: Task, roles: set[str]) -> TaskEvent | None:
        refusal = _refusal(task, transition, action, roles)
        if refusal is not None:
            if _already_applied(task, sender, message):
                return None
            raise refusal
        from_state = task.state
        now = timezone.now()
        parts = message.get("parts") or []
        acting_as_recipient = transition.actor == "recipient" or roles == {"recipient"}
        follow_up = {
            **message,
            "taskId": str(task.id),
            "contextId": task.context_id,
            "role": "ROLE_AGENT" if acting_as_recipient else "ROLE_USER",
        }
        task.history = [*task.history, follow_up]
        if transition.parts_become == "artifact" and parts:
            task.artifacts = [*task.artifacts, _artifact("result", parts)]
        task.metadata = {**task.metadata}
        if transition.parts_become == "status":
            task.metadata["statusMessage"] = follow_up
        else:
            task.metadata.pop("statusMessage", None)
        if transition.target is not None:
            task.state = transition.target
            task.awaiting = transition.awaiting_target
            task.status_at = now
        task.updated_at = now
        return _event_row(
            task,
            sender,
            action,
            from_state,
            task.state,
            {"messageId": message.get("messageId"), "parts": parts},
        )

    task = None
    if action in _FAST_ACTIONS and connection.vendor == "postgresql":
        task = _fast_recipient_transition(sender, task_id, action, message)
    if task is None:
        task = _transition(sender, task_id, decide)
    metrics.transition(action)
    return task


# The recipient taking an unread task (ack: done, accept: working on it) is most of the
# lifecycle traffic; it changes state and appends the message to the history, nothing else.
_FAST_ACTIONS = frozenset({Kind.ACK, Kind.ACCEPT})
_RANK_SQL = " ".join(f"WHEN '{level}' THEN {rank}" for level, rank in SENSITIVITY_RANK.items())


def _fast_recipient_transition(
    sender: Sender, task_id: Any, action: str, message: dict[str, Any]
) -> Task | None:
    """Postgres: ack or accept in one statement, without reading the task first.

    It applies only in the common case — the caller is the recipient of an unread task, the
    policy lets it read the task, and no webhook or push config wants the event — and then
    does exactly what `_transition` with the lifecycle table would: lock the parties (id
    order), compare-and-set the task, append the message to its history, insert the event.
    Anything else (another state, a refusal, a retry, a webhook, a restrictive allow-list)
    returns None, and the caller takes the general path, which reads the task and gives the
    right answer or error."""
    me = sender.agent
    pk = _task_pk(task_id)
    if me is None or pk is None or not policy.allows_anyone(me.receive_from):
        return None
    transition = TRANSITIONS[action]
    now = timezone.now()
    parts = message.get("parts") or []
    follow_up = {**message, "taskId": str(pk), "role": "ROLE_AGENT"}
    payload = {"messageId": message.get("messageId"), "parts": parts}
    returning = rows.select_list(Task, TASK_FIELDS)
    sql = (
        "WITH t AS (SELECT m.id, m.sender_id FROM messaging_task m"
        " LEFT JOIN agents_agent s ON s.id = m.sender_id"
        " WHERE m.id = %s AND m.tenant_id = %s AND m.recipient_id = %s"
        " AND m.type <> 'broadcast_summary' AND m.state = 'input_required'"
        " AND m.awaiting = 'recipient' AND NOT m.push_configured"
        f" AND (CASE m.sensitivity {_RANK_SQL} ELSE 1 END) <= %s"
        " AND (m.sender_id IS NULL OR m.sender_id = m.recipient_id"
        " OR s.send_to @> '[\"*\"]'::jsonb OR s.send_to @> jsonb_build_array(%s::text))"
        " AND NOT EXISTS (SELECT 1 FROM agents_agent w"
        " WHERE w.id IN (m.sender_id, m.recipient_id) AND w.webhook_url <> ''"
        " AND w.status = 'active')),"
        " lk AS (SELECT a.id FROM agents_agent a, t WHERE a.id = t.sender_id OR a.id = %s"
        " ORDER BY a.id FOR NO KEY UPDATE OF a),"
        " upd AS (UPDATE messaging_task SET state = %s, awaiting = '',"
        " history = messaging_task.history"
        " || jsonb_build_array(%s::jsonb || jsonb_build_object('contextId', context_id)),"
        " metadata = messaging_task.metadata - 'statusMessage', status_at = %s, updated_at = %s"
        " WHERE id = (SELECT id FROM t) AND state = 'input_required' AND awaiting = 'recipient'"
        f" AND NOT push_configured AND (SELECT count(*) FROM lk) > 0 RETURNING {returning}),"
        " ev AS (INSERT INTO messaging_taskevent (tenant_id, task_id, sender_agent_id,"
        " recipient_agent_id, actor_id, actor_label, kind, from_state, to_state, payload,"
        " created_at)"
        " SELECT tenant_id, id, sender_id, recipient_id, recipient_id, '', %s,"
        " 'input_required', state, %s, updated_at FROM upd RETURNING id)"
        " SELECT upd.*, ev.id FROM upd, ev"
    )
    params = [
        pk,
        sender.tenant.pk,
        me.pk,
        SENSITIVITY_RANK.get(me.disclosure_ceiling, 1),
        str(me.pk),
        me.pk,
        transition.target,
        Jsonb(follow_up),
        now,
        now,
        action,
        Jsonb({k: v for k, v in payload.items() if v not in (None, [], {})}),
    ]
    row = _one_statement(sql, params)
    if row is None:
        return None
    task = rows.build(Task, TASK_FIELDS, row[:-1])
    metrics.events_written(1)
    events.ring_after_commit(agent_ids=_party_ids(task), event_id=row[-1], tenant_id=task.tenant_id)
    return task


def cancel_task(*, sender: Sender, task_id: str, while_live: bool = False) -> Task:
    """CancelTask: the sender withdraws a task the recipient has not read yet (compat).

    With `while_live` (the per-agent A2A endpoints, where the caller owns the task the way
    A2A means it) the sender may cancel any non-terminal task: unread, working, or waiting
    for the sender's reply; the recipient sees the `cancel` event on its stream."""

    def decide(task: Task, roles: set[str]) -> TaskEvent:
        if task.state in TERMINAL_STATES:
            raise TaskNotCancelable(f"Task {task.id} is {task.state} and cannot be canceled.")
        unread = task.state == TaskState.INPUT_REQUIRED and task.awaiting == Task.Awaiting.RECIPIENT
        if "sender" not in roles or not (unread or while_live):
            raise TaskNotCancelable(
                "Only the sender can cancel a task, and only while it is unread."
            )
        from_state = task.state
        task.state, task.awaiting = TaskState.CANCELED, Task.Awaiting.NOBODY
        task.status_at = task.updated_at = timezone.now()
        # A question the recipient asked (block) is no longer the task's status.
        task.metadata = {k: v for k, v in task.metadata.items() if k != "statusMessage"}
        return _event_row(task, sender, Kind.CANCEL, from_state, TaskState.CANCELED, {})

    task = _transition(sender, task_id, decide)
    metrics.transition(Kind.CANCEL)
    return task


_CHANGED = ["state", "awaiting", "history", "artifacts", "metadata", "status_at", "updated_at"]


def _transition(sender: Sender, task_id: Any, decide) -> Task:
    """Apply `decide(task, roles)` — which mutates the task in memory and returns its event
    row, returns None for a retry of an action already applied, or raises a refusal — as one
    compare-and-set with its event.

    Postgres: read without locks, decide, then one statement that locks the parties' agent
    rows, updates the task only if its state, awaiting and updated_at are still those read,
    and inserts the event; a lost race reads again and decides again (so the loser gets the
    refusal that now applies). Other databases: the same decision inside a transaction
    holding the row locks."""
    if connection.vendor != "postgresql":
        with transaction.atomic():
            task, roles = _lock_party_task(sender, task_id)
            event = decide(task, roles)
            if event is None:
                return task
            rows.update(task, _CHANGED)
            rows.insert(event)
            push_delivery.schedule([event])  # webhooks and push configs, after commit
            events.ring_after_commit(
                agent_ids=_party_ids(task), event_id=event.id, tenant_id=task.tenant_id
            )
        metrics.events_written(1)
        return task
    for _attempt in range(5):
        task, roles = _read_party_task(sender, task_id)
        expected = (task.state, task.awaiting, task.updated_at)
        event = decide(task, roles)
        if event is None:
            return task
        if _compare_and_set(task, expected, event):
            metrics.events_written(1)
            events.ring_after_commit(
                agent_ids=_party_ids(task), event_id=event.id, tenant_id=task.tenant_id
            )
            return task
    raise ServiceUnavailable("The task is changing too fast; retry shortly.")


def _read_party_task(sender: Sender, task_id: Any) -> tuple[Task, set[str]]:
    """The task and its parties' policy fields in one unlocked read (Postgres path)."""
    pk = _task_pk(task_id)
    row = None
    if pk:
        policy_columns = ", ".join(
            f"{alias}.{col}" for alias in ("s", "r") for col in _POLICY_COLUMNS
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {rows.select_list(Task, TASK_FIELDS)}, {policy_columns}"
                " FROM messaging_task LEFT JOIN agents_agent s ON s.id = messaging_task.sender_id"
                " JOIN agents_agent r ON r.id = messaging_task.recipient_id"
                " WHERE messaging_task.id = %s AND messaging_task.tenant_id = %s"
                " AND messaging_task.type <> %s",
                [pk, sender.tenant.pk, Task.Type.BROADCAST_SUMMARY],
            )
            row = cursor.fetchone()
    if row is None:
        raise TaskNotFound(f"Task not found: {task_id}")
    n = len(TASK_FIELDS)
    task = rows.build(Task, TASK_FIELDS, row[:n])
    roles = party_roles(sender, task)
    if not roles:
        raise TaskNotFound(f"Task not found: {task_id}")
    width = len(_POLICY_COLUMNS)
    if task.sender_id is not None:
        task.sender = rows.build(
            Agent, ("id", *_POLICY_FIELDS), (task.sender_id, *row[n : n + width])
        )
    task.recipient = rows.build(
        Agent, ("id", *_POLICY_FIELDS), (task.recipient_id, *row[n + width :])
    )
    if not policy.may_read(sender.agent, task):
        raise TaskNotFound(f"Task not found: {task_id}")
    return task, roles


# Policy, and the webhook URL the push fan-out needs; in model order (rows.build).
_POLICY_FIELDS = ("name", "status", "webhook_url", "send_to", "receive_from", "disclosure_ceiling")
_POLICY_COLUMNS = _POLICY_FIELDS


def _compare_and_set(task: Task, expected: tuple, event: TaskEvent) -> bool:
    """Postgres: lock the parties (id order), update the task if unchanged since it was
    read, insert the event — one autocommit statement. False when another change won."""
    ids = sorted(_party_ids(task))
    model_fields = [Task._meta.get_field(name) for name in _CHANGED]
    assignments = ", ".join(f"{f.column} = %s" for f in model_fields)
    event_sql, event_params = rows.insert_select(event, source="upd")
    # Webhook and push-config deliveries of this event, when there are any (push/delivery.py).
    webhooks = push_delivery.transition_delivery_sql(task, event="ev")
    webhook_sql, webhook_params = webhooks or ("", [])
    state, awaiting, updated_at = expected
    sql = (
        "WITH lk AS (SELECT id FROM agents_agent WHERE id IN ("
        + ", ".join(["%s"] * len(ids))
        + ") ORDER BY id FOR NO KEY UPDATE),"
        f" upd AS (UPDATE messaging_task SET {assignments}"
        " WHERE id = %s AND state = %s AND awaiting = %s AND updated_at = %s"
        " AND push_configured = %s"
        " AND (SELECT count(*) FROM lk) > 0 RETURNING id),"
        f" ev AS ({event_sql} RETURNING id)"
        + (f", dl AS ({webhook_sql} RETURNING id)" if webhooks else "")
        + " SELECT id, "
        + ("(SELECT array_agg(id) FROM dl)" if webhooks else "NULL")
        + " FROM ev"
    )
    params = [
        *ids,
        *[f.get_db_prep_save(getattr(task, f.attname), connection) for f in model_fields],
        task.pk,
        state,
        awaiting,
        updated_at,
        task.push_configured,
        *event_params,
        *webhook_params,
    ]
    row = _one_statement(sql, params)
    if row is None:
        return False
    event.pk = row[0]
    if row[1]:
        push_delivery.enqueue_after_commit(list(row[1]))
    return True


def _refusal(task: Task, transition: Transition, action: str, roles: set[str]) -> Exception | None:
    if task.state in TERMINAL_STATES:
        return UnsupportedOperation(f"Task {task.id} is {task.state}; terminal tasks are final.")
    if transition.actor != "either" and transition.actor not in roles:
        return UnsupportedOperation(f"Only the task's {transition.actor} can {action} it.")
    if task.state not in transition.sources or (
        transition.awaiting_source is not None and task.awaiting != transition.awaiting_source
    ):
        return UnsupportedOperation(f"Cannot {action} a task that is {_describe(task)}.")
    return None


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
    when the compare-and-set would fail, so the success path pays nothing for it."""
    message_id = message.get("messageId")
    if not message_id:
        return False
    return (
        TaskEvent.objects.filter(task=task, actor=sender.agent, actor_label=_actor_label(sender))
        .filter(payload__messageId=message_id)
        .exclude(kind=Kind.CREATED)
        .exists()
    )


def _actor_label(sender: Sender) -> str:
    return "" if sender.agent else f"external:{sender.caller_id}"


def _describe(task: Task) -> str:
    if task.state == TaskState.INPUT_REQUIRED:
        return (
            "unread"
            if task.awaiting == Task.Awaiting.RECIPIENT
            else "waiting for the sender's reply"
        )
    return task.state


def _party_ids(task: Task) -> list[uuid.UUID]:
    return [i for i in {task.sender_id, task.recipient_id} if i is not None]


def _lock_party_task(sender: Sender, task_id: Any) -> tuple[Task, set[str]]:
    """The task, row-locked, with the agent rows of its parties locked after it in id order
    (and loaded for the policy check). Anything the caller may not see is TaskNotFound."""
    pk = _task_pk(task_id)
    task = (
        rows.first(
            Task,
            TASK_FIELDS,
            f"SELECT {rows.select_list(Task, TASK_FIELDS)} FROM messaging_task"
            " WHERE id = %s AND tenant_id = %s AND type <> %s" + rows.lock_clause(),
            [
                rows.prep(Task, "id", pk),
                rows.prep(Task, "tenant", sender.tenant.pk),
                Task.Type.BROADCAST_SUMMARY,
            ],
        )
        if pk
        else None
    )
    roles = party_roles(sender, task) if task is not None else set()
    if task is None or not roles:
        raise TaskNotFound(f"Task not found: {task_id}")
    parties = _lock_parties(task)
    if task.sender_id is not None:
        task.sender = parties[task.sender_id]
    task.recipient = parties[task.recipient_id]
    if not policy.may_read(sender.agent, task):
        raise TaskNotFound(f"Task not found: {task_id}")
    return task, roles


def _lock_parties(task: Task) -> dict[uuid.UUID, Agent]:
    ids = sorted(_party_ids(task))
    placeholders = ", ".join(["%s"] * len(ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {rows.select_list(Agent, PARTY_FIELDS)} FROM agents_agent"
            f" WHERE id IN ({placeholders}) ORDER BY id" + rows.lock_clause(no_key=True),
            [rows.prep(Agent, "id", i) for i in ids],
        )
        agents = [rows.build(Agent, PARTY_FIELDS, row) for row in cursor.fetchall()]
    return {agent.id: agent for agent in agents}


def _event_row(
    task: Task, sender: Sender, kind: str, from_state: str, to_state: str, payload: dict
) -> TaskEvent:
    return TaskEvent(
        tenant_id=task.tenant_id,
        task=task,
        sender_agent_id=task.sender_id,
        recipient_agent_id=task.recipient_id,
        actor=sender.agent,
        actor_label=_actor_label(sender),
        kind=kind,
        from_state=from_state,
        to_state=to_state,
        payload={k: v for k, v in payload.items() if v not in (None, [], {})},
        created_at=task.updated_at,
    )
