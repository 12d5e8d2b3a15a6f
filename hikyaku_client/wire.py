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

# The states a Hikyaku task can be in, on the wire.
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

# The names people read and type (the broker's messaging/lifecycle.py; README, "Task states"):
# each is a wire state, and the wire's INPUT_REQUIRED is split by whose turn it is.
HUMAN_STATES: dict[str, tuple[str, str | None]] = {
    "unread": ("TASK_STATE_INPUT_REQUIRED", "recipient"),
    "working": ("TASK_STATE_WORKING", None),
    "blocked": ("TASK_STATE_INPUT_REQUIRED", "sender"),
    "completed": ("TASK_STATE_COMPLETED", None),
    "rejected": ("TASK_STATE_REJECTED", None),
    "failed": ("TASK_STATE_FAILED", None),
    "canceled": ("TASK_STATE_CANCELED", None),
}


def normalize_state(value: str) -> str:
    """A status filter as the broker takes it: `unread`, `blocked`, `working`, … as they are
    (the human vocabulary), and wire spellings (`input-required`, `TASK_STATE_WORKING`,
    `INPUT_REQUIRED`) as `TASK_STATE_*`."""
    human = value.strip().lower().replace("cancelled", "canceled")
    if human in HUMAN_STATES:
        return human
    name = value.strip().upper().replace("-", "_").replace("CANCELLED", "CANCELED")
    if not name.startswith("TASK_STATE_"):
        name = f"TASK_STATE_{name}"
    if name not in STATES:
        choices = ", ".join(HUMAN_STATES)
        raise ConfigurationError(
            f"Unknown task state {value!r}; use one of: {choices} (or an A2A state name "
            "such as input-required)."
        )
    return name


def state_of(task: dict[str, Any]) -> str:
    """A task's state in the human vocabulary: `unread`, `blocked`, `working`, …"""
    state = str((task.get("status") or {}).get("state", ""))
    if state == "TASK_STATE_INPUT_REQUIRED":
        awaiting = (task.get("metadata") or {}).get("awaiting")
        return "blocked" if awaiting == "sender" else "unread"
    return state.removeprefix("TASK_STATE_").lower().replace("_", "-") or "?"


def matches_state(task: dict[str, Any], wanted: str) -> bool:
    """Whether a task is in `wanted`, a value `normalize_state` returned."""
    if wanted in HUMAN_STATES:
        return state_of(task) == wanted
    return (task.get("status") or {}).get("state") == wanted


def state_after_event(kind: str, to_state: str, before: str | None) -> str:
    """The human state an event of a task's timeline left it in, given the one before it:
    events carry the stored state, whose turn it is follows from the verb."""
    state = str(to_state or "").removeprefix("TASK_STATE_").lower().replace("-", "_")
    if state != "input_required":
        return state.replace("_", "-")
    if kind == "block":
        return "blocked"
    if kind == "created" or before is None:
        return "unread"
    return before


def text_part(text: str) -> dict[str, Any]:
    return {"text": text}


def data_part(data: Any) -> dict[str, Any]:
    return {"data": data}


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
