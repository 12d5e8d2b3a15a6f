"""Instances built from hand-written rows (hikyaku/rows.py, `build`) are the instances the ORM
would give: the same values, the same deferred fields, loaded from the same database; a model
with init signal receivers still has them called. New instances (`new`) are the ones the
model's constructor builds, and whatever the constructor would do more is left to it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC

import psycopg
import pytest
from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import testbed
from agents.models import Agent
from hikyaku import rows
from messaging import lifecycle
from messaging.models import Task, TaskEvent
from messaging.stream.reads import TASK_FIELDS
from tests.messaging.rpc import act, send

pytestmark = pytest.mark.django_db


def _read(task_id: str) -> Task:
    sql = f"SELECT {rows.select_list(Task, TASK_FIELDS)} FROM messaging_task WHERE id = %s"
    with connection.cursor() as cursor:
        cursor.execute(sql, [rows.prep(Task, "id", task_id)])
        return rows.build(Task, TASK_FIELDS, cursor.fetchone())


def test_a_built_task_is_the_one_the_orm_reads(agent, peer):
    task_id = send(agent, peer.id, "hello", nested={"list": [1, 2.5, None]})["id"]
    act(peer, task_id, "accept", "on it")

    built = _read(task_id)
    orm = Task.objects.only(*TASK_FIELDS).get(pk=task_id)

    for name in TASK_FIELDS:
        attname = Task._meta.get_field(name).attname
        assert getattr(built, attname) == getattr(orm, attname), name
    assert built.get_deferred_fields() == orm.get_deferred_fields() != set()
    assert (built._state.adding, built._state.db) == (False, "default")
    assert built.history and built.state == orm.state
    # A deferred field loads on access, and the related rows by their keys.
    assert built.created_at == Task.objects.get(pk=task_id).created_at
    assert built.recipient.name == peer.model.name
    built.metadata = {"saved": "from a built instance"}
    built.save(update_fields=["metadata"])
    assert Task.objects.get(pk=task_id).metadata == {"saved": "from a built instance"}


def test_json_columns_decode_as_djangos_field_decodes_them(agent, peer):
    """JSON columns are decoded by orjson, and what orjson would read otherwise or refuses by
    Django's field, so a built task holds what the ORM's holds: an integer beyond 64 bits
    (orjson would make it a float), a float that is whole, text in any script, deep
    nesting."""
    task_id = send(agent, peer.id)["id"]
    deep: list = []
    for _ in range(40):
        deep = [deep]
    odd = {
        "big": 2**70 + 1,
        "neg": -(2**65) - 1,
        "u64": 2**64 - 1,
        "whole": 3.0,
        "tiny": 1e-7,
        "text": "é 日本 \u2028",
        "deep": deep,
    }
    Task.objects.filter(pk=task_id).update(metadata=odd, artifacts=[odd])
    built = _read(task_id)
    orm = Task.objects.get(pk=task_id)
    assert built.metadata == orm.metadata == odd
    assert built.artifacts == orm.artifacts == [odd]
    assert type(built.metadata["whole"]) is type(orm.metadata["whole"]) is float
    assert type(built.metadata["big"]) is type(built.metadata["neg"]) is int
    converters = rows._reader(Task, ("metadata",))[1][0][0]
    assert Task._meta.get_field("metadata").from_db_value not in converters  # orjson's, first


def test_init_signal_receivers_are_still_called(agent, peer):
    task_id = send(agent, peer.id)["id"]
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.__dict__.get("id"))

    post_init.connect(receiver, sender=Task)
    try:
        built = _read(task_id)
    finally:
        post_init.disconnect(receiver, sender=Task)
    assert seen == [built.pk]
    assert _read(task_id).pk == built.pk and seen == [built.pk]


def _task_values(agent, peer) -> dict:
    """What a send gives a new task: related instances, a key, values, and fields left out."""
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    now = timezone.now()
    return {
        "tenant": agent.model.tenant,
        "sender": agent.model,
        "parent": None,
        "recipient_id": peer.model.id,
        "caller_id": "",
        "context_id": str(peer.model.id),
        "state": lifecycle.CREATED_PHASE.state,
        "awaiting": lifecycle.CREATED_PHASE.awaiting,
        "message": message,
        "history": [message],
        "message_id": "m-1",
        "created_at": now,
        "updated_at": now,
        "status_at": now,
    }


def _contents(obj) -> tuple[dict, dict]:
    values = dict(obj.__dict__)
    state = vars(values.pop("_state"))
    return values, state


def test_a_new_task_is_the_one_the_constructor_builds(agent, peer):
    values = _task_values(agent, peer)
    made, built = rows.new(Task, **values), Task(**values)

    made_values, made_state = _contents(made)
    built_values, built_state = _contents(built)
    # The one default that differs call by call: a fresh id each.
    assert made_values.pop("id") != built_values.pop("id")
    assert list(made_values) == list(built_values)  # every field, in the model's order
    assert made_values == built_values
    assert made_state == built_state
    assert made_state["fields_cache"] == {
        "tenant": agent.model.tenant,
        "sender": agent.model,
        "parent": None,
    }
    assert (made._state.adding, made._state.db) == (True, "default")
    assert made.sender is agent.model and made.recipient.name == peer.model.name
    assert made.depth == 0 and made.artifacts == [] and made.push_configured is False

    made.save()
    stored = Task.objects.get(pk=made.pk)
    assert (stored.sender_id, stored.recipient_id, stored.message) == (
        agent.model.id,
        peer.model.id,
        values["message"],
    )


def test_a_new_event_is_the_one_the_constructor_builds(agent, peer):
    task = rows.new(Task, **_task_values(agent, peer))
    values = {
        "tenant_id": task.tenant_id,
        "task": task,
        "sender_agent_id": task.sender_id,
        "actor": agent.model,
        "kind": "created",
        "to_state": task.state,
        "payload": {"messageId": "m-1"},
        "created_at": task.created_at,
    }
    made, built = rows.new(TaskEvent, **values), TaskEvent(**values)
    assert _contents(made) == _contents(built)


def test_what_the_constructor_does_more_is_left_to_it(agent, peer):
    values = _task_values(agent, peer)
    with pytest.raises(TypeError, match="unexpected keyword arguments: 'colour'"):
        rows.new(Task, colour="blue", **values)

    # A related instance not saved yet: the constructor gives it the instance's database.
    unsaved = Agent(tenant_id=agent.model.tenant_id, name="carol")
    assert unsaved._state.db is None
    made = rows.new(Task, **{**values, "sender": unsaved})
    assert made.sender_id == unsaved.id and unsaved._state.db == "default"

    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.message_id)

    post_init.connect(receiver, sender=Task)
    try:
        rows.new(Task, **values)
    finally:
        post_init.disconnect(receiver, sender=Task)
    assert seen == ["m-1"]


# Statements (`one`) ---------------------------------------------------------------------------


def _backend_pid() -> int:
    return rows.one("SELECT pg_backend_pid()", [])[0]


@contextmanager
def _other_connection() -> Iterator[psycopg.Connection]:
    params = connection.get_connection_params()
    keys = ("dbname", "user", "password", "host", "port")
    with psycopg.connect(**{k: params[k] for k in keys if params.get(k)}, autocommit=True) as other:
        yield other


def test_a_statement_is_seen_by_django_when_it_looks(agent, peer):
    """Queries counted (DEBUG, tests, the benchmark's counts) and execute wrappers see the
    hot path's statements as they see the ORM's."""
    with CaptureQueriesContext(connection) as captured:
        send(agent, peer.id, "counted")
    inserts = [
        q["sql"] for q in captured.captured_queries if q["sql"].startswith(("INSERT", "WITH"))
    ]
    assert any("messaging_task" in sql for sql in inserts)

    seen = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        assert rows.one("SELECT %s", [7]) == (7,)
    assert seen == ["SELECT %s"]


def test_a_failed_statement_raises_djangos_error_and_leaves_the_connection_usable(agent, peer):
    task_id = send(agent, peer.id)["id"]
    duplicate = "INSERT INTO messaging_task SELECT * FROM messaging_task WHERE id = %s"
    with pytest.raises(IntegrityError), transaction.atomic():
        rows.one(duplicate, [rows.prep(Task, "id", task_id)])
    assert rows.one(
        "SELECT count(*) FROM messaging_task WHERE id = %s", [rows.prep(Task, "id", task_id)]
    ) == (1,)


@pytest.mark.skipif(not settings.IS_POSTGRES, reason="a kept cursor is Postgres's")
@pytest.mark.django_db(transaction=True)
def test_statements_go_on_after_the_connection_is_closed_or_dropped(agent, peer):
    first = _backend_pid()
    assert _backend_pid() == first  # the kept cursor, on the same connection

    connection.close()  # what CONN_MAX_AGE does at the end of a request
    second = _backend_pid()
    assert second != first
    assert send(agent, peer.id, "after a close")["id"]

    with _other_connection() as other:
        testbed.terminate_backends(other.cursor(), [second])
    # The request that finds the connection gone fails with Django's error; the end of the
    # request drops the connection, and the next one opens another.
    with pytest.raises(OperationalError):
        _backend_pid()
    connection.close_if_unusable_or_obsolete()
    assert _backend_pid() not in (first, second)
    assert send(agent, peer.id, "after a drop")["id"]


@pytest.mark.skipif(not settings.IS_POSTGRES, reason="the kept cursor is Postgres's")
def test_timestamps_read_on_the_kept_cursor_are_the_ones_django_reads():
    """The kept cursor reads timestamps with psycopg's compiled loader instead of Django's
    Python one: the same datetimes, with the same tzinfo object, at the edges of the range and
    for values written in another zone."""
    values = [
        "2026-12-06 23:59:59.999999+00",
        "2026-07-01 12:00:00.5-07:30",
        "0001-01-01 00:00:00+00",
        "9999-12-31 23:59:59.999999+00",
        "1969-12-31 23:59:59.000001+00",
    ]
    sql = "SELECT " + ", ".join(["%s::timestamptz"] * len(values))
    kept = rows.one(sql, values)
    with connection.cursor() as cursor:  # Django's cursor and loader
        cursor.execute(sql, values)
        django = cursor.fetchone()
    assert kept == django
    assert [v.tzinfo for v in kept] == [v.tzinfo for v in django]
    assert all(v.tzinfo is UTC for v in kept)
    oid = psycopg.adapters.types["timestamptz"].oid
    loader = rows._held.cursor.adapters.get_loader(oid, psycopg.pq.Format.TEXT)
    assert loader is psycopg.adapters.get_loader(oid, psycopg.pq.Format.TEXT)
