"""Retention with frozen time: only what is due is removed, nothing else is touched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.forms.models import model_to_dict

from agents.models import Agent
from agents.services import deregister_agent
from hikyaku.celery import app
from messaging import retention
from messaging.models import PushConfig, Task, TaskEvent, WebhookDelivery
from tenants.models import ApiKey, Tenant
from tests import factories
from tests.messaging.rpc import act, message, result, send

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def at(days: float):
    return time_machine.travel(T0 + timedelta(days=days), tick=False)


def snapshot() -> dict:
    """Every row of every table retention may touch, by primary key."""
    return {
        model.__name__: {obj.pk: model_to_dict(obj) for obj in model.objects.all()}
        for model in (Tenant, ApiKey, Agent, Task, TaskEvent, PushConfig, WebhookDelivery)
    }


def delivery_row(task: dict, agent, *, days_old_at: float, nth: int) -> WebhookDelivery:
    with at(days_old_at):
        event = TaskEvent.objects.filter(task_id=task["id"]).order_by("id")[nth]
        return WebhookDelivery.objects.create(
            tenant=agent.tenant,
            event_id=event.id,
            task_id=task["id"],
            target="agent",
            agent=agent.model,
            url="https://hooks.example.com/x",
            outcome="delivered",
        )


@pytest.fixture
def world(settings, tenant, other_tenant):
    """Defaults: tasks 30 days, deregistered agents 7 days, delivery logs 14 days."""
    settings.HIKYAKU_RETENTION_DAYS = 30
    settings.HIKYAKU_DEREGISTERED_TTL_DAYS = 7
    settings.HIKYAKU_WEBHOOK_LOG_DAYS = 14
    w = {}
    with at(0):
        alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
        w["old_done"] = send(alice, bob.id, "old and acked")
        act(bob, w["old_done"]["id"], "ack")
        w["old_open"] = send(alice, bob.id, "old but still unread")
        w["old_working"] = send(alice, bob.id, "old, in progress")
        act(bob, w["old_working"]["id"], "accept")
        w["old_canceled"] = send(alice, bob.id, "withdrawn")
        result(alice, "CancelTask", {"id": w["old_canceled"]["id"]})
        w["old_broadcast"] = result(alice, "SendMessage", {"message": message("all", to="*")})[
            "task"
        ]
        result(
            alice,
            "CreateTaskPushNotificationConfig",
            {"taskId": w["old_done"]["id"], "url": "https://hooks.example.com/p"},
        )
        gone = factories.agent(tenant, name="gone")
        w["to_gone"] = send(alice, gone.id, "to an agent that left")
        w["from_gone"] = send(gone, bob.id, "from an agent that left")
        stranger = factories.agent(other_tenant, name="mallory")
        peer = factories.agent(other_tenant, name="trent")
        w["other_tenant_old_done"] = send(stranger, peer.id, "elsewhere")
        act(peer, w["other_tenant_old_done"]["id"], "ack")
    with at(25):
        w["recent_done"] = send(alice, bob.id, "acked last week")
        act(bob, w["recent_done"]["id"], "ack")
        deregister_agent(agent=gone.model)  # deregistered on day 25
        recent_gone = factories.agent(tenant, name="recent-gone")
        w["to_recent_gone"] = send(alice, recent_gone.id, "still kept")
    with at(33):
        deregister_agent(agent=recent_gone.model)  # deregistered on day 33
    w["old_log"] = delivery_row(w["recent_done"], bob, days_old_at=20, nth=0)
    w["new_log"] = delivery_row(w["recent_done"], bob, days_old_at=30, nth=1)
    w.update(alice=alice, bob=bob, gone=gone, recent_gone=recent_gone, stranger=stranger)
    return w


def test_only_what_is_due_is_removed_and_nothing_else_is_touched(world):
    w = world
    before = snapshot()
    with at(35):
        counts = retention.purge(batch_size=2)  # several batches
    after = snapshot()

    # Due: terminal tasks last changed > 30 days ago (of the old broadcast only its summary:
    # the deliveries are unread), every task of the agent deregistered > 7 days ago whatever
    # its state, that agent, and delivery logs > 14 days old.
    broadcast_summary = w["old_broadcast"]["id"]
    due_tasks = {
        w["old_done"]["id"],
        w["old_canceled"]["id"],
        broadcast_summary,
        w["to_gone"]["id"],
        w["from_gone"]["id"],
        w["other_tenant_old_done"]["id"],
    }
    deleted_tasks = {str(pk) for pk in before["Task"]} - {str(pk) for pk in after["Task"]}
    # The broadcast delivery to "gone" went with its agent.
    to_gone_broadcast = {
        str(pk)
        for pk, row in before["Task"].items()
        if row["type"] == "broadcast" and str(row["recipient"]) == w["gone"].id
    }
    assert deleted_tasks == due_tasks | to_gone_broadcast
    assert {str(pk) for pk in before["Agent"]} - {str(pk) for pk in after["Agent"]} == {
        w["gone"].id
    }
    assert set(before["WebhookDelivery"]) - set(after["WebhookDelivery"]) == {w["old_log"].pk}
    assert after["PushConfig"] == {}  # it belonged to a purged task
    deleted_events = set(before["TaskEvent"]) - set(after["TaskEvent"])
    assert deleted_events == {
        pk for pk, row in before["TaskEvent"].items() if str(row["task"]) in deleted_tasks
    }
    assert counts.as_dict() == {
        "tasks": len(deleted_tasks),
        "events": len(deleted_events),
        "agents": 1,
        "webhook_deliveries": 1,
    }
    # Every surviving row is exactly as it was.
    for table, rows in after.items():
        for pk, row in rows.items():
            assert row == before[table][pk], (table, pk)
    assert set(after["Tenant"]) == set(before["Tenant"])
    assert set(after["ApiKey"]) == set(before["ApiKey"])


def test_nothing_is_due_a_day_earlier(world):
    before = snapshot()
    # Old tasks are 29.9 days old, "gone" left 4.9 days ago, the old log is 9.9 days old.
    with at(29.9):
        counts = retention.purge()
    assert counts.as_dict() == {"tasks": 0, "events": 0, "agents": 0, "webhook_deliveries": 0}
    assert snapshot() == before


def test_survivors_still_work(world):
    w = world
    with at(35):
        retention.purge()
        assert result(w["bob"], "GetTask", {"id": w["old_open"]["id"]})["id"]
        assert act(w["bob"], w["old_working"]["id"], "complete")["status"]["state"] == (
            "TASK_STATE_COMPLETED"
        )
        assert send(w["alice"], w["bob"].id, "life goes on")["contextId"] == w["bob"].id


def test_dry_run_counts_exactly_what_a_purge_deletes(world):
    before = snapshot()
    with at(35):
        predicted = retention.purge(dry_run=True)
        assert snapshot() == before
        assert retention.purge() == predicted


def test_the_purge_command(world, capsys):
    with at(35):
        call_command("purge", "--dry-run")
        assert "Would delete:" in capsys.readouterr().out
        call_command("purge", "--batch-size", "3")
        out = capsys.readouterr().out
    assert out.startswith("Deleted:") and "1 deregistered agent(s)" in out
    with at(35):
        call_command("purge")
    assert "Deleted: 0 task(s), 0 event(s), 0 deregistered agent(s)" in capsys.readouterr().out


def test_beat_runs_the_purge_and_the_webhook_sweeper(settings):
    schedule = settings.CELERY_BEAT_SCHEDULE
    tasks = {entry["task"] for entry in schedule.values()}
    assert tasks == {"messaging.purge_expired", "messaging.retry_due_webhooks"}
    app.loader.import_default_modules()
    assert tasks <= set(app.tasks)


def test_the_purge_task_is_a_thin_wrapper(world):
    from messaging.tasks import purge_expired

    with at(35):
        predicted = retention.purge(dry_run=True).as_dict()
        assert predicted["tasks"] > 0
        assert purge_expired() == predicted
        assert retention.purge(dry_run=True).as_dict()["tasks"] == 0
