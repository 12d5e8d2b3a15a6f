"""Agent authentication (DESIGN.md §2), one implementation for every surface.

REST, JSON-RPC, SSE and MCP-over-HTTP all call `authenticate_agent` with the raw
`Authorization` and `X-Agent-Id` header values. Two identities are accepted:

1. compat: `Bearer <api key>` + `X-Agent-Id` (refused when the tenant requires agent tokens);
2. `Bearer <agent token>`, with `X-Agent-Id` optional and, when present, matching.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from hikyaku import rows
from hikyaku.errors import Unauthenticated
from tenants.credentials import AGENT_TOKEN_RE, API_KEY_RE, hash_secret, secrets_match
from tenants.models import ApiKey, Tenant
from tenants.ratelimit import check_rate
from tenants.services import touch_api_key

from .models import Agent

AGENT_FIELDS = tuple(f.name for f in Agent._meta.concrete_fields)
KEY_FIELDS = tuple(f.name for f in ApiKey._meta.concrete_fields)


@dataclass(frozen=True)
class AgentIdentity:
    tenant: Tenant
    agent: Agent
    api_key: ApiKey | None  # set for the compat identity, None for an agent token
    credential_hash: str  # what re-validation (open streams) checks again

    @property
    def via_token(self) -> bool:
        return self.api_key is None


def bearer_secret(authorization: str | None) -> str:
    """The credential of an `Authorization: Bearer …` header; the scheme is case-insensitive."""
    if not authorization:
        raise Unauthenticated("Missing Authorization header; send 'Authorization: Bearer <key>'.")
    scheme, _, value = authorization.strip().partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value:
        raise Unauthenticated("Authorization must use the Bearer scheme.")
    return value


def _parse_agent_id(agent_id: str | None) -> uuid.UUID | None:
    if agent_id is None or agent_id.strip() == "":
        return None
    try:
        return uuid.UUID(agent_id.strip())
    except ValueError:
        raise Unauthenticated("X-Agent-Id is not a valid agent id.") from None


def authenticate_key(authorization: str | None) -> ApiKey:
    """An active, unexpired tenant API key (registration needs nothing else)."""
    raw = bearer_secret(authorization)
    if not API_KEY_RE.match(raw):
        raise Unauthenticated("Invalid API key.")
    api_key = _first_with_tenant(
        ApiKey,
        KEY_FIELDS,
        f"SELECT {rows.select_list(ApiKey, KEY_FIELDS)}, t.name, t.slug, t.require_agent_tokens"
        " FROM tenants_apikey JOIN tenants_tenant t ON t.id = tenants_apikey.tenant_id"
        " WHERE key_hash = %s",
        [hash_secret(raw)],
    )
    if api_key is None or not secrets_match(raw, api_key.key_hash) or not api_key.is_active():
        raise Unauthenticated("Invalid, revoked or expired API key.")
    check_rate(api_key.key_hash)
    touch_api_key(api_key=api_key, interval_seconds=settings.HIKYAKU_TOUCH_INTERVAL_SECONDS)
    return api_key


def authenticate_agent(*, authorization: str | None, agent_id: str | None) -> AgentIdentity:
    raw = bearer_secret(authorization)
    claimed_id = _parse_agent_id(agent_id)

    if AGENT_TOKEN_RE.match(raw):
        token_hash = hash_secret(raw)
        agent = _first_with_tenant(
            Agent,
            AGENT_FIELDS,
            f"SELECT {rows.select_list(Agent, AGENT_FIELDS)}, t.name, t.slug,"
            " t.require_agent_tokens FROM agents_agent JOIN tenants_tenant t"
            " ON t.id = agents_agent.tenant_id WHERE agents_agent.token_hash = %s AND agents_agent.status = %s",
            [token_hash, Agent.Status.ACTIVE],
        )
        if agent is None or not secrets_match(raw, agent.token_hash or ""):
            raise Unauthenticated("Invalid agent token, or the agent is not active.")
        if claimed_id is not None and claimed_id != agent.id:
            raise Unauthenticated("X-Agent-Id does not match the agent token.")
        check_rate(token_hash)
        _touch_agent(agent)
        return AgentIdentity(
            tenant=agent.tenant, agent=agent, api_key=None, credential_hash=token_hash
        )

    api_key = authenticate_key(authorization)
    if api_key.tenant.require_agent_tokens:
        raise Unauthenticated("This tenant requires agent tokens: send 'Bearer <agent token>'.")
    if claimed_id is None:
        raise Unauthenticated("Missing X-Agent-Id header (or use an agent token).")
    agent = rows.first(
        Agent,
        AGENT_FIELDS,
        f"SELECT {rows.select_list(Agent, AGENT_FIELDS)} FROM agents_agent"
        " WHERE id = %s AND tenant_id = %s AND status = %s",
        [
            rows.prep(Agent, "id", claimed_id),
            rows.prep(Agent, "tenant", api_key.tenant_id),
            Agent.Status.ACTIVE,
        ],
    )
    if agent is None:
        raise Unauthenticated("Unknown or inactive agent for this API key.")
    agent.tenant = api_key.tenant
    _touch_agent(agent)
    return AgentIdentity(
        tenant=api_key.tenant, agent=agent, api_key=api_key, credential_hash=api_key.key_hash
    )


def identity_is_current(identity: AgentIdentity) -> bool:
    """Whether an identity established earlier still holds (revocation, expiry, rotation,
    deregistration, disabling, and the tenant's token requirement). One query."""
    agents = Agent.objects.filter(pk=identity.agent.pk, status=Agent.Status.ACTIVE)
    if identity.via_token:
        return agents.filter(token_hash=identity.credential_hash).exists()
    now = timezone.now()
    # One filter() call, so every condition applies to the same key row.
    return agents.filter(
        Q(tenant__api_keys__expires_at__isnull=True) | Q(tenant__api_keys__expires_at__gt=now),
        tenant__require_agent_tokens=False,
        tenant__api_keys__key_hash=identity.credential_hash,
        tenant__api_keys__revoked_at__isnull=True,
    ).exists()


def _first_with_tenant(model, fields: tuple[str, ...], sql: str, params: list):
    """One row of `model` joined with its tenant, in one hand-written query.

    Authentication runs on every request; the ORM would spend several times the database
    round trip compiling this join (see hikyaku/rows.py)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    obj = rows.build(model, fields, row[: len(fields)])
    name, slug, requires_tokens = row[len(fields) :]
    obj.tenant = Tenant.from_db(
        connection.alias,
        ["id", "name", "slug", "require_agent_tokens"],
        [obj.tenant_id, name, slug, bool(requires_tokens)],
    )
    return obj


def _touch_agent(agent: Agent) -> None:
    now = timezone.now()
    interval = settings.HIKYAKU_TOUCH_INTERVAL_SECONDS
    if agent.last_seen_at and (now - agent.last_seen_at).total_seconds() < interval:
        return
    Agent.objects.filter(pk=agent.pk).update(last_seen_at=now)
    agent.last_seen_at = now
