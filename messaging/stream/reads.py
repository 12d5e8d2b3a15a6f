"""The inbox streams' read: every woken inbox stream of a process in one statement.

The hub hands the inbox streams that were woken together to `read_inboxes_on_loop`: on
Postgres the statement runs on the event loop's own connection, elsewhere on one trip to a
stream DB thread (`read_inboxes`). One hand-written statement (hikyaku/rows.py) reads, for
each stream, its events after its cursor (at most PAGE), their tasks, both parties' current
rows, each task's latest event id (whether the row is that event's moment,
messaging/stream/snapshot.py) and whether the stream's credentials still hold — the same
condition as `agents.auth.identity_is_current`, in the same snapshot as the events, so
nothing is delivered on credentials revoked before the read however recent the hub's batch
check. Each event is rendered and encoded once per dialect however many streams carry it.

A select_related queryset for one stream's read cost ~1.4 ms of CPU to compile here, several
times the statement itself; column names, parameter adapters and value converters still come
from the models.
"""

from __future__ import annotations

import uuid
from functools import cache
from typing import Any, Protocol

from django.db import connection

from agents.auth import AgentIdentity, current_time_param, identity_current_sql
from agents.models import Agent
from hikyaku import rows as sql_rows

from .. import policy
from ..a2a.wire import Dialect, render_task
from ..models import Task, TaskEvent
from . import db, snapshot, sse
from .batch import Batch

PAGE = 500  # events read per stream and statement; a full page is followed by another read
# Streams per statement: SQLite allows 32,766 parameters, and a statement this size is
# already well past the point where one more read per batch costs anything.
CHUNK = 200
Kind = TaskEvent.Kind


class InboxFeed(Protocol):
    """What the read needs of an inbox stream (messaging.stream.feeds.InboxFeed)."""

    tenant_id: uuid.UUID
    agent_id: uuid.UUID
    identity: AgentIdentity
    dialect: Dialect
    cursor: int


def _in_model_order(model: type, names: set[str]) -> tuple[str, ...]:
    """Field names in the model's concrete order: Model.from_db (under hikyaku.rows.build)
    matches values to fields by that order, whatever order the names are given in."""
    return tuple(f.name for f in model._meta.concrete_fields if f.name in names)


# What rendering (messaging.a2a.wire.task_v1), snapshots and policy (messaging.policy) read.
TASK_FIELDS = _in_model_order(
    Task,
    {
        "id",
        "sender",
        "recipient",
        "context_id",
        "type",
        "state",
        "awaiting",
        "status_at",
        "artifacts",
        "history",
        "metadata",
        "sensitivity",
    },
)
AGENT_FIELDS = _in_model_order(
    Agent, {"id", "tenant", "status", "send_to", "receive_from", "disclosure_ceiling"}
)
PARTIES = (("sender", Agent, AGENT_FIELDS), ("recipient", Agent, AGENT_FIELDS))


def _events_sql(k: str, tenant: str, agent: str, after: str, credentials: str) -> str:
    """One stream's events after its cursor (at most PAGE), with whether its credentials
    hold; the stream's values are SQL expressions. Parameters: those of `credentials`, then
    two kind names."""
    quote = connection.ops.quote_name
    table = quote(TaskEvent._meta.db_table)
    column = {f: quote(TaskEvent._meta.get_field(f).column) for f in ("tenant", "task", "kind")}
    return (
        f"SELECT {k} AS k, {credentials} AS ok, y.id AS id, y.{column['task']} AS task_id,"
        f" CASE WHEN y.{column['kind']} = %s AND y.recipient_agent_id = {agent} THEN 1 ELSE 0"
        f" END AS delivery FROM {table} y WHERE y.{column['tenant']} = {tenant}"
        f" AND y.id > {after} AND (y.recipient_agent_id = {agent}"
        f" OR (y.sender_agent_id = {agent} AND y.{column['kind']} <> %s)) ORDER BY y.id LIMIT {PAGE}"
    )


