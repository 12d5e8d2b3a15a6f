from django import forms
from django.contrib import admin, messages

from hikyaku.errors import InvalidRequest

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
