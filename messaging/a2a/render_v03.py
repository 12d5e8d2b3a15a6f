"""A2A 1.0 ProtoJSON rendered in the 0.3 dialect in plain Python: the fast path of
`wire.task_v03`, `wire.message_v03` and `wire.stream_response_v03` (docs/PROTOCOL.md §4.1).

Each function returns what a2a-sdk's compat conversions give for the same body (parsed into
protobuf, converted to the 0.3 pydantic model, dumped with `mode="json", by_alias=True,
exclude_none=True`) and raises `protojson.Unhandled` for a shape it does not reproduce, so
that the caller takes the sdk path. Besides the rules in messaging/a2a/protojson.py:

- keys come in the 0.3 models' field order (alphabetical), with `kind` always present;
- a message's metadata is left out when empty, a part's or an artifact's is kept;
- a data part whose value is not an object is wrapped as `{"value": …}` and marked with
  `metadata.data_part_compat`;
- timestamps are printed as protobuf prints them: `Z`, and 0, 3, 6 or 9 fractional digits.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from .protojson import Unhandled, base64_text, string, strings, struct, struct_value

_STATES = {
    "TASK_STATE_UNSPECIFIED": "unknown",
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
}
_FINAL = frozenset(("completed", "canceled", "failed", "rejected"))
_TASK = frozenset(("id", "contextId", "status", "artifacts", "history", "metadata"))
_STATUS = frozenset(("state", "message", "timestamp"))
_MESSAGE = frozenset(
    ("messageId", "contextId", "taskId", "role", "parts", "metadata", "extensions")
    + ("referenceTaskIds",)
)
_PART = frozenset(("text", "raw", "url", "data", "metadata", "filename", "mediaType"))
_ARTIFACT = frozenset(("artifactId", "name", "description", "parts", "metadata", "extensions"))
_STATUS_UPDATE = frozenset(("taskId", "contextId", "status", "metadata"))
_ARTIFACT_UPDATE = frozenset(("taskId", "contextId", "artifact", "append", "lastChunk", "metadata"))
_TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?Z"
)


def _fields(obj: Any, known: frozenset[str]) -> dict[str, Any]:
    """`obj` when it is an object of known fields, none of them null."""
    if type(obj) is not dict or not obj.keys() <= known or None in obj.values():
        raise Unhandled
    return obj


def _list(value: Any) -> list[Any]:
    if type(value) is not list:
        raise Unhandled
    return value


def task(body: Any) -> dict[str, Any]:
    """A 1.0 Task as a 0.3 Task."""
    body = _fields(body, _TASK)
    if "status" not in body:
        raise Unhandled
    out: dict[str, Any] = {}
    artifacts = _list(body.get("artifacts", []))
    if artifacts:
        out["artifacts"] = [artifact(a) for a in artifacts]
    out["contextId"] = string(body.get("contextId", ""))
    history = _list(body.get("history", []))
    if history:
        out["history"] = [message(m) for m in history]
    out["id"] = string(body.get("id", ""))
    out["kind"] = "task"
    if "metadata" in body:
        out["metadata"] = struct(body["metadata"])
    out["status"] = status(body["status"])
    return out


def status(body: Any) -> dict[str, Any]:
    body = _fields(body, _STATUS)
    out: dict[str, Any] = {}
    if "message" in body:
        out["message"] = message(body["message"])
    state = body.get("state", "TASK_STATE_UNSPECIFIED")
    if not isinstance(state, str) or state not in _STATES:
        raise Unhandled
    out["state"] = _STATES[state]
    if "timestamp" in body:
        out["timestamp"] = timestamp(body["timestamp"])
    return out


def timestamp(value: Any) -> str:
    """An RFC 3339 UTC timestamp as protobuf's Timestamp prints it back."""
    match = _TIMESTAMP.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise Unhandled
    year, month, day, hour, minute, second, fraction = match.groups()
    try:
        datetime(int(year), int(month), int(day), int(hour), int(minute), int(second))
    except ValueError:
        raise Unhandled from None
    head = value[:19]
    nanos = int(fraction.ljust(9, "0")) if fraction else 0
    if nanos == 0:
        return head + "Z"
    if nanos % 1_000_000 == 0:
        return f"{head}.{nanos // 1_000_000:03d}Z"
    if nanos % 1_000 == 0:
        return f"{head}.{nanos // 1_000:06d}Z"
    return f"{head}.{nanos:09d}Z"


