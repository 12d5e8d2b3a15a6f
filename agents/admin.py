from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Count, Q
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers

from hikyaku.errors import InvalidRequest
from tenants import services as tenant_services
from tenants.models import ApiKey, Tenant

from . import services
from .models import Agent

POLICY_FIELDS = ("send_to", "receive_from", "disclosure_ceiling")


class AgentAdminForm(forms.ModelForm):
    """Policy fields are validated and normalised by the same service the REST API uses."""

    # agents.destinations decides (the model field's validator), as for every stored URL.
    webhook_url = forms.CharField(max_length=2000, required=False)

    class Meta:
        model = Agent
        fields = (
            "name",
            "description",
            "skills",
            "public",
            "send_to",
            "receive_from",
            "disclosure_ceiling",
            "webhook_url",
        )
        help_texts = {
            "send_to": 'Agent ids of this tenant this agent may send to, or ["*"] for anyone; '
            "[] for nobody.",
            "receive_from": 'Agent ids of this tenant this agent accepts messages from, or ["*"] '
            "for anyone; [] for nobody.",
            "disclosure_ceiling": "The most sensitive messages this agent may send or see "
            "(public-safe < internal < restricted). Lowering it hides tasks above it at once.",
        }

    def clean(self):
        cleaned = super().clean()
        if self.instance.pk is None:
            return cleaned
        try:
            cleaned.update(
                services.clean_policy(
                    agent=self.instance, **{f: cleaned.get(f) for f in POLICY_FIELDS}
                )
            )
        except InvalidRequest as exc:
            for field, errors in (exc.details or {}).items():
                self.add_error(field if field in self.fields else None, errors)
        return cleaned


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentAdminForm
    list_display = (
        "name",
        "tenant",
        "status",
        "policy",
        "disclosure_ceiling",
        "has_webhook",
        "public",
        "registered_at",
        "last_seen_at",
        "key",
        "id",
    )
    list_filter = ("status", "public", "disclosure_ceiling", "registered_at", "tenant")
    list_select_related = ("tenant", "registered_with")
    search_fields = ("name", "description", "=id", "tenant__slug")
    date_hierarchy = "registered_at"
    readonly_fields = (
        "id",
        "public",
        "tenant",
        "status",
        "token",
        "token_expires_at",
        "webhook_secret_hint",
        "registered_with",
        "registered_at",
        "deregistered_at",
        "last_seen_at",
    )
    fieldsets = (
        (None, {"fields": ("id", "tenant", "name", "description", "skills", "status")}),
        ("Delivery", {"fields": ("webhook_url", "webhook_secret_hint", "public")}),
        (
            "Policy (who may talk to whom)",
            {"fields": ("send_to", "receive_from", "disclosure_ceiling")},
        ),
        (
            "Identity",
            {
                "fields": (
                    "token",
                    "token_expires_at",
                    "registered_with",
                    "registered_at",
                    "last_seen_at",
                    "deregistered_at",
                )
            },
        ),
    )
    actions = [
        "disable",
        "enable",
        "publish",
        "unpublish",
        "rotate_token",
        "rotate_webhook_secret",
        "deregister",
    ]

    def has_add_permission(self, request) -> bool:
        return False  # agents register themselves with an API key

    def get_actions(self, request):
        # Deregister rather than delete (history stays readable until retention); deleting
        # stays possible one agent at a time, and with its tenant.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @admin.display(description="Registered with")
    def key(self, obj: Agent) -> str:
        return f"hky_{obj.registered_with.prefix}…" if obj.registered_with else "—"

    @admin.display(description="Token")
    def token(self, obj: Agent) -> str:
        return f"hka_{obj.token_prefix}…" if obj.token_prefix else "—"

    @admin.display(description="Webhook signing secret")
    def webhook_secret_hint(self, obj: Agent) -> str:
        return f"{obj.webhook_secret[:12]}…" if obj.webhook_secret else "— (created on first use)"

    @admin.display(description="Policy")
    def policy(self, obj: Agent) -> str:
        def side(values: list[str]) -> str:
            return "anyone" if "*" in (values or []) else f"{len(values or [])} agent(s)"

        return f"send to {side(obj.send_to)}; receive from {side(obj.receive_from)}"

    @admin.display(description="Webhook", boolean=True)
    def has_webhook(self, obj: Agent) -> bool:
        return bool(obj.webhook_url)

    def save_model(self, request, obj, form, change):
        policy = {f: form.cleaned_data[f] for f in POLICY_FIELDS if f in form.changed_data}
        # The service makes the policy change (its event and the tenant's policy revision), so
        # the model save keeps the stored values.
        for field in policy:
            setattr(obj, field, form.initial.get(field))
        super().save_model(request, obj, form, change)
        if policy:
            services.set_agent_policy(agent=obj, **policy)

    @admin.action(description="Deregister selected agents")
    def deregister(self, request, queryset):
        count = sum(services.deregister_agent(agent=agent) for agent in queryset)
        self.message_user(request, f"{count} agent(s) deregistered.")

    @admin.action(description="Disable selected agents (inbox kept; streams close)")
    def disable(self, request, queryset):
        count = sum(services.set_agent_enabled(agent=a, enabled=False) for a in queryset)
        self.message_user(request, f"{count} agent(s) disabled.")

    @admin.action(description="Enable selected agents")
    def enable(self, request, queryset):
        count = sum(services.set_agent_enabled(agent=a, enabled=True) for a in queryset)
        self.message_user(request, f"{count} agent(s) enabled.")

    @admin.action(description="Rotate agent tokens (old tokens stop working at once)")
    def rotate_token(self, request, queryset):
        issued = [
            f"{agent.name} ({agent.id}): {services.rotate_agent_token(agent=agent)}"
            for agent in queryset.exclude(status=Agent.Status.DEREGISTERED)
        ]
        if not issued:
            self.message_user(request, "No active or disabled agent selected.", messages.ERROR)
            return
        self.message_user(
            request,
            "New agent tokens — copy them now, they will not be shown again: " + "; ".join(issued),
            messages.WARNING,
        )

    @admin.action(description="Rotate webhook signing secrets")
    def rotate_webhook_secret(self, request, queryset):
        issued = [
            f"{agent.name} ({agent.id}): {services.rotate_webhook_secret(agent=agent)}"
            for agent in queryset
        ]
        self.message_user(request, "New webhook secrets: " + "; ".join(issued), messages.WARNING)

    @admin.action(description="Publish selected agents (anonymous A2A callers may message them)")
    def publish(self, request, queryset):
        count = sum(services.set_agent_public(agent=a, public=True) for a in queryset)
        self.message_user(request, f"{count} agent(s) published.")

    @admin.action(description="Unpublish selected agents")
    def unpublish(self, request, queryset):
        count = sum(services.set_agent_public(agent=a, public=False) for a in queryset)
        self.message_user(request, f"{count} agent(s) unpublished.")


