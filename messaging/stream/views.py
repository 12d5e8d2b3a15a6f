"""The stream URLs as Django views: what a web (WSGI) process answers to them.

In a stream process (hikyaku.asgi) these paths never reach Django: the lean handlers serve
them. A web process must not hold a thread for a stream, so these views hand the request to
the stream tier (421, messaging/stream/handoff.py) instead of serving it: at once for the
inbox (before authentication, which the stream tier does and counts), after the session
check for the web UI's streams (outsiders see the 404 every page of a tenant gives them).
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.views.decorators.http import require_GET

from hikyaku.errors import HikyakuError, error_response

from . import web
from .handoff import stream_refused


@require_GET
def subscribe(request: HttpRequest) -> HttpResponse:
    return stream_refused("GET /api/v1/subscribe (the inbox stream)")


def tenant_events(request: HttpRequest, slug: str) -> HttpResponse:
    return _web_stream(request, slug, request.GET.get("agent") or None)


def agent_events(request: HttpRequest, slug: str, agent_id) -> HttpResponse:
    return _web_stream(request, slug, str(agent_id))


def _web_stream(request: HttpRequest, slug: str, agent: str | None) -> HttpResponse:
    # Outsiders get the same 404 for every method, as on every page of a tenant (no existence
    # oracle); members a 405, or for a GET the hand-off to the stream tier.
    session_key = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
    try:
        web.authorize(session_key, slug, agent)
    except HikyakuError as exc:
        return error_response(exc)
    if request.method != "GET":
        return HttpResponseNotAllowed(["GET"])
    return stream_refused("The web UI's event stream")
