from django.urls import path

from .a2a.views import agent_jsonrpc, broker_jsonrpc
from .api import TaskEventsView
from .stream import views as stream_views

urlpatterns = [
    path("", broker_jsonrpc, name="a2a-root"),
    path("a2a/", broker_jsonrpc, name="a2a"),
    path("api/v1/subscribe", stream_views.subscribe, name="api-subscribe"),
    path("a2a/agents/<str:agent_id>/", agent_jsonrpc, name="a2a-agent"),
    # Clients configured without the card's trailing slash still reach the endpoint (a POST
    # cannot be redirected to the slashed URL).
    path("a2a/agents/<str:agent_id>", agent_jsonrpc),
    path("api/v1/tasks/<str:task_id>/events", TaskEventsView.as_view(), name="api-task-events"),
]
