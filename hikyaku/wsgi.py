"""WSGI entry point: the request/response server in production (see README, Topology).

The broker's JSON-RPC calls (`POST /`, `POST /a2a/`) are most of the traffic: they are
answered in front of Django's handler (hikyaku/lean.py), and so is the agent list
(`GET /api/v1/agents`). Other calls of agents — an agent's
own endpoint `POST /a2a/agents/<id>/`, and the broker's when lean.py leaves them to Django —
are authenticated by bearer credentials on every request, so they skip the middleware that
serves browsers — sessions, CSRF, messages, the auth user, allauth, APPEND_SLASH: a second
handler runs them with only what applies to them (request log, the client's address,
security headers, body limit, frame options). Everything else, the web UI and admin
included, gets the full stack of settings.MIDDLEWARE.
"""

import os
import re

from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler, get_str_from_wsgi
from django.core.wsgi import get_wsgi_application

from hikyaku import heap
from hikyaku.sqlite_backup import hold_server_lock

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")

# The middleware an agent's JSON-RPC call goes through, in settings.MIDDLEWARE's order.
API_MIDDLEWARE = (
    "hikyaku.request_log.request_log_middleware",
    "hikyaku.client_address.client_address_middleware",
    "django.middleware.security.SecurityMiddleware",
    "hikyaku.middleware.security_headers_middleware",
    "hikyaku.middleware.BodyLimitMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
)
JSONRPC_PATH = re.compile(r"^/(?:a2a/(?:agents/[^/]+/?)?)?$")


def api_handler() -> WSGIHandler:
    """A WSGIHandler whose middleware chain is API_MIDDLEWARE (Django builds the chain from
    settings.MIDDLEWARE when a handler is created). The benchmark runs its floor view on one
    too (bench/wsgi.py), so that the floor pays what an agent's call pays."""
    full = list(settings.MIDDLEWARE)
    missing = [m for m in API_MIDDLEWARE if m not in full]
    if missing:
        raise RuntimeError(f"API_MIDDLEWARE names middleware not in settings: {missing}")
    settings.MIDDLEWARE = [m for m in full if m in API_MIDDLEWARE]
    try:
        return WSGIHandler()
    finally:
        settings.MIDDLEWARE = full


def _content_length(environ) -> int | None:
    try:
        return int(environ["CONTENT_LENGTH"])
    except (KeyError, ValueError):
        return None


def _header_reader(environ):
    def header(name: str) -> str | None:
        return environ.get("HTTP_" + name.upper().replace("-", "_"))

    return header


def _application():
    site = get_wsgi_application()
    api = api_handler()
    from hikyaku import client_address, lean  # needs the apps loaded above

    def application(environ, start_response):
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD")
        length = _content_length(environ)
        if lean.applies(method, path, length, environ.get("HTTP_HOST")):
            body = environ["wsgi.input"].read(length) if length else b""
            status, headers, out = lean.answer(
                path=path,
                header=_header_reader(environ),
                body=body,
                address=client_address.from_meta(environ),
                method=method,
                query=get_str_from_wsgi(environ, "QUERY_STRING", ""),
            )
            start_response(lean.status_line(status), headers)
            return [out]
        if method == "POST" and JSONRPC_PATH.match(path):
            return api(environ, start_response)
        return site(environ, start_response)

    return application


application = _application()
# On the embedded SQLite default, `manage.py restore` refuses while this process runs.
hold_server_lock(settings.DATABASES["default"])
# Everything this process needs is loaded: keep it out of the collector's full passes.
heap.settle()
