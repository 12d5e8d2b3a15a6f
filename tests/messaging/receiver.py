"""A real HTTP webhook receiver for tests: a threading HTTP server on 127.0.0.1 that records
every request and answers from a script (status codes in order, or hanging)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Answers with `statuses` in order (the last one repeats); `hang_seconds` > 0 makes it
    wait that long before answering."""

    statuses: list[int] = field(default_factory=lambda: [200])
    hang_seconds: float = 0.0
    requests: list[Received] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _arrived: threading.Condition = field(default_factory=threading.Condition)

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length)
        with self._arrived:
            index = len(self.requests)
            self.requests.append(
                Received(handler.path, dict(handler.headers.items()), body, time.monotonic())
            )
            self._arrived.notify_all()
        if self.hang_seconds:
            time.sleep(self.hang_seconds)
        status = self.statuses[min(index, len(self.statuses) - 1)]
        payload = b'{"ok": true}' if status < 300 else b"receiver says no"
        try:
            handler.send_response(status)
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
        except OSError:
            pass  # the sender gave up (timeout) and closed the connection

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        with self._arrived:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"expected {count} webhook request(s), got {len(self.requests)}"
                    )
                self._arrived.wait(left)
            return list(self.requests)

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                receiver._answer(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = _bind(Handler)
        self.server.daemon_threads = True
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _bind(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """On a port the kernel chooses (testbed/ports.py says why)."""
    return ThreadingHTTPServer(("127.0.0.1", 0), handler)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver().start()
    yield server
    server.stop()
