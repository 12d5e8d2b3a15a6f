"""The agents' hot path, served in front of Django's handler (docs/ARCHITECTURE.md, "The agents'
hot path").

`POST /` and `POST /a2a/` — SendMessage, ListTasks, GetTask, the lifecycle follow-ups,
CancelTask — are most of the broker's traffic. Under Django's handler each paid for the URL
resolver, the middleware chain and the request and response objects of a browser framework.
Here the WSGI application (hikyaku/wsgi.py) and the ASGI dispatcher (hikyaku/asgi.py) give the
body and headers straight to messaging.a2a.endpoint and write its answer with what the API
middleware chain would have added: the security headers, `X-Request-Id`, the request log line
and the request metrics (hikyaku/request_log.py). Django still answers what this does not:
other methods and paths, bodies without a Content-Length or over the limit, and settings this
does not reproduce (HTTPS redirects, HSTS).
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

from messaging.a2a import endpoint

from . import client_address, error_pages, middleware, request_log
from .logging import request_id_var

log = logging.getLogger("django.request")

# The broker's endpoint, by path, with the route name Django's resolver gives it.
ROUTES = {"/": "a2a-root", "/a2a/": "a2a"}


def applies(method: str, path: str, content_length: int | None) -> bool:
    """Whether this request is answered here (else Django answers it)."""
    return (
        method == "POST"
        and path in ROUTES
        and content_length is not None
        and content_length <= settings.HIKYAKU_MAX_BODY_BYTES
        and not settings.SECURE_SSL_REDIRECT
        and not settings.SECURE_HSTS_SECONDS
    )


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
        try:
            reply = endpoint.broker(header=header, body=body)
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
            method="POST",
            route=ROUTES[path],
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
