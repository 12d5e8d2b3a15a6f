import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from tenants.models import ApiKey, Tenant

from .destinations import validate_url


class Sensitivity(models.TextChoices):
    """Disclosure levels, ordered: public-safe < internal < restricted."""

    PUBLIC_SAFE = "public-safe", "Public-safe"
    INTERNAL = "internal", "Internal"
    RESTRICTED = "restricted", "Restricted"


SENSITIVITY_RANK = {Sensitivity.PUBLIC_SAFE: 0, Sensitivity.INTERNAL: 1, Sensitivity.RESTRICTED: 2}


def allow_all() -> list[str]:
    return ["*"]


class Agent(models.Model):
    """An identity inside a tenant, usually an ephemeral coding-agent session."""

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        DISABLED = "disabled", "Disabled"
        DEREGISTERED = "deregistered", "Deregistered"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=200)
    description = models.TextField(max_length=2000, blank=True)
    skills = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    registered_at = models.DateTimeField(default=timezone.now)
    deregistered_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    token_hash = models.CharField(max_length=64, unique=True, null=True, blank=True, editable=False)
    token_prefix = models.CharField(max_length=8, blank=True, editable=False)
    # Checked at authentication and by open streams, like an API key's expiry. Null: never.
    token_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The API key the current token was minted under (registration with that key, or a
    # rotation authenticated by it): the token works only while that key is active, so
    # revoking a leaked key, or its expiry, stops what it registered (docs/ARCHITECTURE.md,
    # Credentials). Null: issued by an owner, who vouches for it. A plain id, not a foreign
    # key: a key row that is gone counts as inactive, never as "no key".
    token_key_id = models.UUIDField(null=True, blank=True, editable=False)
    # Checked by agents.destinations (one rule for every way a URL is stored), not by
    # Django's URLValidator, which refuses single-label hosts such as compose service names.
    webhook_url = models.CharField(max_length=2000, blank=True, validators=[validate_url])
    # Signs this agent's webhook deliveries (X-Hikyaku-Signature). Kept in clear because the
    # broker must compute the HMAC; shown to the agent itself and to the admin.
    webhook_secret = models.CharField(max_length=100, blank=True, editable=False)
    # The key the agent registered with, for the per-key agent count in the web UI. Any active
    # key of the tenant authenticates the agent; this records provenance only.
    registered_with = models.ForeignKey(
        ApiKey,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="registered_agents",
        editable=False,
    )
    public = models.BooleanField(
        default=False, help_text="Anonymous A2A callers may message this agent."
    )
    # Policy (docs/PROTOCOL.md §4.5): allow-lists of agent ids or "*", and a disclosure ceiling.
    send_to = models.JSONField(default=allow_all, blank=True)
    receive_from = models.JSONField(default=allow_all, blank=True)
    disclosure_ceiling = models.CharField(
        max_length=16, choices=Sensitivity.choices, default=Sensitivity.INTERNAL
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["active", "disabled", "deregistered"]),
                name="agent_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(status="deregistered", deregistered_at__isnull=False)
                | (~Q(status="deregistered") & Q(deregistered_at__isnull=True)),
                name="agent_deregistered_at_iff_deregistered",
            ),
            models.CheckConstraint(
                condition=Q(disclosure_ceiling__in=["public-safe", "internal", "restricted"]),
                name="agent_ceiling_valid",
            ),
            # A name is an address (agents.selectors.resolve_destination): one live agent per
            # name in a tenant. Deregistering frees the name.
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=Q(status__in=["active", "disabled"]),
                name="agent_live_name_unique",
                violation_error_message="An agent of this tenant already has this name.",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "status", "name", "id"], name="agent_tenant_listing"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"

    @property
    def is_active(self) -> bool:
        return self.status == self.Status.ACTIVE


class AgentEventKind(models.TextChoices):
    REGISTERED = "registered", "Registered"
    UPDATED = "updated", "Updated"
    POLICY = "policy", "Policy changed"
    PUBLISHED = "published", "Published"
    UNPUBLISHED = "unpublished", "Unpublished"
    DISABLED = "disabled", "Disabled"
    ENABLED = "enabled", "Enabled"
    DEREGISTERED = "deregistered", "Deregistered"
    TOKEN_ISSUED = "token-issued", "Token issued"
    TOKEN_ROTATED = "token-rotated", "Token rotated"
    TOKEN_REVOKED = "token-revoked", "Token revoked"


class AgentEvent(models.Model):
    """Append-only: one row per change to an agent's existence, policy, status or token, in
    the transaction of the change. Changes of the first three kinds bump the tenant's
    `policy_revision`; `policy_revision` here is the tenant's revision after this change.
    `changes` maps a field to `[old, new]` and never holds a secret."""

    Kind = AgentEventKind

    id = models.BigAutoField(primary_key=True)
    # The (tenant, id) index serves the tenant's lookups.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    changes = models.JSONField(default=dict, blank=True)
    policy_revision = models.PositiveBigIntegerField()
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=AgentEventKind.values), name="agentevent_kind_valid"
            )
        ]
        indexes = [models.Index(fields=["tenant", "id"], name="agentevent_tenant_id")]

    def __str__(self) -> str:
        return f"{self.kind} {self.agent_id} (revision {self.policy_revision})"
