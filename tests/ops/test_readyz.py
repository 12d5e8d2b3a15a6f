"""/readyz: 503 (never 500) while the database is unreachable, 200 again once it is back."""

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.ops.processes import DATABASE_PORTS, base_env, free_port, granian_wsgi, running

PG_BIN = Path("/usr/lib/postgresql/15/bin")


class PrivatePostgres:
    """A throwaway Postgres cluster on a loopback port, started and stopped at will."""

    def __init__(self, root: Path, port: int) -> None:
        self.root, self.port = root, port
        self.data = root / "data"
        self._as_postgres = os.geteuid() == 0  # postgres refuses to run as root

    def _run(self, *command: str) -> None:
        if self._as_postgres:
            command = ("runuser", "-u", "postgres", "--", *command)
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        if self._as_postgres:
            shutil.chown(self.root, user="postgres")
        self._run(str(PG_BIN / "initdb"), "-D", str(self.data), "--auth=trust", "-U", "postgres")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "postgres.log"),
            "-w",
            "start",
        )

    def stop(self) -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"


@pytest.fixture
def private_postgres():
    if not (PG_BIN / "initdb").exists():
        pytest.skip("Postgres 15 server binaries are not installed")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("no postgres user to run a private cluster as")
    root = Path(tempfile.mkdtemp(prefix="hikyaku-pg-", dir="/tmp"))
    cluster = PrivatePostgres(root, free_port(DATABASE_PORTS))
    cluster.init()
    cluster.start()
    try:
        yield cluster
    finally:
        try:
            cluster.stop()
        except subprocess.CalledProcessError:
            pass  # already stopped
        shutil.rmtree(root, ignore_errors=True)


def ready(url: str) -> httpx.Response:
    return httpx.get(url, timeout=10)


def wait_for_status(url: str, status: int, timeout: float = 20) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        response = ready(url)
        if response.status_code == status or time.monotonic() > deadline:
            return response
        time.sleep(0.2)


def test_readyz_follows_the_database_down_and_back_up(private_postgres, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/readyz"
    env = base_env(DATABASE_URL=private_postgres.url)
    with running(granian_wsgi(port), env=env, log=tmp_path / "web.log", ready_url=url):
        up = ready(url)
        assert up.status_code == 200
        assert up.json() == {"status": "ok", "checks": {"database": "ok"}}

        private_postgres.stop()
        down = ready(url)
        assert down.status_code == 503
        assert down.headers["Content-Type"] == "application/json"
        assert down.json() == {"status": "unavailable", "checks": {"database": "unavailable"}}

        private_postgres.start()
        back = wait_for_status(url, 200)
        assert back.status_code == 200, back.text
    assert "Traceback" not in (tmp_path / "web.log").read_text()


def test_readyz_answers_503_when_the_database_port_is_closed(tmp_path):
    closed = free_port(DATABASE_PORTS)
    port = free_port()
    url = f"http://127.0.0.1:{port}/readyz"
    env = base_env(DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed}/nothing")
    with running(granian_wsgi(port), env=env, log=tmp_path / "web.log", ready_url=url):
        response = ready(url)
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "unavailable"}


@pytest.mark.django_db
def test_redis_down_is_reported_but_keeps_the_broker_ready(client, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port(DATABASE_PORTS)}/0"
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "degraded",
        "checks": {"database": "ok", "redis": "unavailable"},
    }
