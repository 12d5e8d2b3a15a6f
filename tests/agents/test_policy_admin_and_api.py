"""Owners set policy (the service, the operator REST endpoint, the admin); agents cannot."""

from __future__ import annotations

import json
import uuid

import pytest

from agents.models import Agent
from agents.services import set_agent_enabled, set_agent_policy
from hikyaku.errors import InvalidRequest
from tests import factories

pytestmark = pytest.mark.django_db


def put_policy(client, key: str, agent_id: str, body):
    return client.put(
        f"/api/v1/agents/{agent_id}/policy",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )


# The service ---------------------------------------------------------------------------------


def test_allow_lists_are_normalised(agent, peer, tenant):
    carol = factories.agent(tenant, name="carol")
    set_agent_policy(
        agent=agent.model, send_to=[carol.id.upper(), peer.id, peer.id], receive_from=["*", peer.id]
    )
    stored = Agent.objects.get(pk=agent.id)
    assert stored.send_to == sorted([carol.id, peer.id]) and stored.receive_from == ["*"]
    set_agent_policy(agent=agent.model, send_to=[])
    assert Agent.objects.get(pk=agent.id).send_to == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("send_to", ["not-an-id"]),
        ("send_to", "*"),
        ("receive_from", [7]),
        ("receive_from", ["{random}"]),
        ("receive_from", ["{stranger}"]),
        ("disclosure_ceiling", "secret"),
    ],
)
def test_invalid_policies_are_refused_and_change_nothing(agent, stranger, field, value):
    if isinstance(value, list):
        value = [
            v.format(random=uuid.uuid4(), stranger=stranger.id) if isinstance(v, str) else v
            for v in value
        ]
    with pytest.raises(InvalidRequest) as raised:
        set_agent_policy(agent=agent.model, **{field: value})
    assert field in raised.value.details
    stored = Agent.objects.get(pk=agent.id)
    assert (stored.send_to, stored.receive_from, stored.disclosure_ceiling) == (
        ["*"],
        ["*"],
        "internal",
    )


def test_another_tenants_agent_is_reported_like_an_unknown_one(agent, stranger):
    random_id = str(uuid.uuid4())
    messages = []
    for other in (stranger.id, random_id):
        with pytest.raises(InvalidRequest) as raised:
            set_agent_policy(agent=agent.model, send_to=[other])
        messages.append(raised.value.details["send_to"][0].replace(other, "<id>"))
    assert messages[0] == messages[1]


# The operator REST endpoint --------------------------------------------------------------------


def test_operators_read_and_set_policy_with_the_tenant_key(client, api_key, agent, peer):
    response = client.get(
        f"/api/v1/agents/{agent.id}/policy", HTTP_AUTHORIZATION=f"Bearer {api_key}"
    )
    assert response.status_code == 200
    assert response.json() == {
        "agent_id": agent.id,
        "status": "active",
        "send_to": ["*"],
        "receive_from": ["*"],
        "disclosure_ceiling": "internal",
    }
    response = put_policy(
        client, api_key, agent.id, {"send_to": [peer.id], "disclosure_ceiling": "restricted"}
    )
    assert response.status_code == 200, response.content
    assert response.json()["send_to"] == [peer.id]
    assert response.json()["receive_from"] == ["*"]  # left out: unchanged
    assert response.json()["disclosure_ceiling"] == "restricted"


def test_operators_can_set_policy_on_a_disabled_agent(client, api_key, agent):
    set_agent_enabled(agent=agent.model, enabled=False)
    response = put_policy(client, api_key, agent.id, {"receive_from": []})
    assert response.status_code == 200 and response.json()["status"] == "disabled"


def test_agents_cannot_change_their_own_policy_with_their_token(client, agent):
    response = put_policy(client, agent.token, agent.id, {"send_to": ["*"]})
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert client.get(
        f"/api/v1/agents/{agent.id}/policy", HTTP_AUTHORIZATION=f"Bearer {agent.token}"
    ).status_code == 401  # fmt: skip


