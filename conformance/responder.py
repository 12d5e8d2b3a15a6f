"""A responder agent for the A2A TCK: a real agent that works its inbox through the broker.

The TCK talks to a public agent's own A2A endpoint (`/a2a/agents/<id>/`) and selects the
behaviour it expects by the prefix of each message's `messageId` (its scenarios/*.feature).
This process is that agent. It holds only the agent's token, watches its inbox over the
broker's public surfaces (`ListTasks` on `/a2a/`), and answers with the lifecycle verbs of
DESIGN.md §4.4 (`accept`, `complete`, `block`, `reject`), exactly as a coding agent would.
The broker has no TCK logic.

    python -m conformance.responder --url http://127.0.0.1:8000 --token hka_... --agent-id ...

Like the client package, this never imports Django.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

log = logging.getLogger("conformance.responder")


@dataclass(frozen=True)
class Step:
    action: str
    parts: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    pause: float = 0.0  # seconds to wait before this step (long-running work)


def _text(text: str) -> list[dict[str, Any]]:
    return [{"text": text}]


def _working(*steps: Step) -> list[Step]:
    """Report WORKING first (a status update on streams), then the given steps."""
    return [Step("accept", _text("Working on it.")), *steps]


_FILE = {
    "raw": base64.b64encode(b"tck").decode(),
    "mediaType": "text/plain",
    "filename": "output.txt",
}
_FILE_URL = {
    "url": "https://example.com/output.txt",
    "mediaType": "text/plain",
    "filename": "output.txt",
}

# messageId prefix → what the agent does (the TCK's scenarios/*.feature). Longer prefixes
# first, so "tck-artifact-file-url" is not taken for "tck-artifact-file".
SCENARIOS: list[tuple[str, list[Step]]] = [
    ("tck-complete-task", [Step("complete", _text("Hello from TCK"))]),
    ("tck-artifact-text", [Step("complete", _text("Generated text content"))]),
    ("tck-artifact-file-url", [Step("complete", [_FILE_URL])]),
    ("tck-artifact-file", [Step("complete", [_FILE])]),
    ("tck-artifact-data", [Step("complete", [{"data": {"key": "value", "count": 42}}])]),
    (
        "tck-message-response",
        [Step("complete", _text("Direct message response"), {"replyAs": "message"})],
    ),
    ("tck-input-required", _working(Step("block", _text("Please provide more input.")))),
    ("tck-reject-task", [Step("reject", _text("rejected"))]),
    ("tck-stream-001", _working(Step("complete", _text("Stream hello from TCK")))),
    ("tck-stream-002", [Step("complete", _text("Stream message-only response"))]),
    ("tck-stream-003", _working(Step("complete", _text("Stream task lifecycle")))),
    ("tck-stream-ordering-001", _working(Step("complete", _text("Ordered output")))),
    ("tck-stream-artifact-text", _working(Step("complete", _text("Streamed text content")))),
    ("tck-stream-artifact-file", _working(Step("complete", [_FILE]))),
    # The broker has no partial artifacts: both chunks arrive as one result artifact.
    ("tck-stream-artifact-chunked", _working(Step("complete", _text("chunk-1 chunk-2")))),
    # Long-running work: WORKING, then completion after twice the TCK's 2 s stream timeout.
    ("test-resubscribe-message-id", _working(Step("complete", _text("Done."), pause=4.0))),
]


def plan(message_id: str) -> list[Step]:
    for prefix, steps in SCENARIOS:
        if message_id.startswith(prefix):
            return steps
    return [Step("complete", _text(f"Unhandled messageId prefix: {message_id}"))]


def needs_answer(task: dict[str, Any]) -> bool:
    """Unread, or working with the caller's message last (a reply to our question)."""
    state = task.get("status", {}).get("state")
    awaiting = (task.get("metadata") or {}).get("awaiting")
    if state == "TASK_STATE_INPUT_REQUIRED":
        return awaiting == "recipient"
    history = task.get("history") or []
    return (
        state == "TASK_STATE_WORKING" and bool(history) and history[-1].get("role") == "ROLE_USER"
    )


class Responder:
    def __init__(self, *, url: str, token: str, agent_id: str, poll_interval: float) -> None:
        self.agent_id = agent_id
        self.poll_interval = poll_interval
        self.http = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"},
            timeout=30,
        )
        self.busy: set[str] = set()
        self.handled: set[tuple[str, str]] = set()  # (task id, triggering messageId)

    async def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
        response = await self.http.post("/a2a/", json=body)
        response.raise_for_status()
        payload = response.json()
        if "error" in payload:
            raise RuntimeError(f"{method}: {payload['error'].get('message')}")
        return payload["result"]

    async def live_tasks(self) -> list[dict[str, Any]]:
        tasks, token = [], ""
        while True:
            page = await self.rpc(
                "ListTasks",
                {
                    "contextId": self.agent_id,
                    "status": ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING"],
                    "pageSize": 100,
                    "pageToken": token,
                    "historyLength": 1,
                    "includeArtifacts": False,
                },
            )
            tasks += page["tasks"]
            token = page["nextPageToken"]
            if not token:
                return tasks

    def consider(self, task: dict[str, Any]) -> None:
        """Start answering `task` if it waits for us and nobody is on it yet."""
        if not needs_answer(task) or task["id"] in self.busy:
            return
        trigger = (task.get("history") or [{}])[-1]
        key = (task["id"], trigger.get("messageId", ""))
        if key in self.handled:
            return
        self.handled.add(key)
        self.busy.add(task["id"])
        unread = task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        asyncio.create_task(self.answer(task["id"], key[1], unread=unread))

    async def answer(self, task_id: str, message_id: str, *, unread: bool) -> None:
        steps = plan(message_id)
        if not unread and steps and steps[0].action == "accept":
            steps = steps[1:]  # a reply to our question: we are already working on it
        try:
            for step in steps:
                if step.pause:
                    await asyncio.sleep(step.pause)
                await self.rpc(
                    "SendMessage",
                    {
                        "message": {
                            "messageId": uuid.uuid4().hex,
                            "role": "ROLE_AGENT",
                            "taskId": task_id,
                            "parts": step.parts or _text(step.action),
                            "metadata": {"action": step.action, **step.metadata},
                        }
                    },
                )
            log.info("answered %s (%s): %s", task_id, message_id, [s.action for s in steps])
        except Exception as exc:  # the caller may cancel meanwhile; keep serving others
            log.warning("could not answer %s (%s): %s", task_id, message_id, exc)
        finally:
            self.busy.discard(task_id)

    async def poll(self) -> None:
        log.info("polling the inbox of %s every %.2f s", self.agent_id, self.poll_interval)
        while True:
            try:
                for task in await self.live_tasks():
                    self.consider(task)
            except (httpx.HTTPError, RuntimeError) as exc:
                log.warning("poll failed: %s", exc)
                await asyncio.sleep(1)
            await asyncio.sleep(self.poll_interval)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the broker's base URL")
    parser.add_argument("--token", required=True, help="the agent's token (hka_...)")
    parser.add_argument("--agent-id", required=True)
    parser.add_argument("--poll-interval", type=float, default=0.1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="responder: %(message)s")
    responder = Responder(
        url=args.url, token=args.token, agent_id=args.agent_id, poll_interval=args.poll_interval
    )
    try:
        asyncio.run(responder.poll())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
