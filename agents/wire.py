"""An agent as the registry's REST reads answer it (docs/PROTOCOL.md §3): one plain function,
shared by the Django views and the agents' hot path. `agents.api.AgentOut` describes the same
fields for the OpenAPI document; tests/agents/test_registry_api.py holds the two together."""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from django.utils import timezone

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
