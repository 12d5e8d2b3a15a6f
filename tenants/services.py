"""Writes for users, tenants, memberships and API keys. Each service is one transaction.

Workflows that reach into agents (revoking a tenant's last key deregisters its agents) live
in agents/services.py, the higher layer.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from hikyaku.errors import InvalidRequest, NotFound

from .credentials import display_prefix, hash_secret, new_api_key
from .models import ApiKey, Membership, Tenant, User


@dataclass(frozen=True)
class CreatedApiKey:
    api_key: ApiKey
    raw_key: str  # shown to the caller once, never stored


def create_tenant(*, name: str, slug: str | None = None, owner: User | None = None) -> Tenant:
    slug = slugify(slug or name)[:64]
    if not slug:
        raise InvalidRequest(
            "A tenant needs a name with letters or digits.", details={"name": ["invalid"]}
        )
    try:
        with transaction.atomic():
            tenant = Tenant.objects.create(name=name.strip() or slug, slug=slug)
            if owner is not None:
                Membership.objects.create(user=owner, tenant=tenant, role=Membership.Role.OWNER)
    except IntegrityError:
        raise InvalidRequest(
            f"A tenant with the slug {slug!r} already exists.", details={"slug": ["taken"]}
        ) from None
    return tenant


SLUG_SUFFIX_ALPHABET = string.ascii_lowercase + string.digits
SLUG_SUFFIX_LENGTH = 6


def create_own_tenant(*, name: str, owner: User, slug_prefix: str | None = None) -> Tenant:
    """A tenant someone creates for themselves (the web UI), owned by them. Its slug is the
    prefix (or the name) and a random suffix, `acme-k3x9p2`: slugs share one namespace, and a
    slug the creator chose outright would tell them whether another tenant already has it
    (docs/ARCHITECTURE.md, Web UI). Operators choose exact slugs (`create_tenant`)."""
    prefix = slugify(slug_prefix or name)[: 64 - SLUG_SUFFIX_LENGTH - 1].strip("-")
    if not prefix:
        raise InvalidRequest(
            "A tenant needs a name with letters or digits.", details={"name": ["invalid"]}
        )
    for _ in range(5):  # a collision of the suffix is a one-in-two-billion event
        suffix = "".join(secrets.choice(SLUG_SUFFIX_ALPHABET) for _ in range(SLUG_SUFFIX_LENGTH))
        try:
            return create_tenant(name=name, slug=f"{prefix}-{suffix}", owner=owner)
        except InvalidRequest as exc:
            if (exc.details or {}).get("slug") != ["taken"]:
                raise
    raise InvalidRequest("Could not choose a free address; try again.")


def get_or_create_tenant(*, slug: str) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    return tenant or create_tenant(name=slug, slug=slug)


def rename_tenant(*, tenant: Tenant, name: str) -> bool:
    """Change a tenant's display name (its slug never changes); True if this call changed it."""
    name = name.strip()
    if not name or len(name) > 200:
        raise InvalidRequest("A tenant name is 1 to 200 characters.", details={"name": ["invalid"]})
    changed = Tenant.objects.filter(pk=tenant.pk).exclude(name=name).update(name=name)
    tenant.name = name
    return bool(changed)


def add_member(*, tenant: Tenant, user: User, role: str = Membership.Role.MEMBER) -> Membership:
    membership, _ = Membership.objects.update_or_create(
        tenant=tenant, user=user, defaults={"role": role}
    )
    return membership


def leave_tenant(*, tenant: Tenant, user: User) -> None:
    with transaction.atomic():
        membership = Membership.objects.select_for_update().filter(tenant=tenant, user=user).first()
        if membership is None:
            raise NotFound()
        if membership.role == Membership.Role.OWNER:
            owners = Membership.objects.filter(tenant=tenant, role=Membership.Role.OWNER).count()
            if owners <= 1:
                raise InvalidRequest("The last owner cannot leave; add another owner first.")
        membership.delete()


def create_api_key(
    *,
    tenant: Tenant,
    label: str = "",
    created_by: User | None = None,
    expires_at: datetime | None = None,
) -> CreatedApiKey:
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidRequest("expires_at must be in the future.", details={"expires_at": ["past"]})
    raw = new_api_key()
    api_key = ApiKey.objects.create(
        tenant=tenant,
        prefix=display_prefix(raw),
        key_hash=hash_secret(raw),
        label=label[:200],
        created_by=created_by,
        expires_at=expires_at,
    )
    return CreatedApiKey(api_key=api_key, raw_key=raw)


def touch_api_key(*, api_key: ApiKey, interval_seconds: int) -> None:
    """Record use without a write per request: at most one UPDATE per key per interval."""
    now = timezone.now()
    if api_key.last_used_at and (now - api_key.last_used_at).total_seconds() < interval_seconds:
        return
    ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
    api_key.last_used_at = now
