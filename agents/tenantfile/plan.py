"""Export a tenant as a file, plan the changes a file asks for, and apply them.

Agents are matched by name among the tenant's live (active or disabled) agents; relations are
stored as agent ids and written in the file as names. A plan is computed and applied in one
transaction holding the tenant's row lock, through the same services as the admin and the
API, so every change writes its AgentEvent and bumps the tenant's policy revision, and a plan
with no steps writes nothing: applying the same file twice changes nothing the second time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml
from django.db import transaction

from tenants import services as tenant_services
from tenants.models import Tenant

from .. import history, services
from ..models import Agent, Sensitivity
from ..selectors import LIVE_STATUSES
from .checks import ANYONE, RELATIONS, VERSION, AgentSpec, TenantFile, check_against
from .parse import Document

# Compared and shown in this order; `status` is a step of its own (disable / enable).
FIELDS = (
    "description",
    "skills",
    "public",
    "send_to",
    "receive_from",
    "disclosure_ceiling",
    "webhook_url",
)
DEFAULTS: dict[str, Any] = {
    "description": "",
    "skills": [],
    "public": False,
    "send_to": [ANYONE],
    "receive_from": [ANYONE],
    "disclosure_ceiling": Sensitivity.INTERNAL,
    "webhook_url": "",
}
HEADER = (
    "# Hikyaku tenant file (docs/TENANTFILE.md). Review changes to it, then:\n"
    "#   manage.py tenantfile apply FILE --dry-run   # the plan\n"
    "#   manage.py tenantfile apply FILE             # the same plan, applied\n"
)


@dataclass(frozen=True)
class Change:
    field: str
    old: Any
    new: Any


@dataclass
class Step:
    verb: str  # create tenant, rename tenant, create, update, disable, enable, deregister
    name: str
    changes: list[Change] = field(default_factory=list)
    spec: AgentSpec | None = None
    agent: Agent | None = None

    def render(self) -> list[str]:
        what = {
            "create tenant": f"create tenant {self.name}",
            "rename tenant": f"rename tenant {self.name}",
            "deregister": f"deregister agent {self.name} (absent from the file; --prune)",
        }.get(self.verb, f"{self.verb} agent {self.name}")
        lines = [f"{_SIGN[self.verb]} {what}"]
        for change in self.changes:
            if change.old is None:
                lines.append(f"    {change.field}: {_show(change.new)}")
            else:
                lines.append(f"    {change.field}: {_show(change.old)} -> {_show(change.new)}")
        return lines


_SIGN = {
    "create tenant": "+",
    "rename tenant": "~",
    "create": "+",
    "update": "~",
    "disable": "-",
    "enable": "+",
    "deregister": "-",
}


@dataclass
class Plan:
    slug: str
    steps: list[Step]
    revision: int | None = None  # the tenant's policy revision after applying

    def render(self) -> list[str]:
        if not self.steps:
            return [f"Tenant {self.slug}: no changes."]
        counts: dict[str, int] = {}
        for step in self.steps:
            counts[step.verb] = counts.get(step.verb, 0) + 1
        summary = ", ".join(f"{n} {verb}" for verb, n in counts.items())
        lines = [f"Tenant {self.slug}: {len(self.steps)} step(s) ({summary})."]
        for step in self.steps:
            lines.extend(step.render())
        return lines


def export_tenant(*, tenant: Tenant) -> str:
    """The tenant's live agents as a tenant file: sorted by name, relations by name (unique
    among live agents, docs/PROTOCOL.md §1), no secrets."""
    live = _live_agents(tenant)
    names_by_id = {str(a.pk): a.name for a in live}
    agents = []
    for agent in live:
        current = _current(agent, names_by_id)
        agents.append(
            {
                "name": agent.name,
                "description": current["description"],
                "skills": _sorted_keys(current["skills"]),
                "public": current["public"],
                "status": agent.status,
                "send_to": current["send_to"],
                "receive_from": current["receive_from"],
                "disclosure_ceiling": current["disclosure_ceiling"],
                "webhook_url": current["webhook_url"],
            }
        )
    document = {
        "version": VERSION,
        "tenant": {"slug": tenant.slug, "name": tenant.name},
        "agents": agents,
    }
    return HEADER + yaml.dump(
        document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100
    )


def apply_file(
    *,
    tenant_file: TenantFile,
    document: Document,
    prune: bool = False,
    dry_run: bool = False,
    show: Callable[[Plan], None] = lambda plan: None,
) -> Plan:
    """Plan the file against the tenant under its row lock, `show` the plan, and unless
    `dry_run` apply it in the same transaction. Problems only the database reveals (relations
    to unknown agents) are added to `document` and
    abort before anything is shown or written."""
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().filter(slug=tenant_file.slug).first()
        live = _live_agents(tenant) if tenant else []
        check_against(document, tenant_file, live, prune=prune)
        if document.problems:
            return Plan(slug=tenant_file.slug, steps=[])
        plan = _plan(tenant, tenant_file, live, prune=prune)
        show(plan)
        if dry_run or not plan.steps:
            return plan
        tenant = _execute(plan, tenant, tenant_file, live)
        plan.revision = history.policy_revision(tenant_id=tenant.pk)
    return plan


def _plan(
    tenant: Tenant | None, tenant_file: TenantFile, live: list[Agent], *, prune: bool
) -> Plan:
    steps: list[Step] = []
    if tenant is None:
        name = tenant_file.name or tenant_file.slug
        steps.append(Step("create tenant", tenant_file.slug, [Change("name", None, name)]))
    elif tenant_file.name and tenant.name != tenant_file.name:
        steps.append(
            Step("rename tenant", tenant_file.slug, [Change("name", tenant.name, tenant_file.name)])
        )
    by_name = {a.name: a for a in live}
    names_by_id = {str(a.pk): a.name for a in live}
    for spec in sorted(tenant_file.agents, key=lambda s: s.name):
        desired = _desired(spec)
        agent = by_name.get(spec.name)
        if agent is None:
            changes = [Change(f, None, desired[f]) for f in FIELDS if desired[f] != DEFAULTS[f]]
            steps.append(Step("create", spec.name, changes, spec=spec))
            if spec.status == Agent.Status.DISABLED:
                steps.append(Step("disable", spec.name, spec=spec))
            continue
        current = _current(agent, names_by_id)
        changes = [Change(f, current[f], desired[f]) for f in FIELDS if current[f] != desired[f]]
        if changes:
            steps.append(Step("update", spec.name, changes, spec=spec, agent=agent))
        if agent.status != spec.status:
            verb = "disable" if spec.status == Agent.Status.DISABLED else "enable"
            steps.append(Step(verb, spec.name, spec=spec, agent=agent))
    if prune:
        wanted = tenant_file.names()
        steps.extend(Step("deregister", a.name, agent=a) for a in live if a.name not in wanted)
    return Plan(slug=tenant_file.slug, steps=steps)


def _execute(
    plan: Plan, tenant: Tenant | None, tenant_file: TenantFile, live: list[Agent]
) -> Tenant:
    """Run the steps through the services: tenant, new agents, fields, then relations (which
    may name agents created above), then status and deregistrations."""
    for step in plan.steps:
        if step.verb == "create tenant":
            tenant = tenant_services.create_tenant(
                name=tenant_file.name or tenant_file.slug, slug=tenant_file.slug
            )
        elif step.verb == "rename tenant":
            tenant_services.rename_tenant(tenant=tenant, name=tenant_file.name)
    assert tenant is not None
    agents = {a.name: a for a in live}
    for step in plan.steps:
        if step.verb == "create":
            spec = step.spec
            agents[spec.name] = services.register_agent(
                tenant=tenant,
                name=spec.name,
                description=spec.description,
                skills=spec.skills,
                webhook_url=spec.webhook_url,
                issue_token=False,
            ).agent
        elif step.verb == "update":
            fields = {c.field: c.new for c in step.changes}
            services.update_agent(
                agent=step.agent,
                **{f: fields[f] for f in ("description", "skills", "webhook_url") if f in fields},
            )
    ids = {name: str(agent.pk) for name, agent in agents.items()}
    for step in plan.steps:
        if step.verb not in ("create", "update"):
            continue
        agent, fields = agents[step.name], {c.field: c.new for c in step.changes}
        if "public" in fields:
            services.set_agent_public(agent=agent, public=fields["public"])
        policy = {f: fields[f] for f in (*RELATIONS, "disclosure_ceiling") if f in fields}
        for relation in RELATIONS:
            if relation in policy and policy[relation] != [ANYONE]:
                policy[relation] = [ids[name] for name in policy[relation]]
        if policy:
            services.set_agent_policy(agent=agent, **policy)
    for step in plan.steps:
        if step.verb in ("disable", "enable"):
            services.set_agent_enabled(agent=agents[step.name], enabled=step.verb == "enable")
        elif step.verb == "deregister":
            services.deregister_agent(agent=step.agent)
    return tenant


def _live_agents(tenant: Tenant) -> list[Agent]:
    return list(
        Agent.objects.filter(tenant=tenant, status__in=LIVE_STATUSES).order_by("name", "id")
    )


def _relation_names(ids: list[str], names_by_id: dict[str, str]) -> list[str]:
    """A stored allow-list as the file writes it. Ids of deregistered agents are left out:
    they can never be delivered to again, so the file need not (and cannot) name them."""
    if ANYONE in ids:
        return [ANYONE]
    return sorted({names_by_id[i] for i in ids if i in names_by_id})


def _current(agent: Agent, names_by_id: dict[str, str]) -> dict[str, Any]:
    return {
        "description": agent.description,
        "skills": agent.skills or [],
        "public": agent.public,
        "send_to": _relation_names(agent.send_to, names_by_id),
        "receive_from": _relation_names(agent.receive_from, names_by_id),
        "disclosure_ceiling": agent.disclosure_ceiling,
        "webhook_url": agent.webhook_url,
    }


def _desired(spec: AgentSpec) -> dict[str, Any]:
    return {
        "description": spec.description,
        "skills": spec.skills,
        "public": spec.public,
        "send_to": sorted(spec.send_to),
        "receive_from": sorted(spec.receive_from),
        "disclosure_ceiling": spec.disclosure_ceiling,
        "webhook_url": spec.webhook_url,
    }


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _sorted_keys(value: Any) -> Any:
    """Postgres (jsonb) and SQLite store object keys in different orders: sort them so the
    same tenant exports the same bytes on either."""
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line text (a description reads as written); lists indented
    under their key."""

    def increase_indent(self, flow: bool = False, indentless: bool = False):
        return super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)
