"""What every web UI page shares: login, tenant membership, and the page context.

Every view under /ui/t/<slug>/ is wrapped in `tenant_view`: it requires a login, resolves the
membership of the current user in the tenant of the URL, and answers 404 when there is none, so
another tenant's slug (or any id inside it) looks exactly like one that does not exist. Views
that change the tenant's keys, agents or members also require the owner role (403 inside a
tenant one belongs to is not an oracle: the member can see the tenant anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from hikyaku.errors import NotFound
from tenants import selectors as tenant_selectors
from tenants.models import Membership, Tenant


@dataclass(frozen=True)
class TenantContext:
    """The tenant of the URL and the current user's membership in it."""

    tenant: Tenant
    membership: Membership

    @property
    def is_owner(self) -> bool:
        return self.membership.role == Membership.Role.OWNER


TenantView = Callable[..., HttpResponse]


def tenant_view(*, owner_only: bool = False) -> Callable[[TenantView], TenantView]:
    """Decorate `view(request, ctx, **kwargs)` served at a URL with a `<slug:slug>` part."""

    def decorator(view: TenantView) -> TenantView:
        @wraps(view)
        def wrapper(request: HttpRequest, slug: str, **kwargs: Any) -> HttpResponse:
            membership = tenant_selectors.membership_for(user=request.user, tenant_slug=slug)
            if membership is None:
                raise Http404("No such tenant.")
            ctx = TenantContext(tenant=membership.tenant, membership=membership)
            if owner_only and not ctx.is_owner:
                raise PermissionDenied("Only owners of this tenant can do this.")
            try:
                return view(request, ctx, **kwargs)
            except NotFound:
                # A domain "not found" (unknown agent, other tenant's id) is a page 404.
                raise Http404("Not found.") from None

        return login_required(never_cache(wrapper))

    return decorator


def render_page(
    request: HttpRequest,
    template: str,
    context: dict[str, Any] | None = None,
    *,
    ctx: TenantContext | None = None,
    status: int = 200,
) -> HttpResponse:
    """Render a UI page of the current tenant (the tenant tabs and switcher need it)."""
    page: dict[str, Any] = {}
    if ctx is not None:
        page.update(tenant=ctx.tenant, membership=ctx.membership, is_owner=ctx.is_owner)
    page.update(context or {})
    return render(request, template, page, status=status)
