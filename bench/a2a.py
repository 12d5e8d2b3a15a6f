"""The A2A JSON-RPC bodies the benchmark sends, in both dialects, and reading what comes back.

Hand-written on purpose: the benchmark is a client and must cost as little CPU as possible,
and it checks the wire format the broker promises (docs/PROTOCOL.md §4, docs/COMPAT.md) rather
than an SDK's view of it. `V1` is A2A 1.0 at `/a2a/` with agent tokens; `V03` is the 0.3
dialect at `POST /` with the tenant's API key and `X-Agent-Id`, which is all the broker Hikyaku
replaces speaks: the same bodies go to both brokers on that path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

A2A_PATH = "/a2a/"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
COMPLETED = "TASK_STATE_COMPLETED"
FILLER = (
    "Please review the diff in src/hikyaku/inbox.py and tell me whether the cursor pagination "
    "still holds when two tasks share a status timestamp. "
)


def headers(token: str) -> dict[str, str]:
    return {"A2A-Version": "1.0", "Authorization": f"Bearer {token}"}


@dataclass(frozen=True)
class Dialect:
    """One wire dialect: where requests go, how an agent authenticates, what the bodies and
    task states look like. `credentials(agent)` gets any object with `id`, `token`, `api_key`."""

    name: str
    path: str
    input_required: str
    completed: str

    def credentials(self, agent: Any) -> dict[str, str]:
        if self.name == "0.3":
            return {"Authorization": f"Bearer {agent.api_key}", "X-Agent-Id": agent.id}
        return headers(agent.token)

    def send_message(self, *, message_id: str, destination: str, text: str) -> dict[str, Any]:
        if self.name == "0.3":
            return _rpc("SendMessage", {"message": _message_03(message_id, text, destination)})
        return send_message(message_id=message_id, destination=destination, text=text)

    def ack(self, *, message_id: str, task_id: str) -> dict[str, Any]:
        if self.name == "0.3":
            message = {**_message_03(message_id, "ack", None), "taskId": task_id}
            return _rpc("SendMessage", {"message": message})
        return ack(message_id=message_id, task_id=task_id)

    def list_inbox(self, *, agent_id: str, page_size: int = 100) -> dict[str, Any]:
        if self.name == "0.3":  # the old broker ignores pageSize and answers every task at once
            params = {"contextId": agent_id, "status": self.input_required, "pageSize": page_size}
            return _rpc("ListTasks", params)
        return list_inbox(agent_id=agent_id, page_size=page_size)


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def _message_03(message_id: str, text: str, destination: str | None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "messageId": message_id,
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
    }
    if destination is not None:
        message["metadata"] = {"destination": destination}
    return message


def compact(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def message_text(message_id: str, recipient: str, size: int) -> str:
    """A text part that names its own message id and recipient, padded to about `size`."""
    head = f"bench {message_id} to {recipient}: "
    body = (FILLER * (size // len(FILLER) + 1))[: max(0, size - len(head))]
    return head + body


def send_message(
    *, message_id: str, destination: str, text: str, rpc_id: int | str = 1
) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": message_id,
                "role": "ROLE_USER",
                "parts": [{"text": text}],
                "metadata": {"destination": destination},
            }
        },
    }


def ack(*, message_id: str, task_id: str, rpc_id: int | str = 1) -> dict[str, Any]:
    """A follow-up with no action: the recipient's ack (docs/PROTOCOL.md §4.4)."""
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": message_id,
                "role": "ROLE_USER",
                "taskId": task_id,
                "parts": [{"text": "ack"}],
            }
        },
    }


def list_inbox(*, agent_id: str, page_size: int = 100, rpc_id: int | str = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "ListTasks",
        "params": {
            "contextId": agent_id,
            "status": INPUT_REQUIRED,
            "pageSize": page_size,
            "historyLength": 1,
        },
    }


V1 = Dialect("1.0", A2A_PATH, INPUT_REQUIRED, COMPLETED)
V03 = Dialect("0.3", "/", "input-required", "completed")


class RpcError(Exception):
    pass


def result(response_json: dict[str, Any]) -> dict[str, Any]:
    if "error" in response_json:
        raise RpcError(json.dumps(response_json["error"])[:500])
    return response_json["result"]


@dataclass
class Delivery:
    """One task found in an inbox, reduced to what the checks need."""

    task_id: str
    message_id: str
    recipient: str  # contextId
    sender: str
    type: str
    broadcast_id: str


def delivery(task: dict[str, Any]) -> Delivery:
    metadata = task.get("metadata") or {}
    message_id = ""
    for message in task.get("history") or []:
        if message.get("role") in ("ROLE_USER", "user") and message.get("messageId"):
            message_id = message["messageId"]
            break
    if not message_id:  # fall back to the compat artifact, whose text names the message
        for artifact in task.get("artifacts") or []:
            for part in artifact.get("parts") or []:
                text = part.get("text", "")
                if text.startswith("bench "):
                    message_id = text.split()[1]
    return Delivery(
        task_id=task["id"],
        message_id=message_id,
        recipient=task.get("contextId", ""),
        sender=metadata.get("fromAgentId", ""),
        type=metadata.get("type", ""),
        broadcast_id=metadata.get("broadcastId", ""),
    )
