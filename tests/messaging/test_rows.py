"""Instances built from hand-written rows (hikyaku/rows.py, `build`) are the instances the ORM
would give: the same values, the same deferred fields, loaded from the same database; a model
with init signal receivers still has them called."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models.signals import post_init

from hikyaku import rows
from messaging.models import Task
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
