"""The domain error hierarchy, with stable codes, and its translation to the REST envelope.

Services raise these; each edge translates them: REST into
`{"error": {"code", "message", "details"?}}` (`envelope`, the one function that writes it),
JSON-RPC into an error object (messaging/a2a/jsonrpc.py), forms into form errors. Nothing
outside this hierarchy should ever reach a client.
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response

log = logging.getLogger(__name__)


def envelope(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The REST error envelope (docs/PROTOCOL.md §3). Every REST-shaped error body, whichever
    server or handler writes it, is built here."""
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = details
    return {"error": body}


class HikyakuError(Exception):
    code = "INTERNAL"
    status = 500
    # JSON-RPC code and A2A ErrorInfo reason used by the A2A surface, and the HTTP status of
    # its JSON-RPC answer: 200, but where docs/PROTOCOL.md §4.2 names another (401, 429).
    rpc_code = -32603
    rpc_reason = "INTERNAL_ERROR"
    rpc_status = 200

    def __init__(self, message: str = "", *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message or self.default_message())
        self.message = message or self.default_message()
        self.details = details

    @classmethod
    def default_message(cls) -> str:
        return cls.__doc__.strip().splitlines()[0] if cls.__doc__ else cls.code

    def envelope(self) -> dict[str, Any]:
        return envelope(self.code, self.message, self.details)


class Unauthenticated(HikyakuError):
    """Missing or invalid credentials."""

    code, status = "UNAUTHORIZED", 401
    rpc_code, rpc_reason, rpc_status = -32000, "UNAUTHENTICATED", 401


class Forbidden(HikyakuError):
    """Not allowed."""

    code, status = "FORBIDDEN", 403
    rpc_code, rpc_reason = -32600, "PERMISSION_DENIED"


class NotFound(HikyakuError):
    """Not found."""

    code, status = "NOT_FOUND", 404
    rpc_code, rpc_reason = -32001, "TASK_NOT_FOUND"


class AgentNotFound(NotFound):
    """Agent not found."""

    code = "AGENT_NOT_FOUND"


class TaskNotFound(NotFound):
    """Task not found."""


class InvalidRequest(HikyakuError):
    """Invalid request."""

    code, status = "INVALID_REQUEST", 400
    rpc_code, rpc_reason = -32602, "INVALID_PARAMS"


class DestinationNotFound(InvalidRequest):
    """Destination agent not found."""


class TaskNotCancelable(HikyakuError):
    """Task cannot be canceled."""

    code, status = "TASK_NOT_CANCELABLE", 409
    rpc_code, rpc_reason = -32002, "TASK_NOT_CANCELABLE"


class UnsupportedOperation(HikyakuError):
    """This operation is not supported in the task's current state."""

    code, status = "UNSUPPORTED_OPERATION", 409
    rpc_code, rpc_reason = -32004, "UNSUPPORTED_OPERATION"


class RateLimited(HikyakuError):
    """Rate limit exceeded; slow down."""

    code, status = "RATE_LIMITED", 429
    rpc_code, rpc_reason, rpc_status = -32029, "RATE_LIMITED", 429


class MethodNotAllowed(HikyakuError):
    """Method not allowed."""

    code, status = "METHOD_NOT_ALLOWED", 405
    rpc_code, rpc_reason = -32600, "INVALID_REQUEST"


class PayloadTooLarge(HikyakuError):
    """Request body too large."""

    code, status = "PAYLOAD_TOO_LARGE", 413
    rpc_code, rpc_reason = -32600, "PAYLOAD_TOO_LARGE"


class ServiceUnavailable(HikyakuError):
    """The service is temporarily unavailable; retry shortly."""

    code, status = "UNAVAILABLE", 503
    rpc_code, rpc_reason = -32603, "UNAVAILABLE"


def error_response(error: HikyakuError) -> JsonResponse:
    """A plain Django response carrying the REST error envelope."""
    response = JsonResponse(error.envelope(), status=error.status)
    decorate(response, error)
    return response


# Seconds a client waits before retrying after a 503: a database restart or failover is
# usually over within seconds (docs/PROTOCOL.md §3).
UNAVAILABLE_RETRY_AFTER = 1


def error_headers(error: HikyakuError) -> list[tuple[str, str]]:
    """The headers an error implies, on any surface and any server."""
    if isinstance(error, Unauthenticated):
        return [("WWW-Authenticate", 'Bearer realm="hikyaku"')]
    if isinstance(error, RateLimited) and error.details:
        return [("Retry-After", str(error.details.get("retry_after", 60)))]
    if isinstance(error, ServiceUnavailable):
        return [("Retry-After", str(UNAVAILABLE_RETRY_AFTER))]
    return []


def decorate(response, error: HikyakuError) -> None:
    """Set the headers an error implies on a Django (or DRF) response."""
    for name, value in error_headers(error):
        response[name] = value


def _validation_details(detail: Any) -> dict[str, Any]:
    if isinstance(detail, dict):
        return {
            field: [str(m) for m in msgs] if isinstance(msgs, list) else _validation_details(msgs)
            for field, msgs in detail.items()
        }
    if isinstance(detail, list):
        return {"non_field_errors": [str(m) for m in detail]}
    return {"non_field_errors": [str(detail)]}


def rest_exception_handler(exc: Exception, context: dict) -> Response | None:
    """DRF exception handler: every error leaves in the envelope of docs/PROTOCOL.md §3."""
    error = rest_error(exc)
    if error is None:
        return None
    response = Response(error.envelope(), status=error.status)
    decorate(response, error)
    return response


def rest_error(exc: Exception) -> HikyakuError | None:
    """What a REST call answers for `exc` (None: an error of ours, a 500) — for the DRF views
    (`rest_exception_handler`) and the registry reads answered in front of them."""
    from django.db import DatabaseError, DataError
    from django.http import Http404

    error: HikyakuError
    if isinstance(exc, HikyakuError):
        error = exc
    elif isinstance(exc, drf_exceptions.ValidationError):
        error = InvalidRequest("Invalid request.", details=_validation_details(exc.detail))
    elif isinstance(exc, drf_exceptions.ParseError):
        error = InvalidRequest(f"Malformed request body: {exc.detail}")
    elif isinstance(exc, drf_exceptions.UnsupportedMediaType):
        error = InvalidRequest(str(exc.detail))
    elif isinstance(exc, drf_exceptions.NotAuthenticated | drf_exceptions.AuthenticationFailed):
        error = Unauthenticated(str(exc.detail))
    elif isinstance(exc, drf_exceptions.PermissionDenied):
        error = Forbidden(str(exc.detail))
    elif isinstance(exc, Http404 | drf_exceptions.NotFound):
        error = NotFound()
    elif isinstance(exc, drf_exceptions.MethodNotAllowed):
        error = MethodNotAllowed(str(exc.detail))
    elif isinstance(exc, drf_exceptions.Throttled):
        error = RateLimited()
    elif isinstance(exc, DataError):
        # The database refused a value of the request (too long, out of range): a 400, never
        # a 503 that invites the client to retry the same request forever.
        log.warning("database refused a value: %s", exc)
        error = InvalidRequest(
            "A value in the request cannot be stored (too long or out of range)."
        )
    elif isinstance(exc, DatabaseError):
        log.warning("database unavailable: %s", exc.__class__.__name__)
        error = ServiceUnavailable()
    else:
        return None
    return error
