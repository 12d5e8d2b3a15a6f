"""API keys: list, create (the raw key is shown once), revoke with confirmation."""

from __future__ import annotations

import secrets

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect

from agents import selectors as agent_selectors
from agents import services as agent_services
from hikyaku.errors import InvalidRequest
from tenants.models import ApiKey
from tenants.services import create_api_key

from ..forms import ApiKeyForm, RevokeKeyForm, add_service_error
from .base import TenantContext, render_page, tenant_view

# Session key of the one-time form tokens already used to create a key (tokens only; the raw
# key itself never enters the session).
USED_FORM_TOKENS = "webui.used_key_form_tokens"


def _new_key_form() -> ApiKeyForm:
    return ApiKeyForm(initial={"once": secrets.token_urlsafe(24)})


def _keys_page(
    request: HttpRequest, ctx: TenantContext, form: ApiKeyForm, status: int = 200
) -> HttpResponse:
    keys = list(agent_selectors.api_keys_with_agent_counts(tenant=ctx.tenant))
    return render_page(
        request,
        "webui/keys.html",
        {
            "section": "keys",
            "keys": keys,
            "form": form,
            "active_count": sum(1 for key in keys if key.status == "active"),
        },
        ctx=ctx,
        status=status,
    )


@tenant_view()
def keys(request: HttpRequest, ctx: TenantContext) -> HttpResponse:
    return _keys_page(request, ctx, _new_key_form())


@tenant_view(owner_only=True)
def key_create(request: HttpRequest, ctx: TenantContext) -> HttpResponse:
    """POST creates a key and renders it in this response only (never stored, never shown
    again). A resubmitted form (reload) creates nothing and redirects to the list."""
    if request.method != "POST":
        return redirect("webui:keys", slug=ctx.tenant.slug)
    form = ApiKeyForm(request.POST)
    if not form.is_valid():
        return _keys_page(request, ctx, form, status=400)
    used: list[str] = request.session.get(USED_FORM_TOKENS, [])
    if form.cleaned_data["once"] in used:
        messages.info(
            request,
            "That key was already created. Its secret is shown only once and cannot be "
            "displayed again; create a new key if it was lost.",
        )
        return redirect("webui:keys", slug=ctx.tenant.slug)
    try:
        created = create_api_key(
            tenant=ctx.tenant,
            label=form.cleaned_data["label"],
            created_by=request.user,
            expires_at=form.expires_at(),
        )
    except InvalidRequest as error:
        add_service_error(form, error)
        return _keys_page(request, ctx, form, status=400)
    request.session[USED_FORM_TOKENS] = [*used[-19:], form.cleaned_data["once"]]
    # tenant_view's never_cache sends Cache-Control: no-store, so no cache keeps this page.
    return render_page(
        request,
        "webui/key_created.html",
        {"section": "keys", "api_key": created.api_key, "raw_key": created.raw_key},
        ctx=ctx,
    )


@tenant_view(owner_only=True)
def key_revoke(request: HttpRequest, ctx: TenantContext, key_id: str) -> HttpResponse:
    """GET shows what revoking would do; POST revokes. The agents whose tokens the key minted
    stop (tokens revoked, or deregistered: the owner's choice), and the tenant's last active
    key takes every agent with it, as agents.services.revoke_api_key implements."""
    api_key = _key_of(ctx, key_id)
    if api_key.revoked_at is not None:
        messages.info(request, f"Key hky_{api_key.prefix}… is already revoked.")
        return redirect("webui:keys", slug=ctx.tenant.slug)
    form = RevokeKeyForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        if form.is_valid():
            done = agent_services.revoke_api_key(
                api_key=api_key, agents=form.cleaned_data["agents"]
            )
            note = ""
            if done.deregistered:
                note = f" {done.deregistered} agent(s) were deregistered."
            elif done.tokens_revoked:
                note = f" {done.tokens_revoked} agent(s) lost the token this key gave them."
            messages.success(request, f"Key hky_{api_key.prefix}… revoked.{note}")
            return redirect("webui:keys", slug=ctx.tenant.slug)
    return render_page(
        request,
        "webui/key_revoke.html",
        {
            "section": "keys",
            "api_key": api_key,
            "impact": agent_selectors.revocation_impact(api_key=api_key),
            "form": form,
        },
        ctx=ctx,
    )


def _key_of(ctx: TenantContext, key_id: str) -> ApiKey:
    api_key = ApiKey.objects.filter(tenant=ctx.tenant, pk=key_id).first()
    if api_key is None:
        raise Http404("No such key.")
    return api_key
