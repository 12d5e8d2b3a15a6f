"""The web UI's and the admin's revocation: the agents a key registered stop, as the owner
chooses (their tokens revoked, the default, or deregistered)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from agents.models import Agent
from tenants.models import ApiKey
from tenants.selectors import api_key_by_raw
from tests import factories

pytestmark = pytest.mark.django_db


def register(key: str, name: str) -> str:
    response = Client().post(
        "/api/v1/agents",
        json.dumps({"name": name, "description": ""}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert response.status_code == 201, response.content
    return response.json()["agent_id"]


@pytest.fixture
def leaked(tenant) -> str:
    factories.api_key(tenant, label="kept")
    return factories.api_key(tenant, label="leaked")


def test_the_page_says_which_agents_stop_and_offers_the_choice(owner_client, leaked):
    register(leaked, "one")
    register(leaked, "two")
    key_id = api_key_by_raw(leaked).pk
    html = owner_client.get(f"/ui/t/acme/keys/{key_id}/revoke/").content.decode()
    assert "2 agents registered with this key" in html and "stop too" in html
    assert 'value="revoke-tokens"' in html and 'value="deregister"' in html
    assert "last active key" not in html


def test_revoking_by_default_revokes_their_tokens(owner_client, leaked):
    agent_id = register(leaked, "one")
    key_id = api_key_by_raw(leaked).pk
    response = owner_client.post(f"/ui/t/acme/keys/{key_id}/revoke/", follow=True)
    assert "1 agent(s) lost the token this key gave them" in response.content.decode()
    agent = Agent.objects.get(pk=agent_id)
    assert (agent.status, agent.token_hash) == (Agent.Status.ACTIVE, None)


def test_the_owner_may_deregister_them_instead(owner_client, leaked):
    agent_id = register(leaked, "one")
    key_id = api_key_by_raw(leaked).pk
    response = owner_client.post(
        f"/ui/t/acme/keys/{key_id}/revoke/", {"agents": "deregister"}, follow=True
    )
    assert "1 agent(s) were deregistered" in response.content.decode()
    assert Agent.objects.get(pk=agent_id).status == Agent.Status.DEREGISTERED


def test_an_unknown_choice_is_a_form_error_and_revokes_nothing(owner_client, leaked):
    register(leaked, "one")
    key_id = api_key_by_raw(leaked).pk
    response = owner_client.post(f"/ui/t/acme/keys/{key_id}/revoke/", {"agents": "keep"})
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert ApiKey.objects.get(pk=key_id).revoked_at is None


def test_the_admin_action_asks_and_applies_the_choice(tenant, leaked):
    agent_id = register(leaked, "one")
    root = factories.user("root@example.com")
    root.is_staff = root.is_superuser = True
    root.save()
    admin = Client()
    admin.force_login(root)
    key_id = str(api_key_by_raw(leaked).pk)
    action = {"action": "revoke", "_selected_action": [key_id]}
    page = admin.post("/admin/tenants/apikey/", action).content.decode()
    assert "agent tokens issued under them" in page and 'value="deregister"' in page
    done = admin.post(
        "/admin/tenants/apikey/", {**action, "confirm": "yes", "agents": "deregister"}, follow=True
    )
    assert "1 agent(s) deregistered" in done.content.decode()
    assert Agent.objects.get(pk=agent_id).status == Agent.Status.DEREGISTERED
