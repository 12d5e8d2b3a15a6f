"""Tasks and their events in the admin: read-only. Tasks change only through the lifecycle
services (messaging/services.py), events are an append-only audit log."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from .models import Task, TaskEvent


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class TaskEventInline(admin.TabularInline):
    model = TaskEvent
    extra = 0
    can_delete = False
    fields = ("id", "created_at", "kind", "actor", "actor_label", "from_state", "to_state")
    readonly_fields = fields
    ordering = ("id",)

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ("id", "tenant", "type", "sender", "recipient", "state", "awaiting", "status_at")
    list_filter = ("state", "type", "awaiting", "sensitivity", "status_at", "tenant")
    list_select_related = ("tenant", "sender", "recipient")
    search_fields = ("=id", "=message_id", "=broadcast_id", "search_text", "sender__name")
    date_hierarchy = "status_at"
    show_full_result_count = False
    inlines = [TaskEventInline]
    fieldsets = (
        (None, {"fields": ("id", "tenant", "type", "state", "awaiting", "sensitivity")}),
        ("Parties", {"fields": ("sender", "caller_id", "recipient", "context_id")}),
        ("Thread", {"fields": ("parent", "thread_root_id", "depth", "broadcast_id")}),
        ("Content", {"fields": ("message_id", "message", "history", "artifacts", "metadata")}),
        ("Times", {"fields": ("created_at", "updated_at", "status_at")}),
    )

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # retention removes tasks, not bulk deletes
        return actions


@admin.register(TaskEvent)
class TaskEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "created_at", "kind", "task_link", "actor", "from_state", "to_state")
    list_filter = ("kind", "created_at")
    list_select_related = ("actor",)
    search_fields = ("=task__id", "actor__name", "actor_label")
    date_hierarchy = "created_at"
    show_full_result_count = False

    @admin.display(description="Task")
    def task_link(self, obj: TaskEvent) -> str:
        url = reverse("admin:messaging_task_change", args=[obj.task_id])
        return format_html('<a href="{}">{}</a>', url, obj.task_id)

    def get_actions(self, request):
        return {}

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # append-only; only retention deletes events
