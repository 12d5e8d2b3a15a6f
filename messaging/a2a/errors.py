"""JSON-RPC error objects in the shape a2a-sdk servers produce and its clients map back to
exception types: A2A codes, and `data` = google.rpc.ErrorInfo details."""

from __future__ import annotations

from typing import Any

from a2a.utils import errors as a2a_errors
from a2a.utils.error_handlers import build_error_details

from hikyaku.errors import HikyakuError

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

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
    field = (error.details or {}).get("field") if isinstance(error.details, dict) else None
    return error_object(error.rpc_code, error.message, reason=error.rpc_reason, field=field)


def response(request_id: Any, error: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error}
