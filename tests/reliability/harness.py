"""Real processes and a client ledger for the fault scenarios (no mocks).

The processes come from the process toolkit (testbed/, docs/TESTING.md):

- `Server`: a broker process in its own process group, so a SIGKILL takes it down whole the
  way a crashed container would: granian in WSGI mode (the production web server, 2 workers of
  4 threads) or uvicorn (`make run`, the stream server); rate limits off.
- `Celery`: a Celery worker or beat process, in its own process group too.
- `PrivatePostgres` / `PrivateRedis`: throwaway servers on ports of their own that a test may
  crash and restart without touching the machine's own.
- `SendLoad`: several client threads sending unique messages with a ledger of every attempt
  and its outcome; a send that fails (reset, refused, 503) is retried with the same
  `messageId` until it succeeds, as docs/PROTOCOL.md §4.3 tells clients to.
- `record`: writes a scenario's figures to test-artifacts/reliability/<name>.json (the README's
  table is filled from these).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

import testbed
from testbed import ROOT, wait_until

__all__ = ["Celery", "PrivatePostgres", "PrivateRedis", "Server", "wait_until"]

ARTIFACTS = ROOT / "test-artifacts" / "reliability"


# Processes ---------------------------------------------------------------------------------


class Server(testbed.Server):
    KINDS = testbed.broker.KINDS

    def __init__(
        self, *, kind: str, database_url: str, port: int | None = None, env: dict | None = None
    ):
        granian = kind == "granian-wsgi"
        super().__init__(
            env={
                **os.environ,
                "DATABASE_URL": database_url,
                "HIKYAKU_LOG_FORMAT": "text",
                "HIKYAKU_RATE_LIMIT_PER_MINUTE": "0",
                "HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE": "0",
                **(env or {}),
            },
            kind=kind,
            port=port,
            log_dir=ARTIFACTS,
            workers=2 if granian else 1,
            threads=testbed.WEB_THREADS if granian else None,
            extra=["--log-level", "warning"],
        )


class Celery(testbed.Celery):
    """`celery -A hikyaku worker` or `beat` (its log: test-artifacts/reliability/celery-<name>.log)."""

    def __init__(self, *, kind: str, name: str, env: dict[str, str]) -> None:
        super().__init__(
            kind=kind,
            name=name,
            env={**os.environ, "HIKYAKU_LOG_FORMAT": "text", **env},
            log=ARTIFACTS / f"celery-{name}.log",
        )


class PrivatePostgres(testbed.PostgresCluster):
    """A Postgres cluster of its own, which a test may crash (`pg_ctl -m immediate`)."""

    def __init__(self) -> None:
        port = testbed.free_port()
        super().__init__(port=port, log=ARTIFACTS / f"postgres-{port}.log")

    @staticmethod
    def available() -> bool:
        return testbed.PostgresCluster.unavailable_reason() is None


class PrivateRedis(testbed.RedisServer):
    pass


# The client ledger ------------------------------------------------------------------------


@dataclass
class Attempt:
    at: float
    outcome: str  # "ok", "http-<status>", "rpc-<code>", or the transport error's class name
    status: int | None = None
    task_id: str | None = None
    body: bytes = b""
    wall: float = field(default_factory=time.time)  # when the answer (or error) arrived


@dataclass
class Entry:
    message_id: str
    sender_token: str
    sender_id: str
    recipient_id: str
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def acknowledged(self) -> bool:
        return any(a.outcome == "ok" for a in self.attempts)

    @property
    def task_ids(self) -> set[str]:
        return {a.task_id for a in self.attempts if a.task_id}


class SendLoad:
    """`total` sends spread over `clients` threads; each thread is one sender agent (the
    idempotency key is per sender) writing to the recipients in turn."""

    def __init__(
        self,
        *,
        url: Callable[[], str],
        senders: list[tuple[str, str]],  # (agent id, token)
        recipients: list[str],
        total: int,
        retry_deadline: float = 120.0,
    ) -> None:
        self.url = url
        self.senders = senders
        self.recipients = recipients
        self.total = total
        self.retry_deadline = retry_deadline
        self.entries: list[Entry] = []
        per_client = total // len(senders)
        for index, (sender_id, token) in enumerate(senders):
            count = per_client + (1 if index < total % len(senders) else 0)
            for n in range(count):
                self.entries.append(
                    Entry(
                        message_id=f"{sender_id[:8]}-{n}-{uuid.uuid4().hex[:8]}",
                        sender_token=token,
                        sender_id=sender_id,
                        recipient_id=recipients[n % len(recipients)],
                    )
                )
        self.acknowledged = 0
        self._lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def body(self, entry: Entry) -> dict:
        return {
            "jsonrpc": "2.0",
            "id": entry.message_id,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": entry.message_id,
                    "role": "ROLE_USER",
                    "parts": [{"text": f"reliability {entry.message_id}"}],
                    "metadata": {"destination": entry.recipient_id},
                }
            },
        }

    def send_once(self, http: httpx.Client, entry: Entry) -> Attempt:
        try:
            response = http.post(
                f"{self.url()}/a2a/",
                json=self.body(entry),
                headers={"Authorization": f"Bearer {entry.sender_token}", "A2A-Version": "1.0"},
            )
        except httpx.HTTPError as exc:
            return Attempt(time.monotonic(), exc.__class__.__name__)
        attempt = Attempt(time.monotonic(), "", status=response.status_code, body=response.content)
        try:
            payload = response.json()
        except ValueError:
            attempt.outcome = f"http-{response.status_code}-not-json"
            return attempt
        if response.status_code == 200 and "result" in payload:
            attempt.outcome = "ok"
            attempt.task_id = payload["result"]["task"]["id"]
        elif isinstance(payload.get("error"), dict) and "code" in payload["error"]:
            attempt.outcome = f"http-{response.status_code}-rpc-{payload['error']['code']}"
        else:
            attempt.outcome = f"http-{response.status_code}"
        return attempt

    def _client(self, entries: list[Entry]) -> None:
        try:
            with httpx.Client(timeout=httpx.Timeout(10.0, connect=2.0)) as http:
                for entry in entries:
                    deadline = time.monotonic() + self.retry_deadline
                    while True:
                        attempt = self.send_once(http, entry)
                        entry.attempts.append(attempt)
                        if attempt.outcome == "ok":
                            with self._lock:
                                self.acknowledged += 1
                            break
                        if time.monotonic() > deadline:
                            break
                        time.sleep(0.05)  # then retry the same messageId
        except BaseException as exc:  # surfaced by join()
            self.errors.append(exc)

    def start(self) -> SendLoad:
        by_sender: dict[str, list[Entry]] = {}
        for entry in self.entries:
            by_sender.setdefault(entry.sender_id, []).append(entry)
        self.started = time.monotonic()
        for entries in by_sender.values():
            thread = threading.Thread(target=self._client, args=(entries,), daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def wait_for(self, acknowledged: int, timeout: float = 120) -> None:
        wait_until(
            lambda: self.acknowledged >= acknowledged or not self.running,
            timeout=timeout,
            what=f"{acknowledged} acknowledged sends",
        )

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def join(self, timeout: float = 300) -> None:
        for thread in self.threads:
            thread.join(timeout)
        self.elapsed = time.monotonic() - self.started
        assert not self.errors, self.errors
        assert not self.running, "clients still running"

    # Figures ---------------------------------------------------------------------------

    def outcomes(self) -> Counter:
        return Counter(a.outcome for e in self.entries for a in e.attempts)

    def retried(self) -> list[Entry]:
        return [e for e in self.entries if len(e.attempts) > 1]

    def committed_before_failing(self, created_at: dict[str, float]) -> list[Entry]:
        """Sends stored before their first failed attempt returned: the client was told
        "error" (or nothing) about a message that had in fact been delivered. `created_at`
        maps messageId to the task's creation time (seconds since the epoch)."""
        found = []
        for entry in self.entries:
            failures = [a for a in entry.attempts if a.outcome != "ok"]
            if failures and created_at[entry.message_id] < failures[0].wall:
                found.append(entry)
        return found


