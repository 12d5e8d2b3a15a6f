"""Writes for agents, and the workflows that span tenants and agents. One transaction each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from hikyaku.errors import InvalidRequest
from tenants.credentials import display_prefix, hash_secret, new_agent_token
from tenants.models import ApiKey, Tenant

from .models import Agent


@dataclass(frozen=True)
class RegisteredAgent:
    agent: Agent
    raw_token: str  # returned to the caller once, never stored


def register_agent(
    *,
    tenant: Tenant,
    name: str,
    description: str = "",
    skills: list[dict[str, Any]] | None = None,
    webhook_url: str = "",
    registered_with: ApiKey | None = None,
) -> RegisteredAgent:
    raw = new_agent_token()
    with transaction.atomic():
        # Serialise registrations per tenant so the agent limit cannot be raced past.
        Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
        live = Agent.objects.filter(tenant=tenant).exclude(status=Agent.Status.DEREGISTERED)
        if live.count() >= settings.HIKYAKU_MAX_AGENTS_PER_TENANT:
            raise InvalidRequest(
                f"This tenant already has the maximum of "
                f"{settings.HIKYAKU_MAX_AGENTS_PER_TENANT} agents.",
                details={"name": ["agent limit reached"]},
            )
        agent = Agent.objects.create(
            tenant=tenant,
            name=name,
            description=description,
            skills=skills or [],
            webhook_url=webhook_url,
            registered_with=registered_with,
            token_hash=hash_secret(raw),
            token_prefix=display_prefix(raw),
        )
    return RegisteredAgent(agent=agent, raw_token=raw)


def update_agent(
    *,
    agent: Agent,
    description: str | None = None,
    skills: list[dict[str, Any]] | None = None,
    webhook_url: str | None = None,
) -> Agent:
    changes: dict[str, Any] = {}
    if description is not None:
        changes["description"] = description
    if skills is not None:
        changes["skills"] = skills
    if webhook_url is not None:
        changes["webhook_url"] = webhook_url
    if changes:
        Agent.objects.filter(pk=agent.pk, tenant_id=agent.tenant_id).update(**changes)
        for field, value in changes.items():
            setattr(agent, field, value)
    return agent


def deregister_agent(*, agent: Agent) -> bool:
    """Deregister an agent; True if this call changed it. Its history stays readable."""
    changed = (
        Agent.objects.filter(pk=agent.pk, tenant_id=agent.tenant_id)
        .exclude(status=Agent.Status.DEREGISTERED)
        .update(status=Agent.Status.DEREGISTERED, deregistered_at=timezone.now())
    )
    if changed:
        agent.status = Agent.Status.DEREGISTERED
    return bool(changed)


def set_agent_enabled(*, agent: Agent, enabled: bool) -> bool:
    """Disable an active agent or enable a disabled one; its inbox is kept either way."""
    source, target = (
        (Agent.Status.DISABLED, Agent.Status.ACTIVE)
        if enabled
        else (Agent.Status.ACTIVE, Agent.Status.DISABLED)
    )
    changed = Agent.objects.filter(pk=agent.pk, tenant_id=agent.tenant_id, status=source).update(
        status=target
    )
    if changed:
        agent.status = target
    return bool(changed)


def rotate_agent_token(*, agent: Agent) -> str:
    """Issue a new agent token; the old one stops working at once. Returns the raw token."""
    raw = new_agent_token()
    changed = Agent.objects.filter(
        pk=agent.pk, tenant_id=agent.tenant_id, status=Agent.Status.ACTIVE
    ).update(token_hash=hash_secret(raw), token_prefix=display_prefix(raw))
    if not changed:
        raise InvalidRequest("Only an active agent's token can be rotated.")
    agent.token_hash = hash_secret(raw)
    agent.token_prefix = display_prefix(raw)
    return raw


def revoke_api_key(*, api_key: ApiKey) -> int:
    """Revoke a key at once. Revoking the tenant's last active key deregisters every agent of
    the tenant (compat). Returns how many agents were deregistered."""
    now = timezone.now()
    with transaction.atomic():
        # Lock the tenant so two concurrent revocations agree on which key was the last.
        Tenant.objects.select_for_update().filter(pk=api_key.tenant_id).first()
        ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=now)
        api_key.revoked_at = api_key.revoked_at or now
        still_active = ApiKey.objects.filter(ApiKey.active_q(now), tenant_id=api_key.tenant_id)
        if still_active.exists():
            return 0
        return (
            Agent.objects.filter(tenant_id=api_key.tenant_id)
            .exclude(status=Agent.Status.DEREGISTERED)
            .update(status=Agent.Status.DEREGISTERED, deregistered_at=now)
        )
