from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from agents import api as agents_api
from agents.views import agent_directory, broker_agent_card, peer_agent_card
from agents.whoami import MeView

from . import error_pages, health, metrics

admin.site.site_header = "Hikyaku administration"
admin.site.site_title = "Hikyaku admin"
admin.site.index_title = "Tenants, keys, agents and tasks"
# Admin login goes through allauth (one login flow for people).
admin.site.login = RedirectView.as_view(url="/accounts/login/", query_string=True)

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path(".well-known/agent-card.json", broker_agent_card, name="agent-card"),
    path("a2a/agents/", agent_directory, name="a2a-agents"),
    path(
        "a2a/agents/<str:agent_id>/.well-known/agent-card.json",
        peer_agent_card,
        name="a2a-agent-card",
    ),
    path("api/v1/agents", agents_api.AgentListView.as_view(), name="api-agents"),
    # Before the detail route, whose <str:agent_id> would take "me".
    path("api/v1/agents/me", MeView.as_view(), name="api-agent-me"),
    path("api/v1/agents/<str:agent_id>", agents_api.AgentDetailView.as_view(), name="api-agent"),
    path(
        "api/v1/agents/<str:agent_id>/token",
        agents_api.AgentTokenView.as_view(),
        name="api-agent-token",
    ),
    path(
        "api/v1/agents/<str:agent_id>/policy",
        agents_api.AgentPolicyView.as_view(),
        name="api-agent-policy",
    ),
    path(
        "api/v1/agents/<str:agent_id>/webhook-secret",
        agents_api.WebhookSecretView.as_view(),
        name="api-agent-webhook-secret",
    ),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file: no inline script, so the
    # docs page keeps script-src 'self' (hikyaku/middleware.py).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("admin/", admin.site.urls),
    path("accounts/", include("allauth.urls")),
    path("", include("messaging.urls")),
    path("ui/", include("webui.urls")),
    path("favicon.ico", RedirectView.as_view(url="/static/img/favicon.svg", permanent=True)),
]


# Errors in each surface's own shape (hikyaku/error_pages.py).
handler404 = error_pages.not_found
handler500 = error_pages.server_error