# API keys ------------------------------------------------------------------------------------
# The keys' admin lives here, not in tenants/admin.py: revoking a tenant's last key
# deregisters its agents, a workflow of this app (agents.services.revoke_api_key), and the
# list counts each key's agents.


class KeyStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("active", "Active"), ("expired", "Expired"), ("revoked", "Revoked")]

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == "active":
            return queryset.filter(ApiKey.active_q(now))
        if self.value() == "expired":
            return queryset.filter(revoked_at__isnull=True, expires_at__lte=now)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = (
        "display",
        "tenant",
        "label",
        "status_badge",
        "agent_count",
        "created_at",
        "last_used_at",
        "expires_at",
    )
    list_filter = (KeyStatusFilter, "tenant")
    list_select_related = ("tenant",)
    search_fields = ("prefix", "label", "tenant__slug")
    autocomplete_fields = ("tenant",)
    date_hierarchy = "created_at"
    # Only the display prefix is ever shown: the hash is neither editable nor displayed.
    readonly_fields = (
        "prefix",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    fields = (
        "tenant",
        "label",
        "expires_at",
        "prefix",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    actions = ["revoke"]

    def get_queryset(self, request):
        live = Q(registered_agents__status__in=["active", "disabled"])
        return (
            super()
            .get_queryset(request)
            .annotate(agent_count=Count("registered_agents", filter=live))
        )

    @admin.display(description="Key")
    def display(self, obj: ApiKey) -> str:
        return f"hky_{obj.prefix}…"

    @admin.display(description="Status")
    def status_badge(self, obj: ApiKey) -> str:
        return obj.status

    @admin.display(description="Agents", ordering="agent_count")
    def agent_count(self, obj: ApiKey) -> int:
        return obj.agent_count

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields + (("tenant",) if obj else ())

    def get_actions(self, request):
        # Keys are revoked (services.revoke_api_key), which deregisters the agents of
        # a tenant's last key; a bulk delete would skip that rule.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        created = tenant_services.create_api_key(
            tenant=obj.tenant, label=obj.label, created_by=request.user, expires_at=obj.expires_at
        )
        obj.pk = created.api_key.pk
        obj.__dict__.update(created.api_key.__dict__)
        # Rendered by response_add in this response only, never put in a message or session.
        request._hikyaku_raw_key = created.raw_key

    def response_add(self, request, obj, post_url_continue=None):
        raw_key = getattr(request, "_hikyaku_raw_key", None)
        if raw_key is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "API key created",
            "api_key": obj,
            "raw_key": raw_key,
        }
        response = TemplateResponse(request, "admin/tenants/apikey/created.html", context)
        add_never_cache_headers(response)
        return response

    @admin.action(
        description="Revoke selected keys (their agents stop; the last key of a tenant "
        "deregisters its agents)"
    )
    def revoke(self, request, queryset):
        keys = list(queryset.filter(revoked_at__isnull=True).select_related("tenant"))
        choice = request.POST.get("agents") or services.RevokedKeyAgents.REVOKE_TOKENS
        if request.POST.get("confirm") != "yes" or choice not in services.RevokedKeyAgents.values:
            context = {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": "Revoke API keys?",
                "keys": keys,
                "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
                "last_key_tenants": _tenants_left_without_keys(keys),
                "choices": services.RevokedKeyAgents.choices,
                "default_choice": services.RevokedKeyAgents.REVOKE_TOKENS,
            }
            return TemplateResponse(request, "admin/tenants/apikey/revoke_confirm.html", context)
        done = [services.revoke_api_key(api_key=api_key, agents=choice) for api_key in keys]
        self.message_user(
            request,
            f"Revoked {len(keys)} key(s). {sum(d.deregistered for d in done)} agent(s) "
            f"deregistered, {sum(d.tokens_revoked for d in done)} agent token(s) revoked.",
        )


def _tenants_left_without_keys(keys: list[ApiKey]) -> list[Tenant]:
    """Tenants whose every active key is among `keys`: revoking them deregisters agents."""
    chosen = {key.pk for key in keys}
    tenants = {key.tenant_id: key.tenant for key in keys}
    remaining = set(
        ApiKey.objects.filter(ApiKey.active_q(), tenant_id__in=tenants)
        .exclude(pk__in=chosen)
        .values_list("tenant_id", flat=True)
    )
    return [tenant for pk, tenant in tenants.items() if pk not in remaining]
