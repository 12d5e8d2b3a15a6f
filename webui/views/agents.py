"""Agents of the current tenant: lists by status, detail, and the owners' controls."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agents import selectors as agent_selectors
from agents import services as agent_services
from agents.models import Agent

from .base import TenantContext, render_page, tenant_view

AGENTS_PER_PAGE = 50


@tenant_view()
def agents(request: HttpRequest, ctx: TenantContext) -> HttpResponse:
    status = request.GET.get("status", Agent.Status.ACTIVE)
    if status not in Agent.Status.values:
        status = Agent.Status.ACTIVE
    q = request.GET.get("q", "").strip()[:200]
    counts = agent_selectors.agent_status_counts(tenant=ctx.tenant)
    paginator = Paginator(
        agent_selectors.agents_by_status(tenant=ctx.tenant, status=status, q=q),
        AGENTS_PER_PAGE,
    )
    # With no search the status counts already give the total: no COUNT query for the pager.
    if not q:
        paginator.count = counts[status]
    page = paginator.get_page(request.GET.get("page"))
    return render_page(
        request,
        "webui/agents.html",
        {
            "section": "agents",
            "page": page,
            "status": status,
            "q": q,
            "counts": counts,
            "tabs": [(value, label, counts[value]) for value, label in Agent.Status.choices],
            "has_keys": ctx.tenant.api_keys.exists() if not any(counts.values()) else True,
        },
        ctx=ctx,
    )


@tenant_view()
def agent_detail(request: HttpRequest, ctx: TenantContext, agent_id: str) -> HttpResponse:
    agent = agent_selectors.agent_in_tenant(tenant=ctx.tenant, agent_id=agent_id)
    return render_page(
        request, "webui/agent_detail.html", {"section": "agents", "agent": agent}, ctx=ctx
    )


@require_POST
@tenant_view(owner_only=True)
def agent_set_enabled(
    request: HttpRequest, ctx: TenantContext, agent_id: str, enabled: bool
) -> HttpResponse:
    agent = agent_selectors.agent_in_tenant(tenant=ctx.tenant, agent_id=agent_id)
    if agent_services.set_agent_enabled(agent=agent, enabled=enabled):
        messages.success(request, f"{agent.name} {'enabled' if enabled else 'disabled'}.")
    else:
        messages.info(request, f"{agent.name} is {agent.get_status_display().lower()}.")
    return redirect("webui:agent", slug=ctx.tenant.slug, agent_id=agent.id)


@tenant_view(owner_only=True)
def agent_deregister(request: HttpRequest, ctx: TenantContext, agent_id: str) -> HttpResponse:
    """GET asks for confirmation; POST deregisters (history stays readable)."""
    agent = agent_selectors.agent_in_tenant(tenant=ctx.tenant, agent_id=agent_id)
    if request.method == "POST":
        if agent_services.deregister_agent(agent=agent):
            messages.success(request, f"{agent.name} deregistered.")
        return redirect("webui:agent", slug=ctx.tenant.slug, agent_id=agent.id)
    return render_page(
        request, "webui/agent_deregister.html", {"section": "agents", "agent": agent}, ctx=ctx
    )
