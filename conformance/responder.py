"""A responder agent for the A2A TCK: a real agent that works its inbox through the broker.

The TCK talks to a public agent's own A2A endpoint (`/a2a/agents/<id>/`) and selects the
behaviour it expects by the prefix of each message's `messageId` (its scenarios/*.feature).
This process is that agent. It holds only the agent's token and uses our client package the
way a coding agent's tooling does: it follows its inbox stream (`GET /api/v1/subscribe`, with
a `ListTasks` backfill each time the stream connects) and answers with the lifecycle verbs of
docs/PROTOCOL.md §4.4 (`accept`, `complete`, `block`, `reject`). The broker has no TCK logic.

    python -m conformance.responder --url http://127.0.0.1:8000 --token hka_... --agent-id ...

Like the client package, this never imports Django.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import sys
from dataclasses import dataclass, field
from typing import Any

from hikyaku_client.config import Credentials
from hikyaku_client.errors import HikyakuError
from hikyaku_client.http import HikyakuClient
from hikyaku_client.sse import InboxStream

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
    def __init__(self, *, url: str, token: str, agent_id: str) -> None:
        self.agent_id = agent_id
        self.client = HikyakuClient(
            Credentials(url=url.rstrip("/"), agent_token=token, agent_id=agent_id)
        )
        self.busy: set[str] = set()
        self.handled: set[tuple[str, str]] = set()  # (task id, triggering messageId)

    async def live_tasks(self) -> list[dict[str, Any]]:
        tasks, token = [], ""
        while True:
            page = await self.client.rpc(
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
                await self.client.send_message(
                    {
                        "role": "ROLE_AGENT",
                        "taskId": task_id,
                        "parts": step.parts or _text(step.action),
                        "metadata": {"action": step.action, **step.metadata},
                    }
                )
            log.info("answered %s (%s): %s", task_id, message_id, [s.action for s in steps])
        except Exception as exc:  # the caller may cancel meanwhile; keep serving others
            log.warning("could not answer %s (%s): %s", task_id, message_id, exc)
        finally:
            self.busy.discard(task_id)

    async def run(self) -> None:
        """Follow the inbox stream for ever (it reconnects by itself, resuming where it left
        off); each time it connects, pick up whatever waits from before."""
        stream = InboxStream(self.client, initial_delay=0.2, max_delay=2.0)
        log.info("following the inbox of %s", self.agent_id)
        async for event in stream.events():
            if event.event == "ready":
                try:
                    for task in await self.live_tasks():
                        self.consider(task)
                except HikyakuError as exc:
                    log.warning("backfill failed: %s", exc)
            elif event.event in ("message", "task-update") and event.task:
                self.consider(event.task)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the broker's base URL")
    parser.add_argument("--token", required=True, help="the agent's token (hka_...)")
    parser.add_argument("--agent-id", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="responder: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    responder = Responder(url=args.url, token=args.token, agent_id=args.agent_id)
    try:
        asyncio.run(responder.run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
