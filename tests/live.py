"""Real server processes for end-to-end tests.

`BrokerProcess` runs the broker the way `make run` does (uvicorn serving hikyaku.asgi) in a
subprocess against the test database that pytest-django created, so protocol clients talk to
it over real HTTP. Tests that use it need committed data: mark them
`@pytest.mark.django_db(transaction=True)`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_database_url() -> str:
    """A DATABASE_URL pointing at the database the tests run against."""
    db = settings.DATABASES["default"]
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


class BrokerProcess:
    def __init__(self, *, env: dict[str, str] | None = None, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = env or {}
        self.proc: subprocess.Popen | None = None
        self.log_path = ROOT / "test-artifacts" / f"server-{self.port}.log"

    def start(self) -> BrokerProcess:
        env = {**os.environ, "DATABASE_URL": test_database_url(), "HIKYAKU_LOG_FORMAT": "text"}
        env.update(self.extra_env)
        self.log_path.parent.mkdir(exist_ok=True)
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "hikyaku.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--no-access-log",
                "--timeout-graceful-shutdown",
                "1",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited early; see {self.log_path}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"broker did not start; see {self.log_path}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def broker(django_db_setup, django_db_blocker) -> Iterator[BrokerProcess]:
    """One broker process for the session, on the test database."""
    server = BrokerProcess().start()
    yield server
    server.stop()
