"""The store contract (docs/ARCHITECTURE.md, "One write path"): every store writes the same
rows and gives the same refusals, for every action from every phase by every party, every
policy shape, every webhook and push-config setting, and replays.

The expected outcomes below are written out by hand from docs/PROTOCOL.md §4.4 and §4.5, not
read from messaging/lifecycle.py or messaging/policy.py, so a wrong row there fails here too.
Each test runs through every store the database under test can run: PortableStore everywhere
(it is what SQLite uses), and PostgresStore on Postgres, where
`test_both_stores_write_the_same_rows` also compares the two field by field.
"""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.utils import timezone

from agents import services as agent_services
from hikyaku.errors import (
    DestinationNotFound,
    InvalidRequest,
    TaskNotCancelable,
    TaskNotFound,
    UnsupportedOperation,
)
from messaging import lifecycle, services, store
from messaging.models import PushConfig, Task, TaskEvent, WebhookDelivery
from messaging.parties import Sender
from tests import factories

pytestmark = pytest.mark.django_db

# PostgresStore's statements need Postgres; PortableStore runs on either database.
STORES = ["portable", "postgres"] if connection.vendor == "postgresql" else ["portable"]


@pytest.fixture(params=STORES)
def writer(request, monkeypatch):
    """Which store the services write through."""
    chosen = store.PostgresStore() if request.param == "postgres" else store.PortableStore()
    monkeypatch.setattr(store, "current", lambda: chosen)
    return request.param


# The lifecycle, by hand (docs/PROTOCOL.md §4.4) ------------------------------------------------

PHASES = {  # name: (state, awaiting)
    "unread": ("input_required", "recipient"),
    "working": ("working", ""),
    "blocked": ("input_required", "sender"),
    "completed": ("completed", ""),
    "rejected": ("rejected", ""),
    "failed": ("failed", ""),
    "canceled": ("canceled", ""),
}
LIVE = {"unread", "working", "blocked"}
# How a task reaches each phase: (who, action) from unread.
REACH = {
    "unread": [],
    "working": [("recipient", "accept")],
    "blocked": [("recipient", "accept"), ("recipient", "block")],
    "completed": [("recipient", "ack")],
    "rejected": [("recipient", "reject")],
    "failed": [("recipient", "accept"), ("recipient", "fail")],
    "canceled": [("sender", "cancel")],
}
# action: (who may take it, from which phases, to which phase (None: unchanged))
LIFECYCLE = {
    "ack": ({"recipient"}, {"unread"}, "completed"),
    "accept": ({"recipient"}, {"unread"}, "working"),
    "complete": ({"recipient"}, LIVE, "completed"),
    "reject": ({"recipient"}, LIVE, "rejected"),
    "fail": ({"recipient"}, {"working"}, "failed"),
    "block": ({"recipient"}, {"working"}, "blocked"),
    "reply": ({"sender"}, {"blocked"}, "working"),
    "comment": ({"sender", "recipient"}, LIVE, None),
    "cancel": ({"sender"}, {"unread"}, "canceled"),
}
STATUS_MESSAGE = {"reject", "fail", "block"}  # their message becomes the task's status


def _message(text: str = "hello", **metadata) -> dict:
    return {
        "messageId": f"m-{uuid.uuid4().hex}",
        "role": "ROLE_USER",
        "parts": [{"text": text}, {"data": {"n": 1, "nested": ["ü", None]}}],
        "metadata": metadata,
    }


class Pair:
    """A sender and a recipient agent of one tenant, as services callers."""

    def __init__(self, tenant, **recipient_fields):
        self.tenant = tenant
        self.alice = factories.agent(tenant, name="alice").model
        self.bob = factories.agent(tenant, name="bob", **recipient_fields).model

    def sender(self, who: str) -> Sender:
        agent = self.alice if who == "sender" else self.bob
        agent.refresh_from_db()
        return Sender(tenant=self.tenant, agent=agent)

    def send(self, **metadata) -> Task:
        return services.deliver_unicast(
            sender=self.sender("sender"), message=_message(**metadata), to=str(self.bob.id)
        )

    def act(self, who: str, task_id, action: str, message: dict | None = None) -> Task:
        if action == "cancel":
            return services.cancel_task(sender=self.sender(who), task_id=str(task_id))
        return services.act_on_task(
            sender=self.sender(who),
            task_id=str(task_id),
            action=action,
            message=message or _message(f"{action} by {who}"),
        )


