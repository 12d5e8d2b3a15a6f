"""A private redis-server: no persistence, its own port, nobody else's data.

Tests stop, kill and restart it (on the same port) to take Redis away from the broker without
touching the machine's own Redis; benchmarks run one so that its CPU is theirs alone. Redis
pub/sub channels are shared by every database of one server, so a private server is also the
only way to keep one run's doorbells away from another's.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from .ports import free_port
from .process import Process, Ready


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer(Process):
    def __init__(self, *, port: int | None = None, log: Path | None = None) -> None:
        self.port = port or free_port()
        argv = [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--daemonize", "no",
        ]  # fmt: skip
        super().__init__(argv, log=log, name=f"redis-server:{self.port}", own_session=True)

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def url_for(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    @property
    def url(self) -> str:
        return self.url_for(0)

    def start(self, ready: Ready | None = None, *, timeout: float = 10.0) -> RedisServer:
        """Start (or start again, on the same port) and wait until it answers PING."""
        super().start(ready or (lambda: _pong(self.port)), timeout=timeout)
        return self
