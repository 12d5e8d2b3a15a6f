"""Real server processes for end-to-end tests (started with the process toolkit, testbed/).

`BrokerProcess` runs the broker the way `make run` does (uvicorn serving hikyaku.asgi) in a
subprocess against the test database that pytest-django created, so protocol clients talk to
it over real HTTP. Tests that use it need committed data: mark them
`@pytest.mark.django_db(transaction=True)`. `RedisServer` is a private redis-server a test may
stop and start again. `SSEClient` reads a stream over a real socket.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest
from django.conf import settings

import testbed
from testbed import ROOT, free_port

__all__ = ["ROOT", "BrokerProcess", "RedisServer", "SSEClient", "free_port", "suite_database_url"]

ARTIFACTS = ROOT / "test-artifacts"


def suite_database_url() -> str:
    """A DATABASE_URL pointing at the database the tests run against."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


class BrokerProcess(testbed.Server):
    """`make run`'s server (uvicorn, hikyaku.asgi) on the test database, with the test
    process's environment plus `env`. Its log: test-artifacts/uvicorn-asgi-<port>.log."""

    def __init__(
        self, *, env: dict[str, str] | None = None, port: int | None = None, kind="uvicorn-asgi"
    ) -> None:
        self.extra_env = env or {}
        full_env = {
            **os.environ,
            "DATABASE_URL": suite_database_url(),
            "HIKYAKU_LOG_FORMAT": "text",
        }
        super().__init__(
            env={**full_env, **self.extra_env}, kind=kind, port=port, log_dir=ARTIFACTS
        )

    @property
    def log_path(self):
        return self.log


@pytest.fixture(scope="session")
def broker(django_db_setup, django_db_blocker) -> Iterator[BrokerProcess]:
    """One broker process for the session, on the test database."""
    server = BrokerProcess().start()
    yield server
    server.stop()


@pytest.fixture
def broker_factory(django_db_setup) -> Iterator:
    """Start extra broker processes with their own environment (e.g. REDIS_URL); all are
    stopped at the end of the test. `broker_factory(env={...})` returns a started process."""
    started: list[BrokerProcess] = []

    def start(env: dict[str, str] | None = None) -> BrokerProcess:
        server = BrokerProcess(env=env).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


class RedisServer(testbed.RedisServer):
    """A private redis-server on a port of its own, which a test may stop and start again on
    the same port without touching the machine's Redis."""

    def stop(self, timeout: float = 10.0) -> None:
        super().stop(timeout)
        self.proc = None


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@dataclass
class SSEEvent:
    event: str
    data: str
    id: str | None

    def json(self):
        return json.loads(self.data)


class SSEClient:
    """Reads a Server-Sent Events response in a background thread, over a real socket.

    `events` is a queue of SSEEvent; `closed` is set when the server ends the response.
    Lines are split on LF only, as the SSE specification says (not on U+2028 & co)."""

    def __init__(
        self,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        method: str = "GET",
        json_body: dict | None = None,
    ) -> None:
        self.events: queue.Queue[SSEEvent] = queue.Queue()
        self.comments = 0
        self.closed = threading.Event()
        self.opened = threading.Event()
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = b""
        parts = urlsplit(url)
        self._conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        body = json.dumps(json_body).encode() if json_body is not None else None
        request_headers = dict(headers or {})
        if body is not None:
            request_headers.setdefault("Content-Type", "application/json")
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        self._conn.request(method, path, body=body, headers=request_headers)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self.opened.wait(10):
            raise RuntimeError("stream did not open")

    def _run(self) -> None:
        try:
            response = self._conn.getresponse()
            self._conn.sock.settimeout(None)
            self.status = response.status
            self.headers = {k.lower(): v for k, v in response.getheaders()}
            if "text/event-stream" not in self.headers.get("content-type", ""):
                self.body = response.read()
                return
            self.opened.set()
            name, data, event_id = "message", [], None
            while True:
                raw = response.readline()
                if not raw:
                    return
                line = raw.decode("utf-8").rstrip("\r\n")
                if line == "":
                    if data:
                        self.events.put(SSEEvent(name, "\n".join(data), event_id))
                    name, data, event_id = "message", [], None
                elif line.startswith(":"):
                    self.comments += 1
                else:
                    key, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if key == "event":
                        name = value
                    elif key == "data":
                        data.append(value)
                    elif key == "id":
                        event_id = value
        except Exception:  # the test closed the stream, or the server went away
            pass
        finally:
            self.opened.set()
            self.closed.set()

    def next(self, timeout: float = 5) -> SSEEvent:
        return self.events.get(timeout=timeout)

    def take(self, count: int, timeout: float = 5) -> list[SSEEvent]:
        deadline = time.monotonic() + timeout
        return [self.next(max(deadline - time.monotonic(), 0.01)) for _ in range(count)]

    def drain(self, wait: float = 0.3) -> list[SSEEvent]:
        """Every event that arrives within `wait` seconds of the last one."""
        events = []
        while True:
            try:
                events.append(self.events.get(timeout=wait))
            except queue.Empty:
                return events

    def close(self) -> None:
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._conn.close()
        self._thread.join(5)
