"""REST views of the messaging app: a task's timeline for its parties."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.api import AGENT_AUTH_PARAMS, agent_identity, errors

from . import selectors
from .parties import Sender, actor_display, person_of


class EventOut(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    actor = serializers.SerializerMethodField()
    from_state = serializers.CharField()
    to_state = serializers.CharField()
    note = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()

    def get_actor(self, event) -> dict:
        """The acting agent (`name`: its name, else the external caller's label, else
        "system"), and the person who acted for it from the web UI (else null)."""
        person = person_of(event.actor_label) or None
        if event.actor_id:
            return {"agent_id": str(event.actor_id), "name": event.actor.name, "person": person}
        return {"agent_id": None, "name": actor_display(None, event.actor_label), "person": person}

    def get_note(self, event) -> str:
        return "\n".join(p["text"] for p in event.payload.get("parts", []) if "text" in p)


class EventsParams(serializers.Serializer):
    """Query parameters of a task's timeline; also their OpenAPI description."""

    limit = serializers.IntegerField(
        required=False, default=100, min_value=1, max_value=500, help_text="Page size."
    )
    cursor = serializers.CharField(
        required=False,
        default=None,
        max_length=200,
        allow_blank=True,
        help_text="`next_cursor` of the previous page (empty: the first page).",
    )


class TaskEventsView(APIView):
    @extend_schema(
        operation_id="task_events",
        parameters=[
            *AGENT_AUTH_PARAMS,
            EventsParams,
        ],
        responses={
            200: inline_serializer(
                "TaskEvents",
                {
                    "task_id": serializers.UUIDField(),
                    "events": EventOut(many=True),
                    "next_cursor": serializers.CharField(allow_null=True),
                },
            ),
            **errors(400, 404),
        },
        description="Every event of a task in order, for its sender and recipient.",
    )
    def get(self, request: Request, task_id: str) -> Response:
        identity = agent_identity(request)
        # A plain dict, so `?limit=` is an invalid integer rather than "use the default".
        params = EventsParams(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        task, events, next_cursor = selectors.task_events(
            sender=Sender(tenant=identity.tenant, agent=identity.agent),
            task_id=task_id,
            **params.validated_data,
        )
        return Response(
            {
                "task_id": str(task.id),
                "events": EventOut(events, many=True).data,
                "next_cursor": next_cursor,
            }
        )
