"""Messages: an agent's inbox and sent box, a task's page with its timeline, and sending a
message as one of the tenant's agents (through the same service as the A2A API)."""

from __future__ import annotations

import secrets
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import NoReverseMatch, reverse

from agents import selectors as agent_selectors
from agents.models import Agent
from hikyaku.errors import HikyakuError
from messaging import lifecycle
from messaging import selectors as messaging_selectors
from messaging.models import Task, TaskState
from messaging.parties import Sender
from messaging.services import cancel_task, send_message

from .. import files
from ..forms import SendMessageForm, TaskActionForm, add_service_error
from .base import TenantContext, render_page, tenant_view

TASKS_PER_PAGE = 25


def live_events_url(ctx: TenantContext, agent: Agent) -> str:
    """The session-authenticated event stream of an agent, once the streams work provides
    the URL `webui:agent-events`; until then pages are simply not live."""
    try:
        return reverse("webui:agent-events", kwargs={"slug": ctx.tenant.slug, "agent_id": agent.pk})
    except NoReverseMatch:
        return ""


def _box_view(request: HttpRequest, ctx: TenantContext, agent_id: Any, box: str) -> HttpResponse:
    agent = agent_selectors.agent_in_tenant(tenant=ctx.tenant, agent_id=agent_id)
    # The human vocabulary (messaging/lifecycle.py); a stored name filters too (input_required:
    # unread and blocked together, no tab of its own).
    state = request.GET.get("state", "")
    human = lifecycle.BY_NAME.get(state)
    stored, awaiting = (human.state, human.turn) if human else ("", None)
    if human is None and state in TaskState.values:
        stored = state
    elif human is None:
        state = ""
    q = request.GET.get("q", "").strip()[:200]
    cursor = request.GET.get("cursor", "")
    try:
        page = messaging_selectors.agent_box(
            tenant=ctx.tenant,
            agent=agent,
            box=box,
            state=stored,
            awaiting=awaiting,
            q=q,
            cursor=cursor,
            page_size=TASKS_PER_PAGE,
        )
    except HikyakuError:  # a mangled cursor: start from the newest
        page = messaging_selectors.agent_box(
            tenant=ctx.tenant,
            agent=agent,
            box=box,
            state=stored,
            awaiting=awaiting,
            q=q,
            page_size=TASKS_PER_PAGE,
        )
        cursor = ""
    context = {
        "section": "agents",
        "agent": agent,
        "box": box,
        "tasks": page.tasks,
        "next_cursor": page.next_cursor,
        "cursor": cursor,
        "state": state,
        "q": q,
    }
    counts = messaging_selectors.agent_box_counts(tenant=ctx.tenant, agent=agent, box=box)
    if request.GET.get("fragment"):
        # The list alone, for live refreshes (static/js/live.js), with the tabs' new counts.
        context["live_counts"] = [("all", sum(counts.values())), *counts.items()]
        return render_page(request, "webui/_task_list.html", context, ctx=ctx)
    context.update(
        total=sum(counts.values()),
        filters=[(h.name, h.label, counts[h.name]) for h in lifecycle.PHASES],
        live_url=live_events_url(ctx, agent),
    )
    return render_page(request, "webui/agent_box.html", context, ctx=ctx)


@tenant_view()
def inbox(request: HttpRequest, ctx: TenantContext, agent_id: Any) -> HttpResponse:
    return _box_view(request, ctx, agent_id, "inbox")


@tenant_view()
def sent(request: HttpRequest, ctx: TenantContext, agent_id: Any) -> HttpResponse:
    return _box_view(request, ctx, agent_id, "sent")


@tenant_view()
def task_detail(request: HttpRequest, ctx: TenantContext, task_id: Any) -> HttpResponse:
    task = messaging_selectors.tenant_task(tenant=ctx.tenant, task_id=task_id)
    return _task_page(request, ctx, task)


