from django.contrib import admin

from . import services
from .models import Agent


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("name", "id", "tenant", "status", "public", "registered_at", "last_seen_at")
    list_filter = ("tenant", "status", "public")
    search_fields = ("name", "description", "=id")
    readonly_fields = (
        "id",
        "public",
        "tenant",
        "token_prefix",
        "registered_at",
        "deregistered_at",
        "last_seen_at",
        "status",
    )
    exclude = ("token_hash",)
    actions = ["deregister", "disable", "enable", "publish", "unpublish"]

    def has_add_permission(self, request) -> bool:
        return False  # agents register themselves with an API key

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

    @admin.action(description="Publish selected agents (anonymous A2A callers may message them)")
    def publish(self, request, queryset):
        count = sum(services.set_agent_public(agent=a, public=True) for a in queryset)
        self.message_user(request, f"{count} agent(s) published.")

    @admin.action(description="Unpublish selected agents")
    def unpublish(self, request, queryset):
        count = sum(services.set_agent_public(agent=a, public=False) for a in queryset)
        self.message_user(request, f"{count} agent(s) unpublished.")
