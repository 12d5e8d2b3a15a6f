"""Writes for agents, and the workflows that span tenants and agents. One transaction each."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from hikyaku.errors import HikyakuError, InvalidRequest
from tenants.credentials import display_prefix, hash_secret, new_agent_token, new_webhook_secret
from tenants.models import ApiKey, Tenant

from . import history, tokens
from .destinations import check_url
from .models import SENSITIVITY_RANK, Agent, AgentEvent

Kind = AgentEvent.Kind


class AgentNameTaken(HikyakuError):
    """An active or disabled agent of this tenant already has this name."""

    code, status = "AGENT_NAME_TAKEN", 409
    rpc_code, rpc_reason = -32602, "INVALID_PARAMS"


def _name_taken(name: str) -> AgentNameTaken:
    return AgentNameTaken(
        f"An agent named {name!r} is already registered in this tenant (a name is an "
        "address: one live agent each). Choose another name, or deregister that agent first.",
        details={"name": ["taken"]},
    )


@dataclass(frozen=True)
class RegisteredAgent:
    agent: Agent
    raw_token: str  # returned to the caller once, never stored; "" when none was issued


def register_agent(
    *,
    tenant: Tenant,
    name: str,
    description: str = "",
    skills: list[dict[str, Any]] | None = None,
    webhook_url: str = "",
    registered_with: ApiKey | None = None,
    issue_token: bool = True,
) -> RegisteredAgent:
    """Create an agent. Without `issue_token` it has no token until an owner issues one
    (agents.tokens.issue_agent_token): tenant files create agents that way, so applying
    a file never prints a secret."""
    raw = new_agent_token() if issue_token else ""
    if webhook_url:
        check_url(webhook_url, field="webhook_url")
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
        # The tenant row lock serialises this check with every other registration; the
        # constraint (agent_live_name_unique) still holds against any other writer.
        if live.filter(name=name).exists():
            raise _name_taken(name)
        try:
            with transaction.atomic():
                agent = Agent.objects.create(
                    tenant=tenant,
                    name=name,
                    description=description,
                    skills=skills or [],
                    webhook_url=webhook_url,
                    webhook_secret=new_webhook_secret(),
                    registered_with=registered_with,
                    token_hash=hash_secret(raw) if raw else None,
                    token_prefix=display_prefix(raw) if raw else "",
                    # The token rests on the key that registered it (docs/ARCHITECTURE.md,
                    # Credentials): revoking that key stops it.
                    token_key_id=registered_with.pk if raw and registered_with else None,
                )
        except IntegrityError:
            if live.filter(name=name).exists():
                raise _name_taken(name) from None
            raise
        history.record(
            tenant_id=tenant.pk, agent_ids=[agent.pk], kind=Kind.REGISTERED, changes={"name": name}
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
        if webhook_url:
            check_url(webhook_url, field="webhook_url")
        changes["webhook_url"] = webhook_url
    if changes:
        with transaction.atomic():
            Agent.objects.filter(pk=agent.pk, tenant_id=agent.tenant_id).update(**changes)
            # Field names only: a webhook URL may carry a secret of its own.
            history.record(
                tenant_id=agent.tenant_id,
                agent_ids=[agent.pk],
                kind=Kind.UPDATED,
                changes={"fields": sorted(changes)},
            )
        for field, value in changes.items():
            setattr(agent, field, value)
    return agent


def deregister_agent(*, agent: Agent) -> bool:
    """Deregister an agent; True if this call changed it. Its history stays readable."""
    with transaction.atomic():
        changed = (
            Agent.objects.filter(pk=agent.pk, tenant_id=agent.tenant_id)
            .exclude(status=Agent.Status.DEREGISTERED)
            .update(status=Agent.Status.DEREGISTERED, deregistered_at=timezone.now())
        )
        if changed:
            history.record(tenant_id=agent.tenant_id, agent_ids=[agent.pk], kind=Kind.DEREGISTERED)
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
    with transaction.atomic():
        changed = Agent.objects.filter(
            pk=agent.pk, tenant_id=agent.tenant_id, status=source
        ).update(status=target)
        if changed:
            history.record(
                tenant_id=agent.tenant_id,
                agent_ids=[agent.pk],
                kind=Kind.ENABLED if enabled else Kind.DISABLED,
            )
    if changed:
        agent.status = target
    return bool(changed)


def set_agent_public(*, agent: Agent, public: bool) -> bool:
    """Publish an agent (anyone may read its card, find it in the directory and message it
    through its A2A endpoint, docs/PROTOCOL.md §8) or withdraw that. True if this call changed it.
    Withdrawing takes effect at once; tasks already sent stay in the agent's inbox."""
    with transaction.atomic():
        changed = (
            Agent.objects.filter(pk=agent.pk, tenant_id=agent.tenant_id)
            .exclude(public=public)
            .update(public=public)
        )
        if changed:
            history.record(
                tenant_id=agent.tenant_id,
                agent_ids=[agent.pk],
                kind=Kind.PUBLISHED if public else Kind.UNPUBLISHED,
            )
    agent.public = public
    return bool(changed)


