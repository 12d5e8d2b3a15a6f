"""`GET /api/v1/agents/me`: the caller's identity, tenant, credential, relations, ceiling and
the tenant's policy revision."""

from __future__ import annotations

import pytest
from django.test import Client

from agents import services
from tests import factories

pytestmark = pytest.mark.django_db


def me(client: Client, **headers) -> dict:
    response = client.get("/api/v1/agents/me", **headers)
    assert response.status_code == 200, response.content
    return response.json()


def test_whoami_shows_identity_tenant_credential_relations_ceiling_and_revision(
    tenant, agent, peer, agent_client
):
    carol = factories.agent(tenant, name="carol")
    services.set_agent_policy(
        agent=agent.model,
        send_to=[peer.id, carol.id],
        receive_from=[peer.id],
        disclosure_ceiling="restricted",
    )
    services.set_agent_enabled(agent=carol.model, enabled=False)
    body = me(agent_client)
    assert body["agent_id"] == agent.id and body["name"] == "alice"
    assert body["status"] == "active" and body["public"] is False
    assert body["tenant"] == {"id": str(tenant.pk), "slug": "acme", "name": "Acme"}
    assert body["credential"] == {
        "kind": "agent_token",
        "prefix": agent.token[:12],
        "expires_at": None,
    }
    assert body["send_to"] == {
        "anyone": False,
        "agents": sorted(
            [
                {"agent_id": peer.id, "name": "bob", "status": "active"},
                {"agent_id": carol.id, "name": "carol", "status": "disabled"},
            ],
            key=lambda a: a["agent_id"],
        ),
    }
    assert body["receive_from"] == {
        "anyone": False,
        "agents": [{"agent_id": peer.id, "name": "bob", "status": "active"}],
    }
    assert body["disclosure_ceiling"] == "restricted"
    tenant.refresh_from_db()
    assert body["policy_revision"] == tenant.policy_revision
    assert agent.token not in str(body)


def test_the_revision_moves_with_every_policy_change_and_only_then(agent, peer, agent_client):
    first = me(agent_client)["policy_revision"]
    assert me(agent_client)["policy_revision"] == first
    services.update_agent(agent=agent.model, description="not policy")
    assert me(agent_client)["policy_revision"] == first
    services.set_agent_policy(agent=peer.model, receive_from=[])  # another agent's change
    second = me(agent_client)
    assert second["policy_revision"] == first + 1
    assert second["send_to"] == {"anyone": True, "agents": []}


def test_the_compat_identity_names_the_key(tenant, agent, api_key):
    body = me(Client(), HTTP_AUTHORIZATION=f"Bearer {api_key}", HTTP_X_AGENT_ID=agent.id)
    assert body["agent_id"] == agent.id
    assert body["credential"]["kind"] == "api_key"
    assert body["credential"]["prefix"] == api_key[:12]


def test_a_relation_to_nobody_lists_no_agents(agent, agent_client):
    services.set_agent_policy(agent=agent.model, send_to=[])
    assert me(agent_client)["send_to"] == {"anyone": False, "agents": []}


def test_whoami_costs_a_fixed_number_of_queries(
    tenant, agent, peer, agent_client, django_assert_num_queries
):
    me(agent_client)  # the first request records last_seen_at
    with django_assert_num_queries(2):  # authentication, the revision
        me(agent_client)
    services.set_agent_policy(agent=agent.model, send_to=[peer.id])
    for i in range(20):
        factories.agent(tenant, name=f"extra-{i}")
    services.set_agent_policy(agent=agent.model, receive_from=[a.id for a in [peer, *[agent]]])
    with django_assert_num_queries(3):  # and the names of the agents the lists name
        me(agent_client)


def test_the_route_is_documented(client):
    schema = client.get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/agents/me"]["get"]
    assert operation["operationId"] == "whoami"
    assert {"200", "401"} <= set(operation["responses"])
    body = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    properties = schema["components"]["schemas"][body.rsplit("/", 1)[1]]["properties"]
    assert {"tenant", "credential", "send_to", "receive_from", "policy_revision"} <= set(properties)
