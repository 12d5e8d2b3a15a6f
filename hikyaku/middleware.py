"""Request-level guards that must answer before any view parses a body."""

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse

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
