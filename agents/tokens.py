"""Agent tokens from an owner's side: issue, rotate (replace) and revoke, with an expiry.

An agent holds at most one token, stored as its SHA-256 digest (tenants/credentials.py).
Authentication refuses a token past `Agent.token_expires_at`, and open streams re-check
theirs (agents.auth.identity_is_current), so a replaced, revoked or expired token stops on the
next request and closes the streams it opened within HIKYAKU_STREAM_CHECK_SECONDS. Each
service is one compare-and-set with its AgentEvent row in one transaction.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from hikyaku.errors import InvalidRequest
from tenants.credentials import display_prefix, hash_secret, new_agent_token

from . import history
from .models import Agent, AgentEvent

Kind = AgentEvent.Kind


def issue_agent_token(*, agent: Agent, expires_at: datetime | None = None) -> str:
    """Give an agent that has no token (created from a tenant file, or revoked) a new one.
    Returns the raw token, which is never stored. An agent that already holds a token is
    refused: replacing it is `replace_agent_token`, so issuing cannot silently cut off a
    running agent."""
    _check_expiry(expires_at)
    raw = new_agent_token()
    with transaction.atomic():
        live = _live(agent)
        issued = live.filter(token_hash__isnull=True).update(
            **_token_fields(raw, expires_at), token_key_id=None
        )
        if not issued:
            if live.exists():
                raise InvalidRequest(_refusal(agent, "already has a token: rotate it instead"))
            raise InvalidRequest(_refusal(agent, "is deregistered"))
        history.record(
            tenant_id=agent.tenant_id,
            agent_ids=[agent.pk],
            kind=Kind.TOKEN_ISSUED,
            changes=_expiry_change(expires_at),
        )
    _remember(agent, raw, expires_at)
    return raw


def replace_agent_token(
    *, agent: Agent, expires_at: datetime | None = None, key_id: uuid.UUID | None = None
) -> str:
    """Give the agent a new token whether or not it had one; the old one stops at once.
    Returns the raw token. Active and disabled agents only (an owner may rotate before
    enabling). `key_id`: the API key the new token rests on (Agent.token_key_id) — None
    when an owner issues it."""
    _check_expiry(expires_at)
    raw = new_agent_token()
    with transaction.atomic():
        if not _live(agent).update(**_token_fields(raw, expires_at), token_key_id=key_id):
            raise InvalidRequest("A deregistered agent's token cannot be rotated.")
        history.record(
            tenant_id=agent.tenant_id,
            agent_ids=[agent.pk],
            kind=Kind.TOKEN_ROTATED,
            changes=_expiry_change(expires_at),
        )
    _remember(agent, raw, expires_at)
    agent.token_key_id = key_id
    return raw


def revoke_agent_token(*, agent: Agent) -> bool:
    """Remove the agent's token; True if it had one. The agent stays registered: it can get
    a new token (`issue_agent_token`) or act with a tenant key and X-Agent-Id where the
    tenant allows that."""
    with transaction.atomic():
        changed = Agent.objects.filter(
            pk=agent.pk, tenant_id=agent.tenant_id, token_hash__isnull=False
        ).update(token_hash=None, token_prefix="", token_expires_at=None, token_key_id=None)
        if changed:
            history.record(tenant_id=agent.tenant_id, agent_ids=[agent.pk], kind=Kind.TOKEN_REVOKED)
    if changed:
        _remember(agent, "", None)
    return bool(changed)


def _live(agent: Agent):
    return Agent.objects.filter(pk=agent.pk, tenant_id=agent.tenant_id).exclude(
        status=Agent.Status.DEREGISTERED
    )


def _check_expiry(expires_at: datetime | None) -> None:
    if expires_at is None:
        return
    if expires_at.tzinfo is None:
        raise InvalidRequest("An expiry needs a time zone, e.g. 2027-01-01T00:00:00Z.")
    if expires_at <= timezone.now():
        raise InvalidRequest("The expiry is in the past.")


def _token_fields(raw: str, expires_at: datetime | None) -> dict:
    return {
        "token_hash": hash_secret(raw),
        "token_prefix": display_prefix(raw),
        "token_expires_at": expires_at,
    }


def _expiry_change(expires_at: datetime | None) -> dict:
    return {"expires_at": expires_at.isoformat() if expires_at else None}


def _refusal(agent: Agent, why: str) -> str:
    return f"Agent {agent.name!r} ({agent.pk}) {why}."


def _remember(agent: Agent, raw: str, expires_at: datetime | None) -> None:
    agent.token_key_id = None
    agent.token_hash = hash_secret(raw) if raw else None
    agent.token_prefix = display_prefix(raw) if raw else ""
    agent.token_expires_at = expires_at