def test_policy_endpoint_validation_errors_name_the_fields(client, api_key, agent):
    response = put_policy(client, api_key, agent.id, {"send_to": ["nope"], "colour": "red"})
    assert response.status_code == 400
    assert set(response.json()["error"]["details"]) == {"colour"}
    response = put_policy(client, api_key, agent.id, {"send_to": ["nope"]})
    assert response.status_code == 400
    assert set(response.json()["error"]["details"]) == {"send_to"}
    response = put_policy(client, api_key, agent.id, {"disclosure_ceiling": "top-secret"})
    assert response.status_code == 400


@pytest.mark.parametrize("target", ["{stranger}", "{random}", "{deregistered}", "garbage"])
def test_policy_endpoint_other_tenants_agents_are_not_found(
    client, api_key, tenant, stranger, target
):
    from agents.services import deregister_agent

    gone = factories.agent(tenant, name="gone")
    deregister_agent(agent=gone.model)
    agent_id = target.format(stranger=stranger.id, random=uuid.uuid4(), deregistered=gone.id)
    response = put_policy(client, api_key, agent_id, {"send_to": []})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "AGENT_NOT_FOUND"


def test_policy_endpoint_refuses_an_expired_key(client, tenant, agent):
    from datetime import timedelta

    import time_machine
    from django.utils import timezone

    key = factories.api_key(tenant, expires_at=timezone.now() + timedelta(hours=1))
    with time_machine.travel(timezone.now() + timedelta(hours=2)):
        assert put_policy(client, key, agent.id, {"send_to": []}).status_code == 401


# The admin -------------------------------------------------------------------------------------


@pytest.fixture
def admin_client(client):
    user = factories.user("root@example.com")
    user.is_staff = user.is_superuser = True
    user.save()
    client.force_login(user)
    return client


def admin_form(agent: Agent, **changes) -> dict:
    data = {
        "name": agent.name,
        "description": agent.description,
        "skills": json.dumps(agent.skills),
        "send_to": json.dumps(agent.send_to),
        "receive_from": json.dumps(agent.receive_from),
        "disclosure_ceiling": agent.disclosure_ceiling,
        "webhook_url": agent.webhook_url,
    }
    data.update(changes)
    return data


def test_the_admin_edits_policy_through_the_service(admin_client, agent, peer):
    url = f"/admin/agents/agent/{agent.id}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200
    for text in (b"Policy (who may talk to whom)", b"hka_", b"Webhook signing secret"):
        assert text in page.content
    response = admin_client.post(
        url,
        admin_form(
            agent.refresh(),
            send_to=json.dumps([peer.id.upper(), "*"]),
            receive_from=json.dumps([peer.id, peer.id]),
            disclosure_ceiling="public-safe",
        ),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    stored = agent.refresh()
    assert stored.send_to == ["*"] and stored.receive_from == [peer.id]
    assert stored.disclosure_ceiling == "public-safe"


def test_the_admin_shows_policy_errors_on_the_field(admin_client, agent, stranger):
    url = f"/admin/agents/agent/{agent.id}/change/"
    response = admin_client.post(
        url, admin_form(agent.refresh(), receive_from=json.dumps([stranger.id]))
    )
    assert response.status_code == 200
    assert b"Unknown agent(s) in this tenant" in response.content
    assert agent.refresh().receive_from == ["*"]


def test_the_admin_refuses_a_private_webhook_url(settings, admin_client, agent):
    settings.HIKYAKU_WEBHOOK_ALLOWED_HOSTS = []
    url = f"/admin/agents/agent/{agent.id}/change/"
    response = admin_client.post(
        url, admin_form(agent.refresh(), webhook_url="http://169.254.169.254/latest")
    )
    assert response.status_code == 200 and b"private" in response.content
    assert agent.refresh().webhook_url == ""


def test_the_admin_lists_agents_with_their_policy(admin_client, agent, peer):
    set_agent_policy(agent=agent.model, send_to=[peer.id])
    page = admin_client.get("/admin/agents/agent/")
    assert page.status_code == 200
    assert b"send to 1 agent(s); receive from anyone" in page.content
