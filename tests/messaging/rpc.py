"""Helpers for calling the JSON-RPC endpoint through Django's test client."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

from django.test import Client

from tests.factories import TestAgent

_ids = itertools.count(1)


def call(
    agent: TestAgent | None,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    version: str | None = "1.0",
    path: str = "/a2a/",
    client: Client | None = None,
    headers: dict[str, str] | None = None,
):
    extra = {}
    if agent is not None:
        extra["HTTP_AUTHORIZATION"] = f"Bearer {agent.token}"
    if version is not None:
        extra["HTTP_A2A_VERSION"] = version
    for name, value in (headers or {}).items():
        extra["HTTP_" + name.upper().replace("-", "_")] = value
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params or {}}
    return (client or Client()).post(
        path, json.dumps(body), content_type="application/json", **extra
    )


def result(
    agent: TestAgent, method: str, params: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    response = call(agent, method, params, **kwargs)
    assert response.status_code == 200, response.content
    body = response.json()
    assert "error" not in body, body
    return body["result"]


def error(
    agent: TestAgent | None, method: str, params: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    response = call(agent, method, params, **kwargs)
    body = response.json()
    assert "error" in body, body
    return body["error"]


def message(
    text: str = "hello",
    *,
    to: str | None = None,
    task_id: str | None = None,
    action: str | None = None,
    parts: list | None = None,
    message_id: str | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    meta = dict(metadata)
    if to is not None:
        meta["destination"] = to
    if action is not None:
        meta["action"] = action
    msg: dict[str, Any] = {
        "messageId": message_id or uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": parts if parts is not None else [{"text": text}],
    }
    if meta:
        msg["metadata"] = meta
    if task_id is not None:
        msg["taskId"] = task_id
    return msg


def send(sender: TestAgent, to: str, text: str = "hello", **kwargs: Any) -> dict[str, Any]:
    return result(sender, "SendMessage", {"message": message(text, to=to, **kwargs)})["task"]


def act(
    agent: TestAgent, task_id: str, action: str | None = None, text: str = "ok", **kwargs: Any
) -> dict[str, Any]:
    return result(
        agent, "SendMessage", {"message": message(text, task_id=task_id, action=action, **kwargs)}
    )["task"]


def act_error(
    agent: TestAgent, task_id: str, action: str | None = None, text: str = "ok"
) -> dict[str, Any]:
    return error(agent, "SendMessage", {"message": message(text, task_id=task_id, action=action)})
