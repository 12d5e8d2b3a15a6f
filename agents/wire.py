"""An agent as the registry's REST reads answer it (docs/PROTOCOL.md §3): plain functions,
shared by the Django views and the agents' hot path. `agents.api.AgentOut` and
`AgentDetailOut` describe the same fields for the OpenAPI document;
tests/agents/test_registry_api.py holds them together."""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from django.http import HttpRequest
from django.utils import timezone

from .cards import agent_card
from .models import Agent


def timestamp(value: datetime | None, zone: tzinfo | None = None) -> str | None:
    """A time as the REST API writes it: ISO 8601 in the current time zone (`zone`, when the
    caller has it at hand), `Z` for UTC."""
    if value is None:
        return None
    text = value.astimezone(zone or timezone.get_current_timezone()).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def agent_out(agent: Agent, zone: tzinfo | None = None) -> dict[str, Any]:
    return {
        "agent_id": str(agent.id),
        "name": str(agent.name),
        "description": str(agent.description),
        "skills": agent.skills,
        "status": str(agent.status),
        "registered_at": timestamp(agent.registered_at, zone),
        "last_seen_at": timestamp(agent.last_seen_at, zone),
    }


def visible_webhook_url(agent: Agent, viewer: Agent | None) -> str:
    """A webhook URL often carries a secret of its own: only its agent sees it."""
    return agent.webhook_url if viewer is not None and viewer.pk == agent.pk else ""


def agent_detail_out(
    agent: Agent, *, viewer: Agent | None, request: HttpRequest | None
) -> dict[str, Any]:
    """One agent as GET /api/v1/agents/<id> answers it: `agent_out`, its webhook URL as
    `viewer` may see it, and its A2A card with URLs on `request`'s host."""
    return {
        **agent_out(agent),
        "webhook_url": visible_webhook_url(agent, viewer),
        "agent_card": agent_card(agent, request),
    }
