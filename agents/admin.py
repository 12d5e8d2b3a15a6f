from django import forms
from django.contrib import admin
from django.db import models

from . import services
from .models import Agent


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "tenant",
        "status",
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
        "tenant",
        "status",
        "token_prefix",
        "registered_with",
        "registered_at",
        "deregistered_at",
        "last_seen_at",
    )
    fieldsets = (
        (None, {"fields": ("id", "tenant", "name", "description", "skills", "status")}),
        ("Delivery", {"fields": ("webhook_url", "public")}),
        ("Policy", {"fields": ("send_to", "receive_from", "disclosure_ceiling")}),
        (
            "Identity",
            {
                "fields": (
                    "token_prefix",
                    "registered_with",
                    "registered_at",
                    "last_seen_at",
                    "deregistered_at",
                )
            },
        ),
    )
    actions = ["deregister", "disable", "enable"]
    formfield_overrides = {
        models.URLField: {"form_class": forms.URLField, "assume_scheme": "https"},
    }

    @admin.display(description="Registered with")
    def key(self, obj: Agent) -> str:
        return f"hky_{obj.registered_with.prefix}…" if obj.registered_with else "—"

    def has_add_permission(self, request) -> bool:
        return False  # agents register themselves with an API key

    def get_actions(self, request):
        # Deregister rather than delete (history stays readable until retention); deleting
        # stays possible one agent at a time, and with its tenant.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @admin.action(description="Deregister selected agents")
    def deregister(self, request, queryset):
        count = sum(services.deregister_agent(agent=agent) for agent in queryset)
        self.message_user(request, f"{count} agent(s) deregistered.")

    @admin.action(description="Disable selected agents")
    def disable(self, request, queryset):
        count = sum(services.set_agent_enabled(agent=a, enabled=False) for a in queryset)
        self.message_user(request, f"{count} agent(s) disabled.")

    @admin.action(description="Enable selected agents")
    def enable(self, request, queryset):
        count = sum(services.set_agent_enabled(agent=a, enabled=True) for a in queryset)
        self.message_user(request, f"{count} agent(s) enabled.")
