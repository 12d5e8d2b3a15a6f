"""Request-level guards that must answer before any view parses a body, and the security
headers every response carries."""

from collections.abc import Callable

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

from .errors import PayloadTooLarge, error_response


class BodyLimitMiddleware:
    """Refuse bodies over HIKYAKU_MAX_BODY_BYTES with 413: before reading them when
    Content-Length says so, and after buffering them when it is absent (chunked uploads),
    where Django would otherwise answer a bare 400 from deep inside `request.body`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > settings.HIKYAKU_MAX_BODY_BYTES:
            return error_response(
                PayloadTooLarge(
                    f"Request body is {length} bytes; the limit is "
                    f"{settings.HIKYAKU_MAX_BODY_BYTES}."
                )
            )
        if not length and request.method in ("POST", "PUT", "PATCH"):
            try:
                request.body  # noqa: B018  (buffers the body, checking its real size)
            except RequestDataTooBig:
                return error_response(
                    PayloadTooLarge(
                        f"Request body exceeds the limit of {settings.HIKYAKU_MAX_BODY_BYTES} bytes."
                    )
                )
        return self.get_response(request)


# Content-Security-Policy for every response. Pages load scripts and styles only from our own
# static files (no inline code), so script-src 'self' holds everywhere. The interactive API
# docs are Swagger UI from the installed package (no CDN); its page carries one inline <style>
# block and its components set inline styles, hence 'unsafe-inline' for styles there only.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'self'; "
    "frame-ancestors 'none'"
)
API_DOCS_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; "
    "base-uri 'self'; frame-ancestors 'none'"
)


PERMISSIONS_POLICY = "camera=(), microphone=(), geolocation=(), payment=()"


@sync_and_async_middleware
def security_headers_middleware(get_response):
    """Set CSP (with frame-ancestors 'none'), a referrer policy and a permissions policy.

    Sync and async capable, so it adds no thread hop under ASGI (docs/MEASUREMENTS.md). A view
    that sets its own Content-Security-Policy keeps it.
    """

    def add_headers(request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if "Content-Security-Policy" not in response:
            docs = request.path.startswith("/api/docs")
            response["Content-Security-Policy"] = (
                API_DOCS_CONTENT_SECURITY_POLICY if docs else CONTENT_SECURITY_POLICY
            )
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        return response

    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponse:
            return add_headers(request, await get_response(request))

        return middleware

    def middleware(request: HttpRequest) -> HttpResponse:  # type: ignore[misc]
        return add_headers(request, get_response(request))

    return middleware
