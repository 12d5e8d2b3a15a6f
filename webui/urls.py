from django.urls import include, path

from messaging.stream import views as stream_views

from .views import agents, keys, messages, tenants

app_name = "webui"

tenant_urls = [
    path("", tenants.tenant_home, name="tenant"),
    path("members/", tenants.members, name="members"),
    path("members/add/", tenants.member_add, name="member-add"),
    path("leave/", tenants.tenant_leave, name="leave"),
    path("keys/", keys.keys, name="keys"),
    path("keys/new/", keys.key_create, name="key-create"),
    path("keys/<uuid:key_id>/revoke/", keys.key_revoke, name="key-revoke"),
    path("agents/", agents.agents, name="agents"),
    path("agents/<uuid:agent_id>/", agents.agent_detail, name="agent"),
    path(
        "agents/<uuid:agent_id>/disable/",
        agents.agent_set_enabled,
        {"enabled": False},
        name="agent-disable",
    ),
    path(
        "agents/<uuid:agent_id>/enable/",
        agents.agent_set_enabled,
        {"enabled": True},
        name="agent-enable",
    ),
    path("agents/<uuid:agent_id>/deregister/", agents.agent_deregister, name="agent-deregister"),
    path("agents/<uuid:agent_id>/inbox/", messages.inbox, name="inbox"),
    path("agents/<uuid:agent_id>/sent/", messages.sent, name="sent"),
    path("tasks/<uuid:task_id>/", messages.task_detail, name="task"),
    path("tasks/<uuid:task_id>/act/", messages.task_act, name="task-act"),
    path("tasks/<uuid:task_id>/files/<str:digest>/", messages.task_file, name="task-file"),
    path("send/", messages.send, name="send"),
    # Live events (Server-Sent Events). In a stream process hikyaku.asgi hands these paths to
    # messaging.stream's lean handler; these views are the polling fallback of WSGI processes.
    path("events/", stream_views.tenant_events, name="tenant-events"),
    path("agents/<uuid:agent_id>/events/", stream_views.agent_events, name="agent-events"),
]

urlpatterns = [
    path("", tenants.home, name="home"),
    path("tenants/new/", tenants.tenant_create, name="tenant-create"),
    path("t/<slug:slug>/", include(tenant_urls)),
]
