"""The append-only record of changes to agents, and each tenant's policy revision.

Every write service of agents/services.py and agents/tokens.py calls `record` inside its own
transaction, after its compare-and-set changed a row, so a change and its event commit
together or not at all. Changes to an agent's existence, policy or status bump the tenant's
`policy_revision` (one counter per tenant: an agent compares it with the revision it last
read from GET /api/v1/agents/me to learn that who may talk to whom has changed); token
changes are recorded without bumping it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.db.models import F

from tenants.models import Tenant

from .models import AgentEvent

Kind = AgentEvent.Kind
# Kinds that change who may talk to whom, or who exists to be talked to.
POLICY_KINDS = frozenset(
    {
        Kind.REGISTERED,
        Kind.POLICY,
        Kind.PUBLISHED,
        Kind.UNPUBLISHED,
        Kind.DISABLED,
        Kind.ENABLED,
        Kind.DEREGISTERED,
    }
)


def record(
    *,
    tenant_id: uuid.UUID,
    agent_ids: Iterable[uuid.UUID],
    kind: str,
    changes: dict[str, Any] | None = None,
) -> int:
    """Append one event per agent and, for a policy kind, bump the tenant's revision once.
    Returns the revision after the change. Call inside the change's transaction: the
    revision's UPDATE locks the tenant row, so concurrent changes get distinct revisions."""
    agent_ids = list(agent_ids)
    if not agent_ids:
        return policy_revision(tenant_id=tenant_id)
    if kind in POLICY_KINDS:
        Tenant.objects.filter(pk=tenant_id).update(policy_revision=F("policy_revision") + 1)
    revision = policy_revision(tenant_id=tenant_id)
    AgentEvent.objects.bulk_create(
        AgentEvent(
            tenant_id=tenant_id,
            agent_id=agent_id,
            kind=kind,
            changes=changes or {},
            policy_revision=revision,
        )
        for agent_id in agent_ids
    )
    return revision


def policy_revision(*, tenant_id: uuid.UUID) -> int:
    return Tenant.objects.filter(pk=tenant_id).values_list("policy_revision", flat=True).get()