def rotate_agent_token(*, agent: Agent, key_id: uuid.UUID | None = None) -> str:
    """Issue a new agent token; the old one stops working at once (open streams included,
    since they re-check their credential). Returns the raw token. Works for active and
    disabled agents (an owner may rotate before enabling), not for deregistered ones. The
    new token keeps the old one's expiry while it lies ahead, so an agent cannot outlive an
    expiring token by rotating it. `key_id` is the API key the new token rests on: the key
    the rotating request authenticated with, the old token's key when the agent rotates with
    its token (so rotating cannot untie a token from a key), None when an owner rotates it."""
    expires_at = agent.token_expires_at
    if expires_at is not None and expires_at <= timezone.now():
        expires_at = None
    return tokens.replace_agent_token(agent=agent, expires_at=expires_at, key_id=key_id)


class RevokedKeyAgents(models.TextChoices):
    """What happens to the agents whose tokens a revoked key minted (Agent.token_key_id)."""

    REVOKE_TOKENS = "revoke-tokens", "Revoke their tokens (they stay registered)"
    DEREGISTER = "deregister", "Deregister them"


@dataclass(frozen=True)
class KeyRevocation:
    tokens_revoked: int  # agents left registered without a token
    deregistered: int  # agents deregistered (the key's, or all when it was the last key)


def revoke_api_key(
    *, api_key: ApiKey, agents: str = RevokedKeyAgents.REVOKE_TOKENS
) -> KeyRevocation:
    """Revoke a key at once, and stop the agents whose tokens it minted: their tokens are
    revoked (the default; an owner may issue new ones) or they are deregistered (`agents`).
    Revoking the tenant's last active key deregisters every agent of the tenant (compat)."""
    if agents not in RevokedKeyAgents.values:
        raise InvalidRequest(
            f"agents must be one of {', '.join(RevokedKeyAgents.values)}.",
            details={"agents": ["invalid"]},
        )
    now = timezone.now()
    with transaction.atomic():
        # Lock the tenant so two concurrent revocations agree on which key was the last.
        Tenant.objects.select_for_update().filter(pk=api_key.tenant_id).first()
        ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=now)
        api_key.revoked_at = api_key.revoked_at or now
        live = Agent.objects.filter(tenant_id=api_key.tenant_id).exclude(
            status=Agent.Status.DEREGISTERED
        )
        still_active = ApiKey.objects.filter(ApiKey.active_q(now), tenant_id=api_key.tenant_id)
        if not still_active.exists():
            deregistered = _deregister(
                live, now, tenant_id=api_key.tenant_id, reason="last API key revoked"
            )
            return KeyRevocation(0, deregistered)
        minted = live.filter(token_key_id=api_key.pk)
        if agents == RevokedKeyAgents.DEREGISTER:
            deregistered = _deregister(
                minted, now, tenant_id=api_key.tenant_id, reason="their API key was revoked"
            )
            return KeyRevocation(0, deregistered)
        ids = list(minted.values_list("pk", flat=True))  # stable: the tenant row is locked
        revoked = minted.update(
            token_hash=None, token_prefix="", token_expires_at=None, token_key_id=None
        )
        history.record(
            tenant_id=api_key.tenant_id,
            agent_ids=ids,
            kind=Kind.TOKEN_REVOKED,
            changes={"reason": "their API key was revoked"},
        )
        return KeyRevocation(revoked, 0)


def _deregister(agents, now, *, tenant_id: uuid.UUID, reason: str) -> int:
    """Deregister these live agents of one tenant (inside a transaction holding the tenant
    row lock, so the set is stable)."""
    ids = list(agents.values_list("pk", flat=True))
    count = Agent.objects.filter(pk__in=ids).update(
        status=Agent.Status.DEREGISTERED, deregistered_at=now
    )
    history.record(
        tenant_id=tenant_id, agent_ids=ids, kind=Kind.DEREGISTERED, changes={"reason": reason}
    )
    return count


