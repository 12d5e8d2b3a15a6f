"""Login throttling holds across web processes when REDIS_URL is set: the failed logins
django-allauth counts live in the shared cache, not in each process's memory (README,
Operations)."""

from __future__ import annotations

import os
import re
import uuid

import httpx
import pytest
import redis

from tests import factories
from tests.live import BrokerProcess

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def redis_url() -> str:
    return os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/10"


@pytest.fixture
def shared_cache() -> str:
    url = redis_url()
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        client.ping()
    except redis.RedisError:
        if os.environ.get("REDIS_URL"):
            raise
        pytest.skip(f"no Redis at {url}")
    # Earlier runs' per-address counts of failed logins (everything here is 127.0.0.1).
    for key in client.scan_iter(match="hikyaku:*allauth:rl:*"):
        client.delete(key)
    return url


def log_in(server: BrokerProcess, email: str, password: str) -> httpx.Response:
    with httpx.Client(base_url=server.url, timeout=20) as browser:
        page = browser.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        return browser.post(
            "/accounts/login/",
            data={"login": email, "password": password, "csrfmiddlewaretoken": token},
            headers={"Referer": f"{server.url}/accounts/login/"},
        )


def test_failed_logins_are_counted_across_web_processes(shared_cache):
    email = f"target-{uuid.uuid4().hex[:8]}@example.com"
    factories.user(email, password="the right password")
    env = {"REDIS_URL": shared_cache}
    servers = [BrokerProcess(env=env).start(), BrokerProcess(env=env).start()]
    try:
        # The default budget: 5 failed logins per account in 5 minutes. Spread over two
        # processes, each sees fewer than that.
        for attempt in range(5):
            failed = log_in(servers[attempt % 2], email, "a wrong guess")
            assert failed.status_code == 200 and "not correct" in failed.text
        # The next attempt, even with the right password, is refused by either process.
        refused = log_in(servers[1], email, "the right password")
        assert "Too many failed login attempts" in refused.text
        assert "sessionid" not in refused.cookies
    finally:
        for server in servers:
            server.stop()