def message(body: Any) -> dict[str, Any]:
    """A 1.0 Message as a 0.3 Message."""
    body = _fields(body, _MESSAGE)
    out: dict[str, Any] = {}
    context_id = string(body.get("contextId", ""))
    if context_id:
        out["contextId"] = context_id
    extensions = strings(body.get("extensions", []))
    if extensions:
        out["extensions"] = extensions
    out["kind"] = "message"
    out["messageId"] = string(body.get("messageId", ""))
    if "metadata" in body:
        metadata = struct(body["metadata"])
        if metadata:
            out["metadata"] = metadata
    out["parts"] = [part(p) for p in _list(body.get("parts", []))]
    references = strings(body.get("referenceTaskIds", []))
    if references:
        out["referenceTaskIds"] = references
    role = body.get("role", "ROLE_UNSPECIFIED")
    if role == "ROLE_USER":
        out["role"] = "user"
    elif role == "ROLE_AGENT" or role == "ROLE_UNSPECIFIED":
        out["role"] = "agent"
    else:
        raise Unhandled
    task_id = string(body.get("taskId", ""))
    if task_id:
        out["taskId"] = task_id
    return out


def part(body: Any) -> dict[str, Any]:
    """A 1.0 Part as a 0.3 TextPart, DataPart or FilePart."""
    body = _fields(body, _PART)
    metadata = struct(body["metadata"]) if "metadata" in body else None
    media_type = string(body.get("mediaType", ""))
    filename = string(body.get("filename", ""))
    out: dict[str, Any]
    if "text" in body:
        if "raw" in body or "url" in body or "data" in body:
            raise Unhandled
        out = {"kind": "text"}
        if metadata is not None:
            out["metadata"] = metadata
        out["text"] = string(body["text"])
        return out
    if "data" in body:
        if "raw" in body or "url" in body:
            raise Unhandled
        data = struct_value(body["data"])
        if type(data) is not dict:
            data = {"value": data}
            metadata = metadata or {}
            metadata["data_part_compat"] = True
        out = {"data": data, "kind": "data"}
        if metadata is not None:
            out["metadata"] = metadata
        return out
    if "raw" in body:
        if "url" in body:
            raise Unhandled
        file = {"bytes": base64_text(body["raw"])}
        if media_type:
            file["mimeType"] = media_type
        if filename:
            file["name"] = filename
    elif "url" in body:
        file = {}
        if media_type:
            file["mimeType"] = media_type
        if filename:
            file["name"] = filename
        file["uri"] = string(body["url"])
    else:
        raise Unhandled
    out = {"file": file, "kind": "file"}
    if metadata is not None:
        out["metadata"] = metadata
    return out


def artifact(body: Any) -> dict[str, Any]:
    """A 1.0 Artifact as a 0.3 Artifact."""
    body = _fields(body, _ARTIFACT)
    out: dict[str, Any] = {"artifactId": string(body.get("artifactId", ""))}
    description = string(body.get("description", ""))
    if description:
        out["description"] = description
    extensions = strings(body.get("extensions", []))
    if extensions:
        out["extensions"] = extensions
    if "metadata" in body:
        out["metadata"] = struct(body["metadata"])
    name = string(body.get("name", ""))
    if name:
        out["name"] = name
    out["parts"] = [part(p) for p in _list(body.get("parts", []))]
    return out


def stream_response(result: Any, request_id: Any) -> dict[str, Any]:
    """A 1.0 StreamResponse as the 0.3 JSON-RPC success response carrying it."""
    if type(result) is not dict or len(result) != 1:
        raise Unhandled
    out: dict[str, Any] = {}
    if request_id is not None:
        if type(request_id) is not str and type(request_id) is not int:
            raise Unhandled
        out["id"] = request_id
    out["jsonrpc"] = "2.0"
    ((which, body),) = result.items()
    if which == "statusUpdate":
        out["result"] = _status_update(body)
    elif which == "artifactUpdate":
        out["result"] = _artifact_update(body)
    elif which == "task":
        out["result"] = task(body)
    elif which == "message":
        out["result"] = message(body)
    else:
        raise Unhandled
    return out


def _status_update(body: Any) -> dict[str, Any]:
    body = _fields(body, _STATUS_UPDATE)
    if "status" not in body:
        raise Unhandled
    update_status = status(body["status"])
    out: dict[str, Any] = {
        "contextId": string(body.get("contextId", "")),
        "final": update_status["state"] in _FINAL,
        "kind": "status-update",
    }
    if "metadata" in body:
        out["metadata"] = struct(body["metadata"])
    out["status"] = update_status
    out["taskId"] = string(body.get("taskId", ""))
    return out


def _artifact_update(body: Any) -> dict[str, Any]:
    body = _fields(body, _ARTIFACT_UPDATE)
    append, last_chunk = body.get("append", False), body.get("lastChunk", False)
    if "artifact" not in body or type(append) is not bool or type(last_chunk) is not bool:
        raise Unhandled
    out: dict[str, Any] = {
        "append": append,
        "artifact": artifact(body["artifact"]),
        "contextId": string(body.get("contextId", "")),
        "kind": "artifact-update",
        "lastChunk": last_chunk,
    }
    if "metadata" in body:
        out["metadata"] = struct(body["metadata"])
    out["taskId"] = string(body.get("taskId", ""))
    return out
