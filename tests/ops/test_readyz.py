"""/readyz: 503 (never 500) while the database is unreachable, 200 again once it is back."""

import time

import httpx
import pytest

from testbed import PostgresCluster
from tests.backends import postgres_suite_only
from tests.ops.processes import base_env, free_port, granian_wsgi, running


@pytest.fixture
def private_postgres():
    """A throwaway Postgres cluster on a loopback port, stopped and started at will."""
    reason = PostgresCluster.unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = PostgresCluster(durable=False).start()
    try:
        yield cluster
    finally:
        cluster.destroy()


def ready(url: str) -> httpx.Response:
    return httpx.get(url, timeout=10)


def wait_for_status(url: str, status: int, timeout: float = 20) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        response = ready(url)
        if response.status_code == status or time.monotonic() > deadline:
            return response
        time.sleep(0.2)


PRIVATE = "a server of its own on a Postgres of its own (or none), whatever the suite's database"


@postgres_suite_only(PRIVATE)
def test_readyz_follows_the_database_down_and_back_up(private_postgres, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/readyz"
    env = base_env(DATABASE_URL=private_postgres.url)
    with running(granian_wsgi(port), env=env, log=tmp_path / "web.log", ready_url=url):
        up = ready(url)
        assert up.status_code == 200
        assert up.json() == {"status": "ok", "checks": {"database": "ok"}}

        private_postgres.crash()
        down = ready(url)
        assert down.status_code == 503
        assert down.headers["Content-Type"] == "application/json"
        assert down.json() == {"status": "unavailable", "checks": {"database": "unavailable"}}

        private_postgres.start()
        back = wait_for_status(url, 200)
        assert back.status_code == 200, back.text
    assert "Traceback" not in (tmp_path / "web.log").read_text()


@postgres_suite_only(PRIVATE)
def test_readyz_answers_503_when_the_database_port_is_closed(tmp_path):
    closed = free_port()
    port = free_port()
    url = f"http://127.0.0.1:{port}/readyz"
    env = base_env(DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed}/nothing")
    with running(granian_wsgi(port), env=env, log=tmp_path / "web.log", ready_url=url):
        response = ready(url)
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "unavailable"}


@pytest.mark.django_db
def test_redis_down_is_reported_but_keeps_the_broker_ready(client, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "degraded",
        "checks": {"database": "ok", "redis": "unavailable"},
    }
