"""Home, tenant creation, members, leaving a tenant."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from hikyaku.errors import InvalidRequest, NotFound
from tenants import selectors as tenant_selectors
from tenants import services as tenant_services

from ..forms import AddMemberForm, TenantForm, add_service_error
from .base import TenantContext, render_page, tenant_view


def home(request: HttpRequest) -> HttpResponse:
    """The user's tenants; with none yet, the form to create the first one. Signed out: what
    Hikyaku is, and the way in."""
    if not request.user.is_authenticated:
        return render_page(request, "webui/landing.html")
    memberships = list(tenant_selectors.memberships_for_user(user=request.user))
    return render_page(
        request,
        "webui/home.html",
        {"memberships": memberships, "my_memberships": memberships, "form": TenantForm()},
    )


@login_required
def tenant_create(request: HttpRequest) -> HttpResponse:
    form = TenantForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            tenant = tenant_services.create_own_tenant(
                name=form.cleaned_data["name"],
                slug_prefix=form.cleaned_data["slug"] or None,
                owner=request.user,
            )
        except InvalidRequest as error:
            add_service_error(form, error)
        else:
            messages.success(request, f"Tenant “{tenant.name}” created. You are its owner.")
            return redirect("webui:keys", slug=tenant.slug)
    return render_page(request, "webui/tenant_new.html", {"form": form})


@tenant_view()
def tenant_home(request: HttpRequest, ctx: TenantContext) -> HttpResponse:
    return redirect("webui:agents", slug=ctx.tenant.slug)


@tenant_view()
def members(request: HttpRequest, ctx: TenantContext) -> HttpResponse:
    form = AddMemberForm()
    return _members_page(request, ctx, form)


def _members_page(
    request: HttpRequest, ctx: TenantContext, form: AddMemberForm, status: int = 200
) -> HttpResponse:
    return render_page(
        request,
        "webui/members.html",
        {
            "section": "members",
            "members": tenant_selectors.members_of(tenant=ctx.tenant),
            "form": form,
        },
        ctx=ctx,
        status=status,
    )


@require_POST
@tenant_view(owner_only=True)
def member_add(request: HttpRequest, ctx: TenantContext) -> HttpResponse:
    """Add an existing user by email. Unknown emails are a form error, not an invitation:
    the person signs up first (no mail is sent and no account is created on their behalf)."""
    form = AddMemberForm(request.POST)
    if form.is_valid():
        email = form.cleaned_data["email"]
        user = tenant_selectors.user_by_email(email=email)
        if user is None:
            form.add_error(
                "email",
                f"No account uses {email} yet. Ask them to sign up at "
                f"{request.build_absolute_uri(reverse('account_signup'))}, then add them here.",
            )
        elif tenant_selectors.membership_for(user=user, tenant_slug=ctx.tenant.slug):
            form.add_error("email", f"{user.email} is already a member of this tenant.")
        else:
            tenant_services.add_member(tenant=ctx.tenant, user=user, role=form.cleaned_data["role"])
            messages.success(request, f"{user.email} added as {form.cleaned_data['role']}.")
            return redirect("webui:members", slug=ctx.tenant.slug)
    return _members_page(request, ctx, form, status=400)


@tenant_view()
def tenant_leave(request: HttpRequest, ctx: TenantContext) -> HttpResponse:
    """GET asks for confirmation; POST leaves (the last owner cannot)."""
    if request.method == "POST":
        try:
            tenant_services.leave_tenant(tenant=ctx.tenant, user=request.user)
        except (InvalidRequest, NotFound) as error:
            messages.error(request, error.message)
            return redirect("webui:members", slug=ctx.tenant.slug)
        messages.success(request, f"You left “{ctx.tenant.name}”.")
        return redirect("webui:home")
    return render_page(request, "webui/tenant_leave.html", {"section": "members"}, ctx=ctx)
