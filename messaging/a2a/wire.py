"""The two wire dialects of the JSON-RPC surface (docs/PROTOCOL.md §4.1).

Internally every message, history entry and artifact is A2A 1.0 ProtoJSON. Requests are parsed
with a2a-sdk 1.3 types (1.0: the protobuf types; 0.3: the compat pydantic types converted to
1.0 with `a2a.compat.v0_3.conversions`), and tasks are rendered back in the request's dialect.
The common, well-formed shapes take a plain-Python path that gives the same result without
building protobuf or pydantic objects (messaging/a2a/protojson.py, render_v03.py); anything
else, and every error, goes through a2a-sdk as described.
"""

from __future__ import annotations

import base64
import binascii
import enum
from datetime import datetime
from typing import Any

from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from a2a.types import Message, StreamResponse
from a2a.types import Task as TaskProto
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from pydantic import ValidationError

from hikyaku.errors import HikyakuError, InvalidRequest

from .. import lifecycle
from ..models import Task, TaskEvent, TaskState
from . import protojson, render_v03
from .protojson import Unhandled

MAX_MESSAGE_ID_LENGTH = Task._meta.get_field("message_id").max_length


class VersionNotSupported(HikyakuError):
    """A2A protocol version not supported."""

    code, status = "VERSION_NOT_SUPPORTED", 400
    rpc_code, rpc_reason = -32009, "VERSION_NOT_SUPPORTED"


class Dialect(enum.Enum):
    V1_0 = "1.0"
    V0_3 = "0.3"


def dialect_for(version_header: str | None) -> Dialect:
    """`A2A-Version: 1.x` → 1.0; no header → the 0.3 compat dialect; anything else → -32009."""
    if version_header is None or version_header.strip() == "":
        return Dialect.V0_3
    version = version_header.strip()
    major = version.split(".", 1)[0]
    if major == "1":
        return Dialect.V1_0
    if version in ("0.3", "0.3.0"):
        return Dialect.V0_3
    raise VersionNotSupported(f"A2A version {version!r} is not supported; use 1.0 (or 0.3).")


STATE_V1 = {
    TaskState.INPUT_REQUIRED: "TASK_STATE_INPUT_REQUIRED",
    TaskState.WORKING: "TASK_STATE_WORKING",
    TaskState.COMPLETED: "TASK_STATE_COMPLETED",
    TaskState.REJECTED: "TASK_STATE_REJECTED",
    TaskState.FAILED: "TASK_STATE_FAILED",
    TaskState.CANCELED: "TASK_STATE_CANCELED",
}
STATE_V03 = {state: state.value.replace("_", "-") for state in TaskState}
_STATE_NAMES = {
    **{name: state for state, name in STATE_V1.items()},
    **{name: state for state, name in STATE_V03.items()},
    **{state.value: state for state in TaskState},
    "TASK_STATE_CANCELLED": TaskState.CANCELED,
    "cancelled": TaskState.CANCELED,
}


def parse_states(value: Any) -> list[str]:
    """A status filter in either dialect's spelling: one state or a list of them."""
    return parse_status_filter(value)[0]


def parse_status_filter(value: Any) -> tuple[list[str], str | None]:
    """A status filter: one state or a list, in either dialect's spelling or in the human
    vocabulary (messaging/lifecycle.py). Returns the stored states and, for `unread` or
    `blocked`, whose turn it must be."""
    values = value if isinstance(value, list) else [value]
    states: list[str] = []
    awaiting: set[str | None] = set()
    for item in values:
        human = lifecycle.BY_NAME.get(item.strip().lower()) if isinstance(item, str) else None
        state = human.state if human else _STATE_NAMES.get(item) if isinstance(item, str) else None
        if state is None:
            names = ", ".join(lifecycle.BY_NAME)
            raise InvalidRequest(
                f"Unknown task state: {item!r} (use one of {names}, or an A2A state name).",
                details={"field": "status"},
            )
        states.append(str(state))
        awaiting.add(human.turn if human else None)
    if awaiting - {None} and len(values) > 1:
        raise InvalidRequest(
            "unread and blocked filter on their own: list other states without them.",
            details={"field": "status"},
        )
    return states, awaiting.pop() if len(values) == 1 else None


