"""The stream URLs as plain Django views: the fallback for a WSGI web process.

In a stream process (hikyaku.asgi) these paths never reach Django: the lean handlers serve
them. A WSGI process has no dispatcher in front, so it serves them by polling the database,
holding a server thread per stream, for at most HIKYAKU_WSGI_STREAMS_MAX streams at a time.
Production routes these paths to the stream processes (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.views.decorators.http import require_GET

from agents.auth import authenticate_agent
from hikyaku.errors import HikyakuError, ServiceUnavailable, error_response

from ..a2a.wire import dialect_for
from . import web
from .feeds import InboxFeed, TenantFeed, parse_event_id
from .serve import polled_response


def _since(request: HttpRequest) -> int | None:
    since = parse_event_id(request.headers.get("Last-Event-ID"), "Last-Event-ID")
    return since if since is not None else parse_event_id(request.GET.get("since"), "since")


def _answer(begin) -> HttpResponse:
    try:
        return polled_response(begin)
    except HikyakuError as exc:
        return error_response(exc)
    except DatabaseError:
        return error_response(ServiceUnavailable())


@require_GET
def subscribe(request: HttpRequest) -> HttpResponse:
    def begin() -> InboxFeed:
        dialect = dialect_for(request.headers.get("A2A-Version"))
        since = _since(request)
        identity = authenticate_agent(
            authorization=request.headers.get("Authorization"),
            agent_id=request.headers.get("X-Agent-Id"),
        )
        return InboxFeed(identity, dialect, since)

    return _answer(begin)


def tenant_events(request: HttpRequest, slug: str) -> HttpResponse:
    return _web_stream(request, slug, request.GET.get("agent") or None)


def agent_events(request: HttpRequest, slug: str, agent_id) -> HttpResponse:
    return _web_stream(request, slug, str(agent_id))


def _web_stream(request: HttpRequest, slug: str, agent: str | None) -> HttpResponse:
    session_key = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
    if request.method != "GET":
        # Outsiders get the same 404 for every method (no existence oracle), members a 405.
        try:
            web.authorize(session_key, slug, agent)
        except HikyakuError as exc:
            return error_response(exc)
        return HttpResponseNotAllowed(["GET"])

    def begin() -> TenantFeed:
        since = _since(request)
        tenant, agent_id = web.authorize(session_key, slug, agent)
        return TenantFeed(
            tenant=tenant,
            agent_id=agent_id,
            since=since,
            validate=lambda: web.still_allowed(session_key, slug, agent),
            check_seconds=settings.HIKYAKU_STREAM_CHECK_SECONDS,
        )

    return _answer(begin)
