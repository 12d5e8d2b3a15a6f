from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.db.models import Count, Q
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers

from agents.services import RevokedKeyAgents, revoke_api_key

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
        # Keys are revoked (agents.services.revoke_api_key), which deregisters the agents of
        # a tenant's last key; a bulk delete would skip that rule.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        created = services.create_api_key(
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
        choice = request.POST.get("agents") or RevokedKeyAgents.REVOKE_TOKENS
        if request.POST.get("confirm") != "yes" or choice not in RevokedKeyAgents.values:
            context = {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": "Revoke API keys?",
                "keys": keys,
                "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
                "last_key_tenants": _tenants_left_without_keys(keys),
                "choices": RevokedKeyAgents.choices,
                "default_choice": RevokedKeyAgents.REVOKE_TOKENS,
            }
            return TemplateResponse(request, "admin/tenants/apikey/revoke_confirm.html", context)
        done = [revoke_api_key(api_key=api_key, agents=choice) for api_key in keys]
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
