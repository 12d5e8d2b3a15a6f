"""Reads for agents, always scoped by tenant first."""

from __future__ import annotations

import base64
import json
import uuid

from django.db.models import Q, QuerySet

from hikyaku.errors import AgentNotFound, InvalidRequest
from tenants.models import Tenant

from .models import Agent


def parse_agent_id(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError):
        return None


def active_agent(*, tenant: Tenant, agent_id: str | uuid.UUID) -> Agent:
    """An active agent of this tenant; anything else (malformed, unknown, deregistered,
    another tenant's) is the same AgentNotFound."""
    pk = parse_agent_id(str(agent_id))
    agent = (
        Agent.objects.filter(tenant=tenant, pk=pk, status=Agent.Status.ACTIVE).first()
        if pk
        else None
    )
    if agent is None:
        raise AgentNotFound(f"Agent not found: {agent_id}")
    agent.tenant = tenant
    return agent


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
    """One page of the tenant's active agents by name, and the cursor of the next page."""
    agents: QuerySet[Agent] = Agent.objects.filter(tenant=tenant, status=Agent.Status.ACTIVE)
    if q:
        agents = agents.filter(name__icontains=q)
    if cursor:
        name, last_id = decode_cursor(cursor, length=2)
        if not isinstance(name, str) or parse_agent_id(last_id) is None:
            raise InvalidRequest("Invalid cursor.", details={"cursor": ["invalid"]})
        agents = agents.filter(Q(name__gt=name) | Q(name=name, id__gt=parse_agent_id(last_id)))
    page = list(agents.order_by("name", "id")[: limit + 1])
    next_cursor = None
    if len(page) > limit:
        page = page[:limit]
        next_cursor = encode_cursor([page[-1].name, str(page[-1].id)])
    return page, next_cursor
