"""Budgets that credentials cannot multiply (docs/ARCHITECTURE.md, Credentials): one per tenant
over all its credentials, and one per client address for failed authentications — against
real server processes, on every agent surface (REST, JSON-RPC, the SSE inbox, /mcp)."""

from __future__ import annotations

import time

import httpx
import pytest
from django.test import Client

from tests import factories
from tests.live import BrokerProcess
from tests.messaging.rpc import message

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for_a_fresh_window(seconds_needed: int = 20) -> None:
    """The limiter counts per wall-clock minute; start early enough to stay in one window."""
    remaining = 60 - time.time() % 60
    if remaining < seconds_needed:
        time.sleep(remaining + 0.2)


def rest(server: BrokerProcess, token: str, **headers: str) -> httpx.Response:
    return httpx.get(
        f"{server.url}/api/v1/agents",
        headers={"Authorization": f"Bearer {token}", **headers},
        timeout=10,
    )


def rpc(server: BrokerProcess, token: str, to: str, **headers: str) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message(to=to)},
    }
    return httpx.post(
        f"{server.url}/a2a/",
        json=body,
        headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0", **headers},
        timeout=10,
    )


def sse(server: BrokerProcess, token: str, **headers: str) -> httpx.Response:
    """The first answer of the inbox stream: its status (and, refused, its body)."""
    with httpx.stream(
        "GET",
        f"{server.url}/api/v1/subscribe",
        headers={"Authorization": f"Bearer {token}", **headers},
        timeout=10,
    ) as response:
        if response.status_code != 200:
            response.read()
        return response


def mcp(server: BrokerProcess, token: str, **headers: str) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    return httpx.post(
        f"{server.url}/mcp",
        json=body,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            **headers,
        },
        timeout=10,
    )


def test_a_tenants_agents_share_one_budget(tenant, other_tenant):
    server = BrokerProcess(
        env={"HIKYAKU_RATE_LIMIT_PER_MINUTE": "1000", "HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE": "12"}
    ).start()
    try:
        key = factories.api_key(tenant)
        agents = [factories.agent(tenant, name=f"a{n}") for n in range(3)]
        outsider = factories.agent(other_tenant, name="outsider")
        wait_for_a_fresh_window()
        statuses = []
        for n in range(12):  # 4 each: every agent far under its own budget
            sender = agents[n % 3]
            statuses.append(rpc(server, sender.token, agents[(n + 1) % 3].id).status_code)
        assert statuses == [200] * 12
        for sender in agents:
            refused = rpc(server, sender.token, agents[0].id)
            assert refused.status_code == 429
            assert refused.json()["error"]["data"][0]["reason"] == "RATE_LIMITED"
            assert 0 < int(refused.headers["Retry-After"]) <= 60
            assert rest(server, sender.token).json()["error"]["code"] == "RATE_LIMITED"
        # Minting another agent does not buy more: the key is the tenant's too.
        minted = httpx.post(
            f"{server.url}/api/v1/agents",
            json={"name": "fresh", "description": ""},
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
        )
        assert minted.status_code == 429
        # Another tenant has a budget of its own.
        assert rest(server, outsider.token).status_code == 200
    finally:
        server.stop()


