"""Reads for agents, always scoped by tenant first."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass

from django.db import connection
from django.db.models import Count, F, Q, QuerySet

from hikyaku import rows
from hikyaku.errors import AgentNotFound, InvalidRequest
from tenants.models import ApiKey, Tenant

from .models import Agent

# Every column of an agent, as the ORM would load it (the directory renders cards from them),
# and of a tenant.
_AGENT_FIELDS = tuple(f.name for f in Agent._meta.concrete_fields)
_TENANT_FIELDS = tuple(f.name for f in Tenant._meta.concrete_fields)


def parse_agent_id(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError):
        return None


def active_agent(*, tenant: Tenant, agent_id: str | uuid.UUID) -> Agent:
    """An active agent of this tenant; anything else (malformed, unknown, deregistered,
    another tenant's) is the same AgentNotFound."""
    return _tenants_agent(tenant, agent_id, "status = %s", [Agent.Status.ACTIVE.value])


def _tenants_agent(tenant: Tenant, agent_id: str | uuid.UUID, condition: str, params: list):
    """The agent of this tenant with this id for which `condition` holds, in one hand-written
    statement (the registry's reads, docs/ARCHITECTURE.md "The agents' hot path"); else
    AgentNotFound, whatever the reason."""
    pk = parse_agent_id(str(agent_id))
    agent = (
        rows.first(
            Agent,
            _AGENT_FIELDS,
            f"SELECT {rows.select_list(Agent, _AGENT_FIELDS)} FROM agents_agent"
            f" WHERE tenant_id = %s AND id = %s AND {condition}",
            [rows.prep(Agent, "tenant", tenant.pk), rows.prep(Agent, "id", pk), *params],
        )
        if pk
        else None
    )
    if agent is None:
        raise AgentNotFound(f"Agent not found: {agent_id}")
    agent.tenant = tenant
    return agent


def resolve_destination(*, tenant: Tenant, to: str) -> str:
    """A send's destination as the send path takes it: an agent id, or "*" (broadcast). An
    agent name is an address too (README, "Names as addresses"): the active agent of this
    tenant with that name, whose id is returned. Anything else comes back unchanged, for the
    send path to refuse as "Destination agent not found" naming what was given."""
    if to == "*" or parse_agent_id(to) is not None:
        return to
    found = (
        Agent.objects.filter(tenant=tenant, name=to.strip(), status=Agent.Status.ACTIVE)
        .values_list("pk", flat=True)
        .first()
    )
    return str(found) if found is not None else to


def manageable_agent(*, tenant: Tenant, agent_id: str | uuid.UUID) -> Agent:
    """An active or disabled agent of this tenant (what an operator may manage); deregistered,
    unknown and other tenants' agents are the same AgentNotFound."""
    return _tenants_agent(tenant, agent_id, "status <> %s", [Agent.Status.DEREGISTERED.value])


def encode_cursor(values: list) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, *, length: int) -> list:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, TypeError, RecursionError):
        values = None
    if not isinstance(values, list) or len(values) != length:
        raise InvalidRequest("Invalid cursor.", details={"cursor": ["invalid"]})
    return values


def list_active_agents(
    *, tenant: Tenant, q: str = "", limit: int = 100, cursor: str | None = None
) -> tuple[list[Agent], str | None]:
    """One page of the tenant's active agents by name, and the cursor of the next page: one
    hand-written statement (an agent's registry read, docs/ARCHITECTURE.md "The agents' hot
    path"), with `q` matched as the ORM's `name__icontains` matches it on either database."""
    where = ["tenant_id = %s", "status = %s"]
    params = [rows.prep(Agent, "tenant", tenant.pk), Agent.Status.ACTIVE.value]
    if q:
        where.append(_name_contains())
        params.append(f"%{connection.ops.prep_for_like_query(q)}%")
    if cursor:
        name, last_id = _name_cursor(cursor)
        where.append("(name > %s OR (name = %s AND id > %s))")
        params += [name, name, rows.prep(Agent, "id", last_id)]
    params.append(limit + 1)
    page = [
        rows.build(Agent, _AGENT_FIELDS, row)
        for row in rows.many(
            f"SELECT {rows.select_list(Agent, _AGENT_FIELDS)} FROM agents_agent"
            f" WHERE {' AND '.join(where)} ORDER BY name, id LIMIT %s",
            params,
        )
    ]
    return _next_page(page, limit)


def _name_contains() -> str:
    """`name__icontains = %s` as the ORM renders it on this connection's database."""
    return f"{connection.ops.lookup_cast('icontains', 'CharField') % 'name'} " + (
        connection.operators["icontains"] % "%s"
    )


def _name_page(
    agents: QuerySet[Agent], *, limit: int, cursor: str | None
) -> tuple[list[Agent], str | None]:
    if cursor:
        name, last_id = _name_cursor(cursor)
        agents = agents.filter(Q(name__gt=name) | Q(name=name, id__gt=last_id))
    return _next_page(list(agents.order_by("name", "id")[: limit + 1]), limit)


def _name_cursor(cursor: str) -> tuple[str, uuid.UUID]:
    name, last_id = decode_cursor(cursor, length=2)
    pk = parse_agent_id(last_id)
    if not isinstance(name, str) or pk is None:
        raise InvalidRequest("Invalid cursor.", details={"cursor": ["invalid"]})
    return name, pk