@pytest.fixture
def pair(tenant) -> Pair:
    return Pair(tenant)


def _row(task_id) -> dict:
    task = Task.objects.get(pk=task_id)
    return {f.attname: getattr(task, f.attname) for f in Task._meta.concrete_fields}


@pytest.mark.parametrize("phase", list(PHASES))
@pytest.mark.parametrize("action", list(LIFECYCLE))
@pytest.mark.parametrize("who", ["sender", "recipient"])
def test_every_action_from_every_phase_by_every_party(writer, pair, phase, action, who):
    task = pair.send()
    for step_who, step in REACH[phase]:
        pair.act(step_who, task.id, step)
    before, events_before = _row(task.id), TaskEvent.objects.filter(task_id=task.id).count()
    assert (before["state"], before["awaiting"]) == PHASES[phase]
    allowed_by, sources, target = LIFECYCLE[action]
    message = _message(f"{action} by {who}")

    if who not in allowed_by or phase not in sources:
        refused = TaskNotCancelable if action == "cancel" else UnsupportedOperation
        with pytest.raises(refused):
            pair.act(who, task.id, action, message)
        assert _row(task.id) == before  # nothing written
        assert TaskEvent.objects.filter(task_id=task.id).count() == events_before
        return

    pair.act(who, task.id, action, message)
    after = _row(task.id)
    expected_phase = target or phase
    assert (after["state"], after["awaiting"]) == PHASES[expected_phase]
    event = TaskEvent.objects.filter(task_id=task.id).latest("id")
    actor = pair.alice if who == "sender" else pair.bob
    assert (event.kind, event.from_state, event.to_state, event.actor_id) == (
        action,
        before["state"],
        after["state"],
        actor.id,
    )
    assert event.created_at == after["updated_at"]
    if target is not None:
        assert after["status_at"] == after["updated_at"] > before["status_at"]
    else:
        assert after["status_at"] == before["status_at"]
    if action == "cancel":  # CancelTask carries no message
        assert after["history"] == before["history"] and event.payload == {}
        assert after["artifacts"] == before["artifacts"]
        assert "statusMessage" not in after["metadata"]
        return
    entry = after["history"][-1]
    assert after["history"][:-1] == before["history"]
    assert entry["parts"] == message["parts"]
    assert (entry["taskId"], entry["contextId"]) == (str(task.id), str(pair.bob.id))
    assert entry["role"] == ("ROLE_AGENT" if who == "recipient" else "ROLE_USER")
    assert event.payload == {"messageId": message["messageId"], "parts": message["parts"]}
    if action == "complete":
        assert [a["name"] for a in after["artifacts"]] == ["message", "result"]
        assert after["artifacts"][-1]["parts"] == message["parts"]
    else:
        assert after["artifacts"] == before["artifacts"]
    if action in STATUS_MESSAGE:
        assert after["metadata"]["statusMessage"] == entry
    else:
        assert "statusMessage" not in after["metadata"]


def test_a_stranger_of_the_tenant_cannot_act_on_anything(writer, pair, tenant):
    task = pair.send()
    carol = Sender(tenant=tenant, agent=factories.agent(tenant, name="carol").model)
    for action in LIFECYCLE:
        with pytest.raises(TaskNotFound):
            if action == "cancel":
                services.cancel_task(sender=carol, task_id=str(task.id))
            else:
                services.act_on_task(
                    sender=carol, task_id=str(task.id), action=action, message=_message()
                )
    assert TaskEvent.objects.filter(task_id=task.id).count() == 1


# The policy, by hand (docs/PROTOCOL.md §4.5) ----------------------------------------------------

# shape: (alice's policy, bob's policy, message sensitivity,
#         delivered?, alice may still read/act, bob may still read/act)
SHAPES = {
    "open": ({}, {}, "internal", True, True, True),
    "send_to names him": ({"send_to": "bob"}, {}, "internal", True, True, True),
    "send_to excludes him": ({"send_to": []}, {}, "internal", False, False, False),
    "receive_from names her": ({}, {"receive_from": "alice"}, "internal", True, True, True),
    "receive_from excludes her": ({}, {"receive_from": []}, "internal", False, False, False),
    "his ceiling is lower": ({}, {"ceiling": "public-safe"}, "internal", False, True, False),
    "her ceiling is lower": ({"ceiling": "public-safe"}, {}, "internal", False, False, True),
    "restricted for both": (
        {"ceiling": "restricted"},
        {"ceiling": "restricted"},
        "restricted",
        True,
        True,
        True,
    ),
    "restricted above his": ({"ceiling": "restricted"}, {}, "restricted", False, True, False),
    "public-safe for anyone": (
        {"ceiling": "public-safe"},
        {"ceiling": "public-safe"},
        "public-safe",
        True,
        True,
        True,
    ),
}


