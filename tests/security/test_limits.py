"""Size and rate limits (docs/PROTOCOL.md §4.6), hit and answered correctly on every surface.

Bodies over 1 MiB → 413 `PAYLOAD_TOO_LARGE` (REST and JSON-RPC, with and without
Content-Length); message limits → JSON-RPC -32602 naming the field, registry limits → 400
naming the field; nothing is stored by a refused request; values exactly at a limit pass. Rate
limits → 429 with `Retry-After` and `RATE_LIMITED` on both surfaces, against real server
processes (two of them sharing the count through Redis when REDIS_URL is set).
"""

from __future__ import annotations

import json
import os
import time

import httpx
import pytest
from django.test import Client

from agents.models import Agent
from messaging.models import Task
from tenants.ratelimit import FLUSH_EVERY
from tests import factories
from tests.live import BrokerProcess
from tests.messaging.rpc import call, message, result, send

pytestmark = pytest.mark.django_db

MIB = 1024 * 1024


def rpc_error(agent, method: str, params: dict) -> dict:
    response = call(agent, method, params)
    assert response.status_code == 200, response.content[:300]
    return response.json()["error"]


def rest_error(response, status: int = 400) -> dict:
    assert response.status_code == status, response.content[:300]
    return response.json()["error"]


# Body size ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/a2a/", "/", "/api/v1/agents"])
def test_a_body_one_byte_over_1_mib_is_413_and_one_at_the_limit_is_not(api_key, agent, path):
    token = api_key if path == "/api/v1/agents" else agent.token
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    for size, expected_413 in ((MIB, False), (MIB + 1, True)):
        body = json.dumps({"name": "x", "description": ""})
        body += " " * (size - len(body))  # trailing whitespace is valid JSON
        response = client.post(path, body, content_type="application/json")
        if expected_413:
            assert rest_error(response, 413)["code"] == "PAYLOAD_TOO_LARGE"
        else:
            assert response.status_code != 413


def test_patch_over_1_mib_is_413(agent):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    body = json.dumps({"description": "x" * MIB})
    response = client.patch(f"/api/v1/agents/{agent.id}", body, content_type="application/json")
    assert rest_error(response, 413)["code"] == "PAYLOAD_TOO_LARGE"
    assert agent.refresh().description != "x" * MIB


# Message limits (JSON-RPC) ---------------------------------------------------------------


def big_metadata(peer_id: str, size: int) -> dict:
    meta = {"destination": peer_id, "pad": ""}
    meta["pad"] = "m" * (size - len(json.dumps(meta, separators=(",", ":"))))
    return meta


@pytest.mark.parametrize(
    "build, field",
    [
        (lambda p: message(to=p, parts=[{"text": "x"}] * 65), "message.parts"),
        (lambda p: message(to=p, parts=[]), "message.parts"),
        (lambda p: {**message(), "metadata": big_metadata(p, 16 * 1024 + 1)}, "message.metadata"),
        (lambda p: message("x" * (256 * 1024), to=p), "message"),
        (lambda p: message(to=p, message_id="m" * 201), "message.messageId"),
    ],
    ids=["65 parts", "no parts", "metadata 16 KiB + 1", "message > 256 KiB", "messageId 201"],
)
def test_message_limits_are_invalid_params_naming_the_field(agent, peer, build, field):
    err = rpc_error(agent, "SendMessage", {"message": build(peer.id)})
    assert err["code"] == -32602
    assert err["data"][0]["metadata"]["field"] == field
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    "build",
    [
        lambda p: message(to=p, parts=[{"text": "x"}] * 64),
        lambda p: {**message(), "metadata": big_metadata(p, 16 * 1024)},
        lambda p: message("x" * (250 * 1024), to=p),
        lambda p: message(to=p, message_id="m" * 200),
    ],
    ids=["64 parts", "metadata 16 KiB", "message 250 KiB", "messageId 200"],
)
def test_values_at_the_limit_pass(agent, peer, build):
    assert result(agent, "SendMessage", {"message": build(peer.id)})["task"]["id"]


@pytest.mark.parametrize(
    "params, field",
    [
        ({"pageSize": 101}, "pageSize"),
        ({"pageSize": 0}, "pageSize"),
        ({"historyLength": 10_001}, "historyLength"),
        ({"historyLength": -1}, "historyLength"),
    ],
)
def test_list_limits_are_invalid_params(agent, params, field):
    err = rpc_error(agent, "ListTasks", {"contextId": agent.id, **params})
    assert err["code"] == -32602 and err["data"][0]["metadata"]["field"] == field


def test_thread_depth_limit_is_invalid_params(agent, peer, settings):
    settings.HIKYAKU_MAX_THREAD_DEPTH = 2
    parent = send(agent, peer.id, "root")
    for _ in range(2):
        params = {"message": {**message(to=peer.id), "referenceTaskIds": [parent["id"]]}}
        parent = result(agent, "SendMessage", params)["task"]
    params = {"message": {**message(to=peer.id), "referenceTaskIds": [parent["id"]]}}
    err = rpc_error(agent, "SendMessage", params)
    assert err["code"] == -32602 and "depth" in err["message"]
    assert Task.objects.count() == 3


# Registry limits (REST) --------------------------------------------------------------------