def rotate_webhook_secret(*, agent: Agent) -> str:
    """Issue a new webhook signing secret; deliveries from now on are signed with it."""
    secret = new_webhook_secret()
    Agent.objects.filter(pk=agent.pk, tenant_id=agent.tenant_id).update(webhook_secret=secret)
    agent.webhook_secret = secret
    return secret


def webhook_secret(*, agent: Agent) -> str:
    """The agent's webhook signing secret, created on first use (agents registered before
    secrets existed have none yet)."""
    if agent.webhook_secret:
        return agent.webhook_secret
    secret = new_webhook_secret()
    Agent.objects.filter(pk=agent.pk, webhook_secret="").update(webhook_secret=secret)
    agent.webhook_secret = (
        Agent.objects.filter(pk=agent.pk).values_list("webhook_secret", flat=True).first() or ""
    )
    return agent.webhook_secret


def set_agent_policy(
    *,
    agent: Agent,
    send_to: list[str] | None = None,
    receive_from: list[str] | None = None,
    disclosure_ceiling: str | None = None,
) -> Agent:
    """Change who `agent` may talk to (docs/PROTOCOL.md §4.5). An owner's action, never an agent's:
    callers must have established that the actor is an owner or operator of the tenant.

    Allow-lists hold agent ids of the same tenant or "*" (anyone); an empty list allows
    nobody. Arguments left None keep their value. Every read and transition re-checks the
    policy, so narrowing it closes access to existing history at once."""
    changes = clean_policy(
        agent=agent,
        send_to=send_to,
        receive_from=receive_from,
        disclosure_ceiling=disclosure_ceiling,
    )
    if changes:
        with transaction.atomic():
            # The current values under the row lock: the event records what really changed,
            # and an unchanged policy is no change (no event, no new revision).
            current = (
                Agent.objects.select_for_update()
                .filter(pk=agent.pk, tenant_id=agent.tenant_id)
                .values(*changes)
                .first()
            ) or {}
            changed = {f: v for f, v in changes.items() if f in current and current[f] != v}
            if changed:
                Agent.objects.filter(pk=agent.pk, tenant_id=agent.tenant_id).update(**changed)
                history.record(
                    tenant_id=agent.tenant_id,
                    agent_ids=[agent.pk],
                    kind=Kind.POLICY,
                    changes={f: [current[f], v] for f, v in changed.items()},
                )
        for field, value in changes.items():
            setattr(agent, field, value)
    return agent


def clean_policy(
    *,
    agent: Agent,
    send_to: Any = None,
    receive_from: Any = None,
    disclosure_ceiling: Any = None,
) -> dict[str, Any]:
    """Validate and normalise a policy change (InvalidRequest with per-field details)."""
    changes: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    for field, value in (("send_to", send_to), ("receive_from", receive_from)):
        if value is None:
            continue
        try:
            changes[field] = _normalise_allow_list(agent, value)
        except ValueError as exc:
            errors[field] = [str(exc)]
    if disclosure_ceiling is not None:
        if disclosure_ceiling not in SENSITIVITY_RANK:
            errors["disclosure_ceiling"] = ["Must be one of public-safe, internal, restricted."]
        else:
            changes["disclosure_ceiling"] = disclosure_ceiling
    if errors:
        raise InvalidRequest("Invalid policy.", details=errors)
    return changes


MAX_ALLOW_LIST = 1000


def _normalise_allow_list(agent: Agent, value: Any) -> list[str]:
    """Canonical form: ["*"] when it allows anyone, else sorted unique lowercase UUIDs of
    agents of the same tenant (any status: a disabled peer may be enabled again)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError('Must be a list of agent ids or "*".')
    if "*" in value:
        return ["*"]
    if len(value) > MAX_ALLOW_LIST:
        raise ValueError(f"At most {MAX_ALLOW_LIST} entries.")
    ids: set[uuid.UUID] = set()
    for entry in value:
        try:
            ids.add(uuid.UUID(entry.strip()))
        except ValueError:
            raise ValueError(f"Not an agent id: {entry!r}.") from None
    known = set(
        Agent.objects.filter(tenant_id=agent.tenant_id, pk__in=ids).values_list("pk", flat=True)
    )
    unknown = sorted(str(i) for i in ids - known)
    if unknown:
        # The same words for another tenant's agents as for ids that never existed.
        raise ValueError(f"Unknown agent(s) in this tenant: {', '.join(unknown)}.")
    return sorted(str(i) for i in ids)
