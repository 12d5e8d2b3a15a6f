"""The registry read agents make all day, `GET /api/v1/agents` (docs/PROTOCOL.md §3), answered
from a request's headers and query string alone: by the agents' hot path in front of Django
(hikyaku/lean.py) and, through the same functions, by the DRF view (agents/api.py), which
still answers what the hot path leaves to Django (docs/ARCHITECTURE.md, "The agents' hot
path")."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from django.http import QueryDict
from django.utils import timezone
from rest_framework import serializers

from hikyaku.errors import error_headers, rest_error
from tenants.models import Tenant

from . import selectors
from .auth import authenticate_agent
from .wire import agent_out


class ListParams(serializers.Serializer):
    """Query parameters of the agent list; also their OpenAPI description."""

    q = serializers.CharField(
        required=False,
        default="",
        max_length=200,
        allow_blank=True,
        help_text="Case-insensitive name search.",
    )
    limit = serializers.IntegerField(
        required=False, default=100, min_value=1, max_value=500, help_text="Page size."
    )
    cursor = serializers.CharField(
        required=False,
        default=None,
        max_length=1000,
        allow_blank=True,
        help_text="`next_cursor` of the previous page (empty: the first page).",
    )


@cache
def _defaults() -> dict[str, Any]:
    return {name: field.default for name, field in ListParams().fields.items()}


def list_params(query: QueryDict) -> dict[str, Any]:
    """The list's parameters as ListParams validates them (its defaults without any)."""
    if not query:
        return dict(_defaults())
    # A plain dict, so `?limit=` is an invalid integer rather than "use the default".
    params = ListParams(data=query.dict())
    params.is_valid(raise_exception=True)
    return params.validated_data


def agents_page(tenant: Tenant, params: dict[str, Any]) -> dict[str, Any]:
    """One page of the tenant's active agents, as the list answers it."""
    agents, next_cursor = selectors.list_active_agents(tenant=tenant, **params)
    zone = timezone.get_current_timezone()
    return {"agents": [agent_out(agent, zone) for agent in agents], "next_cursor": next_cursor}


# What the hot path writes: status, the JSON body, headers, the fields of the request's log line.
Answer = tuple[int, dict[str, Any], list[tuple[str, str]], dict[str, Any]]


def list_agents(*, header: Callable[[str], str | None], query: str) -> Answer:
    """`GET /api/v1/agents`, answered as the DRF view answers it (hikyaku.lean adds the
    `Allow` header DRF adds); `header(name)` reads a request header, `query` is the query
    string."""
    log: dict[str, Any] = {}
    try:
        identity = authenticate_agent(
            authorization=header("Authorization"), agent_id=header("X-Agent-Id")
        )
        log = {"tenant_id": identity.tenant.id, "agent_id": identity.agent.id}
        page = agents_page(identity.tenant, list_params(QueryDict(query)))
    except Exception as exc:
        error = rest_error(exc)
        if error is None:
            raise
        return error.status, error.envelope(), error_headers(error), log
    return 200, page, [], log
