"""The embedded default's writers take turns on a lock of their process instead of sleeping
in SQLite's busy handler (hikyaku/sqlite3/base.py)."""

import threading
import uuid

import pytest
from django.db import connection, connections, transaction
from django.db.models import Field

from hikyaku.sqlite3.base import WRITERS
from messaging import lifecycle
from messaging.models import Task
from messaging.parties import Sender
from messaging.services import act_on_task, send_message
from tests import factories
from tests.backends import sqlite_suite_only

pytestmark = [
    sqlite_suite_only("the lock belongs to the SQLite backend"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def no_busy_wait():
    """SQLite's busy handler off: a writer that meets another's write lock fails at once
    ("database is locked") instead of sleeping, so any contention shows."""
    options = connection.settings_dict["OPTIONS"]
    before = options["timeout"]
    options["timeout"] = 0
    connection.close()
    yield
    options["timeout"] = before
    connection.close()


def test_concurrent_sends_in_one_process_never_meet_the_busy_handler(tenant, no_busy_wait):
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    failures: list[BaseException] = []

    def sender(n: int) -> None:
        try:
            for i in range(25):
                send_message(
                    sender=Sender(tenant=tenant, agent=alice.model),
                    message={
                        "messageId": f"w{n}-{i}-{uuid.uuid4().hex[:6]}",
                        "role": "ROLE_USER",
                        "parts": [{"text": f"{n}/{i}"}],
                        "metadata": {"destination": bob.id},
                    },
                )
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sender, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    assert Task.objects.filter(recipient=bob.model).count() == 200
    assert not WRITERS.locked()


def test_the_lock_is_given_back_however_a_transaction_ends(tenant):
    with transaction.atomic():
        assert WRITERS.locked()
        factories.agent(tenant, name="committed")
    assert not WRITERS.locked()
    with pytest.raises(RuntimeError), transaction.atomic():
        factories.agent(tenant, name="rolled-back")
        raise RuntimeError("abandon")
    assert not WRITERS.locked()
    transaction.set_autocommit(False)
    connection.close()  # a connection closed inside its transaction
    assert not WRITERS.locked()


def test_a_send_and_an_ack_adapt_their_rows_before_taking_the_write_lock(tenant, monkeypatch):
    """A transaction holds the database's only write lock: a send's and an ack's row values
    are adapted for the database (Django's `get_db_prep_save`, field by field) before it
    begins, so the lock is held for the statements alone."""
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    adapted: list[bool] = []  # for each value adapted: whether the write lock was held
    original = Field.get_db_prep_save

    def observed(field, value, connection):
        adapted.append(WRITERS.locked())
        return original(field, value, connection)

    monkeypatch.setattr(Field, "get_db_prep_save", observed)
    task = send_message(
        sender=Sender(tenant=tenant, agent=alice.model),
        message={
            "messageId": f"prep-{uuid.uuid4().hex[:6]}",
            "role": "ROLE_USER",
            "parts": [{"text": "hello"}],
            "metadata": {"destination": bob.id},
        },
    )
    sent = len(adapted)
    act_on_task(
        sender=Sender(tenant=tenant, agent=bob.model),
        task_id=str(task.id),
        action=lifecycle.DEFAULT_ACTION,  # the recipient's ack
        message={
            "messageId": f"ack-{uuid.uuid4().hex[:6]}",
            "role": "ROLE_USER",
            "parts": [{"text": "on it"}],
        },
    )
    # Both wrote rows (a task and its event; the task's changes and an event), every value
    # adapted with the lock free.
    assert sent > 20 and len(adapted) > sent + 10
    assert not any(adapted)
    assert Task.objects.get(pk=task.pk).state == "completed"
