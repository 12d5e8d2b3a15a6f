"""The web UI's session streams `GET /ui/t/<slug>/events/` and `/ui/t/<slug>/agents/<id>/events/`,
against a real server process."""

from __future__ import annotations

import time

import httpx
import pytest
from django.conf import settings
from django.test import Client

from tenants import services as tenant_services
from tests import factories
from tests.live import SSEClient
from tests.messaging.test_streams import act, send

pytestmark = pytest.mark.django_db(transaction=True)


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def watch(broker, slug: str, cookie: str | None, path: str = "events/") -> SSEClient:
    headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"} if cookie else {}
    return SSEClient(f"{broker.url}/ui/t/{slug}/{path}", headers=headers)


@pytest.fixture
def member(tenant):
    user = factories.user("member@example.com")
    tenant_services.add_member(tenant=tenant, user=user)
    return user


def test_a_member_sees_every_event_of_the_tenant(broker, tenant, member):
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    stream = watch(broker, tenant.slug, session_cookie(member))
    try:
        assert stream.status == 200
        ready = stream.next()
        assert ready.event == "ready" and ready.json()["tenant"] == tenant.slug
        task = send(broker, alice, bob.id, "héllo")
        created = stream.next()
        assert created.event == "message"
        body = created.json()
        assert body["kind"] == "created" and body["taskId"] == task["id"]
        assert body["senderAgentId"] == alice.id and body["recipientAgentId"] == bob.id
        assert body["actor"] == "alice" and body["toState"] == "input_required"
        assert body["task"]["artifacts"][0]["parts"] == [{"text": "héllo"}]
        assert int(created.id) == body["eventId"]
        act(broker, bob, task["id"], "ack")
        update = stream.next()
        assert update.event == "task-update"
        assert update.json()["kind"] == "ack" and update.json()["toState"] == "completed"
    finally:
        stream.close()


def test_the_agent_filter_narrows_the_stream_to_one_agent(broker, tenant, member):
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    carol = factories.agent(tenant, name="carol")
    stream = watch(broker, tenant.slug, session_cookie(member), f"agents/{carol.id}/events/")
    try:
        assert stream.next().event == "ready"
        send(broker, alice, bob.id, "not carol's")
        to_carol = send(broker, alice, carol.id, "for carol")
        from_carol = send(broker, carol, bob.id, "from carol")
        events = stream.take(2)
        assert [e.json()["taskId"] for e in events] == [to_carol["id"], from_carol["id"]]
        assert stream.drain(0.5) == []
    finally:
        stream.close()


def test_outsiders_get_401_or_404(broker, tenant, other_tenant, member):
    cookie = session_cookie(member)
    anonymous = httpx.get(f"{broker.url}/ui/t/{tenant.slug}/events/")
    assert anonymous.status_code == 401
    other = httpx.get(
        f"{broker.url}/ui/t/{other_tenant.slug}/events/",
        headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"},
    )
    assert other.status_code == 404
    missing = httpx.get(
        f"{broker.url}/ui/t/no-such-tenant/events/",
        headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"},
    )
    assert missing.status_code == 404
    stranger = factories.agent(other_tenant, name="mallory")
    foreign_agent = httpx.get(
        f"{broker.url}/ui/t/{tenant.slug}/agents/{stranger.id}/events/",
        headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"},
    )
    assert foreign_agent.status_code == 404
    foreign_query = httpx.get(
        f"{broker.url}/ui/t/{tenant.slug}/events/?agent={stranger.id}",
        headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"},
    )
    assert foreign_query.status_code == 404


def test_other_tenants_events_never_reach_a_members_stream(broker, tenant, other_tenant, member):
    stream = watch(broker, tenant.slug, session_cookie(member))
    try:
        assert stream.next().event == "ready"
        mallory = factories.agent(other_tenant, name="mallory")
        send(broker, mallory, mallory.id, "elsewhere")
        assert stream.drain(1.5) == []
    finally:
        stream.close()


def test_logging_out_or_leaving_the_tenant_closes_the_stream(broker, tenant, member):
    from django.contrib.sessions.models import Session

    cookie = session_cookie(member)
    stream = watch(broker, tenant.slug, cookie)
    try:
        assert stream.next().event == "ready"
        Session.objects.filter(session_key=cookie).delete()  # what logging out does
        deadline = time.monotonic() + 6
        while not stream.closed.is_set() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert stream.closed.is_set()
        assert stream.drain(0.05)[-1].event == "closed"
    finally:
        stream.close()

    other = factories.user("other@example.com")
    tenant_services.add_member(tenant=tenant, user=other)
    stream = watch(broker, tenant.slug, session_cookie(other))
    try:
        assert stream.next().event == "ready"
        tenant.memberships.filter(user=other).delete()
        assert stream.closed.wait(6)
    finally:
        stream.close()


def test_a_replay_shows_each_events_task_as_it_was_then(broker, tenant, member):
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    task = send(broker, alice, bob.id, "Fix the uploader")
    act(broker, bob, task["id"], "accept", "on it")
    act(broker, bob, task["id"], "block", "Which branch?")
    act(broker, alice, task["id"], "reply", "main")
    act(broker, bob, task["id"], "complete", "Fixed in abc123")
    stream = watch(broker, tenant.slug, session_cookie(member), "events/?since=0")
    try:
        assert stream.next().event == "ready"
        events = [e.json() for e in stream.take(5)]
    finally:
        stream.close()
    assert [e["kind"] for e in events] == ["created", "accept", "block", "reply", "complete"]
    for event in events:
        state = event["task"]["status"]["state"]
        assert state == "TASK_STATE_" + event["toState"].upper(), event
    assert [e["task"]["metadata"].get("awaiting") for e in events] == [
        "recipient",
        None,
        "sender",
        None,
        None,
    ]
    assert events[2]["task"]["status"]["message"]["parts"] == [{"text": "Which branch?"}]
    assert [len(e["task"]["history"]) for e in events] == [1, 2, 3, 4, 5]
    assert [e["task"]["status"]["timestamp"] for e in events] == [e["at"] for e in events]
