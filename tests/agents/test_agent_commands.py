"""`manage.py agenttoken issue|rotate|revoke` and `manage.py agent disable|enable`, and the
policy revision and event row every change of an agent writes."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from agents import services, tokens
from agents.models import Agent, AgentEvent
from tenants.models import Tenant
from tests import factories

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue().strip()


def status_with(token: str) -> int:
    return Client().get("/api/v1/agents/me", HTTP_AUTHORIZATION=f"Bearer {token}").status_code


def revision(tenant) -> int:
    return Tenant.objects.get(pk=tenant.pk).policy_revision


def test_rotate_prints_only_the_new_token_and_the_old_one_stops(agent, tenant):
    token, note = run("agenttoken", "rotate", "--tenant", "acme", "--agent", "alice")
    assert token.startswith("hka_") and "\n" not in token
    assert "not shown again" in note and "without expiry" in note
    assert Agent.objects.get(pk=agent.id).token_hash not in (token, None)
    assert status_with(agent.token) == 401
    assert status_with(token) == 200


def test_issue_refuses_an_agent_that_has_a_token_and_serves_one_that_has_none(agent, tenant):
    with pytest.raises(CommandError, match="already has a token: rotate it instead"):
        run("agenttoken", "issue", "--tenant", "acme", "--agent", "alice")
    assert status_with(agent.token) == 200  # issuing never cut the running agent off
    out, _ = run("agenttoken", "revoke", "--tenant", "acme", "--agent", "alice")
    assert out.startswith("Revoked the token of alice")
    assert status_with(agent.token) == 401
    assert run("agenttoken", "revoke", "--tenant", "acme", "--agent", "alice")[0].endswith(
        "had no token."
    )
    token, _ = run("agenttoken", "issue", "--tenant", "acme", "--agent", agent.id)
    assert status_with(token) == 200 and status_with(agent.token) == 401


def test_an_issued_token_expires(agent, tenant):
    run("agenttoken", "revoke", "--tenant", "acme", "--agent", "alice")
    expires = (timezone.now() + timedelta(hours=1)).replace(microsecond=0)
    token, note = run(
        "agenttoken", "issue", "--tenant", "acme", "--agent", "alice", "--expires",
        expires.isoformat().replace("+00:00", "Z"),
    )  # fmt: skip
    assert f"until {expires.isoformat()}" in note
    assert Agent.objects.get(pk=agent.id).token_expires_at == expires
    assert status_with(token) == 200
    with time_machine.travel(expires + timedelta(seconds=1)):
        assert status_with(token) == 401
        # The agent rotating its own expired token is not possible, and an owner's rotation
        # without --expires gives a token without one.
        fresh, _ = run("agenttoken", "rotate", "--tenant", "acme", "--agent", "alice")
        assert status_with(fresh) == 200


def test_an_agent_rotating_its_own_token_keeps_its_expiry(agent, tenant):
    expires = timezone.now() + timedelta(hours=1)
    token = tokens.replace_agent_token(agent=agent.model, expires_at=expires)
    response = Client().post(
        f"/api/v1/agents/{agent.id}/token", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code == 200
    assert Agent.objects.get(pk=agent.id).token_expires_at == expires
    with time_machine.travel(expires + timedelta(seconds=1)):
        assert status_with(response.json()["agent_token"]) == 401


@pytest.mark.parametrize(
    "expires, message",
    [
        ("tomorrow", "not an ISO 8601 date"),
        ("2999-01-01T00:00:00", "needs a time zone"),
        ("2000-01-01T00:00:00Z", "The expiry is in the past."),
    ],
)
def test_bad_expiries_are_refused(agent, tenant, expires, message):
    before = Agent.objects.get(pk=agent.id).token_hash
    with pytest.raises(CommandError, match=message):
        run("agenttoken", "rotate", "--tenant", "acme", "--agent", "alice", "--expires", expires)
    assert Agent.objects.get(pk=agent.id).token_hash == before


def test_agents_are_found_by_name_or_id_in_their_tenant_only(agent, tenant, stranger):
    with pytest.raises(CommandError, match="No tenant 'nope'"):
        run("agent", "disable", "--tenant", "nope", "--agent", "alice")
    with pytest.raises(CommandError, match="No live agent 'mallory' in tenant 'acme'"):
        run("agent", "disable", "--tenant", "acme", "--agent", "mallory")
    with pytest.raises(CommandError, match="No live agent"):
        run("agenttoken", "rotate", "--tenant", "acme", "--agent", stranger.id)
    other = factories.agent(tenant, name="carol")
    assert run("agent", "disable", "--tenant", "acme", "--agent", other.id)[0].endswith("disabled.")
    assert Agent.objects.get(pk=agent.id).status == "active"
    services.deregister_agent(agent=other.model)
    with pytest.raises(CommandError, match="No live agent"):
        run("agenttoken", "issue", "--tenant", "acme", "--agent", other.id)
    with pytest.raises(CommandError, match="No live agent 'carol'"):
        run("agent", "enable", "--tenant", "acme", "--agent", "carol")


def test_disable_and_enable(agent, tenant):
    assert run("agent", "disable", "--tenant", "acme", "--agent", "alice")[0].endswith("disabled.")
    assert status_with(agent.token) == 401
    assert "already disabled" in run("agent", "disable", "--tenant", "acme", "--agent", "alice")[0]
    # A disabled agent's token can still be rotated, so it is ready when enabled again.
    token, _ = run("agenttoken", "rotate", "--tenant", "acme", "--agent", "alice")
    assert status_with(token) == 401
    assert run("agent", "enable", "--tenant", "acme", "--agent", "alice")[0].endswith("enabled.")
    assert status_with(token) == 200 and status_with(agent.token) == 401


# The policy revision and the event rows ---------------------------------------------------


def test_every_change_of_who_may_talk_to_whom_bumps_the_revision_once(tenant, other_tenant):
    start = revision(tenant)
    alice = factories.agent(tenant, name="alice").model
    bob = factories.agent(tenant, name="bob").model
    assert revision(tenant) == start + 2  # registrations
    services.set_agent_policy(agent=alice, send_to=[str(bob.pk)])
    services.set_agent_policy(agent=alice, send_to=[str(bob.pk)])  # the same: no change
    services.set_agent_policy(agent=alice, disclosure_ceiling="restricted")
    services.set_agent_public(agent=alice, public=True)
    services.set_agent_public(agent=alice, public=True)
    services.set_agent_enabled(agent=bob, enabled=False)
    services.set_agent_enabled(agent=bob, enabled=False)
    services.set_agent_enabled(agent=bob, enabled=True)
    assert revision(tenant) == start + 7
    # Not policy: descriptions and tokens. They are recorded all the same.
    services.update_agent(agent=alice, description="new", webhook_url="https://h.example.com/x")
    services.rotate_agent_token(agent=alice)
    tokens.revoke_agent_token(agent=bob)
    tokens.issue_agent_token(agent=bob)
    assert revision(tenant) == start + 7
    services.deregister_agent(agent=bob)
    assert revision(tenant) == start + 8
    assert revision(other_tenant) == 0
    kinds = list(
        AgentEvent.objects.filter(tenant=tenant)
        .order_by("id")
        .values_list("kind", "policy_revision")
    )
    assert kinds == [
        ("registered", start + 1),
        ("registered", start + 2),
        ("policy", start + 3),
        ("policy", start + 4),
        ("published", start + 5),
        ("disabled", start + 6),
        ("enabled", start + 7),
        ("updated", start + 7),
        ("token-rotated", start + 7),
        ("token-revoked", start + 7),
        ("token-issued", start + 7),
        ("deregistered", start + 8),
    ]
    policy = AgentEvent.objects.filter(tenant=tenant, kind="policy").order_by("id")
    assert [e.changes for e in policy] == [
        {"send_to": [["*"], [str(bob.pk)]]},
        {"disclosure_ceiling": ["internal", "restricted"]},
    ]
    # A webhook URL may hold a secret: an update records the field names only.
    assert AgentEvent.objects.get(kind="updated").changes == {
        "fields": ["description", "webhook_url"]
    }


def test_revoking_the_last_key_records_every_deregistration_under_one_revision(tenant, api_key):
    from tenants.selectors import api_key_by_raw

    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    start = revision(tenant)
    assert services.revoke_api_key(api_key=api_key_by_raw(api_key)).deregistered == 2
    assert revision(tenant) == start + 1
    events = AgentEvent.objects.filter(kind="deregistered")
    assert sorted(str(e.agent_id) for e in events) == sorted([alice.id, bob.id])
    assert {e.policy_revision for e in events} == {start + 1}


def test_the_rest_api_and_the_admin_bump_the_revision(tenant, api_key, agent, peer, admin_client):
    start = revision(tenant)
    response = Client().put(
        f"/api/v1/agents/{agent.id}/policy",
        {"send_to": [peer.id]},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_key}",
    )
    assert response.status_code == 200 and revision(tenant) == start + 1
    page = admin_client.get(f"/admin/agents/agent/{agent.id}/change/")
    assert page.status_code == 200
    form = {
        "name": "alice",
        "description": "alice agent",
        "skills": "[]",
        "send_to": f'["{peer.id}"]',
        "receive_from": "[]",
        "disclosure_ceiling": "internal",
        "webhook_url": "",
    }
    saved = admin_client.post(f"/admin/agents/agent/{agent.id}/change/", form)
    assert saved.status_code == 302, saved.content[:2000]
    assert Agent.objects.get(pk=agent.id).receive_from == []
    assert revision(tenant) == start + 2
    assert AgentEvent.objects.filter(kind="policy").last().changes == {"receive_from": [["*"], []]}


def test_open_streams_checks_stop_an_expired_token(agent):
    """Both re-validations open streams use (one identity, and a whole process's batch)."""
    from agents.auth import authenticate_agent, current_identities, identity_is_current

    expires = timezone.now() + timedelta(minutes=1)
    token = tokens.replace_agent_token(agent=agent.model, expires_at=expires)
    identity = authenticate_agent(authorization=f"Bearer {token}", agent_id=None)
    assert identity_is_current(identity)
    assert current_identities([identity]) == {(identity.agent.pk, identity.credential_hash)}
    with time_machine.travel(expires + timedelta(seconds=1)):
        assert not identity_is_current(identity)
        assert current_identities([identity]) == set()
