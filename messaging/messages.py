"""What a sent message is held to before it becomes tasks (docs/PROTOCOL.md §4.3, §4.6): the
limits, the digest a retry with the same messageId must repeat, its sensitivity, the text the
web UI searches, and the metadata every delivery carries."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from django.conf import settings

from agents.models import SENSITIVITY_RANK, Sensitivity
from hikyaku import parsers
from hikyaku.errors import InvalidRequest

from .parties import Sender


def check_limits(message: dict[str, Any]) -> None:
    """The limits of docs/PROTOCOL.md §4.6. A new message needs a part; a follow-up (it names
    `taskId`) may have none (compat: the replaced broker's clients ack with `parts: []`)."""
    parts = message.get("parts") or []
    if not parts and not message.get("taskId"):
        raise InvalidRequest(
            "message.parts must hold at least one part.", details={"field": "message.parts"}
        )
    if len(parts) > settings.HIKYAKU_MAX_PARTS:
        raise InvalidRequest(
            f"A message may have at most {settings.HIKYAKU_MAX_PARTS} parts.",
            details={"field": "message.parts"},
        )
    if len(canonical(message.get("metadata") or {})) > settings.HIKYAKU_MAX_METADATA_BYTES:
        raise InvalidRequest(
            f"message.metadata exceeds {settings.HIKYAKU_MAX_METADATA_BYTES} bytes.",
            details={"field": "message.metadata"},
        )
    if len(canonical(message)) > settings.HIKYAKU_MAX_MESSAGE_BYTES:
        raise InvalidRequest(
            f"The message exceeds {settings.HIKYAKU_MAX_MESSAGE_BYTES} bytes.",
            details={"field": "message"},
        )


def canonical(value: Any) -> bytes:
    """Compact JSON with sorted keys: what the limits measure and content hashes digest. The
    bytes must never change — stored hashes of earlier sends depend on them."""
    return parsers.dumps(value, sort_keys=True)


def content_hash(message: dict[str, Any], to: str) -> str:
    """What a retry with the same messageId must repeat exactly."""
    significant = {k: v for k, v in message.items() if k not in ("messageId", "contextId")}
    return hashlib.sha256(canonical({"to": to, "message": significant})).hexdigest()


def sensitivity_of(message: dict[str, Any]) -> str:
    value = (message.get("metadata") or {}).get("sensitivity", Sensitivity.INTERNAL)
    if value not in SENSITIVITY_RANK:
        raise InvalidRequest(
            "message.metadata.sensitivity must be one of public-safe, internal, restricted.",
            details={"field": "message.metadata.sensitivity"},
        )
    return value


def search_text(parts: list[dict[str, Any]]) -> str:
    return "\n".join(p["text"] for p in parts if "text" in p)[:10_000]


def task_metadata(
    sender: Sender, recipient_id: uuid.UUID | None, kind: str, **extra: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"type": kind}
    if sender.agent is not None:
        metadata["fromAgentId"] = str(sender.agent.id)
        metadata["fromAgentName"] = sender.agent.name
    else:
        metadata["fromCallerId"] = sender.caller_id
    if recipient_id is not None:
        metadata["toAgentId"] = str(recipient_id)
    metadata.update({k: v for k, v in extra.items() if v is not None})
    return metadata
