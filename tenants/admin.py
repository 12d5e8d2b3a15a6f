from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.utils import timezone

from agents.services import revoke_api_key

from . import services
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
    list_display = ("name", "slug", "require_agent_tokens", "active_keys", "created_at")
    search_fields = ("name", "slug")
    list_filter = ("require_agent_tokens",)
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

    @admin.display(description="Active keys")
    def active_keys(self, obj: Tenant) -> int:
        return obj.api_keys.filter(ApiKey.active_q()).count()


class KeyStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return (("active", "Active"), ("expired", "Expired"), ("revoked", "Revoked"))

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
        "status",
        "created_at",
        "last_used_at",
        "expires_at",
    )
    list_filter = (KeyStatusFilter, "tenant")
    search_fields = ("prefix", "label", "tenant__slug")
    readonly_fields = (
        "prefix",
        "key_hash",
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
        "key_hash",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    actions = ["revoke"]

    @admin.display(description="Key")
    def display(self, obj: ApiKey) -> str:
        return f"hky_{obj.prefix}…"

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields + (("tenant",) if obj else ())

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        created = services.create_api_key(
            tenant=obj.tenant, label=obj.label, created_by=request.user, expires_at=obj.expires_at
        )
        obj.pk = created.api_key.pk
        obj.__dict__.update(created.api_key.__dict__)
        self.message_user(
            request,
            f"API key created: {created.raw_key} — copy it now, it will not be shown again.",
            messages.WARNING,
        )

    @admin.action(
        description="Revoke selected keys (the last key of a tenant deregisters its agents)"
    )
    def revoke(self, request, queryset):
        deregistered = 0
        for api_key in queryset.filter(revoked_at__isnull=True):
            deregistered += revoke_api_key(api_key=api_key)
        self.message_user(request, f"Revoked. {deregistered} agent(s) deregistered.")
