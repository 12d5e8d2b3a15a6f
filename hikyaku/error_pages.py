"""What a 404, 405 or 500 looks like on each surface, with DEBUG off (README, Configuration).

Machines get their protocol's error shape: the JSON-RPC error object under /a2a/, the REST
envelope under /api/ and for any client that does not ask for HTML (`/metrics` answers
strangers with exactly this 404, so it cannot be told from an unknown URL). People get the
project's own pages: under /ui/, /accounts/ and /admin/, and wherever a browser asks.
"""

from __future__ import annotations

from collections.abc import Callable

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader
from django.utils.decorators import sync_and_async_middleware

from .errors import envelope

PAGE_PREFIXES = ("/ui/", "/accounts/", "/admin/")
MESSAGES = {
    404: ("NOT_FOUND", "Not found."),
    405: ("METHOD_NOT_ALLOWED", "Method not allowed."),
    500: ("INTERNAL", "Internal server error."),
}
# JSON-RPC has no "no such endpoint" or "wrong HTTP method": both are invalid requests.
RPC_CODES = {404: -32600, 405: -32600, 500: -32603}


def surface(path: str, accept: str) -> str:
    """Whose error shape a request gets: "rpc", "rest" or "page"."""
    if path.startswith("/a2a/"):
        return "rpc"
    if path.startswith("/api/"):
        return "rest"
    if path.startswith(PAGE_PREFIXES) or "text/html" in accept:
        return "page"
    return "rest"


def _surface(request: HttpRequest) -> str:
    return surface(request.path, request.headers.get("Accept", ""))


def machine_body(path: str, status: int) -> dict:
    """The JSON body of a bare 404, 405 or 500 at `path` (for machines: no page)."""
    code, message = MESSAGES[status]
    if surface(path, "") == "rpc":
        return {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": RPC_CODES[status], "message": message},
        }
    return envelope(code, message)


def machine_error(request: HttpRequest, status: int) -> JsonResponse:
    return JsonResponse(machine_body(request.path, status), status=status)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _surface(request) == "page":
        return render(request, "404.html", status=404)
    return machine_error(request, 404)


def server_error(request: HttpRequest) -> HttpResponse:
    if _surface(request) == "page":
        # No context processors: whatever failed may be what they would touch.
        return HttpResponse(loader.get_template("500.html").render(), status=500)
    return machine_error(request, 500)


@sync_and_async_middleware
def machine_errors_middleware(get_response: Callable):
    """Give a bare 404/405/500 under /api/ or /a2a/ (Django's own, e.g. a view's
    require_POST) its surface's JSON body; JSON answers pass untouched."""

    def fix(request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if (
            response.status_code in MESSAGES
            and request.path.startswith(("/api/", "/a2a/"))
            and not response.get("Content-Type", "").startswith("application/json")
            and not getattr(response, "streaming", False)
        ):
            fixed = machine_error(request, response.status_code)
            if response.has_header("Allow"):
                fixed["Allow"] = response["Allow"]
            return fixed
        return response

    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponse:
            return fix(request, await get_response(request))

        return middleware

    def middleware(request: HttpRequest) -> HttpResponse:  # type: ignore[misc]
        return fix(request, get_response(request))

    return middleware
