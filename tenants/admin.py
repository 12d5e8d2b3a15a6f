from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.db.models import Count, Q
from django.utils import timezone

from .models import ApiKey, Membership, Tenant, User


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    ordering = ("email",)
    list_display = ("email", "name", "is_staff", "is_active", "date_joined")
    search_fields = ("email", "name")
    list_filter = ("is_staff", "is_active")
    fieldsets = (
        (None, {"fields": ("email", "password")}),
        ("Profile", {"fields": ("name",)}),
        (
            "Permissions",
            {"fields": ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")},
        ),
        ("Dates", {"fields": ("last_login", "date_joined")}),
    )
    add_fieldsets = ((None, {"classes": ("wide",), "fields": ("email", "password1", "password2")}),)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)
    fields = ("user", "role", "created_at")
    readonly_fields = ("created_at",)


class ApiKeyInline(admin.TabularInline):
    """The tenant's keys at a glance (several may be active at once, for rotation)."""

    model = ApiKey
    extra = 0
    can_delete = False
    show_change_link = True
    fields = ("display", "label", "status", "created_at", "expires_at", "last_used_at")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # keys are created on the key page, which shows the raw key once

    @admin.display(description="Key")
    def display(self, obj: ApiKey) -> str:
        return f"hky_{obj.prefix}…"


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "slug",
        "member_count",
        "active_key_count",
        "require_agent_tokens",
        "created_at",
    )
    search_fields = ("name", "slug", "memberships__user__email")
    list_filter = ("require_agent_tokens", "created_at")
    date_hierarchy = "created_at"
    prepopulated_fields = {"slug": ("name",)}
    fieldsets = (
        (None, {"fields": ("name", "slug")}),
        (
            "Credentials",
            {
                "fields": ("require_agent_tokens",),
                "description": "With agent tokens required, the API key + X-Agent-Id identity "
                "is refused everywhere (open streams close): agents act only with their own "
                "hka_ token, and the API key stays an operator credential.",
            },
        ),
    )
    inlines = [MembershipInline, ApiKeyInline]

    def get_queryset(self, request):
        # Both counts in the list query, not one query per row.
        now = timezone.now()
        active = Q(api_keys__revoked_at__isnull=True) & (
            Q(api_keys__expires_at__isnull=True) | Q(api_keys__expires_at__gt=now)
        )
        return (
            super()
            .get_queryset(request)
            .annotate(
                member_count=Count("memberships", distinct=True),
                active_key_count=Count("api_keys", filter=active, distinct=True),
            )
        )

    @admin.display(description="Members", ordering="member_count")
    def member_count(self, obj: Tenant) -> int:
        return obj.member_count

    @admin.display(description="Active keys", ordering="active_key_count")
    def active_key_count(self, obj: Tenant) -> int:
        return obj.active_key_count


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role",)
    search_fields = ("user__email", "tenant__slug", "tenant__name")
    list_select_related = ("user", "tenant")
    autocomplete_fields = ("user", "tenant")
