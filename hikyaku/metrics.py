"""Prometheus metrics: the counters other modules bump, and the `/metrics` view.

Callers use the hook functions, one line each, a few microseconds each::

    from hikyaku import metrics

    metrics.sent("unicast", deliveries=1)        # after a send committed
    metrics.transition("complete")              # after a lifecycle step committed
    metrics.events_written(3)                   # counted when the transaction commits
    metrics.doorbell("rung")                    # or "failed", "received", "missed"
    metrics.webhook_attempt("delivered")        # see WEBHOOK_ATTEMPTS for the outcomes
    with metrics.stream_open("subscribe"):      # or "a2a", "ui", "mcp", "wait"
        ...                                     # the open stream (sync or async code)

The metric objects below are public too, for anything the hooks do not cover. Count work
that committed, so rolled-back work is never counted. Label values must come from small
fixed sets (never ids, paths or user input), because each distinct value is a series.

Several processes serve the broker (web workers, stream, Celery). Set `PROMETHEUS_MULTIPROC_DIR`
to an empty directory shared by all of them on one host and every process writes its samples
there; `/metrics` on any of them then reports the sum. The variable must be set before the
process starts, and the directory emptied whenever the whole group is (re)started
(`make cluster` does both; docker-compose gives each container a fresh tmpfs).

Access to `/metrics`: a request is served when it carries `Authorization: Bearer
<HIKYAKU_METRICS_TOKEN>`, or comes from an address in `HIKYAKU_METRICS_ALLOWED_IPS` (IPs or
CIDRs, matched against the socket peer, never a forwarded header), or comes from loopback
without passing through a proxy (no X-Forwarded-For / Forwarded / X-Real-IP) while
`HIKYAKU_METRICS_LOOPBACK` is on (the default). Anything else gets the ordinary JSON 404, so
the endpoint does not advertise itself.
"""

from __future__ import annotations

import glob
import hmac
import ipaddress
import json
import logging
import os
import threading
from collections.abc import Iterable
from functools import lru_cache

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from . import error_pages
from .errors import envelope

log = logging.getLogger(__name__)

# --- The metrics ---------------------------------------------------------------------------

REQUESTS = Counter(
    "hikyaku_http_requests",
    "HTTP requests answered, by resolved route name, method and status.",
    ["route", "method", "status"],
)
REQUEST_DURATION = Histogram(
    "hikyaku_http_request_duration_seconds",
    "Time from the request reaching Django to the response leaving it (for a stream: until "
    "its headers), by resolved route name.",
    ["route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
SEND_MESSAGES = Counter(
    "hikyaku_send_messages",
    "Messages accepted by SendMessage (any surface), by type: unicast or broadcast.",
    ["type"],
)
DELIVERIES = Counter(
    "hikyaku_deliveries",
    "Delivery tasks created: one per recipient of an accepted message.",
)
EVENTS_WRITTEN = Counter(
    "hikyaku_events_written",
    "Task events committed to the event log.",
)
TASK_TRANSITIONS = Counter(
    "hikyaku_task_transitions",
    "Task lifecycle events, by kind (created, ack, accept, complete, reject, fail, block, "
    "reply, comment, cancel).",
    ["kind"],
)
STREAM_CONNECTIONS = Gauge(
    "hikyaku_stream_connections",
    "Streams open now, by surface (subscribe, a2a, ui, mcp; wait: blocking sends waiting "
    "for their agent's answer).",
    ["surface"],
    multiprocess_mode="livesum",
)
DOORBELLS = Counter(
    "hikyaku_doorbells",
    "Doorbells (wake-ups after commit), by outcome: rung, failed (publish error; the stream's "
    "periodic check catches up), received, missed (found by the periodic check).",
    ["outcome"],
)
WEBHOOK_ATTEMPTS = Counter(
    "hikyaku_webhook_attempts",
    "Push-notification POST attempts, by outcome: delivered, http_error, timeout, "
    "connection_error (DNS failures included), refused (destination not allowed), gave_up "
    "(retries exhausted), dropped (no longer allowed to see the task), deferred (held back "
    "by a tenant's or a destination's concurrency cap).",
    ["outcome"],
)

# --- Hooks ---------------------------------------------------------------------------------

# labels() takes a lock and builds a tuple on every call; a plain dict read does not. Label
# values are bounded sets, so these caches are too. Racing threads may both create an entry;
# labels() returns the same child, so that is harmless.
_children: dict[tuple[int, str], object] = {}


def _child(metric, value: str):
    key = (id(metric), value)
    child = _children.get(key)
    if child is None:
        child = metric.labels(value)
        _children[key] = child
    return child


def sent(message_type: str, deliveries: int) -> None:
    """A message was accepted: `message_type` is unicast or broadcast; one delivery task per
    recipient."""
    _child(SEND_MESSAGES, message_type).inc()
    if deliveries:
        DELIVERIES.inc(deliveries)


def transition(kind: str) -> None:
    """A task lifecycle event committed (ack, accept, complete, reject, fail, block, ...)."""
    _child(TASK_TRANSITIONS, str(kind)).inc()


def events_written(count: int) -> None:
    """Events were written in the current transaction; they count once it commits.

    Callable inside or outside a transaction (outside, it counts at once).
    """
    transaction.on_commit(lambda: EVENTS_WRITTEN.inc(count))


def doorbell(outcome: str) -> None:
    _child(DOORBELLS, outcome).inc()


def webhook_attempt(outcome: str) -> None:
    _child(WEBHOOK_ATTEMPTS, outcome).inc()


def stream_open(surface: str):
    """Count a stream as open for the duration of a `with` block (works in async code too)."""
    return _child(STREAM_CONNECTIONS, surface).track_inprogress()


# --- The request hot path ------------------------------------------------------------------

# One (counter child, histogram child) pair per (route, method, status), cached as above.
_request_children: dict[tuple[str, str, int], tuple] = {}


def observe_request(route: str, method: str, status: int, seconds: float) -> None:
    """Count one answered request. `route` is the resolved URL name, never the raw path."""
    key = (route, method, status)
    children = _request_children.get(key)
    if children is None:
        children = (
            REQUESTS.labels(route=route, method=method, status=str(status)),
            REQUEST_DURATION.labels(route=route),
        )
        _request_children[key] = children
    children[0].inc()
    children[1].observe(seconds)


# --- Exposition ----------------------------------------------------------------------------


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def forget_dead_processes(path: str) -> None:
    """Drop the live-gauge files of processes that died without cleaning up.

    prometheus_client expects the process manager to call `mark_process_dead` for each exited
    worker; granian, uvicorn and Celery have no such hook, and a SIGKILLed stream process would
    otherwise count its streams as open forever. The directory is per host, so a pid check is
    enough.
    """
    for name in glob.glob(os.path.join(path, "gauge_live*_*.db")):
        try:
            pid = int(os.path.basename(name).rsplit("_", 1)[1][:-3])
        except ValueError:
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid, path)
        except PermissionError:
            pass  # alive, owned by another user


def render() -> bytes:
    """The exposition text of this process, or of every process sharing the multiproc dir."""
    path = multiprocess_dir()
    if path is None:
        return generate_latest(REGISTRY)
    forget_dead_processes(path)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)
    return generate_latest(registry)


@lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in entries if entry)


_PROXY_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def access_allowed(*, remote_addr: str, authorization: str, proxied: bool) -> bool:
    """The `/metrics` access rule (module docstring), shared by the view and the worker."""
    token = settings.HIKYAKU_METRICS_TOKEN
    if token and authorization[:7].lower() == "bearer ":
        if hmac.compare_digest(authorization[7:].strip().encode(), token.encode()):
            return True
    try:
        address = ipaddress.ip_address(remote_addr)
    except ValueError:
        return False
    if getattr(address, "ipv4_mapped", None) is not None:
        address = address.ipv4_mapped
    if any(
        address in network for network in _networks(tuple(settings.HIKYAKU_METRICS_ALLOWED_IPS))
    ):
        return True
    return settings.HIKYAKU_METRICS_LOOPBACK and address.is_loopback and not proxied


def _is_proxied(meta: dict) -> bool:
    return any(header in meta for header in _PROXY_HEADERS)


def metrics_view(request: HttpRequest) -> HttpResponse:
    allowed = access_allowed(
        remote_addr=request.META.get("REMOTE_ADDR") or "",
        authorization=request.META.get("HTTP_AUTHORIZATION", ""),
        proxied=_is_proxied(request.META),
    )
    if not allowed:
        # The same answer as any unknown URL (hikyaku.urls handler404): no existence oracle.
        return error_pages.not_found(request)
    return HttpResponse(render(), content_type=CONTENT_TYPE_LATEST)


# --- The Celery worker's exporter ------------------------------------------------------------


def start_worker_exporter(*, host: str, port: int):
    """Serve `/metrics` from a Celery worker's main process, under the same access rule.

    Workers have no HTTP server, but they make the webhook attempts. With the prefork pool the
    children count into PROMETHEUS_MULTIPROC_DIR, which this exporter reads; without that
    directory only the main process's own samples would show, so we say so.
    """
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client.exposition import ThreadingWSGIServer

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            """No line per scrape on stderr."""

    if multiprocess_dir() is None:
        log.warning(
            "worker metrics: PROMETHEUS_MULTIPROC_DIR is not set; samples counted in pool "
            "child processes will not show"
        )

    def app(environ: dict, start_response) -> Iterable[bytes]:
        allowed = access_allowed(
            remote_addr=environ.get("REMOTE_ADDR", ""),
            authorization=environ.get("HTTP_AUTHORIZATION", ""),
            proxied=_is_proxied(environ),
        )
        if not allowed or environ.get("PATH_INFO") not in ("/metrics", "/"):
            start_response("404 Not Found", [("Content-Type", "application/json")])
            return [json.dumps(envelope("NOT_FOUND", "Not found.")).encode()]
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
        return [render()]

    server = make_server(host, port, app, ThreadingWSGIServer, handler_class=QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics-exporter", daemon=True).start()
    log.info("worker metrics served on http://%s:%s/metrics", host, port)
    return server
