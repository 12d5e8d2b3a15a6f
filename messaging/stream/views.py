"""The stream URLs as Django views: what a web (WSGI) process answers to them.

In a stream process (hikyaku.asgi) these paths never reach Django: the lean handlers serve
them. A web process must not hold a thread for a stream, so these views hand the request to
the stream tier (421, messaging/stream/handoff.py) instead of serving it.
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
    if request.method != "GET":
        # Outsiders get the same 404 for every method (no existence oracle), members a 405.
        session_key = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
        try:
            web.authorize(session_key, slug, agent)
        except HikyakuError as exc:
            return error_response(exc)
        return HttpResponseNotAllowed(["GET"])
    return stream_refused("The web UI's event stream")
