"""Credential lifecycle: key expiry and rotation, throttled last-use stamps, agent-token
rotation by the agent and by owners, "require agent tokens", webhook secrets.

Open streams close through `identity_is_current` (what every stream re-checks on wake-up and
periodically), so these tests assert it alongside the request surfaces."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.auth import authenticate_agent, identity_is_current
from agents.models import Agent
from agents.services import (
    deregister_agent,
    revoke_api_key,
    rotate_agent_token,
    set_agent_enabled,
)
from hikyaku.errors import InvalidRequest, Unauthenticated
from tenants.models import ApiKey
from tenants.selectors import api_key_by_raw
from tests import factories
from tests.messaging.rpc import call

pytestmark = pytest.mark.django_db


def as_key(client, key: str, agent_id: str, path: str = "/api/v1/agents"):
    return client.get(path, HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_X_AGENT_ID=agent_id)


def rpc_with_key(key: str, agent_id: str):
    return call(
        None,
        "ListTasks",
        {"contextId": agent_id},
        headers={"Authorization": f"Bearer {key}", "X-Agent-Id": agent_id},
    )


# API keys --------------------------------------------------------------------------------------


def test_an_expired_key_is_refused_everywhere_at_once(client, tenant, agent):
    key = factories.api_key(tenant, expires_at=timezone.now() + timedelta(minutes=5))
    identity = authenticate_agent(authorization=f"Bearer {key}", agent_id=agent.id)
    assert as_key(client, key, agent.id).status_code == 200
    assert rpc_with_key(key, agent.id).status_code == 200
    with time_machine.travel(timezone.now() + timedelta(minutes=5, seconds=1)):
        assert not identity_is_current(identity)  # an open stream closes
        assert as_key(client, key, agent.id).status_code == 401
        assert rpc_with_key(key, agent.id).status_code == 401
        register = client.post(
            "/api/v1/agents",
            {"name": "late", "description": ""},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key}",
        )
        assert register.status_code == 401
        # The agent's own token is a separate credential and still works.
        assert factories.AgentClient(agent).get("/api/v1/agents").status_code == 200


def test_several_active_keys_rotate_without_downtime(client, tenant, agent):
    old = factories.api_key(tenant, label="2025")
    new = factories.api_key(tenant, label="2026")
    old_identity = authenticate_agent(authorization=f"Bearer {old}", agent_id=agent.id)
    new_identity = authenticate_agent(authorization=f"Bearer {new}", agent_id=agent.id)
    assert ApiKey.objects.filter(ApiKey.active_q(), tenant=tenant).count() == 2
    assert revoke_api_key(api_key=api_key_by_raw(old)).deregistered == 0  # not the last key
    assert not identity_is_current(old_identity)
    assert identity_is_current(new_identity)
    assert as_key(client, old, agent.id).status_code == 401
    assert as_key(client, new, agent.id).status_code == 200
    assert agent.refresh().status == Agent.Status.ACTIVE


def test_last_used_at_is_throttled_not_written_per_request(settings, client, api_key, agent):
    settings.HIKYAKU_TOUCH_INTERVAL_SECONDS = 60

    def key_updates(n: int) -> int:
        with CaptureQueriesContext(connection) as ctx:
            for _ in range(n):
                assert as_key(client, api_key, agent.id).status_code == 200
        return sum(
            1
            for q in ctx.captured_queries
            if q["sql"].startswith("UPDATE") and "tenants_apikey" in q["sql"]
        )

    start = timezone.now()
    with time_machine.travel(start, tick=False):
        assert key_updates(20) == 1
        assert key_updates(20) == 0
        first = api_key_by_raw(api_key).last_used_at
    with time_machine.travel(start + timedelta(seconds=61), tick=False):
        assert key_updates(20) == 1
    assert api_key_by_raw(api_key).last_used_at > first


def test_last_seen_at_is_throttled_too(settings, agent):
    settings.HIKYAKU_TOUCH_INTERVAL_SECONDS = 60
    client = factories.AgentClient(agent)
    with CaptureQueriesContext(connection) as ctx:
        for _ in range(20):
            client.get("/api/v1/agents")
    updates = [q for q in ctx.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1 and "last_seen_at" in updates[0]["sql"]


# Agent tokens ----------------------------------------------------------------------------------


def test_an_agent_rotating_its_token_invalidates_the_old_one_at_once(client, agent):
    identity = authenticate_agent(authorization=f"Bearer {agent.token}", agent_id=None)
    response = factories.AgentClient(agent).post(f"/api/v1/agents/{agent.id}/token")
    assert response.status_code == 200
    new_token = response.json()["agent_token"]
    assert new_token != agent.token
    assert not identity_is_current(identity)
    old = client.get("/api/v1/agents", HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    assert old.status_code == 401
    assert call(agent, "ListTasks", {"contextId": agent.id}).status_code == 401
    new = client.get("/api/v1/agents", HTTP_AUTHORIZATION=f"Bearer {new_token}")
    assert new.status_code == 200


def test_an_agent_cannot_rotate_another_agents_token(agent, peer):
    response = factories.AgentClient(agent).post(f"/api/v1/agents/{peer.id}/token")
    assert response.status_code == 403
    assert factories.AgentClient(peer).get("/api/v1/agents").status_code == 200


def test_owners_rotate_tokens_even_of_disabled_agents_but_not_deregistered(agent, peer):
    set_agent_enabled(agent=agent.model, enabled=False)
    raw = rotate_agent_token(agent=agent.model)
    set_agent_enabled(agent=agent.model, enabled=True)
    with pytest.raises(Unauthenticated):
        authenticate_agent(authorization=f"Bearer {agent.token}", agent_id=None)
    assert (
        authenticate_agent(authorization=f"Bearer {raw}", agent_id=None).agent.pk == agent.model.pk
    )
    deregister_agent(agent=peer.model)
    with pytest.raises(InvalidRequest):
        rotate_agent_token(agent=peer.model)


@pytest.fixture
def admin_client(client):
    user = factories.user("root@example.com")
    user.is_staff = user.is_superuser = True
    user.save()
    client.force_login(user)
    return client


def test_owners_rotate_tokens_from_the_admin(admin_client, agent, peer):
    identity = authenticate_agent(authorization=f"Bearer {agent.token}", agent_id=None)
    response = admin_client.post(
        "/admin/agents/agent/",
        {"action": "rotate_token", "_selected_action": [agent.id]},
        follow=True,
    )
    assert response.status_code == 200
    shown = re.findall(r"hka_[A-Za-z0-9]{40}", response.content.decode())
    assert len(shown) == 1
    assert not identity_is_current(identity)
    assert authenticate_agent(authorization=f"Bearer {shown[0]}", agent_id=None).agent.pk == (
        agent.model.pk
    )
    assert factories.AgentClient(peer).get("/api/v1/agents").status_code == 200


def test_the_admin_shows_keys_and_the_token_requirement(admin_client, tenant, api_key):
    factories.api_key(tenant, label="expiring", expires_at=timezone.now() + timedelta(days=1))
    page = admin_client.get(f"/admin/tenants/tenant/{tenant.pk}/change/").content.decode()
    assert "Require agent tokens" in page and "operator credential" in page
    assert page.count("hky_") >= 2 and "expiring" in page
    keys = admin_client.get("/admin/tenants/apikey/?status=active").content.decode()
    assert "expiring" in keys
    assert (
        "expiring" not in admin_client.get("/admin/tenants/apikey/?status=revoked").content.decode()
    )


# "Require agent tokens" ------------------------------------------------------------------------


def test_requiring_agent_tokens_turns_off_the_key_identity(client, tenant, api_key, agent):
    identity = authenticate_agent(authorization=f"Bearer {api_key}", agent_id=agent.id)
    tenant.require_agent_tokens = True
    tenant.save()
    assert not identity_is_current(identity)
    response = as_key(client, api_key, agent.id)
    assert response.status_code == 401
    assert "agent tokens" in response.json()["error"]["message"]
    assert rpc_with_key(api_key, agent.id).status_code == 401
    assert factories.AgentClient(agent).get("/api/v1/agents").status_code == 200
    # Registration still takes the key: it is the operator credential.
    register = client.post(
        "/api/v1/agents",
        {"name": "new", "description": ""},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_key}",
    )
    assert register.status_code == 201


# Webhook signing secrets -----------------------------------------------------------------------


def test_an_agent_reads_and_rotates_its_webhook_secret(agent, peer, stranger):
    me = factories.AgentClient(agent)
    first = me.get(f"/api/v1/agents/{agent.id}/webhook-secret").json()["webhook_secret"]
    assert first.startswith("whsec_") and len(first) == 70
    assert me.get(f"/api/v1/agents/{agent.id}/webhook-secret").json()["webhook_secret"] == first
    rotated = me.post(f"/api/v1/agents/{agent.id}/webhook-secret").json()["webhook_secret"]
    assert rotated != first and agent.refresh().webhook_secret == rotated
    assert me.get(f"/api/v1/agents/{peer.id}/webhook-secret").status_code == 403
    assert me.get(f"/api/v1/agents/{stranger.id}/webhook-secret").status_code == 404


def test_only_the_agent_itself_sees_its_webhook_url(tenant, agent):
    hooked = factories.agent(tenant, name="hooked", webhook_url="https://h.example.com/?k=s3")
    mine = factories.AgentClient(hooked).get(f"/api/v1/agents/{hooked.id}").json()
    assert mine["webhook_url"] == "https://h.example.com/?k=s3"
    theirs = factories.AgentClient(agent).get(f"/api/v1/agents/{hooked.id}").json()
    assert theirs["webhook_url"] == ""