class AckLoad(SendLoad):
    """Each recipient acknowledges its tasks (a follow-up with `message.taskId`), one client
    thread per recipient, retrying with the same messageId like SendLoad."""

    def __init__(
        self,
        *,
        url: Callable[[], str],
        tasks: dict[str, list[str]],  # recipient token -> its task ids
        retry_deadline: float = 120.0,
    ) -> None:
        self.url = url
        self.retry_deadline = retry_deadline
        self.entries = [
            Entry(
                message_id=f"ack-{task_id}",
                sender_token=token,
                sender_id=token[-12:],  # groups the entries by client thread
                recipient_id=task_id,
            )
            for token, task_ids in tasks.items()
            for task_id in task_ids
        ]
        self.total = len(self.entries)
        self.acknowledged = 0
        self._lock = threading.Lock()
        self.threads = []
        self.errors = []

    def body(self, entry: Entry) -> dict:
        return {
            "jsonrpc": "2.0",
            "id": entry.message_id,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": entry.message_id,
                    "role": "ROLE_USER",
                    "taskId": entry.recipient_id,
                    "parts": [{"text": "ack"}],
                }
            },
        }


def record(name: str, figures: dict[str, Any]) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{name}.json").write_text(json.dumps(figures, indent=2, default=str) + "\n")
    print(f"\n{name}: {json.dumps(figures, default=str)}")