def _outer(source: str) -> str:
    """The events of `source` (k, ok, id, task_id, delivery) with their tasks, both parties
    and each task's latest event id."""
    quote = connection.ops.quote_name
    events = quote(TaskEvent._meta.db_table)
    agents = quote(Agent._meta.db_table)
    task_pk = quote(Task._meta.pk.column)
    agent_pk = quote(Agent._meta.pk.column)
    task_of = quote(TaskEvent._meta.get_field("task").column)
    return (
        f"SELECT w.k, w.ok, w.id, w.delivery, (SELECT MAX(x.id) FROM {events} x"
        f" WHERE x.{task_of} = w.task_id), {sql_rows.columns('t', Task, TASK_FIELDS)},"
        f" {sql_rows.columns('s', Agent, AGENT_FIELDS)},"
        f" {sql_rows.columns('r', Agent, AGENT_FIELDS)}"
        f" FROM {source}"
        f" JOIN {quote(Task._meta.db_table)} t ON t.{task_pk} = w.task_id"
        f" LEFT JOIN {agents} s ON s.{agent_pk} = t.{quote(Task._meta.get_field('sender').column)}"
        f" LEFT JOIN {agents} r ON r.{agent_pk} = t."
        f"{quote(Task._meta.get_field('recipient').column)}"
        " ORDER BY w.k, w.id"
    )


@cache
def _postgres_statement(single: bool) -> str:
    """Postgres: one text whatever the number of streams (their values as arrays; plain
    values for one stream, the usual case, which cost less to adapt), so the connection
    prepares it once; a statement per number of streams would be planned again and again,
    and planning it costs far more than running it."""
    token, _ = identity_current_sql("c.agent", "c.hash", via_token=True)
    key, _ = identity_current_sql("c.agent", "c.hash", via_token=False)
    events = _events_sql(
        "c.k", "c.tenant", "c.agent", "c.after", f"CASE WHEN c.via THEN {token} ELSE {key} END"
    )
    if single:
        values = "SELECT %s::int, %s::uuid, %s::uuid, %s::bigint, %s::text, %s::bool"
    else:
        values = "SELECT * FROM unnest(%s::int[], %s::uuid[], %s::uuid[], %s::bigint[],"
        values += " %s::text[], %s::bool[])"
    return _outer(
        f"({values}) AS c(k, tenant, agent, after, hash, via) CROSS JOIN LATERAL ({events}) w"
    )


@cache
def _portable_member(via_token: bool) -> str:
    credentials, _ = identity_current_sql("%s", "%s", via_token=via_token)
    return f"SELECT * FROM ({_events_sql('%s', '%s', '%s', '%s', credentials)}) AS q"


def _statement(feeds: list[InboxFeed]) -> tuple[str, list[Any]]:
    now = current_time_param()
    if db.on_postgres():
        _, token = identity_current_sql("", "", via_token=True, now=now)
        _, key = identity_current_sql("", "", via_token=False, now=now)
        rows = [
            (k, f.tenant_id, f.agent_id, f.cursor, f.identity.credential_hash, f.identity.via_token)
            for k, f in enumerate(feeds)
        ]
        values = (
            list(rows[0])
            if len(rows) == 1
            else [list(column) for column in zip(*rows, strict=True)]
        )
        sql = _postgres_statement(len(rows) == 1)
        return sql, [*values, *token, *key, Kind.CREATED, Kind.CREATED]
    # Elsewhere (SQLite: no LATERAL, and statements cost little to plan), one member per
    # stream, each with its own limit.
    members, params = [], []
    for k, feed in enumerate(feeds):
        via_token = feed.identity.via_token
        _, constants = identity_current_sql("", "", via_token=via_token, now=now)
        me = sql_rows.prep(TaskEvent, "recipient_agent_id", feed.agent_id)
        members.append(_portable_member(via_token))
        params += [
            k,
            *constants,
            sql_rows.prep(Agent, "id", feed.agent_id),
            feed.identity.credential_hash,
            Kind.CREATED,
            me,
            sql_rows.prep(TaskEvent, "tenant", feed.tenant_id),
            feed.cursor,
            me,
            me,
            Kind.CREATED,
        ]
    return _outer(f"({' UNION ALL '.join(members)}) w"), params


class _Row:
    __slots__ = ("event_id", "delivery", "latest", "task")

    def __init__(self, event_id: int, delivery: bool, latest: int, task: Task) -> None:
        self.event_id, self.delivery, self.latest, self.task = event_id, delivery, latest, task


