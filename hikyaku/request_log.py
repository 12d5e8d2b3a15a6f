"""One access-log line and one metrics sample per request (docs/PROTOCOL.md §11).

The outermost middleware. For every request it
- takes the caller's `X-Request-Id` when it is a sane token (letters, digits, `._:-`, at most
  128), or makes one, puts it on `request.request_id` and echoes it in the response;
- counts the request in `hikyaku_http_requests` / `..._duration_seconds`, labelled by the
  resolved URL name (never the raw path, which would make a series per id);
- logs one line on the `hikyaku.request` logger: request_id, method, route, path (without the
  query string), status, duration_ms, plus whatever the view attached.

The hook for views: once the caller is known, call
`tag_request(request, tenant_id=..., agent_id=...)` (any small, non-secret values; `rpc_method`
for JSON-RPC, for instance) and those keys join the line; text values are cut at 200
characters. It works with a Django or a DRF request and stores them in
`request.hikyaku_log`, a dict on the underlying HttpRequest, which a plain Django view may
also set directly. Headers, bodies and query strings are never logged, so keys and
tokens cannot leak through this line.

Health checks and `/metrics` scrapes are counted but logged at DEBUG, so a load balancer
polling `/readyz` does not drown the log. `HIKYAKU_REQUEST_LOG=false` turns the line off.

Sync and async capable, so under ASGI it adds no thread hop (docs/MEASUREMENTS.md). For a streaming
response the duration ends when the headers leave, not when the stream closes.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from time import perf_counter
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.urls import Resolver404, resolve
from django.utils.decorators import sync_and_async_middleware

from . import metrics
from .logging import STANDARD_ATTRIBUTES, request_id_var

log = logging.getLogger("hikyaku.request")

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_QUIET_ROUTES = frozenset({"healthz", "readyz", "metrics"})
_CORE_FIELDS = frozenset({"request_id", "method", "route", "path", "status", "duration_ms"})


def tag_request(request: Any, **fields: Any) -> None:
    """Add fields to this request's access-log line (module docstring). Never pass secrets."""
    # A DRF Request proxies reads to the HttpRequest but keeps attributes set on itself.
    http_request = getattr(request, "_request", request)
    existing = getattr(http_request, "hikyaku_log", None)
    if existing is None:
        http_request.hikyaku_log = fields
    else:
        existing.update(fields)


def request_id_of(incoming: str | None) -> str:
    """The caller's `X-Request-Id` when it is a sane token, else a new one."""
    if incoming and _REQUEST_ID.fullmatch(incoming):
        return incoming
    return os.urandom(16).hex()


def _request_id(request: HttpRequest) -> str:
    return request_id_of(request.META.get("HTTP_X_REQUEST_ID"))


def _route(request: HttpRequest, status: int) -> str:
    match = getattr(request, "resolver_match", None)
    if match is not None:
        return match.view_name
    # No view ran: the URL did not resolve (404), a static file was served, or a middleware
    # answered first (413 for an oversized body, a redirect). Only the last needs a lookup.
    if status == 404:
        return "unmatched"
    if request.path.startswith(_static_prefix()):
        return "static"
    try:
        return resolve(request.path_info).view_name
    except Resolver404:
        return "unmatched"


def _static_prefix() -> str:
    return "/" + settings.STATIC_URL.lstrip("/")


def _finish(
    request: HttpRequest, response: HttpResponseBase, started: float, request_id: str
) -> HttpResponseBase:
    status = response.status_code
    response["X-Request-Id"] = request_id
    record(
        request_id=request_id,
        method=request.method,
        route=_route(request, status),
        path=request.path,
        status=status,
        seconds=perf_counter() - started,
        extra=getattr(request, "hikyaku_log", None),
    )
    return response


def record(
    *,
    request_id: str,
    method: str | None,
    route: str,
    path: str,
    status: int,
    seconds: float,
    extra: dict[str, Any] | None,
) -> None:
    """Count one answered request and log its line: for Django's requests (the middleware)
    and for those answered in front of Django (hikyaku/lean.py) alike."""
    method = method if method in _METHODS else "OTHER"
    metrics.observe_request(route, method, status, seconds)
    if not settings.HIKYAKU_REQUEST_LOG:
        return
    level = logging.DEBUG if route in _QUIET_ROUTES else logging.INFO
    if not log.isEnabledFor(level):
        return
    duration_ms = round(seconds * 1000, 2)
    fields = {
        "request_id": request_id,
        "method": method,
        "route": route,
        "path": path,
        "status": status,
        "duration_ms": duration_ms,
    }
    if extra:
        for key, value in extra.items():
            if key not in _CORE_FIELDS and key not in STANDARD_ATTRIBUTES:
                # Some values echo the caller (a JSON-RPC method name): keep them short.
                if isinstance(value, str) and len(value) > 200:
                    value = value[:200] + "…"
                fields[key] = value
    log.log(level, "%s %s %s %.1fms", method, path, status, duration_ms, extra=fields)


@sync_and_async_middleware
def request_log_middleware(
    get_response: Callable[[HttpRequest], HttpResponseBase],
) -> Callable[[HttpRequest], HttpResponseBase]:
    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponseBase:
            started = perf_counter()
            request_id = request.request_id = _request_id(request)
            token = request_id_var.set(request_id)
            try:
                response = await get_response(request)
            finally:
                request_id_var.reset(token)
            return _finish(request, response, started, request_id)

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponseBase:
        started = perf_counter()
        request_id = request.request_id = _request_id(request)
        token = request_id_var.set(request_id)
        try:
            response = get_response(request)
        finally:
            request_id_var.reset(token)
        return _finish(request, response, started, request_id)

    return middleware
