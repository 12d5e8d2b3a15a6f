"""JSON-RPC 2.0 for every A2A endpoint, written once (docs/PROTOCOL.md §4.2).

Both endpoints (the broker's `/a2a/` and `/`, an agent's `/a2a/agents/<id>/`) and both tiers
(the WSGI views of messaging/a2a/views.py, the ASGI stream handlers of messaging/stream and
the dispatcher in hikyaku/asgi.py) go through this module for:

- the envelope: `parse` reads a request body with the one strict JSON parser
  (hikyaku.parsers) and checks the JSON-RPC 2.0 object, answering -32700 or -32600;
- the method names: every method by its A2A 1.0 name and its 0.3 (slash) alias, and which
  of them answer with a stream;
- the errors: domain and database errors become error objects in the shape a2a-sdk servers
  write and its clients map back to exception types (the A2A codes, `data` =
  google.rpc.ErrorInfo details), with the HTTP status docs/PROTOCOL.md §4.2 gives them.

What is left to each tier is writing the answer (a Django response, or raw ASGI messages).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from a2a.utils import errors as a2a_errors
from a2a.utils.error_handlers import build_error_details
from django.db import DatabaseError, DataError

from hikyaku import parsers
from hikyaku.errors import HikyakuError, InvalidRequest, ServiceUnavailable, error_headers

from ..parties import Sender
from .wire import Dialect

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# Method names ------------------------------------------------------------------------------

# Every method either endpoint serves, by its A2A 1.0 name, with its 0.3 name.
V03_NAMES = {
    "SendMessage": "message/send",
    "SendStreamingMessage": "message/stream",
    "GetTask": "tasks/get",
    "ListTasks": "tasks/list",
    "CancelTask": "tasks/cancel",
    "SubscribeToTask": "tasks/resubscribe",
    "CreateTaskPushNotificationConfig": "tasks/pushNotificationConfig/set",
    "GetTaskPushNotificationConfig": "tasks/pushNotificationConfig/get",
    "ListTaskPushNotificationConfigs": "tasks/pushNotificationConfig/list",
    "DeleteTaskPushNotificationConfig": "tasks/pushNotificationConfig/delete",
    "GetExtendedAgentCard": "agent/getAuthenticatedExtendedCard",
}
_BY_ANY_NAME = {**{name: name for name in V03_NAMES}, **{v: k for k, v in V03_NAMES.items()}}
# The methods that answer with a stream (messaging/stream/a2a.py, messaging/stream/peer.py).
STREAMING = frozenset({"SendStreamingMessage", "SubscribeToTask"})

Handler = TypeVar("Handler")


def name_of(method: str) -> str | None:
    """The A2A 1.0 name of a method given by either name; None for an unknown one."""
    return _BY_ANY_NAME.get(method)


def is_streaming(method: str) -> bool:
    return name_of(method) in STREAMING


def method_table(handlers: Mapping[str, Handler]) -> dict[str, Handler]:
    """A method table answering both names of each method: `handlers` is keyed by the A2A 1.0
    name (a KeyError for a name not in V03_NAMES)."""
    table: dict[str, Handler] = {}
    for name, handler in handlers.items():
        table[name] = table[V03_NAMES[name]] = handler
    return table


@dataclass(frozen=True)
class Call:
    """One call of a broker endpoint method: who calls, in which dialect, with what params."""

    sender: Sender
    dialect: Dialect
    params: dict[str, Any]


# The envelope ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Envelope:
    """A well-formed JSON-RPC 2.0 request."""

    request_id: Any
    method: str
    params: dict[str, Any]

    @property
    def streaming(self) -> bool:
        return is_streaming(self.method)


class EnvelopeError(Exception):
    """A body that is not one valid JSON-RPC 2.0 request; `response` is the error to send
    (HTTP 200)."""

    def __init__(self, response: dict[str, Any]) -> None:
        super().__init__(response["error"]["message"])
        self.response = response


def parse(body: bytes) -> Envelope:
    """The JSON-RPC request in a body, or EnvelopeError: -32700 for anything that is not
    strict JSON (hikyaku.parsers), -32600 for JSON that is not one request object."""
    try:
        payload = parsers.loads(body)
    except ValueError:
        raise EnvelopeError(
            response(None, error_object(PARSE_ERROR, "Parse error: the body is not valid JSON."))
        ) from None
    return envelope_of(payload)


def envelope_of(payload: Any) -> Envelope:
    """The JSON-RPC 2.0 request of a decoded body, or EnvelopeError (-32600)."""
    if isinstance(payload, list):
        raise EnvelopeError(
            response(None, error_object(INVALID_REQUEST, "Batch requests are not supported."))
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
            response(
                request_id,
                error_object(
                    INVALID_REQUEST,
                    "Invalid request: expected a JSON-RPC 2.0 object with a method and object params.",
                ),
            )
        )
    return Envelope(request_id=request_id, method=method, params=params)


# Answers -----------------------------------------------------------------------------------

_BY_CODE: dict[int, type[a2a_errors.A2AError]] = {
    code: cls for cls, code in a2a_errors.JSON_RPC_ERROR_CODE_MAP.items()
}


def error_object(
    code: int, message: str, *, reason: str | None = None, field: str | None = None
) -> dict[str, Any]:
    error_cls = _BY_CODE.get(code)
    body: dict[str, Any] = {"code": code, "message": message}
    if error_cls is not None:
        body["data"] = build_error_details(error_cls(message, {"field": field} if field else None))
    elif reason:
        body["data"] = [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": "a2a-protocol.org",
                "metadata": {},
            }
        ]
    return body


def from_domain(error: HikyakuError) -> dict[str, Any]:
    """The error object of a domain error."""
    field = (error.details or {}).get("field") if isinstance(error.details, dict) else None
    return error_object(error.rpc_code, error.message, reason=error.rpc_reason, field=field)


def response(request_id: Any, error: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC error response."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def result(request_id: Any, value: Any) -> dict[str, Any]:
    """A JSON-RPC success response."""
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def method_not_found(request_id: Any, method: str) -> dict[str, Any]:
    return response(request_id, error_object(METHOD_NOT_FOUND, f"Method not found: {method}"))


@dataclass(frozen=True)
class Answer:
    """What to send for a request that failed: HTTP status, JSON body and headers."""

    status: int
    body: dict[str, Any]
    headers: list[tuple[str, str]]


def error_answer(request_id: Any, exc: HikyakuError | DatabaseError, *, method: str) -> Answer:
    """The answer to a domain or database error raised while serving `method`."""
    if isinstance(exc, HikyakuError):
        body = response(request_id, from_domain(exc))
        return Answer(exc.rpc_status, body, error_headers(exc))
    if isinstance(exc, DataError):
        # A value the database refuses (too long, out of range): the request's fault, so
        # never a 503 that invites the client to retry the same thing forever.
        log.warning("database refused a value during %s: %s", method, exc)
        error = InvalidRequest(
            "A value in the request cannot be stored (too long or out of range)."
        )
        return Answer(200, response(request_id, from_domain(error)), [])
    log.warning("database unavailable during %s: %s", method, exc.__class__.__name__)
    error = ServiceUnavailable()
    return Answer(503, response(request_id, from_domain(error)), error_headers(error))
