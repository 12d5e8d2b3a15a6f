"""Real processes and a client ledger for the fault scenarios (no mocks).

- `Server`: a broker process in its own process group, so a SIGKILL takes it down whole the
  way a crashed container would: granian in WSGI mode (the production web server) or uvicorn
  (`make run`, the stream server).
- `Celery`: a Celery worker or beat process, in its own process group too.
- `PrivatePostgres` / `PrivateRedis`: throwaway servers on ports 16800–16899 that a test may
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
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.live import ROOT

BIN = Path(sys.executable).parent
ARTIFACTS = ROOT / "test-artifacts" / "reliability"
PG_BIN = Path(os.environ.get("HIKYAKU_PG_BIN", "/usr/lib/postgresql/15/bin"))


def port_in_range(low: int = 16800, high: int = 16899) -> int:
    """A free port in the range reserved for servers the tests start themselves."""
    for port in range(low, high + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {low}-{high}")


def wait_until(predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


# Broker processes --------------------------------------------------------------------------


class Server:
    KINDS = ("granian-wsgi", "uvicorn-asgi")

    def __init__(self, *, kind: str, database_url: str, port: int, env: dict | None = None):
        assert kind in self.KINDS, kind
        self.kind = kind
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "HIKYAKU_LOG_FORMAT": "text",
            "HIKYAKU_RATE_LIMIT_PER_MINUTE": "0",
            "HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE": "0",
            **(env or {}),
        }
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def command(self) -> list[str]:
        if self.kind == "granian-wsgi":
            return [
                str(BIN / "granian"),
                "--interface",
                "wsgi",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "2",
                "--blocking-threads",
                "4",
                "--no-ws",
                "--log-level",
                "warning",
                "hikyaku.wsgi:application",
            ]
        return [
            str(BIN / "uvicorn"),
            "hikyaku.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--no-access-log",
            "--log-level",
            "warning",
            "--timeout-graceful-shutdown",
            "1",
        ]

    def start(self) -> Server:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        log = (ARTIFACTS / f"{self.kind}-{self.port}-{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(
            self.command(),
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: kill() takes the workers too
        )

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited early (see {log.name})")
            try:
                return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout=60, what=f"{self.kind} on {self.port}")
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL the server and every worker it forked, at once."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            self.kill()


class Celery:
    """`celery -A hikyaku worker` or `beat` in its own process group (a SIGKILL takes the
    worker's pool processes down with it, as a crashed container would)."""

    def __init__(self, *, kind: str, name: str, env: dict[str, str]) -> None:
        assert kind in ("worker", "beat"), kind
        self.kind = kind
        self.name = name
        self.env = {**os.environ, "HIKYAKU_LOG_FORMAT": "text", **env}
        self.log = ARTIFACTS / f"celery-{name}.log"
        self.dir = Path(tempfile.mkdtemp(prefix="hikyaku-celery-"))
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        common = [str(BIN / "celery"), "-A", "hikyaku", self.kind, "--loglevel", "INFO"]
        if self.kind == "beat":
            return [*common, "--schedule", str(self.dir / "celerybeat-schedule")]
        return [
            *common,
            "--hostname",
            f"{self.name}@%h",
            "--concurrency",
            "2",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]

    def start(self) -> Celery:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        ready = b" ready." if self.kind == "worker" else b"beat: Starting"

        def started() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"celery {self.kind} exited early (see {self.log})")
            return ready in self.log.read_bytes()

        wait_until(started, timeout=60, what=f"celery {self.kind} {self.name}")
        return self

    def kill(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


# Private Postgres and Redis ---------------------------------------------------------------


def _as_postgres(cmd: list[str]) -> list[str]:
    """Postgres refuses to run as root: run its tools as the postgres user when we are root."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


class PrivatePostgres:
    """A Postgres 15 cluster of its own, which a test may crash (`pg_ctl -m immediate`)."""

    def __init__(self) -> None:
        self.port = port_in_range()
        self.dir = Path(tempfile.mkdtemp(prefix="hikyaku-proof-pg-"))
        self.data = self.dir / "data"
        self.log = ARTIFACTS / f"postgres-{self.port}.log"

    @staticmethod
    def available() -> bool:
        return (PG_BIN / "initdb").exists() and (os.geteuid() != 0 or shutil.which("runuser"))

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/hikyaku"

    def _ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), *args]),
            check=check,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> PrivatePostgres:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            self.log.touch()
            shutil.chown(self.log, "postgres", "postgres")
        subprocess.run(
            _as_postgres(
                [
                    str(PG_BIN / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-instructions",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=120,
        )
        # In the configuration file, so every start and restart uses them.
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.dir}'\nmax_connections = 200\n"
                "fsync = on\nsynchronous_commit = on\n"
            )
        self._ctl("-l", str(self.log), "-w", "start")
        subprocess.run(
            _as_postgres(
                [
                    str(PG_BIN / "createdb"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-U",
                    "postgres",
                    "hikyaku",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=60,
        )
        return self

    def restart_immediate(self) -> float:
        """`pg_ctl restart -m immediate` (a crash, then recovery); returns the seconds it took."""
        started = time.monotonic()
        self._ctl("-m", "immediate", "-l", str(self.log), "-w", "restart")
        return time.monotonic() - started

    def crash(self) -> None:
        self._ctl("-m", "immediate", "-w", "stop")

    def start_again(self) -> None:
        self._ctl("-l", str(self.log), "-w", "start")

    def destroy(self) -> None:
        self._ctl("-m", "immediate", "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def query(self, sql: str, *params: Any) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.url.replace("postgres://", "postgresql://")) as conn:
            return conn.execute(sql, params).fetchall()


class PrivateRedis:
    def __init__(self, *, ports: tuple[int, int] = (16800, 16899)) -> None:
        self.port = port_in_range(*ports)
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def up() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return True
            except OSError:
                return False

        wait_until(up, timeout=10, what="redis")
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


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