def parse_message(
    raw: Any, dialect: Dialect, *, ignore_unknown_fields: bool = False
) -> dict[str, Any]:
    """Validate `params.message` and return it as A2A 1.0 ProtoJSON. Unknown fields are an
    error unless `ignore_unknown_fields` (the per-agent endpoints follow A2A's
    forward-compatibility rule and drop them)."""
    if not isinstance(raw, dict):
        raise InvalidRequest("params.message must be an object.", details={"field": "message"})
    check_file_bytes(raw, dialect)
    try:
        if dialect is Dialect.V1_0:
            message = protojson.message_v1(raw, ignore_unknown_fields=ignore_unknown_fields)
        else:
            message = protojson.message_v03(raw)
    except Unhandled:
        pass
    else:
        if 0 < len(message.get("messageId", "")) <= MAX_MESSAGE_ID_LENGTH:
            return message
    return parse_message_sdk(raw, dialect, ignore_unknown_fields=ignore_unknown_fields)


def parse_message_sdk(
    raw: dict[str, Any], dialect: Dialect, *, ignore_unknown_fields: bool
) -> dict[str, Any]:
    """`parse_message` through a2a-sdk's types: every shape, and every error's wording."""
    try:
        if dialect is Dialect.V1_0:
            proto = ParseDict(raw, Message(), ignore_unknown_fields=ignore_unknown_fields)
        else:
            proto = conversions.to_core_message(types_v03.Message.model_validate(raw))
    except ParseError as exc:
        raise InvalidRequest(f"Invalid message: {exc}", details={"field": "message"}) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in ("message", *first["loc"]))
        raise InvalidRequest(f"Invalid {field}: {first['msg']}", details={"field": field}) from None
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"Invalid message: {exc}", details={"field": "message"}) from None
    except OverflowError:
        # Protobuf's Struct (metadata, data parts) holds every number as a double.
        raise InvalidRequest(
            "Invalid message: a number is too large (metadata and data hold doubles).",
            details={"field": "message"},
        ) from None
    if not proto.message_id:
        raise InvalidRequest(
            "message.messageId is required.", details={"field": "message.messageId"}
        )
    if len(proto.message_id) > MAX_MESSAGE_ID_LENGTH:
        raise InvalidRequest(
            f"message.messageId is longer than {MAX_MESSAGE_ID_LENGTH} characters.",
            details={"field": "message.messageId"},
        )
    message = MessageToDict(proto)
    message.setdefault("role", "ROLE_USER")
    for index, part in enumerate(message.get("parts") or []):
        if not ({"text", "data", "url", "raw"} & part.keys()):
            raise InvalidRequest(
                f"message.parts[{index}] needs text, data, url or raw content.",
                details={"field": f"message.parts[{index}]"},
            )
        # Keep JSON numbers exactly as sent (protobuf's Struct would turn 1 into 1.0).
        if "data" in part and dialect is Dialect.V1_0:
            part["data"] = raw["parts"][index].get("data", part["data"])
    metadata = message.get("metadata")
    if metadata is not None and dialect is Dialect.V1_0 and isinstance(raw.get("metadata"), dict):
        message["metadata"] = raw["metadata"]
    return message


def check_file_bytes(raw: dict[str, Any], dialect: Dialect) -> None:
    """Refuse file contents that are not base64. Both dialects' parsers decode leniently —
    dropping what is not base64, so `"%%%"` became an empty file — and a file that is not
    what was sent must be an error, never a silent loss. 1.0 (protobuf's JSON mapping) takes
    either alphabet, padding optional; 0.3 the standard alphabet, padded. Line breaks (MIME
    encoders insert them) are ignored in both."""
    parts = raw.get("parts")
    if not isinstance(parts, list):
        return
    for index, part in enumerate(parts):
        if not isinstance(part, dict):
            continue
        if dialect is Dialect.V1_0:
            value, field = part.get("raw"), f"message.parts[{index}].raw"
        else:
            file = part.get("file")
            value = file.get("bytes") if isinstance(file, dict) else None
            field = f"message.parts[{index}].file.bytes"
        if isinstance(value, str) and not _is_base64(value, dialect):
            raise InvalidRequest(
                f"{field} is not base64: a file's content must be base64-encoded"
                + (" (standard alphabet, padded)." if dialect is Dialect.V0_3 else "."),
                details={"field": field},
            )


