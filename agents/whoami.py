"""`GET /api/v1/agents/me`: who the caller is, in which tenant, and what its policy lets it do.

The answer carries the tenant's policy revision (agents/history.py): an agent that keeps it
can tell, by asking again, whether any agent of its tenant was registered, deregistered,
disabled, enabled, published or had its allow-lists or ceiling changed since.
"""

from __future__ import annotations

import uuid

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .api import AGENT_AUTH_PARAMS, AgentOut, agent_identity, errors
from .auth import AgentIdentity
from .models import Agent
from .wire import agent_out, timestamp

ANYONE = "*"


def whoami(identity: AgentIdentity) -> dict:
    """The caller's profile: two queries (its profile with the tenant's revision, and the
    names of the agents its allow-lists name, skipped when both allow anyone)."""
    agent = identity.agent
    # The profile fields authentication leaves deferred (agents.auth.IDENTITY_FIELDS), with the
    # tenant's revision, in one query.
    profile = (
        Agent.objects.filter(pk=agent.pk, tenant_id=identity.tenant.pk)
        .values("description", "skills", "tenant__policy_revision")
        .get()
    )
    agent.description, agent.skills = profile["description"], profile["skills"]
    revision = profile["tenant__policy_revision"]
    named = {uuid.UUID(i) for i in (*agent.send_to, *agent.receive_from) if i != ANYONE}
    peers = (
        {
            pk: (name, status)
            for pk, name, status in Agent.objects.filter(
                tenant_id=identity.tenant.pk, pk__in=named
            ).values_list("pk", "name", "status")
        }
        if named
        else {}
    )

    def relation(ids: list[str]) -> dict:
        if ANYONE in ids:
            return {"anyone": True, "agents": []}
        listed = [(uuid.UUID(i), peers.get(uuid.UUID(i))) for i in ids]
        return {
            "anyone": False,
            "agents": [
                {"agent_id": str(pk), "name": peer[0], "status": peer[1]}
                for pk, peer in listed
                if peer is not None
            ],
        }

    if identity.via_token:
        credential = {
            "kind": "agent_token",
            "prefix": f"hka_{agent.token_prefix}",
            "expires_at": _when(agent.token_expires_at),
        }
    else:
        credential = {
            "kind": "api_key",
            "prefix": f"hky_{identity.api_key.prefix}",
            "expires_at": _when(identity.api_key.expires_at),
        }
    return {
        **agent_out(agent),
        "public": agent.public,
        "webhook_url": agent.webhook_url,
        "tenant": {
            "id": str(identity.tenant.pk),
            "slug": identity.tenant.slug,
            "name": identity.tenant.name,
        },
        "credential": credential,
        "send_to": relation(agent.send_to),
        "receive_from": relation(agent.receive_from),
        "disclosure_ceiling": agent.disclosure_ceiling,
        "policy_revision": revision,
    }


def _when(value) -> str | None:
    return timestamp(value)


class PeerOut(serializers.Serializer):
    agent_id = serializers.UUIDField()
    name = serializers.CharField()
    status = serializers.CharField()


class RelationOut(serializers.Serializer):
    anyone = serializers.BooleanField(help_text='The allow-list is ["*"].')
    agents = PeerOut(many=True, help_text="The agents it names (any status), when not anyone.")


class TenantOut(serializers.Serializer):
    id = serializers.UUIDField()
    slug = serializers.CharField()
    name = serializers.CharField()


class CredentialOut(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["agent_token", "api_key"])
    prefix = serializers.CharField(help_text="The credential's public prefix, never the secret.")
    expires_at = serializers.DateTimeField(allow_null=True)


class MeOut(AgentOut):
    public = serializers.BooleanField()
    webhook_url = serializers.CharField()
    tenant = TenantOut()
    credential = CredentialOut()
    send_to = RelationOut()
    receive_from = RelationOut()
    disclosure_ceiling = serializers.ChoiceField(choices=["public-safe", "internal", "restricted"])
    policy_revision = serializers.IntegerField(
        help_text="The tenant's policy revision: any change to the tenant's agents (registered, "
        "deregistered, disabled, enabled, published) or to their allow-lists or ceilings "
        "raises it."
    )


class MeView(APIView):
    @extend_schema(
        operation_id="whoami",
        parameters=AGENT_AUTH_PARAMS,
        responses={200: MeOut, **errors()},
        description="The calling agent: its identity and tenant, the credential it used, who "
        "it may send to and receive from (ids and names), its disclosure ceiling, and the "
        "tenant's policy revision.",
    )
    def get(self, request: Request) -> Response:
        return Response(whoami(agent_identity(request)))
