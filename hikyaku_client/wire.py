"""The A2A 1.0 vocabulary the client writes: parts (ProtoJSON, no "kind"), task states and the
lifecycle verbs of docs/PROTOCOL.md §4.4."""

from __future__ import annotations

import base64
import mimetypes
import os
from pathlib import Path
from typing import Any

from .errors import ConfigurationError

# Lifecycle verbs, sent as SendMessage with message.taskId and message.metadata.action.
ACTIONS = ("ack", "accept", "complete", "reject", "fail", "block", "reply", "comment")

# The states a Hikyaku task can be in.
STATES = (
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
)
TERMINAL_STATES = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"}
)


def normalize_state(value: str) -> str:
    """`input-required`, `INPUT_REQUIRED`, `completed`, `TASK_STATE_WORKING` → `TASK_STATE_*`."""
    name = value.strip().upper().replace("-", "_").replace("CANCELLED", "CANCELED")
    if not name.startswith("TASK_STATE_"):
        name = f"TASK_STATE_{name}"
    if name not in STATES:
        choices = ", ".join(s.removeprefix("TASK_STATE_").lower().replace("_", "-") for s in STATES)
        raise ConfigurationError(f"Unknown task state {value!r}; use one of: {choices}.")
    return name


def text_part(text: str) -> dict[str, Any]:
    return {"text": text}


def data_part(data: Any) -> dict[str, Any]:
    return {"data": data}


def url_part(url: str, *, filename: str = "", media_type: str = "") -> dict[str, Any]:
    part: dict[str, Any] = {"url": url}
    if filename:
        part["filename"] = filename
    if media_type:
        part["mediaType"] = media_type
    return part


def file_part(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A file as a `raw` part (base64) with its name and media type."""
    file_path = Path(path)
    try:
        content = file_path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"Cannot read {str(path)!r}: {exc.strerror or exc}.") from None
    media_type = mimetypes.guess_type(file_path.name)[0] or "application/octet-stream"
    return {
        "raw": base64.b64encode(content).decode("ascii"),
        "filename": file_path.name,
        "mediaType": media_type,
    }


def build_parts(
    *,
    text: str | None = None,
    files: list[str] | tuple[str, ...] = (),
    data: Any = None,
    has_data: bool = False,
) -> list[dict[str, Any]]:
    """The message parts for the given text, files and JSON data, in that order."""
    parts: list[dict[str, Any]] = []
    if text:
        parts.append(text_part(text))
    parts.extend(file_part(f) for f in files)
    if has_data or data is not None:
        parts.append(data_part(data))
    return parts