def _is_base64(value: str, dialect: Dialect) -> bool:
    compact = value.replace("\r", "").replace("\n", "")
    if dialect is Dialect.V1_0:
        compact = compact.replace("-", "+").replace("_", "/")
        compact += "=" * (-len(compact) % 4)
    try:
        base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _timestamp(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def task_v1(
    task: Task, *, history_length: int | None = None, include_artifacts: bool = True
) -> dict[str, Any]:
    """The task as an A2A 1.0 ProtoJSON Task."""
    status: dict[str, Any] = {
        "state": STATE_V1[task.state],
        "timestamp": _timestamp(task.status_at),
    }
    metadata = dict(task.metadata)
    status_message = metadata.pop("statusMessage", None)
    if status_message:
        status["message"] = status_message
    if task.awaiting:
        metadata["awaiting"] = task.awaiting
    body: dict[str, Any] = {"id": str(task.id), "contextId": task.context_id, "status": status}
    if include_artifacts and task.artifacts:
        body["artifacts"] = task.artifacts
    history = task.history
    if history_length is not None:
        history = history[-history_length:] if history_length > 0 else []
    if history:
        body["history"] = [
            {**m, "taskId": str(task.id), "contextId": task.context_id} for m in history
        ]
    body["metadata"] = metadata
    return body


def task_v03(task_body_v1: dict[str, Any]) -> dict[str, Any]:
    """A 1.0 task body in the 0.3 dialect, as a2a-sdk's compat conversions render it."""
    try:
        return render_v03.task(task_body_v1)
    except Unhandled:
        return _task_v03_sdk(task_body_v1)


def _task_v03_sdk(task_body_v1: dict[str, Any]) -> dict[str, Any]:
    proto = ParseDict(task_body_v1, TaskProto())
    return conversions.to_compat_task(proto).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


def message_v03(message: dict[str, Any]) -> dict[str, Any]:
    """A 1.0 message in the 0.3 dialect, as a2a-sdk's compat conversions render it."""
    try:
        return render_v03.message(message)
    except Unhandled:
        return _message_v03_sdk(message)


def _message_v03_sdk(message: dict[str, Any]) -> dict[str, Any]:
    return conversions.to_compat_message(ParseDict(message, Message())).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


def stream_response_v03(result: dict[str, Any], request_id: Any) -> dict[str, Any]:
    """A 1.0 StreamResponse as the 0.3 JSON-RPC response a stream sends, as a2a-sdk's compat
    conversions render it, but for the update's metadata, kept as it is (integers stay
    integers: `eventId`)."""
    try:
        compat = render_v03.stream_response(result, request_id)
    except Unhandled:
        compat = _stream_response_v03_sdk(result, request_id)
    body = result.get("statusUpdate") or result.get("artifactUpdate")
    if body and "metadata" in body:
        compat["result"]["metadata"] = body["metadata"]
    return compat


def _stream_response_v03_sdk(result: dict[str, Any], request_id: Any) -> dict[str, Any]:
    return conversions.to_compat_stream_response(
        ParseDict(result, StreamResponse()), request_id
    ).model_dump(mode="json", by_alias=True, exclude_none=True)


def render_task(task: Task, dialect: Dialect, **options: Any) -> dict[str, Any]:
    body = task_v1(task, **options)
    return body if dialect is Dialect.V1_0 else task_v03(body)


def event_message(row: TaskEvent, task: Task) -> dict[str, Any] | None:
    """The message an event carried (a follow-up in the task's history), if any."""
    message_id = (row.payload or {}).get("messageId")
    if message_id:
        for message in reversed(task.history):
            if message.get("messageId") == message_id:
                return {**message, "taskId": str(task.pk), "contextId": task.context_id}
    parts = (row.payload or {}).get("parts")
    if not parts:
        return None
    by_recipient = row.actor_id is not None and row.actor_id == task.recipient_id
    return {
        "messageId": f"event-{row.id}",
        "role": "ROLE_AGENT" if by_recipient else "ROLE_USER",
        "parts": parts,
        "taskId": str(task.pk),
        "contextId": task.context_id,
    }


def update_results(row: TaskEvent, task: Task) -> list[dict[str, Any]]:
    """The A2A 1.0 StreamResponses (as ProtoJSON dicts) for one event of a task."""
    results: list[dict[str, Any]] = []
    ids = {"taskId": str(task.pk), "contextId": task.context_id}
    parts = (row.payload or {}).get("parts")
    if row.kind == TaskEvent.Kind.COMPLETE and parts:
        artifact = next(
            (a for a in reversed(task.artifacts) if a.get("name") == "result"),
            {"artifactId": f"result-{row.id}", "name": "result", "parts": parts},
        )
        results.append({"artifactUpdate": {**ids, "artifact": artifact, "lastChunk": True}})
    state = row.to_state or task.state
    status: dict[str, Any] = {"state": STATE_V1[state], "timestamp": _timestamp(row.created_at)}
    message = event_message(row, task)
    if message is not None:
        status["message"] = message
    metadata = {"eventId": row.id, "kind": row.kind}
    results.append({"statusUpdate": {**ids, "status": status, "metadata": metadata}})
    return results
