"""The agents' hot path, served in front of Django's handler (docs/ARCHITECTURE.md, "The agents'
hot path").

`POST /` and `POST /a2a/` — SendMessage, ListTasks, GetTask, the lifecycle follow-ups,
CancelTask — are most of the broker's traffic, and `GET /api/v1/agents` is the registry read
agents make to find each other. Under Django's handler each paid for the URL resolver, the
middleware chain and the request and response objects of a browser framework (and the list,
for DRF's too). Here the WSGI application (hikyaku/wsgi.py) and the ASGI dispatcher
(hikyaku/asgi.py) give the headers, body and query string straight to
messaging.a2a.endpoint or agents.reads and write the answer with what Django's middleware
would have added: the security headers, `X-Request-Id`, the request log line and the request
metrics (hikyaku/request_log.py). Django still answers what this does not: other methods and
paths, bodies without a Content-Length or over the limit (for a GET, any body), a Host it
would refuse, and settings this does not reproduce (HTTPS redirects, HSTS, forwarded hosts,
refused user agents, PREPEND_WWW).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache
from http import HTTPStatus
from time import perf_counter

from django.conf import settings
from django.core import signals
from django.core.cache import close_caches
from django.core.handlers.base import reset_urlconf
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections, reset_queries
from django.http import HttpRequest
from django.http.request import split_domain_port, validate_host

from agents import reads
from agents.api import AgentListView
from messaging.a2a import endpoint

from . import client_address, error_pages, middleware, request_log
from .logging import request_id_var

log = logging.getLogger("django.request")

Answerer = Callable[..., endpoint.Reply]  # (header=, body=, query=) -> the answer


def _broker(*, header: Callable[[str], str | None], body: bytes, query: str) -> endpoint.Reply:
    return endpoint.broker(header=header, body=body)


def _agents(*, header: Callable[[str], str | None], body: bytes, query: str) -> endpoint.Reply:
    status, value, headers, fields = reads.list_agents(header=header, query=query)
    return endpoint.reply(value, status, [*headers, _allow(AgentListView)], fields)


@cache
def _allow(view_class: type) -> tuple[str, str]:
    """The `Allow` header DRF adds to a view's answers: its methods, HEAD included as Django's
    `View.setup` adds it."""
    view = view_class()
    view.setup(HttpRequest())
    return ("Allow", ", ".join(view.allowed_methods))


# What is answered here, by method and path, with the route name Django's resolver gives it.
ROUTES: dict[tuple[str, str], tuple[str, Answerer]] = {
    ("POST", "/"): ("a2a-root", _broker),
    ("POST", "/a2a/"): ("a2a", _broker),
    ("GET", "/api/v1/agents"): ("api-agents", _agents),
}


def applies(method: str, path: str, content_length: int | None, host: str | None = None) -> bool:
    """Whether this request is answered here (else Django answers it). `host`, the Host
    header, matters to a GET only: Django's full middleware stack, which answers GETs, checks
    it; the POSTs answered here come from its API chain, which does not."""
    if (method, path) not in ROUTES or settings.SECURE_SSL_REDIRECT or settings.SECURE_HSTS_SECONDS:
        return False
    if method == "GET":
        return not content_length and _host_allowed(host)
    return content_length is not None and content_length <= settings.HIKYAKU_MAX_BODY_BYTES


def _host_allowed(host: str | None) -> bool:
    """Whether Django's full stack would answer a request with this Host as it answers any
    (`HttpRequest.get_host` and CommonMiddleware); anything else is left to it."""
    if not host or settings.USE_X_FORWARDED_HOST or settings.PREPEND_WWW:
        return False
    if settings.DISALLOWED_USER_AGENTS:
        return False
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    domain, _ = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)


@cache
def api_headers() -> tuple[tuple[str, str], ...]:
    """What the API middleware chain (hikyaku/wsgi.py, API_MIDDLEWARE) adds to a JSON answer."""
    headers = [("Content-Security-Policy", middleware.CONTENT_SECURITY_POLICY)]
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append(("X-Content-Type-Options", "nosniff"))
    if settings.SECURE_REFERRER_POLICY:
        policy = settings.SECURE_REFERRER_POLICY
        headers.append(("Referrer-Policy", policy if isinstance(policy, str) else ",".join(policy)))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        headers.append(("Cross-Origin-Opener-Policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY))
    headers.append(("Permissions-Policy", middleware.PERMISSIONS_POLICY))
    headers.append(("X-Frame-Options", settings.X_FRAME_OPTIONS))
    return tuple(headers)


def answer(
    *,
    path: str,
    header: Callable[[str], str | None],
    body: bytes,
    address: str,
    method: str = "POST",
    query: str = "",
    signal: bool = True,
) -> tuple[int, list[tuple[str, str]], bytes]:
    """The answer to a request `applies` accepted — status, headers, body. `address` is the client's
    (hikyaku.client_address). `signal` does around it what Django's handler does with its
    request_started/finished signals (they apply CONN_MAX_AGE); a caller that keeps its
    threads' connections itself passes False."""
    started = perf_counter()
    request_id = request_log.request_id_of(header("X-Request-Id"))
    token = request_id_var.set(request_id)
    address_token = client_address.current.set(address)
    if signal:
        _request_started()
    try:
        route, answerer = ROUTES[(method, path)]
        try:
            reply = answerer(header=header, body=body, query=query)
        except Exception:
            log.exception("Internal Server Error: %s", path)
            reply = endpoint.reply(error_pages.machine_body(path, 500), 500)
        headers = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(reply.body))),
            *api_headers(),
            *reply.headers,
            ("X-Request-Id", request_id),
        ]
        request_log.record(
            request_id=request_id,
            method=method,
            route=route,
            path=path,
            status=reply.status,
            seconds=perf_counter() - started,
            extra=reply.log,
        )
        return reply.status, headers, reply.body
    finally:
        request_id_var.reset(token)
        client_address.current.reset(address_token)
        if signal:
            _request_finished()


# Django's own receivers of the request signals (django.db, django.core.cache and
# django.core.handlers.base), by the id Django files a plain function's receiver under.
_DJANGOS = {
    signals.request_started: frozenset(map(id, (reset_queries, close_old_connections))),
    signals.request_finished: frozenset(
        map(id, (close_old_connections, close_caches, reset_urlconf))
    ),
}


def _only_djangos(signal: signals.Signal) -> bool:
    return all(lookup[0] in _DJANGOS[signal] for lookup, *_ in signal.receivers)


def _request_started() -> None:
    """What Django's request_started receivers do, for a request answered here; the signal
    itself once a receiver of anyone else's listens. Dispatching the two signals costs about
    six times as much (docs/MEASUREMENTS.md, "Where a send's CPU goes"): Django's receivers
    walk every database connection and cache of the thread through asgiref's locals, where
    a request answered here uses the default database's connection only, and no cache or
    urlconf of its own. Django's handler still sends both for the requests it answers."""
    if not _only_djangos(signals.request_started):
        signals.request_started.send(sender=__name__)
        return
    db = connections[DEFAULT_DB_ALIAS]
    db.queries_log.clear()
    db.close_if_unusable_or_obsolete()


def _request_finished() -> None:
    """What Django's request_finished receivers do for a request answered here (above): the
    connection past CONN_MAX_AGE, or left unusable by an error, is closed."""
    if not _only_djangos(signals.request_finished):
        signals.request_finished.send(sender=__name__)
        return
    connections[DEFAULT_DB_ALIAS].close_if_unusable_or_obsolete()


def status_line(status: int) -> str:
    return f"{status} {HTTPStatus(status).phrase}"