def test_failed_authentications_are_throttled_per_client_address(tenant):
    """Behind one trusted proxy, X-Forwarded-For names the client. One client guessing
    credentials is refused on every surface, even with a valid one, once over its budget;
    another client is not."""
    server = BrokerProcess(
        env={"HIKYAKU_AUTH_FAILURES_PER_MINUTE": "6", "HIKYAKU_TRUSTED_PROXY_HOPS": "1"}
    ).start()
    try:
        alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
        guesser = {"X-Forwarded-For": "203.0.113.9"}
        neighbour = {"X-Forwarded-For": "198.51.100.4"}
        wait_for_a_fresh_window()
        wrong = "hka_" + "x" * 40
        # Failures count on every surface, the lean stream handlers included.
        failures = [
            rest(server, wrong, **guesser),
            rpc(server, wrong, bob.id, **guesser),
            sse(server, wrong, **guesser),
            mcp(server, wrong, **guesser),
            rest(server, "hky_" + "0" * 32, **guesser),
            rest(server, "garbage", **guesser),
        ]
        assert [r.status_code for r in failures] == [401] * 6
        # Over budget: refused before any lookup, a valid token included, on every surface.
        refused = [
            rest(server, alice.token, **guesser),
            rpc(server, alice.token, bob.id, **guesser),
            sse(server, alice.token, **guesser),
            mcp(server, alice.token, **guesser),
        ]
        assert [r.status_code for r in refused] == [429] * 4
        assert refused[0].json()["error"]["code"] == "RATE_LIMITED"
        assert "failed authentications from this address" in refused[0].json()["error"]["message"]
        assert refused[1].json()["error"]["data"][0]["reason"] == "RATE_LIMITED"
        assert all(0 < int(r.headers["Retry-After"]) <= 60 for r in refused)
        # Another client behind the same proxy is not held back.
        assert rest(server, alice.token, **neighbour).status_code == 200
        assert rpc(server, alice.token, bob.id, **neighbour).status_code == 200
    finally:
        server.stop()


def test_mcp_tools_count_the_outer_client_not_the_broker_itself(tenant):
    """/mcp's tools call the broker in-process: those calls carry the MCP client's address,
    so a budget spent by the loopback address (here, the proxy's own) does not refuse them."""
    server = BrokerProcess(
        env={"HIKYAKU_AUTH_FAILURES_PER_MINUTE": "2", "HIKYAKU_TRUSTED_PROXY_HOPS": "1"}
    ).start()
    try:
        alice = factories.agent(tenant, name="alice")
        wait_for_a_fresh_window()
        for _ in range(2):  # straight from 127.0.0.1, through no proxy
            assert rest(server, "hka_" + "x" * 40).status_code == 401
        assert rest(server, alice.token).status_code == 429
        body = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "whoami", "arguments": {}},
        }
        response = httpx.post(
            f"{server.url}/mcp",
            json=body,
            headers={
                "Authorization": f"Bearer {alice.token}",
                "Accept": "application/json, text/event-stream",
                "X-Forwarded-For": "198.51.100.4",
            },
            timeout=10,
        )
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        assert not result.get("isError"), result
        assert result["structuredContent"]["agent"]["agent_id"] == alice.id
    finally:
        server.stop()


def test_requests_without_credentials_and_successes_spend_no_failure_budget(settings, agent):
    settings.HIKYAKU_AUTH_FAILURES_PER_MINUTE = 2
    settings.REDIS_URL = ""  # count in process memory for this test
    client = Client(REMOTE_ADDR="192.0.2.77")
    for _ in range(5):
        assert client.get("/api/v1/agents").status_code == 401  # no credential: no guess
        assert (
            client.get("/api/v1/agents", HTTP_AUTHORIZATION=f"Bearer {agent.token}").status_code
            == 200
        )
    for _ in range(2):
        bad = client.get("/api/v1/agents", HTTP_AUTHORIZATION="Bearer hka_" + "y" * 40)
        assert bad.status_code == 401
    limited = client.get("/api/v1/agents", HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    assert limited.status_code == 429
    # IPv6 clients are counted per /64: a new address in the same network does not help.
    for _ in range(2):
        Client(REMOTE_ADDR="2001:db8:1:2::10").get(
            "/api/v1/agents", HTTP_AUTHORIZATION="Bearer hka_" + "z" * 40
        )
    same_net = Client(REMOTE_ADDR="2001:db8:1:2::99")
    other_net = Client(REMOTE_ADDR="2001:db8:1:3::10")
    headers = {"HTTP_AUTHORIZATION": f"Bearer {agent.token}"}
    assert same_net.get("/api/v1/agents", **headers).status_code == 429
    assert other_net.get("/api/v1/agents", **headers).status_code == 200
