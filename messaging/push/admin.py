"""Push configs and the webhook delivery log in the admin: read-only (docs/PROTOCOL.md §9).

Registered from MessagingConfig.ready(), next to messaging/admin.py (tasks and events)."""

from django.contrib import admin

from ..models import PushConfig, WebhookDelivery


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def get_actions(self, request):
        return {}


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnly):
    list_display = (
        "id",
        "created_at",
        "tenant",
        "target",
        "url",
        "event_id",
        "outcome",
        "attempts",
        "last_status",
        "last_error",
        "next_attempt_at",
    )
    list_filter = ("outcome", "target", "created_at", "tenant")
    list_select_related = ("tenant",)
    search_fields = ("=task_id", "=event_id", "url", "=agent__id")
    date_hierarchy = "created_at"
    show_full_result_count = False
    fields = (
        "id",
        "tenant",
        "event_id",
        "task_id",
        "target",
        "agent",
        "push_config",
        "url",
        "outcome",
        "attempts",
        "last_status",
        "last_error",
        "next_attempt_at",
        "created_at",
        "updated_at",
    )

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # retention removes old log rows


@admin.register(PushConfig)
class PushConfigAdmin(ReadOnly):
    list_display = ("config_id", "task", "url", "created_by", "created_by_caller", "created_at")
    list_filter = ("dialect", "created_at", "tenant")
    list_select_related = ("created_by", "task")
    search_fields = ("=task__id", "config_id", "url")
    # The token and credentials are the receiver's secrets: not shown.
    fields = (
        "tenant",
        "task",
        "config_id",
        "url",
        "auth_scheme",
        "created_by",
        "created_by_caller",
        "dialect",
        "created_at",
    )
