"""The A2A JSON-RPC endpoint (`POST /` and `POST /a2a/`): one plain view and a method table.

Kept off DRF and as lean as possible: it is the hottest path of the broker."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, DataError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.csrf import csrf_exempt

from agents.auth import authenticate_agent
from hikyaku import parsers
from hikyaku.errors import (
    HikyakuError,
    InvalidRequest,
    RateLimited,
    ServiceUnavailable,
    Unauthenticated,
    decorate,
)

from ..parties import Sender
from ..stream.a2a import STREAMING_METHODS
from ..stream.handoff import call_refused
from . import errors
from .methods import METHODS, Call
from .wire import dialect_for

log = logging.getLogger(__name__)


def _json(body: dict[str, Any], status: int = 200) -> HttpResponse:
    return HttpResponse(
        json.dumps(body, ensure_ascii=False, separators=(",", ":")),
        content_type="application/json",
        status=status,
    )


class EnvelopeError(Exception):
    """A body that is not one valid JSON-RPC 2.0 request; `response` is the error to send."""

    def __init__(self, response: dict[str, Any]) -> None:
        super().__init__(response["error"]["message"])
        self.response = response


def parse_request(payload: Any) -> tuple[Any, str, dict[str, Any]]:
    """(id, method, params) of a decoded JSON-RPC 2.0 request body, or EnvelopeError."""
    if isinstance(payload, list):
        raise EnvelopeError(
            errors.response(
                None,
                errors.error_object(errors.INVALID_REQUEST, "Batch requests are not supported."),
            )
        )
    request_id = payload.get("id") if isinstance(payload, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | None):
        request_id = None
    method = payload.get("method") if isinstance(payload, dict) else None
    params = payload.get("params", {}) if isinstance(payload, dict) else None
    if (
        not isinstance(payload, dict)
        or payload.get("jsonrpc") != "2.0"
        or not isinstance(method, str)
        or not isinstance(params, dict)
        or ("id" in payload and request_id is None and payload["id"] is not None)
    ):
        raise EnvelopeError(
            errors.response(
                request_id,
                errors.error_object(
                    errors.INVALID_REQUEST,
                    "Invalid request: expected a JSON-RPC 2.0 object with a method and object params.",
                ),
            )
        )
    return request_id, method, params


@dataclass(frozen=True)
class Envelope:
    """A well-formed JSON-RPC 2.0 request."""

    request_id: Any
    method: str
    params: dict[str, Any]


def parse_envelope(request: HttpRequest) -> Envelope | HttpResponse:
    """The request's JSON-RPC envelope, or the error response to send instead (shared by the
    broker endpoint and the agents' own endpoints)."""
    try:
        payload = parsers.loads(request.body)
    except ValueError:
        return _json(
            errors.response(
                None,
                errors.error_object(errors.PARSE_ERROR, "Parse error: the body is not valid JSON."),
            )
        )
    try:
        request_id, method, params = parse_request(payload)
    except EnvelopeError as exc:
        return _json(exc.response)
    return Envelope(request_id=request_id, method=method, params=params)


def not_post(request: HttpRequest) -> HttpResponse:
    return _json(
        errors.response(
            None,
            errors.error_object(errors.INVALID_REQUEST, "Use POST with a JSON-RPC 2.0 body."),
        ),
        status=405,
    )


def error_reply(request_id: Any, exc: Exception, method: str) -> HttpResponse:
    """The JSON-RPC error response for a domain or database error raised by a method."""
    if isinstance(exc, Unauthenticated | RateLimited):
        response = _json(errors.response(request_id, errors.from_domain(exc)), status=exc.status)
        decorate(response, exc)
        return response
    if isinstance(exc, HikyakuError):
        return _json(errors.response(request_id, errors.from_domain(exc)))
    if isinstance(exc, DataError):
        # A value the database refuses (too long, out of range): the request's fault, so
        # never a 503 that invites the client to retry the same thing forever.
        log.warning("database refused a value during %s: %s", method, exc)
        error = InvalidRequest(
            "A value in the request cannot be stored (too long or out of range)."
        )
        return _json(errors.response(request_id, errors.from_domain(error)))
    log.warning("database unavailable during %s: %s", method, exc.__class__.__name__)
    return _json(errors.response(request_id, errors.from_domain(ServiceUnavailable())), status=503)


def result_reply(request_id: Any, result: dict[str, Any]) -> HttpResponse:
    return _json({"jsonrpc": "2.0", "id": request_id, "result": result})


@csrf_exempt
def jsonrpc(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        if request.path == "/" and request.method in ("GET", "HEAD"):
            return HttpResponseRedirect("/ui/")
        return not_post(request)
    envelope = parse_envelope(request)
    if isinstance(envelope, HttpResponse):
        return envelope
    request_id, method, params = envelope.request_id, envelope.method, envelope.params
    if method in STREAMING_METHODS:
        # Served by the stream processes, never in a web thread (messaging/stream/handoff.py).
        return call_refused(request_id, method)
    try:
        dialect = dialect_for(request.headers.get("A2A-Version"))
        identity = authenticate_agent(
            authorization=request.headers.get("Authorization"),
            agent_id=request.headers.get("X-Agent-Id"),
        )
        request.hikyaku_log = {
            "tenant_id": str(identity.tenant.id),
            "agent_id": str(identity.agent.id),
            "rpc_method": method,
        }
        handler = METHODS.get(method)
        if handler is None:
            return _json(
                errors.response(
                    request_id,
                    errors.error_object(errors.METHOD_NOT_FOUND, f"Method not found: {method}"),
                )
            )
        result = handler(
            Call(
                sender=Sender(tenant=identity.tenant, agent=identity.agent),
                dialect=dialect,
                params=params,
            )
        )
    except (HikyakuError, DatabaseError) as exc:
        return error_reply(request_id, exc, method)
    return result_reply(request_id, result)
