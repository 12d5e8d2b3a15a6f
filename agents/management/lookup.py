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
    """The tenant's active or disabled agent with this name (or this id). Names are how
    tenant files address agents, so a name shared by several live agents is refused rather
    than guessed: the operator passes the id instead."""
    agents = Agent.objects.filter(tenant=tenant, status__in=LIVE_STATUSES)
    pk = parse_agent_id(agent)
    matches = list(agents.filter(pk=pk) if pk else agents.filter(name=agent.strip()))
    if not matches:
        raise CommandError(f"No live agent {agent!r} in tenant {tenant.slug!r}.")
    if len(matches) > 1:
        ids = ", ".join(sorted(str(a.pk) for a in matches))
        raise CommandError(
            f"{len(matches)} live agents of tenant {tenant.slug!r} are named {agent!r} ({ids}): "
            "pass the id instead."
        )
    matches[0].tenant = tenant
    return matches[0]
