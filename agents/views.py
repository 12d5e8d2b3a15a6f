"""Plain Django views of the agents app: the broker's A2A agent card, every agent's own card
(docs/PROTOCOL.md §8) and the directory of cards at /a2a/agents/."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseNotModified, JsonResponse
from django.views.decorators.http import require_GET

from hikyaku.errors import (
    AgentNotFound,
    HikyakuError,
    InvalidRequest,
    Unauthenticated,
    error_response,
)

from . import selectors
from .auth import authenticate_tenant, check_anonymous_rate, client_address, has_credential
from .cards import agent_card, agent_url, broker_card
from .models import Agent


def _cacheable(request: HttpRequest, body: dict[str, Any], cache_control: str) -> HttpResponse:
    """A JSON document with an ETag, answering If-None-Match with 304."""
    raw = json.dumps(body, separators=(",", ":")).encode()
    etag = '"' + hashlib.sha256(raw).hexdigest()[:32] + '"'
    if etag in [t.strip() for t in request.headers.get("If-None-Match", "").split(",")]:
        response: HttpResponse = HttpResponseNotModified()
    else:
        response = HttpResponse(raw, content_type="application/json")
    response["ETag"] = etag
    response["Cache-Control"] = cache_control
    response["Access-Control-Allow-Origin"] = "*"
    return response


@require_GET
def broker_agent_card(request: HttpRequest) -> HttpResponse:
    return _cacheable(request, broker_card(request), "public, max-age=300")


def _visible_agent(request: HttpRequest, agent_id: str) -> Agent:
    """The agent whose card the caller may read: a public agent, or any active agent of the
    caller's tenant. Without credentials anything else is 401 (so unknown and private look
    alike); with credentials of another tenant it is 404."""
    agent = selectors.peer_agent(agent_id=agent_id)
    authorization = request.headers.get("Authorization")
    if has_credential(authorization):
        tenant = authenticate_tenant(
            authorization=authorization, agent_id=request.headers.get("X-Agent-Id")
        )
        if agent is None or (agent.tenant_id != tenant.id and not agent.public):
            raise AgentNotFound(f"Agent not found: {agent_id}")
        return agent
    if agent is None or not agent.public:
        raise Unauthenticated(
            "Send 'Authorization: Bearer <api key or agent token>' to read this agent's card."
        )
    check_anonymous_rate(client_address(request.META))
    return agent


@require_GET
def peer_agent_card(request: HttpRequest, agent_id: str) -> HttpResponse:
    """GET /a2a/agents/<agent_id>/.well-known/agent-card.json: the agent's A2A 1.0 card."""
    try:
        agent = _visible_agent(request, agent_id)
    except HikyakuError as exc:
        return error_response(exc)
    # A private agent's card depends on who asks, so shared caches must not keep it.
    cache_control = "public, max-age=60" if agent.public else "private, max-age=60"
    return _cacheable(request, agent_card(agent, request), cache_control)


def _page_params(request: HttpRequest) -> tuple[int, str | None]:
    try:
        limit = int(request.GET.get("limit", 50))
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        raise InvalidRequest("limit must be between 1 and 100.", details={"limit": ["invalid"]})
    return limit, request.GET.get("cursor") or None


@require_GET
def agent_directory(request: HttpRequest) -> HttpResponse:
    """GET /a2a/agents/: the cards visible to the caller. With a tenant key or an agent
    identity, the tenant's active agents (`?q=` searches names); anonymously, the active
    public agents of every tenant. Cursor-paged by name (`?limit=&cursor=`)."""
    authorization = request.headers.get("Authorization")
    try:
        limit, cursor = _page_params(request)
        if has_credential(authorization):
            tenant = authenticate_tenant(
                authorization=authorization, agent_id=request.headers.get("X-Agent-Id")
            )
            agents, next_cursor = selectors.list_active_agents(
                tenant=tenant, q=request.GET.get("q", ""), limit=limit, cursor=cursor
            )
        else:
            check_anonymous_rate(client_address(request.META))
            agents, next_cursor = selectors.list_public_agents(limit=limit, cursor=cursor)
    except HikyakuError as exc:
        return error_response(exc)
    response = JsonResponse(
        {
            "agents": [
                {
                    "agentId": str(agent.id),
                    "public": agent.public,
                    "url": agent_url(agent, request),
                    "card": agent_card(agent, request),
                }
                for agent in agents
            ],
            "nextCursor": next_cursor or "",
        }
    )
    response["Cache-Control"] = "private, no-cache"
    return response
