"""Registry REST API (docs/PROTOCOL.md §3): thin DRF views over agents.services and selectors."""

from __future__ import annotations

from a2a.types import AgentSkill
from django.db import transaction
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from google.protobuf.json_format import ParseDict, ParseError
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hikyaku.errors import Forbidden
from hikyaku.request_log import tag_request

from . import reads, selectors, services
from .auth import AgentIdentity, authenticate_agent, authenticate_key
from .cards import agent_card
from .models import Agent
from .reads import ListParams
from .wire import agent_detail_out, visible_webhook_url

AGENT_AUTH_PARAMS = [
    OpenApiParameter(
        "X-Agent-Id",
        str,
        OpenApiParameter.HEADER,
        required=False,
        description="The acting agent's id (with a tenant API key; optional with an agent token).",
    )
]


class ErrorDetail(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = serializers.DictField(required=False)


class ErrorEnvelope(serializers.Serializer):
    """The REST error envelope of docs/PROTOCOL.md §3 (hikyaku.errors)."""

    error = ErrorDetail()


_ERROR_MEANINGS = {
    400: "INVALID_REQUEST: validation failed; `details` names the fields.",
    401: "UNAUTHORIZED: missing or invalid credentials.",
    403: "FORBIDDEN: agents may only change themselves.",
    404: "AGENT_NOT_FOUND / NOT_FOUND: unknown, deregistered, or another tenant's.",
    409: "AGENT_NAME_TAKEN: a live agent of the tenant already has this name.",
    413: "PAYLOAD_TOO_LARGE: the body exceeds the limit.",
    429: "RATE_LIMITED: slow down; see Retry-After.",
    503: "UNAVAILABLE: the database is unreachable; retry shortly.",
}


def errors(*statuses: int) -> dict[int, OpenApiResponse]:
    """Error responses for `extend_schema(responses=…)`; 401, 429 and 503 are always possible."""
    return {
        status: OpenApiResponse(ErrorEnvelope, description=_ERROR_MEANINGS[status])
        for status in sorted({*statuses, 401, 429, 503})
    }


def agent_identity(request: Request) -> AgentIdentity:
    identity = authenticate_agent(
        authorization=request.headers.get("Authorization"),
        agent_id=request.headers.get("X-Agent-Id"),
    )
    tag_request(request, tenant_id=identity.tenant.id, agent_id=identity.agent.id)
    return identity


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of coercing them to text."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class SkillsField(serializers.ListField):
    """A list of A2A AgentSkill objects; each needs at least an id and a name."""

    child = serializers.DictField()

    def to_internal_value(self, data):
        skills = super().to_internal_value(data)
        if len(skills) > 100:
            raise serializers.ValidationError("At most 100 skills.")
        cleaned = []
        for index, raw in enumerate(skills):
            try:
                skill = ParseDict(raw, AgentSkill())
            except ParseError as exc:
                raise serializers.ValidationError(f"skills[{index}]: {exc}") from None
            if not skill.id or not skill.name:
                raise serializers.ValidationError(f"skills[{index}] needs an 'id' and a 'name'.")
            cleaned.append(raw)
        return cleaned


class RegisterIn(serializers.Serializer):
    name = StrictCharField(max_length=200, min_length=1, trim_whitespace=True)
    description = StrictCharField(max_length=2000, allow_blank=True, trim_whitespace=False)
    skills = SkillsField(required=False, default=list)
    # Checked by the service (agents.destinations.check_url), as every stored URL is.
    webhook_url = StrictCharField(required=False, allow_blank=True, default="")


class RegisterOut(serializers.Serializer):
    agent_id = serializers.UUIDField()
    api_key = serializers.CharField()
    agent_token = serializers.CharField()
    name = serializers.CharField()
    registered_at = serializers.DateTimeField()


class AgentOut(serializers.Serializer):
    agent_id = serializers.UUIDField(source="id")
    name = serializers.CharField()
    description = serializers.CharField()
    skills = serializers.JSONField()
    status = serializers.CharField()
    registered_at = serializers.DateTimeField()
    last_seen_at = serializers.DateTimeField(allow_null=True)


class AgentDetailOut(AgentOut):
    webhook_url = serializers.SerializerMethodField()
    agent_card = serializers.SerializerMethodField()

    def get_webhook_url(self, agent: Agent) -> str:
        return visible_webhook_url(agent, self.context.get("viewer"))

    def get_agent_card(self, agent: Agent) -> dict:
        return agent_card(agent, self.context.get("request"))


class AgentPatchIn(serializers.Serializer):
    description = StrictCharField(max_length=2000, allow_blank=True, required=False)
    skills = SkillsField(required=False)
    webhook_url = StrictCharField(allow_blank=True, required=False)

    def validate(self, attrs):
        unknown = (
            set(self.initial_data) - set(self.fields)
            if isinstance(self.initial_data, dict)
            else set()
        )
        if unknown:
            raise serializers.ValidationError(
                {f: ["This field cannot be changed."] for f in sorted(unknown)}
            )
        return attrs


class AgentListView(APIView):
    @extend_schema(
        operation_id="register_agent",
        request=RegisterIn,
        responses={201: RegisterOut, **errors(400, 409, 413)},
        description="Register an agent with a tenant API key (`Authorization: Bearer hky_…`). "
        "The agent token is returned once.",
    )
    def post(self, request: Request) -> Response:
        api_key = authenticate_key(request.headers.get("Authorization"))
        tag_request(request, tenant_id=api_key.tenant_id)
        data = RegisterIn(data=request.data)
        data.is_valid(raise_exception=True)
        registered = services.register_agent(
            tenant=api_key.tenant, registered_with=api_key, **data.validated_data
        )
        raw_key = request.headers["Authorization"].strip().partition(" ")[2].strip()
        body = {
            "agent_id": registered.agent.id,
            "api_key": raw_key,
            "agent_token": registered.raw_token,
            "name": registered.agent.name,
            "registered_at": registered.agent.registered_at,
        }
        return Response(RegisterOut(body).data, status=201)

    @extend_schema(
        operation_id="list_agents",
        parameters=[
            *AGENT_AUTH_PARAMS,
            ListParams,
        ],
        responses={
            200: inline_serializer(
                "AgentList",
                {
                    "agents": AgentOut(many=True),
                    "next_cursor": serializers.CharField(allow_null=True),
                },
            ),
            **errors(400),
        },
    )
    def get(self, request: Request) -> Response:
        # The agents' hot path answers this in front of Django (agents/reads.py) alike.
        identity = agent_identity(request)
        params = reads.list_params(request.query_params)
        return Response(reads.agents_page(identity.tenant, params))


class AgentDetailView(APIView):
    def _own(self, identity: AgentIdentity, agent_id: str) -> Agent:
        agent = selectors.active_agent(tenant=identity.tenant, agent_id=agent_id)
        if agent.pk != identity.agent.pk:
            raise Forbidden("Agents can only change themselves.")
        return identity.agent

    @extend_schema(
        operation_id="get_agent",
        parameters=AGENT_AUTH_PARAMS,
        responses={200: AgentDetailOut, **errors(404)},
    )
    def get(self, request: Request, agent_id: str) -> Response:
        identity = agent_identity(request)
        agent = selectors.active_agent(tenant=identity.tenant, agent_id=agent_id)
        return Response(agent_detail_out(agent, viewer=identity.agent, request=request))

    @extend_schema(
        operation_id="update_agent",
        parameters=AGENT_AUTH_PARAMS,
        request=AgentPatchIn,
        responses={200: AgentDetailOut, **errors(400, 403, 404, 413)},
    )
    def patch(self, request: Request, agent_id: str) -> Response:
        identity = agent_identity(request)
        agent = self._own(identity, agent_id)
        data = AgentPatchIn(data=request.data)
        data.is_valid(raise_exception=True)
        services.update_agent(agent=agent, **data.validated_data)
        return Response(agent_detail_out(agent, viewer=agent, request=request))

    @extend_schema(
        operation_id="deregister_agent",
        parameters=AGENT_AUTH_PARAMS,
        responses={204: None, **errors(403, 404)},
    )
    def delete(self, request: Request, agent_id: str) -> Response:
        identity = agent_identity(request)
        services.deregister_agent(agent=self._own(identity, agent_id))
        return Response(status=204)


class AgentTokenView(APIView):
    @extend_schema(
        operation_id="rotate_agent_token",
        parameters=AGENT_AUTH_PARAMS,
        request=None,
        responses={
            200: inline_serializer(
                "AgentToken",
                {"agent_id": serializers.UUIDField(), "agent_token": serializers.CharField()},
            ),
            **errors(403, 404),
        },
        description="Issue a new agent token; the previous token stops working at once.",
    )
    def post(self, request: Request, agent_id: str) -> Response:
        identity = agent_identity(request)
        agent = selectors.active_agent(tenant=identity.tenant, agent_id=agent_id)
        if agent.pk != identity.agent.pk:
            raise Forbidden("Agents can only rotate their own token.")
        with transaction.atomic():
            # The new token rests on what vouched for this request: the key it came with,
            # else the key the old token rested on (docs/ARCHITECTURE.md, Credentials).
            key_id = identity.api_key.pk if identity.api_key else identity.agent.token_key_id
            raw = services.rotate_agent_token(agent=identity.agent, key_id=key_id)
        return Response({"agent_id": str(agent.pk), "agent_token": raw})


class AllowListField(serializers.ListField):
    child = StrictCharField(max_length=64)


class PolicyIn(serializers.Serializer):
    send_to = AllowListField(required=False, max_length=1000)
    receive_from = AllowListField(required=False, max_length=1000)
    disclosure_ceiling = serializers.ChoiceField(
        choices=["public-safe", "internal", "restricted"], required=False
    )

    def validate(self, attrs):
        unknown = (
            set(self.initial_data) - set(self.fields)
            if isinstance(self.initial_data, dict)
            else set()
        )
        if unknown:
            raise serializers.ValidationError({f: ["Unknown field."] for f in sorted(unknown)})
        return attrs


class PolicyOut(serializers.Serializer):
    agent_id = serializers.UUIDField(source="id")
    status = serializers.CharField()
    send_to = serializers.ListField(child=serializers.CharField())
    receive_from = serializers.ListField(child=serializers.CharField())
    disclosure_ceiling = serializers.CharField()


OPERATOR_AUTH = (
    "Operator endpoint: authenticate with a tenant API key (`Authorization: Bearer hky_…`); "
    "agent tokens are refused, so an agent holding only its token cannot change its own "
    "policy. Tenants whose agents must not hold the key turn on 'require agent tokens'."
)


class AgentPolicyView(APIView):
    """Who an agent may talk to (docs/PROTOCOL.md §4.5), for the tenant's operators."""

    @extend_schema(
        operation_id="get_agent_policy",
        responses={200: PolicyOut, **errors(404)},
        description=OPERATOR_AUTH,
    )
    def get(self, request: Request, agent_id: str) -> Response:
        api_key = authenticate_key(request.headers.get("Authorization"))
        agent = selectors.manageable_agent(tenant=api_key.tenant, agent_id=agent_id)
        return Response(PolicyOut(agent).data)

    @extend_schema(
        operation_id="set_agent_policy",
        request=PolicyIn,
        responses={200: PolicyOut, **errors(400, 404, 413)},
        description="Set an agent's allow-lists (`send_to`, `receive_from`: agent ids of this "
        'tenant, or `["*"]` for anyone; `[]` for nobody) and disclosure ceiling. Fields left '
        "out keep their value. Narrowing a policy closes access to existing history at once. "
        + OPERATOR_AUTH,
    )
    def put(self, request: Request, agent_id: str) -> Response:
        api_key = authenticate_key(request.headers.get("Authorization"))
        agent = selectors.manageable_agent(tenant=api_key.tenant, agent_id=agent_id)
        data = PolicyIn(data=request.data)
        data.is_valid(raise_exception=True)
        services.set_agent_policy(agent=agent, **data.validated_data)
        return Response(PolicyOut(agent).data)


class WebhookSecretOut(serializers.Serializer):
    agent_id = serializers.UUIDField()
    webhook_secret = serializers.CharField()


class WebhookSecretView(APIView):
    """The key of the HMAC in X-Hikyaku-Signature on this agent's webhook deliveries."""

    def _own(self, request: Request, agent_id: str) -> Agent:
        identity = agent_identity(request)
        agent = selectors.active_agent(tenant=identity.tenant, agent_id=agent_id)
        if agent.pk != identity.agent.pk:
            raise Forbidden("Agents can only see their own webhook secret.")
        return identity.agent

    @extend_schema(
        operation_id="get_webhook_secret",
        parameters=AGENT_AUTH_PARAMS,
        responses={
            200: WebhookSecretOut,
            **errors(403, 404),
        },
        description="The agent's webhook signing secret (see docs/WEBHOOKS.md).",
    )
    def get(self, request: Request, agent_id: str) -> Response:
        agent = self._own(request, agent_id)
        secret = services.webhook_secret(agent=agent)
        return Response({"agent_id": str(agent.pk), "webhook_secret": secret})

    @extend_schema(
        operation_id="rotate_webhook_secret",
        parameters=AGENT_AUTH_PARAMS,
        request=None,
        responses={
            200: WebhookSecretOut,
            **errors(403, 404),
        },
        description="Issue a new webhook signing secret; deliveries from now on use it.",
    )
    def post(self, request: Request, agent_id: str) -> Response:
        agent = self._own(request, agent_id)
        secret = services.rotate_webhook_secret(agent=agent)
        return Response({"agent_id": str(agent.pk), "webhook_secret": secret})