def _apply_policy(agent, spec: dict, ids: dict) -> None:
    lists = {
        field: [ids[name] for name in ([value] if isinstance(value, str) else value)]
        for field, value in spec.items()
        if field in ("send_to", "receive_from")
    }
    agent_services.set_agent_policy(agent=agent, disclosure_ceiling=spec.get("ceiling"), **lists)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_policy_shape_on_sends_reads_and_actions(writer, pair, shape):
    alice_policy, bob_policy, sensitivity, delivered, alice_reads, bob_reads = SHAPES[shape]
    ids = {"alice": str(pair.alice.id), "bob": str(pair.bob.id)}
    # A task from before the policy: narrowing a policy closes access to history too.
    both_restricted = {"ceiling": "restricted"}
    _apply_policy(pair.alice, both_restricted, ids)
    _apply_policy(pair.bob, both_restricted, ids)
    earlier = pair.send(sensitivity=sensitivity)
    _apply_policy(pair.alice, {"ceiling": "internal", **alice_policy}, ids)
    _apply_policy(pair.bob, {"ceiling": "internal", **bob_policy}, ids)

    if delivered:
        task = pair.send(sensitivity=sensitivity)
        assert Task.objects.get(pk=task.id).recipient_id == pair.bob.id
    else:
        with pytest.raises(DestinationNotFound):
            pair.send(sensitivity=sensitivity)
        assert Task.objects.count() == 1
    for who, may in (("sender", alice_reads), ("recipient", bob_reads)):
        action = "comment"
        if may:
            pair.act(who, earlier.id, action)
        else:
            with pytest.raises(TaskNotFound):
                pair.act(who, earlier.id, action)
    assert TaskEvent.objects.filter(task_id=earlier.id).count() == 1 + alice_reads + bob_reads


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_broadcast_reaches_exactly_whom_each_policy_shape_allows(writer, pair, tenant, shape):
    alice_policy, bob_policy, sensitivity, delivered, _, _ = SHAPES[shape]
    carol = factories.agent(tenant, name="carol").model  # open, default ceiling
    ids = {"alice": str(pair.alice.id), "bob": str(pair.bob.id)}
    _apply_policy(pair.alice, alice_policy, ids)
    _apply_policy(pair.bob, bob_policy, ids)
    summary = services.deliver_broadcast(
        sender=pair.sender("sender"), message=_message("all", sensitivity=sensitivity)
    )
    reached = set(
        Task.objects.filter(broadcast_id=summary.broadcast_id, type="broadcast").values_list(
            "recipient_id", flat=True
        )
    )
    # carol is reachable when alice's own policy lets her send anything at that level to
    # someone not on a list (send_to lists only bob or nobody).
    carol_ok = (
        "send_to" not in alice_policy
        and _rank(alice_policy.get("ceiling", "internal")) >= _rank(sensitivity)
        and _rank("internal") >= _rank(sensitivity)
    )
    expected = ({pair.bob.id} if delivered else set()) | ({carol.id} if carol_ok else set())
    assert reached == expected
    stored = Task.objects.get(pk=summary.pk)
    assert stored.metadata["recipientCount"] == len(expected)
    data = stored.artifacts[0]["parts"][0]["data"]
    assert sorted(data["deliveryTaskIds"]) == sorted(
        str(i)
        for i in Task.objects.filter(
            broadcast_id=summary.broadcast_id, type="broadcast"
        ).values_list("id", flat=True)
    )
    kinds = list(
        TaskEvent.objects.filter(task__broadcast_id=summary.broadcast_id)
        .order_by("id")
        .values_list("task__type", flat=True)
    )
    assert kinds == ["broadcast"] * len(expected) + ["broadcast_summary"]  # the summary's last