@tenant_view()
def task_act(request: HttpRequest, ctx: TenantContext, task_id: Any) -> HttpResponse:
    """A lifecycle action taken by the signed-in person for one of the task's agents, through
    the service the A2A API calls; the event names the person as well as the agent."""
    task = messaging_selectors.tenant_task(tenant=ctx.tenant, task_id=task_id)
    if request.method != "POST":
        return redirect("webui:task", slug=ctx.tenant.slug, task_id=task.pk)
    parties = messaging_selectors.acting_parties(tenant=ctx.tenant, task=task)
    form = TaskActionForm(request.POST, parties=parties)
    if form.is_valid():
        sender = Sender(tenant=ctx.tenant, agent=form.cleaned_data["agent"], person=person(request))
        try:
            if form.cleaned_data["verb"] == lifecycle.EventKind.CANCEL:
                cancel_task(sender=sender, task_id=str(task.pk))
            else:
                send_message(sender=sender, message=form.message(task.pk))
        except HikyakuError as error:
            add_service_error(form, error)
        else:
            return redirect("webui:task", slug=ctx.tenant.slug, task_id=task.pk)
    # Refused: the page as the task now is (another party may just have acted).
    task = messaging_selectors.tenant_task(tenant=ctx.tenant, task_id=task.pk)
    return _task_page(request, ctx, task, form=form, status=400)


def person(request: HttpRequest) -> str:
    """How an event names the signed-in person who acted (docs/PROTOCOL.md, "Event")."""
    return request.user.email or request.user.get_username()


def _task_page(
    request: HttpRequest,
    ctx: TenantContext,
    task: Task,
    *,
    form: TaskActionForm | None = None,
    status: int = 200,
) -> HttpResponse:
    parties = messaging_selectors.acting_parties(tenant=ctx.tenant, task=task)
    if form is None:
        form = TaskActionForm(initial={"once": secrets.token_hex(16)}, parties=parties)
    else:  # refused: the person's words and the reason stay, the buttons are what is open now
        form.parties = parties
    context = {
        "section": "agents",
        "task": task,
        "events": messaging_selectors.task_timeline(tenant=ctx.tenant, task=task),
        "deliveries": (
            messaging_selectors.broadcast_deliveries(tenant=ctx.tenant, summary=task)
            if task.type == Task.Type.BROADCAST_SUMMARY
            else []
        ),
        "action_form": form,
        "person": person(request),
    }
    if request.GET.get("fragment"):
        return render_page(request, "webui/_task_body.html", context, ctx=ctx)
    watched = task.recipient or task.sender
    context["live_url"] = live_events_url(ctx, watched) if watched else ""
    return render_page(request, "webui/task.html", context, ctx=ctx, status=status)


@tenant_view()
def task_file(request: HttpRequest, ctx: TenantContext, task_id: Any, digest: str) -> HttpResponse:
    """A file attached to a task of the tenant, as a download (webui/files.py)."""
    task = messaging_selectors.tenant_task(tenant=ctx.tenant, task_id=task_id)
    part = files.find_part(task, digest)
    if part is None:
        raise Http404("No such file.")
    return files.download(part)


@tenant_view()
def send(request: HttpRequest, ctx: TenantContext) -> HttpResponse:
    """Send a unicast or broadcast as one of the tenant's active agents (owners and members):
    messaging.services.send_message, exactly as the A2A SendMessage method calls it; the
    event names the person too."""
    agents, _ = agent_selectors.list_active_agents(tenant=ctx.tenant, limit=1000)
    if request.method == "POST":
        form = SendMessageForm(request.POST, agents=agents)
        if form.is_valid():
            sender_agent = next(a for a in agents if str(a.pk) == form.cleaned_data["sender"])
            try:
                task = send_message(
                    sender=Sender(tenant=ctx.tenant, agent=sender_agent, person=person(request)),
                    message=form.message(),
                )
            except HikyakuError as error:
                add_service_error(form, error)
            else:
                return redirect("webui:task", slug=ctx.tenant.slug, task_id=task.pk)
        status = 400
    else:
        initial = {"once": secrets.token_hex(16)}
        if request.GET.get("from"):
            initial["sender"] = request.GET["from"]
        if request.GET.get("to"):
            initial["to"] = request.GET["to"]
        form = SendMessageForm(initial=initial, agents=agents)
        status = 200
    return render_page(
        request,
        "webui/send.html",
        {"section": "send", "form": form, "agents": agents},
        ctx=ctx,
        status=status,
    )
