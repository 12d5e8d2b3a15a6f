"""A real broker server process for end-to-end tests (browser, streams), on the test database.

The process is uvicorn serving hikyaku.asgi with DEBUG off, pointed at the database that
pytest-django created (a file for SQLite — see `django_db_modify_db_settings` in
tests/conftest.py — or the test database on the same Postgres server). Tests that drive it
must use `transactional_db` (or `live_db` below), so their writes are committed and visible to
the server, and the tables are flushed afterwards.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

PORT_RANGE = range(8100, 8200)
REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    for port in PORT_RANGE:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORT_RANGE.start}-{PORT_RANGE.stop - 1}")


def database_url_for(settings_dict: dict) -> str:
    """A DATABASE_URL for the test database described by a connection's settings_dict."""
    if settings_dict["ENGINE"].endswith("sqlite3"):
        name = str(settings_dict["NAME"])
        if "mode=memory" in name or name == ":memory:":
            raise RuntimeError("a server process cannot share an in-memory SQLite database")
        return f"sqlite:///{name}"
    base = os.environ.get("DATABASE_URL", "")
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path="/" + quote(settings_dict["NAME"])))


@dataclass
class ServerProcess:
    url: str
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def start_server(*, database_url: str, log_path: Path, extra_env: dict | None = None):
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": "test-server-secret-key-not-for-production",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DJANGO_SECURE_COOKIES": "false",
        "HIKYAKU_LOG_FORMAT": "text",
        **(extra_env or {}),
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    log = log_path.open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "hikyaku.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--timeout-graceful-shutdown",
            "2",
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = ServerProcess(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{server.log()}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"server did not become healthy within 30 s:\n{server.log()}")
