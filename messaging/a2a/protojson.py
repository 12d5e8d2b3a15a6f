"""A2A messages parsed into 1.0 ProtoJSON in plain Python: the fast path of
`wire.parse_message` (docs/PROTOCOL.md §4.1, docs/ARCHITECTURE.md "The wire format").

a2a-sdk parses a message by building protobuf objects (1.0) or pydantic models converted to
protobuf (0.3) and printing them back as ProtoJSON. The functions here compute the same dict
directly for the shapes well-formed clients send, and raise `Unhandled` for anything else, so
that the caller takes the sdk path and every other input, and every error, behaves exactly
as it does there. What the round trip does, and these functions reproduce:

- `google.protobuf.Struct` and `Value` (metadata, data parts) give every number back as a
  float; a number no float holds, a non-finite float or an unpaired surrogate is an error;
- a string or list field without presence is dropped when empty; a part's content (`text`,
  `raw`, `url`, `data`) and a message field (`metadata`) are kept even when empty;
- the keys of a message and of a part come in the proto's field order;
- `raw` (1.0) and `file.bytes` (0.3) are base64, printed back in canonical form.

Key order inside a Struct is not reproduced: protobuf's is a hash order that changes from one
process to the next, so no client can rely on it.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any


class Unhandled(Exception):
    """An input the plain-Python path does not reproduce: take a2a-sdk's path instead."""


# Protobuf's parser refuses more than 100 nested messages, and each level of a Struct costs
# two (Struct and Value). Deeper values than this take the sdk path, which decides.
MAX_DEPTH = 24
_SURROGATE = re.compile("[\ud800-\udfff]")


def string(value: Any) -> str:
    """A string as a protobuf string field or Struct value takes it, and gives it back (a
    plain `str`, also for a subclass such as a TextChoices member)."""
    if type(value) is not str:
        if not isinstance(value, str):
            raise Unhandled
        value = str.__str__(value)
    if not value.isascii() and _SURROGATE.search(value):
        raise Unhandled
    return value


def optional_string(value: Any) -> str | None:
    return None if value is None else string(value)


def strings(value: Any) -> list[str]:
    """A repeated string field (`extensions`, `referenceTaskIds`)."""
    if type(value) is not list:
        raise Unhandled
    return [string(item) for item in value]


def struct_value(value: Any, depth: int = 0) -> Any:
    """`value` after a round trip through `google.protobuf.Value`: numbers become floats."""
    kind = type(value)
    if isinstance(value, str):
        return string(value)
    if kind is int:
        try:
            return float(value)
        except OverflowError:
            raise Unhandled from None
    if kind is float:
        if value - value != 0.0:  # infinite or NaN: protobuf refuses to print them
            raise Unhandled
        return value
    if kind is bool or value is None:
        return value
    if depth >= MAX_DEPTH:
        raise Unhandled
    if kind is dict:
        out = {}
        for key, item in value.items():
            out[string(key)] = struct_value(item, depth + 1)
        return out
    if kind is list:
        return [struct_value(item, depth + 1) for item in value]
    raise Unhandled


def struct(value: Any) -> dict[str, Any]:
    """A `google.protobuf.Struct` field (metadata) after the round trip."""
    if type(value) is not dict:
        raise Unhandled
    return struct_value(value)


def check_value(value: Any, depth: int = 0) -> None:
    """Raise `Unhandled` unless `value` survives a round trip through `google.protobuf.Value`
    (for what the 1.0 dialect keeps as sent)."""
    kind = type(value)
    if isinstance(value, str):
        string(value)
    elif kind is int:
        try:
            float(value)
        except OverflowError:
            raise Unhandled from None
    elif kind is float:
        if value - value != 0.0:
            raise Unhandled
    elif kind is bool or value is None:
        pass
    elif depth >= MAX_DEPTH:
        raise Unhandled
    elif kind is dict:
        for key, item in value.items():
            string(key)
            check_value(item, depth + 1)
    elif kind is list:
        for item in value:
            check_value(item, depth + 1)
    else:
        raise Unhandled


def base64_text(value: Any) -> str:
    """A `bytes` field's text when it is canonical base64 (what protobuf prints back)."""
    if type(value) is not str:
        raise Unhandled
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise Unhandled from None
    if base64.b64encode(decoded).decode("ascii") != value:
        raise Unhandled
    return value


# The 1.0 dialect ----------------------------------------------------------------------------

_MESSAGE_V1 = frozenset(
    ("messageId", "contextId", "taskId", "role", "parts", "metadata", "extensions")
    + ("referenceTaskIds",)
)
_PART_V1 = frozenset(("text", "raw", "url", "data", "metadata", "filename", "mediaType"))
# The proto field names, which protobuf's parser accepts besides the JSON names.
_PROTO_NAMES = frozenset(
    ("message_id", "context_id", "task_id", "reference_task_ids", "media_type")
)


def _skip_unknown(obj: dict[str, Any], known: frozenset[str], ignore: bool) -> None:
    """Unknown keys are dropped when the caller ignores unknown fields; a proto field name or
    an extension name (`[...]`) is not unknown to protobuf, so it takes the sdk path."""
    for key in obj:
        if key not in known and (not ignore or key in _PROTO_NAMES or key.startswith("[")):
            raise Unhandled