def register(key: str, body: dict):
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}").post(
        "/api/v1/agents", json.dumps(body), content_type="application/json"
    )


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": "n" * 201, "description": ""}, "name"),
        ({"name": "n", "description": "d" * 2001}, "description"),
        (
            {
                "name": "n",
                "description": "",
                "skills": [{"id": f"s{i}", "name": "s"} for i in range(101)],
            },
            "skills",
        ),
        (
            {"name": "n", "description": "", "webhook_url": "https://x.test/" + "p" * 2000},
            "webhook_url",
        ),
    ],
    ids=["name 201", "description 2001", "101 skills", "webhook_url 2001+"],
)
def test_registry_limits_are_400_naming_the_field(api_key, body, field):
    assert field in rest_error(register(api_key, body))["details"]
    assert not Agent.objects.exists()


def test_agents_per_tenant_limit(api_key, settings):
    settings.HIKYAKU_MAX_AGENTS_PER_TENANT = 2
    assert register(api_key, {"name": "a", "description": ""}).status_code == 201
    assert register(api_key, {"name": "b", "description": ""}).status_code == 201
    err = rest_error(register(api_key, {"name": "c", "description": ""}))
    assert err["code"] == "INVALID_REQUEST" and "name" in err["details"]
    assert Agent.objects.count() == 2


@pytest.mark.parametrize(
    "path",
    ["/api/v1/agents?limit=501", "/api/v1/agents?limit=0", "/api/v1/tasks/{task}/events?limit=501"],
)
def test_rest_page_size_limits(agent, peer, path):
    task = send(agent, peer.id)
    response = Client(HTTP_AUTHORIZATION=f"Bearer {agent.token}").get(path.format(task=task["id"]))
    assert "limit" in rest_error(response)["details"]


# Rate limits against real processes ------------------------------------------------------


def wait_for_a_fresh_window(seconds_needed: int = 15) -> None:
    """The limiter counts per wall-clock minute; start early enough to stay in one window."""
    remaining = 60 - time.time() % 60
    if remaining < seconds_needed:
        time.sleep(remaining + 0.2)


@pytest.mark.django_db(transaction=True)
def test_rate_limits_answer_429_with_retry_after_on_every_surface(tenant):
    """Processes count locally and add to the shared Redis count in batches, so the limit may
    be overshot by at most FLUSH_EVERY requests per process (tenants/ratelimit.py) but is
    never undershot; a process that refused keeps refusing, and soon every process does."""
    limit = 20
    env = {"HIKYAKU_RATE_LIMIT_PER_MINUTE": str(limit)}
    shared = bool(os.environ.get("REDIS_URL"))
    servers = [BrokerProcess(env=env).start() for _ in range(2 if shared else 1)]
    slack = FLUSH_EVERY * len(servers) if shared else 0
    try:
        key = factories.api_key(tenant)
        alice = factories.agent(tenant, name="alice")
        bob = factories.agent(tenant, name="bob")
        headers = {"Authorization": f"Bearer {alice.token}", "A2A-Version": "1.0"}

        def send(server: BrokerProcess) -> httpx.Response:
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": message(to=bob.id)},
            }
            return httpx.post(f"{server.url}/a2a/", json=body, headers=headers)

        wait_for_a_fresh_window()
        accepted = 0
        refused_by = set()
        statuses = []
        for i in range(limit + slack + 10):  # alternate: one shared budget
            server = servers[i % len(servers)]
            response = send(server)
            statuses.append(response.status_code)
            if response.status_code == 200:
                # Never early; and a process that refused keeps refusing (it counts the
                # refused requests too). Another process may still accept up to the slack.
                assert accepted < limit + slack and server.url not in refused_by
                accepted += 1
            else:
                assert response.status_code == 429, response.text
                refused_by.add(server.url)
                if len(refused_by) == len(servers):
                    break
        assert statuses[:limit] == [200] * limit  # never refused early
        assert limit <= accepted <= limit + slack, accepted
        assert len(refused_by) == len(servers)
        for server in servers:
            rpc = send(server)
            assert rpc.status_code == 429
            assert rpc.json()["error"]["data"][0]["reason"] == "RATE_LIMITED"
            assert 0 < int(rpc.headers["Retry-After"]) <= 60
            rest = httpx.get(
                f"{server.url}/api/v1/agents", headers={"Authorization": f"Bearer {alice.token}"}
            )
            assert rest.status_code == 429 and rest.json()["error"]["code"] == "RATE_LIMITED"
            assert 0 < int(rest.headers["Retry-After"]) <= 60
        assert Task.objects.count() == accepted  # refused sends stored nothing
        # Another credential has its own budget, the tenant key included.
        other = httpx.get(
            f"{servers[0].url}/api/v1/agents",
            headers={"Authorization": f"Bearer {bob.token}"},
        )
        assert other.status_code == 200
        registered = httpx.post(
            f"{servers[-1].url}/api/v1/agents",
            json={"name": "carol", "description": ""},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert registered.status_code == 201
    finally:
        for server in servers:
            server.stop()


@pytest.mark.django_db(transaction=True)
def test_a_real_server_answers_413_before_reading_a_huge_body(broker, agent):
    body = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "'
        + b"x" * (2 * MIB)
        + b'"}}'
    )
    started = time.monotonic()
    response = httpx.post(
        f"{broker.url}/a2a/",
        content=body,
        headers={"Authorization": f"Bearer {agent.token}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert time.monotonic() - started < 10
