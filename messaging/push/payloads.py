"""What a webhook POST carries: the A2A StreamResponse for one event, and its signature.

Body (A2A 1.0 ProtoJSON, what an A2A client's push receiver parses as a StreamResponse):
- the event that created a task → `{"task": <Task>}`;
- any later event (state change, follow-up) → `{"statusUpdate": {"taskId", "contextId",
  "status": {"state", "timestamp", "message"?}, "metadata": {"eventId", "kind", ...}}}`.
Push configs created through the 0.3 dialect get what 0.3 push receivers expect instead: the
Task object itself, in the 0.3 shape. Configs set on an agent's own endpoint (payload dialect
`peer` / `peer-0.3`) get the same shapes in the caller's view (messaging/a2a/peer_view.py).

Headers: `X-Hikyaku-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`,
plus `X-Hikyaku-Event-Id` / `X-Hikyaku-Delivery-Id` (deliveries are at-least-once: deduplicate
by event id), `X-A2A-Notification-Token` and `Authorization` as configured.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

from ..a2a import peer_view
from ..a2a.wire import STATE_V1, Dialect, render_task
from ..models import Task, TaskEvent
from ..parties import person_of

SIGNATURE_HEADER = "X-Hikyaku-Signature"
# The payload dialects of push configs set on an agent's own endpoint (PushConfig.dialect).
PEER_DIALECTS = {"peer": Dialect.V1_0, "peer-0.3": Dialect.V0_3}


def stream_response(task: Task, event: TaskEvent, dialect: str = "1.0") -> dict[str, Any]:
    if dialect in PEER_DIALECTS:
        return peer_view.push_payload(task, event, PEER_DIALECTS[dialect])
    if dialect == Dialect.V0_3.value:
        return render_task(task, Dialect.V0_3)
    if event.kind == TaskEvent.Kind.CREATED:
        body = render_task(task, Dialect.V1_0)
        body.setdefault("metadata", {})["eventId"] = event.id
        return {"task": body}
    status: dict[str, Any] = {
        "state": STATE_V1.get(event.to_state or task.state, STATE_V1[task.state]),
        "timestamp": event.created_at.isoformat().replace("+00:00", "Z"),
    }
    parts = (event.payload or {}).get("parts")
    if parts:
        message: dict[str, Any] = {
            "messageId": (event.payload or {}).get("messageId") or f"event-{event.id}",
            "role": "ROLE_AGENT" if event.actor_id == task.recipient_id else "ROLE_USER",
            "parts": parts,
            "taskId": str(task.id),
            "contextId": task.context_id,
        }
        status["message"] = message
    metadata: dict[str, Any] = {"eventId": event.id, "kind": event.kind}
    if event.from_state:
        metadata["fromState"] = STATE_V1.get(event.from_state, event.from_state)
    if event.actor_id:
        metadata["actorAgentId"] = str(event.actor_id)
    elif event.actor_label:
        metadata["actor"] = event.actor_label
    if person := person_of(event.actor_label):
        metadata["actorPerson"] = person
    for key in ("fromAgentId", "toAgentId", "type"):
        if key in task.metadata:
            metadata[key] = task.metadata[key]
    return {
        "statusUpdate": {
            "taskId": str(task.id),
            "contextId": task.context_id,
            "status": status,
            "metadata": metadata,
        }
    }


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def signature(secret: str, body: bytes, *, timestamp: int | None = None) -> str:
    """The X-Hikyaku-Signature value for `body`."""
    stamp = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={stamp},v1={digest}"


def verify(secret: str, body: bytes, header: str, *, tolerance: int = 300) -> bool:
    """How a receiver checks a delivery (a reference implementation; see docs/WEBHOOKS.md)."""
    try:
        fields = dict(item.split("=", 1) for item in header.split(","))
        stamp = int(fields["t"])
    except (ValueError, KeyError):
        return False
    if abs(time.time() - stamp) > tolerance:
        return False
    expected = signature(secret, body, timestamp=stamp).split("v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))
