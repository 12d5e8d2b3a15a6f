"""How the operator commands find a tenant and one of its live agents."""

from __future__ import annotations

from django.core.management.base import CommandError

from agents.models import Agent
from agents.selectors import LIVE_STATUSES, parse_agent_id
from tenants.models import Tenant


def tenant_by_slug(slug: str) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise CommandError(f"No tenant {slug!r}.")
    return tenant


def live_agent(*, tenant: Tenant, agent: str) -> Agent:
    """The tenant's active or disabled agent with this name (or this id); names are unique
    among a tenant's live agents (docs/PROTOCOL.md §1)."""
    agents = Agent.objects.filter(tenant=tenant, status__in=LIVE_STATUSES)
    pk = parse_agent_id(agent)
    found = (agents.filter(pk=pk) if pk else agents.filter(name=agent.strip())).first()
    if found is None:
        raise CommandError(f"No live agent {agent!r} in tenant {tenant.slug!r}.")
    found.tenant = tenant
    return found
