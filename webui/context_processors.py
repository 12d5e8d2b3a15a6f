"""Template context every page gets."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from tenants import selectors as tenant_selectors


def navigation(request: HttpRequest) -> dict[str, Any]:
    """The tenant switcher's memberships: a lazy queryset, queried only by pages that show it."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"my_memberships": tenant_selectors.memberships_for_user(user=user)}
