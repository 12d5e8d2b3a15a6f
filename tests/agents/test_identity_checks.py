"""`identity_is_current` and its batched twin `current_identities` (what open streams use to
close on revocation) agree with each other and with authentication, condition by condition."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents import services as agent_services
from agents.auth import authenticate_agent, current_identities, identity_is_current
from tenants.models import ApiKey, Tenant
from tests import factories

pytestmark = pytest.mark.django_db


def holds(identity) -> bool:
    batched = (identity.agent.pk, identity.credential_hash) in current_identities([identity])
    assert batched == identity_is_current(identity)
    return batched


def by_key(tenant, agent, raw_key):
    return authenticate_agent(authorization=f"Bearer {raw_key}", agent_id=agent.id)


def by_token(agent):
    return authenticate_agent(authorization=f"Bearer {agent.token}", agent_id=None)


def test_a_fresh_identity_holds_either_way(tenant, agent):
    factories.api_key(tenant)
    raw = factories.api_key(tenant, label="k")
    assert holds(by_token(agent))
    assert holds(by_key(tenant, agent, raw))


def test_revoking_or_expiring_the_key_ends_the_key_identity_only(tenant, agent):
    factories.api_key(tenant)  # another key, so agents stay registered
    raw = factories.api_key(tenant, label="k")
    identity, token_identity = by_key(tenant, agent, raw), by_token(agent)
    ApiKey.objects.filter(label="k").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert not holds(identity)
    ApiKey.objects.filter(label="k").update(expires_at=None, revoked_at=timezone.now())
    assert not holds(identity)
    assert holds(token_identity)


def test_requiring_agent_tokens_ends_key_identities(tenant, agent):
    raw = factories.api_key(tenant)
    identity = by_key(tenant, agent, raw)
    Tenant.objects.filter(pk=tenant.pk).update(require_agent_tokens=True)
    assert not holds(identity)
    assert holds(by_token(agent))


def test_rotation_disabling_and_deregistration_end_identities(tenant, agent, peer):
    token_identity = by_token(agent)
    agent_services.rotate_agent_token(agent=agent.refresh())
    assert not holds(token_identity)
    raw = factories.api_key(tenant)
    key_identity = by_key(tenant, peer, raw)
    agent_services.set_agent_enabled(agent=peer.refresh(), enabled=False)
    assert not holds(key_identity)
    agent_services.set_agent_enabled(agent=peer.refresh(), enabled=True)
    assert holds(key_identity)
    agent_services.deregister_agent(agent=peer.refresh())
    assert not holds(key_identity)


def test_a_key_of_another_tenant_never_vouches_for_an_agent(tenant, agent, other_tenant):
    raw = factories.api_key(tenant)
    identity = by_key(tenant, agent, raw)
    ApiKey.objects.filter(tenant=tenant).update(tenant=other_tenant)
    assert not holds(identity)