def _rank(level: str) -> int:
    return ["public-safe", "internal", "restricted"].index(level)


# Webhooks and push configs ---------------------------------------------------------------------


@pytest.mark.parametrize("alice_hook", [False, True])
@pytest.mark.parametrize("bob_hook", ["none", "active", "disabled"])
@pytest.mark.parametrize("push_configs", [0, 2])
def test_each_event_owes_exactly_its_webhook_deliveries(
    writer, tenant, alice_hook, bob_hook, push_configs
):
    hook = "https://hooks.example.com/{}"
    pair = Pair(tenant)
    if alice_hook:
        agent_services.update_agent(agent=pair.alice, webhook_url=hook.format("alice"))
    if bob_hook != "none":
        agent_services.update_agent(agent=pair.bob, webhook_url=hook.format("bob"))
    task = pair.send()
    created = TaskEvent.objects.get(task_id=task.id)
    expected_created = {("agent", pair.bob.id)} if bob_hook != "none" else set()
    assert _deliveries(created.id) == expected_created
    for n in range(push_configs):
        PushConfig.objects.create(
            tenant=tenant,
            task_id=task.id,
            config_id=f"c{n}",
            url=hook.format(n),
            created_by=pair.alice,
        )
        Task.objects.filter(pk=task.id).update(push_configured=True)
    if bob_hook == "disabled":
        agent_services.set_agent_enabled(agent=pair.bob, enabled=False)
    pair.act("sender", task.id, "comment")
    event = TaskEvent.objects.filter(task_id=task.id).latest("id")
    expected = set()
    if alice_hook:
        expected.add(("agent", pair.alice.id))
    if bob_hook == "active":
        expected.add(("agent", pair.bob.id))
    expected |= {("push_config", pk) for pk in PushConfig.objects.values_list("pk", flat=True)}
    assert _deliveries(event.id) == expected
    for row in WebhookDelivery.objects.filter(event_id=event.id):
        assert (row.tenant_id, row.task_id, row.outcome, row.attempts) == (
            tenant.pk,
            task.id,
            "pending",
            0,
        )


def test_a_broadcast_owes_deliveries_to_its_recipients_with_webhooks(writer, tenant):
    pair = Pair(tenant)
    agent_services.update_agent(agent=pair.bob, webhook_url="https://hooks.example.com/bob")
    carol = factories.agent(tenant, name="carol").model
    summary = services.deliver_broadcast(sender=pair.sender("sender"), message=_message())
    rows = WebhookDelivery.objects.all()
    assert [(r.agent_id, r.url) for r in rows] == [(pair.bob.id, "https://hooks.example.com/bob")]
    (row,) = rows
    assert Task.objects.get(pk=row.task_id).recipient_id == pair.bob.id
    assert TaskEvent.objects.get(pk=row.event_id).task_id == row.task_id
    assert carol.id in set(
        Task.objects.filter(broadcast_id=summary.broadcast_id).values_list(
            "recipient_id", flat=True
        )
    )


def _deliveries(event_id: int) -> set[tuple[str, object]]:
    return {
        (row.target, row.agent_id if row.target == "agent" else row.push_config_id)
        for row in WebhookDelivery.objects.filter(event_id=event_id)
    }


# Replays --------------------------------------------------------------------------------------


def test_a_compare_and_set_decided_on_a_stale_read_writes_nothing(writer, pair):
    """Two comments decided on the same read: the phase is the same for both, so only the
    row's `updated_at` tells that the second read is stale. Its write must fail (the caller
    reads again and retries), or the first comment would vanish from the history."""
    task = pair.send()
    stale = Task.objects.get(pk=task.id)
    expected = store.Expected.of(stale)
    pair.act("sender", task.id, "comment", _message("first"))
    change = lifecycle.apply(
        lifecycle.TRANSITIONS["comment"],
        task=stale,
        roles={"recipient"},
        message=_message("second"),
        now=timezone.now(),
    )
    for column in lifecycle.Change.COLUMNS:
        setattr(stale, column, getattr(change, column))
    event = services.event_row(
        stale, pair.sender("recipient"), "comment", change.from_state, change.payload
    )
    assert store.current().compare_and_set(stale, expected, event) is False
    texts = [entry["parts"][0]["text"] for entry in Task.objects.get(pk=task.id).history]
    assert texts == ["hello", "first"]
    assert TaskEvent.objects.filter(task_id=task.id).count() == 2  # created, the first comment


