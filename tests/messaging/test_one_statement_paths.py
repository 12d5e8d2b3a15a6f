"""The Postgres one-statement paths store exactly what the portable paths store.

A unicast send and the recipient's ack/accept run as single hand-written statements on
Postgres (messaging/services.py); every other database, and every unusual case, takes the
portable path through the model. The same operation done both ways must leave identical
rows, field by field, apart from ids and clocks.
"""

import uuid

import pytest
from django.db import connection

from messaging import services
from messaging.models import Task, TaskEvent
from messaging.parties import Sender

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="Postgres-only paths"),
]

VOLATILE_TASK = {"id", "message_id", "content_hash", "created_at", "updated_at", "status_at"}
VOLATILE_EVENT = {"id", "task", "created_at"}


def _message(text: str, **extra) -> dict:
    return {
        "messageId": f"m-{uuid.uuid4().hex}",
        "role": "ROLE_USER",
        "parts": [{"text": text}, {"data": {"n": 1, "nested": ["ü", None]}}],
        "metadata": {"destination": "ignored here", "note": "ünïcode"},
        **extra,
    }


def _task_row(task_id) -> dict:
    task = Task.objects.get(pk=task_id)
    row = {f.name: getattr(task, f.attname) for f in Task._meta.concrete_fields}
    for artifact in row["artifacts"]:
        artifact["artifactId"] = artifact["artifactId"].split("-")[0]  # random suffix
    row["message"].pop("messageId")
    for entry in row["history"]:
        entry.pop("messageId", None)
        entry.pop("taskId", None)
    return {k: v for k, v in row.items() if k not in VOLATILE_TASK}


def _event_rows(task_id) -> list[dict]:
    events = TaskEvent.objects.filter(task_id=task_id).order_by("id")
    out = []
    for event in events:
        row = {f.name: getattr(event, f.attname) for f in TaskEvent._meta.concrete_fields}
        row["payload"] = {k: v for k, v in row["payload"].items() if k != "messageId"}
        out.append({k: v for k, v in row.items() if k not in VOLATILE_EVENT})
    return out


def _portable(monkeypatch):
    """Run the next operations as on any other database."""
    monkeypatch.setattr(services, "_FAST_ACTIONS", frozenset())
    monkeypatch.setattr(
        services, "_store_unicast_in_one_statement", services._store_unicast_portably
    )
    monkeypatch.setattr(services, "_broadcast_in_one_statement", services._broadcast_portably)


@pytest.mark.parametrize("action", ["ack", "accept"])
def test_send_then_recipient_action_matches_the_portable_path(
    agent, peer, tenant, monkeypatch, action
):
    alice = Sender(tenant=tenant, agent=agent.refresh())
    bob = Sender(tenant=tenant, agent=peer.refresh())

    def scenario() -> str:
        task = services.deliver_unicast(sender=alice, message=_message("review"), to=peer.id)
        reply = _message("on it")
        reply.pop("metadata")
        services.act_on_task(sender=bob, task_id=str(task.id), action=action, message=reply)
        return task.id

    fast = scenario()
    _portable(monkeypatch)
    portable = scenario()

    assert connection.vendor == "postgresql"
    assert _task_row(fast) == _task_row(portable)
    assert _event_rows(fast) == _event_rows(portable)
    assert [e["kind"] for e in _event_rows(fast)] == ["created", action]


def test_an_action_the_one_statement_path_declines_still_gets_the_right_answer(agent, peer, tenant):
    """A sender acking its own outgoing task, a second ack, and an ack of a task in another
    state fall through to the general path and get its refusals."""
    alice = Sender(tenant=tenant, agent=agent.refresh())
    bob = Sender(tenant=tenant, agent=peer.refresh())
    task = services.deliver_unicast(sender=alice, message=_message("review"), to=peer.id)
    with pytest.raises(services.UnsupportedOperation, match="recipient"):
        services.act_on_task(
            sender=alice, task_id=str(task.id), action="ack", message=_message("x")
        )
    services.act_on_task(sender=bob, task_id=str(task.id), action="ack", message=_message("ok"))
    with pytest.raises(services.UnsupportedOperation, match="terminal"):
        services.act_on_task(sender=bob, task_id=str(task.id), action="ack", message=_message("x"))
    assert TaskEvent.objects.filter(task_id=task.id).count() == 2


def test_broadcast_matches_the_portable_path(agent, peer, tenant, monkeypatch):
    from tests import factories

    carol = factories.agent(tenant, name="carol")
    # Policy shapes both paths must apply: carol accepts only bob, so alice cannot reach her.
    from agents import services as agent_services

    agent_services.set_agent_policy(agent=carol.model, receive_from=[peer.id])
    alice = Sender(tenant=tenant, agent=agent.refresh())

    def scenario() -> Task:
        return services.deliver_broadcast(sender=alice, message=_message("all hands"))

    def rows_of(summary: Task) -> tuple:
        deliveries = Task.objects.filter(broadcast_id=summary.broadcast_id).exclude(pk=summary.pk)
        ids = summary.artifacts[0]["parts"][0]["data"]["deliveryTaskIds"]
        assert ids == [str(t.id) for t in deliveries.order_by("recipient_id")]
        by_recipient = sorted(deliveries, key=lambda t: str(t.recipient_id))
        events = [_event_rows(t.id) for t in by_recipient] + [_event_rows(summary.pk)]
        tasks = [_task_row(t.id) for t in by_recipient] + [_task_row(summary.pk)]
        for row in tasks:
            row.pop("broadcast_id")
            row["metadata"].pop("broadcastId")
            for artifact in row["artifacts"]:
                for part in artifact["parts"]:
                    part.get("data", {}).pop("deliveryTaskIds", None)
        order = list(
            TaskEvent.objects.filter(task__broadcast_id=summary.broadcast_id)
            .order_by("id")
            .values_list("task__type", flat=True)
        )
        return tasks, events, order

    fast = rows_of(scenario())
    _portable(monkeypatch)
    portable = rows_of(scenario())

    assert fast == portable
    tasks, _, order = fast
    assert [t["recipient"] for t in tasks] == sorted([peer.model.pk]) + [None]
    assert order == ["broadcast", "broadcast_summary"]  # the summary's event comes last