def _next_page(page: list[Agent], limit: int) -> tuple[list[Agent], str | None]:
    """The page of `limit` (fetched with one more, to know whether another follows)."""
    if len(page) <= limit:
        return page, None
    page = page[:limit]
    return page, encode_cursor([page[-1].name, str(page[-1].id)])


def peer_agent(*, agent_id: str | uuid.UUID) -> Agent | None:
    """An active agent by id in any tenant, for its own A2A endpoint and card, where the
    tenant is not known until the caller is. Callers decide visibility (public, or the
    caller's own tenant) and answer exactly like "not found" otherwise."""
    pk = parse_agent_id(str(agent_id))
    if pk is None:
        return None
    row = rows.one(
        f"SELECT {rows.select_list(Agent, _AGENT_FIELDS)},"
        f" {rows.columns('t', Tenant, _TENANT_FIELDS)} FROM agents_agent"
        " JOIN tenants_tenant t ON t.id = agents_agent.tenant_id"
        " WHERE agents_agent.id = %s AND agents_agent.status = %s",
        [rows.prep(Agent, "id", pk), Agent.Status.ACTIVE.value],
    )
    if row is None:
        return None
    return rows.build_joined(Agent, _AGENT_FIELDS, row, (("tenant", Tenant, _TENANT_FIELDS),))


def peer_reachability(agent_ids: set[uuid.UUID]) -> dict[uuid.UUID, bool]:
    """Which of these agents are still active (their endpoints serve), and whether each is
    public: one query for the open streams of a whole process (messaging/stream/hub.py)."""
    return dict(
        Agent.objects.filter(pk__in=agent_ids, status=Agent.Status.ACTIVE).values_list(
            "pk", "public"
        )
    )


def list_public_agents(
    *, limit: int = 100, cursor: str | None = None
) -> tuple[list[Agent], str | None]:
    """One page of the active public agents of every tenant (the anonymous directory at
    /a2a/agents/): an owner who publishes an agent publishes its card."""
    agents: QuerySet[Agent] = Agent.objects.filter(public=True, status=Agent.Status.ACTIVE)
    return _name_page(agents, limit=limit, cursor=cursor)


# Web UI reads ------------------------------------------------------------------------------

LIVE_STATUSES = (Agent.Status.ACTIVE, Agent.Status.DISABLED)


def agent_in_tenant(*, tenant: Tenant, agent_id: str | uuid.UUID) -> Agent:
    """An agent of this tenant in any status (people still read deregistered agents' history);
    malformed, unknown and other tenants' ids are the same AgentNotFound."""
    pk = parse_agent_id(str(agent_id))
    agent = Agent.objects.filter(tenant=tenant, pk=pk).first() if pk else None
    if agent is None:
        raise AgentNotFound(f"Agent not found: {agent_id}")
    agent.tenant = tenant
    return agent


def agent_status_counts(*, tenant: Tenant) -> dict[str, int]:
    """How many agents the tenant has in each status, in one query."""
    counts = {status: 0 for status in Agent.Status.values}
    rows = Agent.objects.filter(tenant=tenant).values("status").annotate(n=Count("id"))
    for row in rows.order_by():
        counts[row["status"]] = row["n"]
    return counts


def agents_by_status(*, tenant: Tenant, status: str, q: str = "") -> QuerySet[Agent]:
    """The tenant's agents in one status, matching `q` in name or description. Active and
    disabled agents sort by name; deregistered ones most recent first."""
    agents = Agent.objects.filter(tenant=tenant, status=status)
    if q:
        agents = agents.filter(Q(name__icontains=q) | Q(description__icontains=q))
    if status == Agent.Status.DEREGISTERED:
        return agents.order_by("-deregistered_at", "id")
    return agents.order_by("name", "id")


def api_keys_with_agent_counts(*, tenant: Tenant) -> QuerySet[ApiKey]:
    """The tenant's API keys, unrevoked first then newest first, each annotated with
    `agent_count`: its registered agents that are not deregistered. One query."""
    return (
        ApiKey.objects.filter(tenant=tenant)
        .annotate(
            agent_count=Count(
                "registered_agents", filter=Q(registered_agents__status__in=LIVE_STATUSES)
            )
        )
        .order_by(F("revoked_at").desc(nulls_first=True), "-created_at")
    )


@dataclass(frozen=True)
class RevocationImpact:
    last_active_key: bool  # no other active key of the tenant remains
    agents_deregistered: int  # when it is the last key: every live agent of the tenant
    agents_stopped: int  # otherwise: the live agents whose tokens this key minted


def revocation_impact(*, api_key: ApiKey) -> RevocationImpact:
    """What revoking this key would do (agents.services.revoke_api_key): when no other active
    key remains, every live agent of the tenant is deregistered; otherwise the agents whose
    tokens it minted stop (their tokens revoked, or they are deregistered: the owner
    chooses)."""
    others = ApiKey.objects.filter(ApiKey.active_q(), tenant_id=api_key.tenant_id).exclude(
        pk=api_key.pk
    )
    live = Agent.objects.filter(tenant_id=api_key.tenant_id, status__in=LIVE_STATUSES)
    if others.exists():
        stopped = live.filter(token_key_id=api_key.pk).count()
        return RevocationImpact(
            last_active_key=False, agents_deregistered=0, agents_stopped=stopped
        )
    return RevocationImpact(
        last_active_key=True, agents_deregistered=live.count(), agents_stopped=0
    )