def message_v1(raw: dict[str, Any], *, ignore_unknown_fields: bool = False) -> dict[str, Any]:
    """`wire.parse_message` of an A2A 1.0 Message: ProtoJSON with the data parts and the
    message metadata as sent."""
    if not raw.keys() <= _MESSAGE_V1:
        _skip_unknown(raw, _MESSAGE_V1, ignore_unknown_fields)
    message: dict[str, Any] = {}
    for key in ("messageId", "contextId", "taskId"):
        value = string(raw[key]) if key in raw else ""
        if value:
            message[key] = value
    role = raw.get("role", "ROLE_UNSPECIFIED")
    if role == "ROLE_USER" or role == "ROLE_AGENT":
        message["role"] = string(role)
    elif role != "ROLE_UNSPECIFIED":
        raise Unhandled
    parts = raw.get("parts", [])
    if type(parts) is not list:
        raise Unhandled
    if parts:
        message["parts"] = [_part_v1(part, ignore_unknown_fields) for part in parts]
    if "metadata" in raw:
        metadata = raw["metadata"]
        if type(metadata) is not dict:
            raise Unhandled
        check_value(metadata)
        message["metadata"] = metadata
    for key in ("extensions", "referenceTaskIds"):
        if key in raw:
            values = strings(raw[key])
            if values:
                message[key] = values
    if "role" not in message:
        message["role"] = "ROLE_USER"
    return message


def _part_v1(raw: Any, ignore_unknown_fields: bool) -> dict[str, Any]:
    if type(raw) is not dict:
        raise Unhandled
    if not raw.keys() <= _PART_V1:
        _skip_unknown(raw, _PART_V1, ignore_unknown_fields)
    part: dict[str, Any] = {}
    if "text" in raw:
        part["text"] = string(raw["text"])
    if "raw" in raw:
        part["raw"] = base64_text(raw["raw"])
    if "url" in raw:
        part["url"] = string(raw["url"])
    if "data" in raw:
        data = raw["data"]
        if data is None:
            raise Unhandled
        check_value(data)
        part["data"] = data
    if len(part) != 1:  # no content, or two (protobuf's oneof refuses that)
        raise Unhandled
    if "metadata" in raw:
        part["metadata"] = struct(raw["metadata"])
    for key in ("filename", "mediaType"):
        value = string(raw[key]) if key in raw else ""
        if value:
            part[key] = value
    return part


# The 0.3 dialect ----------------------------------------------------------------------------

_MESSAGE_V03 = frozenset(
    ("messageId", "contextId", "taskId", "role", "parts", "metadata", "extensions")
    + ("referenceTaskIds", "kind")
)
# pydantic also accepts the field names; any other unknown key it ignores.
_FIELD_NAMES_V03 = frozenset(("message_id", "context_id", "task_id", "reference_task_ids"))
_ROLES_V03 = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_FILE_KEYS = frozenset(("bytes", "uri", "mimeType", "name"))


def message_v03(raw: dict[str, Any]) -> dict[str, Any]:
    """`wire.parse_message` of an A2A 0.3 Message (validated by a2a-sdk's pydantic model,
    converted with its compat conversions): 1.0 ProtoJSON."""
    if not raw.keys() <= _MESSAGE_V03 and not _FIELD_NAMES_V03.isdisjoint(raw):
        raise Unhandled
    if raw.get("kind", "message") != "message" or "messageId" not in raw:
        raise Unhandled
    role = raw.get("role")
    if type(role) is not str or role not in _ROLES_V03:
        raise Unhandled
    parts = raw.get("parts")
    metadata = raw.get("metadata")
    if type(parts) is not list or (metadata is not None and type(metadata) is not dict):
        raise Unhandled
    message: dict[str, Any] = {}
    for key in ("messageId", "contextId", "taskId"):
        value = optional_string(raw.get(key))
        if value:
            message[key] = value
    message["role"] = _ROLES_V03[role]
    if parts:
        message["parts"] = [_part_v03(part) for part in parts]
    if metadata:
        message["metadata"] = struct(metadata)
    for key in ("extensions", "referenceTaskIds"):
        values = raw.get(key)
        if values is not None:
            values = strings(values)
            if values:
                message[key] = values
    return message


def _part_v03(raw: Any) -> dict[str, Any]:
    if type(raw) is not dict:
        raise Unhandled
    kind = raw.get("kind")
    metadata = raw.get("metadata")
    if metadata is not None and type(metadata) is not dict:
        raise Unhandled
    part: dict[str, Any]
    if kind == "text" and raw.keys() <= {"kind", "text", "metadata"}:
        part = {"text": string(raw.get("text"))}
    elif kind == "data" and raw.keys() <= {"kind", "data", "metadata"}:
        part = {"data": struct(raw.get("data"))}
        if not metadata:
            return part  # empty metadata is not set on a data part
        if "data_part_compat" in metadata:
            raise Unhandled
    elif kind == "file" and raw.keys() <= {"kind", "file", "metadata"}:
        return _file_part_v03(raw.get("file"), metadata)
    else:
        raise Unhandled
    if metadata is not None:
        part["metadata"] = struct(metadata)
    return part


def _file_part_v03(file: Any, metadata: dict[str, Any] | None) -> dict[str, Any]:
    if (
        type(file) is not dict
        or not file.keys() <= _FILE_KEYS
        or ("bytes" in file) == ("uri" in file)
    ):
        raise Unhandled
    if "bytes" in file:
        part = {"raw": base64_text(file["bytes"])}
    else:
        part = {"url": string(file["uri"])}
    if metadata is not None:
        part["metadata"] = struct(metadata)
    name, media_type = optional_string(file.get("name")), optional_string(file.get("mimeType"))
    if name:
        part["filename"] = name
    if media_type:
        part["mediaType"] = media_type
    return part
