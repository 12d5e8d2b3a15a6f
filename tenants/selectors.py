"""Reads for tenants, memberships and keys."""

from __future__ import annotations

from django.db.models import QuerySet

from .credentials import API_KEY_RE, hash_secret
from .models import ApiKey, Membership, Tenant, User


def membership_for(*, user: User, tenant_slug: str) -> Membership | None:
    return (
        Membership.objects.select_related("tenant")
        .filter(user=user, tenant__slug=tenant_slug)
        .first()
    )


def api_key_by_raw(raw: str) -> ApiKey | None:
    """The key row for a raw key, active or not; None when it never existed."""
    if not API_KEY_RE.match(raw):
        return None
    return ApiKey.objects.select_related("tenant").filter(key_hash=hash_secret(raw)).first()


def api_keys_by_prefix_or_raw(value: str) -> QuerySet[ApiKey]:
    if API_KEY_RE.match(value):
        return ApiKey.objects.filter(key_hash=hash_secret(value))
    prefix = value.removeprefix("hky_")[:8]
    return ApiKey.objects.filter(prefix=prefix) if len(prefix) == 8 else ApiKey.objects.none()


def memberships_for_user(*, user: User) -> QuerySet[Membership]:
    """The user's memberships with their tenants, by tenant name."""
    return (
        Membership.objects.select_related("tenant")
        .filter(user=user)
        .order_by("tenant__name", "tenant__slug")
    )


def members_of(*, tenant: Tenant) -> QuerySet[Membership]:
    """The tenant's memberships with their users: owners first, then by email."""
    return (
        Membership.objects.select_related("user")
        .filter(tenant=tenant)
        .order_by("-role", "user__email")
    )


def user_by_email(*, email: str) -> User | None:
    return User.objects.filter(email__iexact=email.strip()).first()
