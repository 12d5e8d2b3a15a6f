"""Revoking (or the expiry of) an API key stops the agents it registered, while other keys keep
the tenant alive (docs/ARCHITECTURE.md, Credentials). Over REST and JSON-RPC, the surfaces
where a leaked key's agents kept working."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from agents import tokens
from agents.auth import authenticate_agent, identity_is_current
from agents.models import Agent, AgentEvent
from agents.services import RevokedKeyAgents, revoke_api_key
from messaging.models import Task
from tenants.models import ApiKey
from tenants.selectors import api_key_by_raw
from tests import factories
from tests.messaging.rpc import call

pytestmark = pytest.mark.django_db


def register(key: str, name: str) -> tuple[str, str]:
    """Register an agent with a tenant key over REST: (agent id, agent token)."""
    response = Client().post(
        "/api/v1/agents",
        json.dumps({"name": name, "description": ""}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    return body["agent_id"], body["agent_token"]


def rest(token: str):
    return Client().get("/api/v1/agents", HTTP_AUTHORIZATION=f"Bearer {token}")


def rpc(token: str):
    body = {"jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": {}}
    return Client().post(
        "/a2a/",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        HTTP_A2A_VERSION="1.0",
    )


def works(token: str) -> bool:
    statuses = {rest(token).status_code, rpc(token).status_code}
    assert len(statuses) == 1, statuses  # both surfaces agree
    return statuses == {200}


@pytest.fixture
def keys(tenant) -> tuple[str, str]:
    """A leaked key, and another key that keeps the tenant alive."""
    return factories.api_key(tenant, label="leaked"), factories.api_key(tenant, label="kept")


def test_revoking_a_key_revokes_the_tokens_it_minted(tenant, keys):
    leaked, kept = keys
    minted_id, minted = register(leaked, "minted")
    other_id, other = register(kept, "other")
    identity = authenticate_agent(authorization=f"Bearer {minted}", agent_id=None)
    assert works(minted) and works(other)

    done = revoke_api_key(api_key=api_key_by_raw(leaked))
    assert (done.tokens_revoked, done.deregistered) == (1, 0)
    assert not works(minted)
    assert not identity_is_current(identity)  # its open streams close
    assert works(other)  # the tenant and its other key's agents go on
    assert register(kept, "newcomer")
    agent = Agent.objects.get(pk=minted_id)
    assert (agent.status, agent.token_hash) == (Agent.Status.ACTIVE, None)  # inbox kept
    event = AgentEvent.objects.filter(agent_id=minted_id).latest("id")
    assert (event.kind, event.changes) == ("token-revoked", {"reason": "their API key was revoked"})
    # An owner may give it a new token; that one rests on no key.
    assert works(tokens.issue_agent_token(agent=agent))
    assert Agent.objects.get(pk=other_id).token_hash is not None


def test_an_owner_may_deregister_a_revoked_keys_agents_instead(tenant, keys):
    leaked, kept = keys
    minted_id, minted = register(leaked, "minted")
    _, other = register(kept, "other")
    done = revoke_api_key(api_key=api_key_by_raw(leaked), agents=RevokedKeyAgents.DEREGISTER)
    assert (done.tokens_revoked, done.deregistered) == (0, 1)
    assert Agent.objects.get(pk=minted_id).status == Agent.Status.DEREGISTERED
    assert not works(minted) and works(other)


def test_an_expired_key_stops_the_tokens_it_minted(tenant):
    expiring = factories.api_key(tenant, expires_at=timezone.now() + timedelta(minutes=5))
    kept = factories.api_key(tenant)
    minted_id, minted = register(expiring, "minted")
    _, other = register(kept, "other")
    with time_machine.travel(timezone.now() + timedelta(minutes=6)):
        assert not works(minted)
        assert works(other)
        # An owner's rotation unties the token from the key.
        agent = Agent.objects.get(pk=minted_id)
        assert works(tokens.replace_agent_token(agent=agent))


def test_an_agent_rotating_its_own_token_stays_tied_to_its_key(tenant, keys):
    leaked, kept = keys
    minted_id, minted = register(leaked, "minted")
    rotated = Client().post(
        f"/api/v1/agents/{minted_id}/token", HTTP_AUTHORIZATION=f"Bearer {minted}"
    )
    assert rotated.status_code == 200
    new_token = rotated.json()["agent_token"]
    assert works(new_token) and not works(minted)
    revoke_api_key(api_key=api_key_by_raw(leaked))
    assert not works(new_token)  # rotating is no way out of a revocation


def test_a_token_rotated_with_another_key_rests_on_that_key(tenant, keys):
    leaked, kept = keys
    minted_id, _ = register(leaked, "minted")
    rotated = Client().post(
        f"/api/v1/agents/{minted_id}/token",
        HTTP_AUTHORIZATION=f"Bearer {kept}",
        HTTP_X_AGENT_ID=minted_id,
    )
    new_token = rotated.json()["agent_token"]
    revoke_api_key(api_key=api_key_by_raw(leaked))
    assert works(new_token)
    revoke_api_key(api_key=api_key_by_raw(kept))  # the tenant's last key: everyone goes
    assert not works(new_token)


def test_a_revoked_key_reads_like_an_unknown_or_malformed_one(tenant, keys, agent):
    leaked, _ = keys
    expired = factories.api_key(tenant, expires_at=timezone.now() + timedelta(minutes=5))
    ApiKey.objects.filter(pk=api_key_by_raw(expired).pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    revoke_api_key(api_key=api_key_by_raw(leaked))
    candidates = [leaked, expired, "hky_" + "0" * 32, "hky_not-a-key", "hky_" + "A" * 32]
    rest_bodies = {
        Client()
        .get("/api/v1/agents", HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_X_AGENT_ID=agent.id)
        .content
        for key in candidates
    }
    assert len(rest_bodies) == 1, rest_bodies
    rpc_errors = set()
    for key in candidates:
        response = call(None, "ListTasks", {}, headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 401
        rpc_errors.add(json.dumps(response.json()["error"]))
    assert len(rpc_errors) == 1, rpc_errors
    assert Task.objects.count() == 0


def test_the_revokeapikey_command_revokes_tokens_or_deregisters(tenant, keys):
    leaked, kept = keys
    minted_id, _ = register(leaked, "minted")
    _, other = register(kept, "other")
    out = _run("revokeapikey", leaked)
    assert "0 agent(s) deregistered, 1 agent token(s) revoked" in out
    spare = factories.api_key(tenant)
    third_id, _ = register(spare, "third")
    out = _run("revokeapikey", spare, "--deregister-agents")
    assert "1 agent(s) deregistered, 0 agent token(s) revoked" in out
    assert Agent.objects.get(pk=third_id).status == Agent.Status.DEREGISTERED
    assert Agent.objects.get(pk=minted_id).status == Agent.Status.ACTIVE
    assert works(other)


def _run(*args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()