def test_replays_write_nothing_new(writer, pair):
    message = _message("once")
    first = services.deliver_unicast(
        sender=pair.sender("sender"), message=message, to=str(pair.bob.id)
    )
    again = services.deliver_unicast(
        sender=pair.sender("sender"), message=dict(message), to=str(pair.bob.id)
    )
    assert again.id == first.id
    with pytest.raises(InvalidRequest, match="messageId was already used"):
        services.deliver_unicast(
            sender=pair.sender("sender"),
            message={**message, "parts": [{"text": "other"}]},
            to=str(pair.bob.id),
        )
    shout = _message("everyone")
    summary = services.deliver_broadcast(sender=pair.sender("sender"), message=shout)
    assert services.deliver_broadcast(sender=pair.sender("sender"), message=dict(shout)).id == (
        summary.id
    )
    ack = _message("ok")
    pair.act("recipient", first.id, "ack", ack)
    retried = pair.act("recipient", first.id, "ack", dict(ack))  # the answer was lost
    assert retried.state == "completed"
    with pytest.raises(UnsupportedOperation):
        pair.act("recipient", first.id, "ack", _message("a new ack"))
    assert Task.objects.count() == 3  # the unicast, one broadcast delivery (bob), the summary
    assert TaskEvent.objects.count() == 1 + 2 + 1


# The two stores against each other (Postgres) ------------------------------------------------


def _normalised(task_id) -> tuple[dict, list[dict]]:
    row = _row(task_id)
    for key in ("id", "message_id", "content_hash", "created_at", "updated_at", "status_at"):
        row.pop(key)
    row["message"] = {k: v for k, v in row["message"].items() if k != "messageId"}
    for artifact in row["artifacts"]:
        artifact["artifactId"] = artifact["artifactId"].split("-")[0]
        for part in artifact["parts"]:
            part.get("data", {}).pop("deliveryTaskIds", None)
    for entry in row["history"]:
        entry.pop("messageId", None)
        entry.pop("taskId", None)
    row["metadata"].pop("broadcastId", None)
    row.pop("broadcast_id")
    status = row["metadata"].get("statusMessage")
    if status:
        status.pop("messageId", None)
        status.pop("taskId", None)
    events = []
    for event in TaskEvent.objects.filter(task_id=task_id).order_by("id"):
        fields = {f.attname: getattr(event, f.attname) for f in TaskEvent._meta.concrete_fields}
        for key in ("id", "task_id", "created_at"):
            fields.pop(key)
        fields["payload"] = {k: v for k, v in fields["payload"].items() if k != "messageId"}
        events.append(fields)
    return row, events


@pytest.mark.skipif(len(STORES) < 2, reason="PostgresStore's statements need Postgres")
def test_both_stores_write_the_same_rows(tenant, monkeypatch):
    pair = Pair(tenant)
    agent_services.update_agent(agent=pair.bob, webhook_url="https://hooks.example.com/bob")
    carol = factories.agent(tenant, name="carol").model
    agent_services.set_agent_policy(agent=carol, receive_from=[str(pair.bob.id)])

    def scenario() -> list:
        task = pair.send(note="ünïcode")
        for who, action in [
            ("recipient", "accept"),
            ("sender", "comment"),
            ("recipient", "block"),
            ("sender", "reply"),
            ("recipient", "complete"),
        ]:
            pair.act(who, task.id, action, _message(f"{action} by {who}"))
        summary = services.deliver_broadcast(sender=pair.sender("sender"), message=_message())
        deliveries = Task.objects.filter(broadcast_id=summary.broadcast_id).order_by(
            "type", "recipient_id"
        )
        owed = sorted(
            (r.target, str(r.agent_id), r.url)
            for r in WebhookDelivery.objects.filter(
                task_id__in=[task.id, *deliveries.values_list("id", flat=True)]
            )
        )
        return [_normalised(task.id), *[_normalised(t.pk) for t in deliveries], owed]

    monkeypatch.setattr(store, "current", lambda: store.PostgresStore())
    one_statement = scenario()
    monkeypatch.setattr(store, "current", lambda: store.PortableStore())
    portable = scenario()
    assert one_statement == portable
    assert len(one_statement) == 4  # the unicast, bob's delivery, the summary, the webhooks