def _collect(fetched: list[tuple]) -> dict[int, tuple[bool, list[_Row]]]:
    """The rows of `_statement` per stream (its index in the chunk) that has events: whether
    its credentials hold, and its events in id order."""
    tasks: dict[tuple[Any, int], Task] = {}  # one instance per task and latest event
    out: dict[int, tuple[bool, list[_Row]]] = {}
    for row in fetched:
        k, ok, event_id, delivery, latest = row[:5]
        values = row[5:]
        task = tasks.get((values[0], latest))
        if task is None:
            task = sql_rows.build_joined(Task, TASK_FIELDS, values, PARTIES)
            tasks[(values[0], latest)] = task
        entry = out.setdefault(k, (bool(ok), []))
        entry[1].append(_Row(event_id, bool(delivery), latest, task))
    return out


def _fetch(sql: str, params: list[Any]) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _moments(older: list[_Row]) -> dict[int, Task]:
    """The task as of each of `older` (`_replays`: events that are not their task's latest),
    by event id."""
    if not older:
        return {}
    steps = snapshot.timelines({r.task.pk for r in older}, max(r.event_id for r in older))
    moments = {}
    for r in older:
        upto = snapshot.up_to(steps.get(r.task.pk, []), r.event_id)
        if upto is not None:
            moments[r.event_id] = snapshot.as_of(r.task, upto)
    return moments


def _replays(found: dict[int, tuple[bool, list[_Row]]]) -> list[_Row]:
    """The rows whose task must be shown as of an earlier moment (`_moments`)."""
    return [r for ok, rows in found.values() if ok for r in rows if r.event_id != r.latest]


def _render(
    chunk: list[InboxFeed],
    batches: list[Batch],
    found: dict[int, tuple[bool, list[_Row]]],
    moments: dict[int, Task],
    frames: dict[tuple[int, Any, bool], bytes],
) -> None:
    """Fill each stream's batch from its rows, advancing its cursor; `frames` holds each
    event's frame per dialect, shared by every stream that carries it."""
    for k, (ok, rows) in found.items():
        feed, batch = chunk[k], batches[k]
        if not ok:
            batch.closed = "credentials"
            continue
        batch.more = len(rows) == PAGE
        for r in rows:
            feed.cursor = r.event_id
            task = r.task
            me = task.recipient if task.recipient_id == feed.agent_id else task.sender
            if me is None or not policy.may_read(me, task):
                continue
            key = (r.event_id, feed.dialect, r.delivery)
            frame = frames.get(key)
            if frame is None:
                body = render_task(moments.get(r.event_id, task), feed.dialect)
                name = "message" if r.delivery else "task-update"
                frame = frames[key] = sse.event(sse.encode(body), name=name, event_id=r.event_id)
            batch.frames.append(frame)


def read_inboxes(feeds: list[InboxFeed]) -> list[Batch]:
    """What each of `feeds` has after its cursor (advancing the cursors), in one statement
    per CHUNK streams. Runs on a stream DB thread."""
    batches = [Batch() for _ in feeds]
    frames: dict[tuple[int, Any, bool], bytes] = {}
    for start in range(0, len(feeds), CHUNK):
        chunk = feeds[start : start + CHUNK]
        found = _collect(_fetch(*_statement(chunk)))
        _render(chunk, batches[start : start + CHUNK], found, _moments(_replays(found)), frames)
    return batches


async def read_inboxes_on_loop(feeds: list[InboxFeed]) -> list[Batch]:
    """`read_inboxes` without a trip to a DB thread where the database allows it: on
    Postgres the statement runs on the stream process's own connection on the event loop
    (messaging.stream.db.loop_fetch), and only a page that replays older events reads their
    timelines on a DB thread. A trip to a DB thread and back costs about as much CPU as the
    read itself (docs/MEASUREMENTS.md, Streams)."""
    if not db.on_postgres():
        return await db.run_db(read_inboxes, feeds)
    batches = [Batch() for _ in feeds]
    frames: dict[tuple[int, Any, bool], bytes] = {}
    for start in range(0, len(feeds), CHUNK):
        chunk = feeds[start : start + CHUNK]
        found = _collect(await db.loop_fetch(*_statement(chunk)))
        replays = _replays(found)
        moments = await db.run_db(_moments, replays) if replays else {}
        _render(chunk, batches[start : start + CHUNK], found, moments, frames)
    return batches
