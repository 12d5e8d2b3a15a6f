"""Inputs that used to answer HTTP 500 (or a 503 that invites endless retries).

Each case is a body or parameter the fuzzers of this package found; every one must now be a
JSON-RPC error object or a 4xx envelope, on SQLite and on Postgres alike.
"""

import base64
import json
import uuid

import httpx
import pytest
from django.db import connection  # noqa: F401  (read by a skipif condition)
from django.test import Client

from messaging.models import Task
from tests.messaging.rpc import message

pytestmark = pytest.mark.django_db


def rpc_raw(agent, body: str):
    response = Client(raise_request_exception=False).post(
        "/a2a/",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agent.token}",
        HTTP_A2A_VERSION="1.0",
    )
    assert response.status_code == 200, response.content[:500]
    return response.json()


def rpc(agent, method: str, params: dict):
    return rpc_raw(
        agent, json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    )


def b64(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "body",
    [
        "[" * 10_000 + "]" * 10_000,  # RecursionError in json.loads
        '{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": '
        + "[" * 5000
        + "]" * 5000
        + "}}",
        '{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": NaN}}',
        '{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": -Infinity}}',
        '{"jsonrpc": "2.0", "id": 1e400, "method": "GetTask", "params": {}}',
        '{"jsonrpc": "2.0", "id": "\\ud800", "method": "GetTask", "params": {"id": "x"}}',
        '{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "\\udfff"}}',
        '{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "a\\u0000"}}',
    ],
    ids=["deep", "deep-param", "nan", "infinity", "1e400", "surrogate-id", "surrogate", "nul"],
)
def test_bodies_python_json_accepts_but_json_does_not_are_parse_errors(agent, body):
    assert rpc_raw(agent, body)["error"]["code"] == -32700


@pytest.mark.parametrize(
    "extra",
    [
        {"metadata": {"n": float("nan")}},
        {"parts": [{"data": {"n": float("inf")}}]},
        {"metadata": {"note": "a\x00b"}},
        {"parts": [{"text": "a\x00b"}]},
    ],
)
def test_unstorable_values_in_a_message_are_refused_and_nothing_is_stored(agent, peer, extra):
    msg = {**message(to=peer.id), **extra}
    if "metadata" in extra:
        msg["metadata"] = {**extra["metadata"], "destination": peer.id}
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg}}
    )
    assert rpc_raw(agent, body)["error"]["code"] == -32700
    assert not Task.objects.exists()


def test_message_id_longer_than_the_column_is_invalid_params(agent, peer):
    err = rpc(agent, "SendMessage", {"message": message(to=peer.id, message_id="m" * 201)})["error"]
    assert err["code"] == -32602 and "messageId" in err["message"]
    assert rpc(agent, "SendMessage", {"message": message(to=peer.id, message_id="m" * 200)})[
        "result"
    ]


@pytest.mark.parametrize("stamp", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"])
def test_timestamps_that_overflow_utc_are_invalid_params(agent, stamp):
    err = rpc(agent, "ListTasks", {"contextId": agent.id, "statusTimestampAfter": stamp})["error"]
    assert err["code"] == -32602


@pytest.mark.parametrize(
    "token",
    [
        b64(["9999-12-31T23:59:59-23:59", "00000000-0000-0000-0000-000000000000"]),
        base64.urlsafe_b64encode(b"[" * 3000 + b"]" * 3000).decode(),
    ],
    ids=["overflow", "deep"],
)
def test_forged_page_tokens_are_invalid_params(agent, token):
    err = rpc(agent, "ListTasks", {"contextId": agent.id, "pageToken": token})["error"]
    assert err["code"] == -32602


def rest(method: str, path: str, token: str, body: str | None = None):
    client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {token}")
    if body is None:
        return getattr(client, method)(path)
    return getattr(client, method)(path, body, content_type="application/json")


@pytest.mark.parametrize(
    "body",
    [
        "[" * 10_000 + "]" * 10_000,
        '{"name": "x", "description": "", "skills": ' + "[" * 5000 + "]" * 5000 + "}",
        '{"name": "a\\u0000", "description": ""}',
        '{"name": "x", "description": NaN}',
    ],
    ids=["deep", "deep-field", "nul", "nan"],
)
def test_rest_bodies_that_are_not_json_are_400(api_key, body):
    response = rest("post", "/api/v1/agents", api_key, body)
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["code"] == "INVALID_REQUEST"


@pytest.mark.parametrize(
    "query",
    [
        "?q=%00",
        pytest.param(
            "?cursor=" + b64(["a\x00", "00000000-0000-0000-0000-000000000000"]),
            marks=pytest.mark.skipif(
                "connection.vendor == 'sqlite'",
                reason="SQLite stores and compares NUL in text, so no database refuses this "
                "cursor there: it pages past every name (200)",
            ),
            id="nul-cursor",
        ),
    ],
)
def test_rest_query_values_the_database_refuses_are_400_not_503(agent, query):
    response = rest("get", "/api/v1/agents" + query, agent.token)
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["code"] == "INVALID_REQUEST"


@pytest.mark.parametrize("accept", ["", "text/plain", "application/xml, text/html;q=0.9"])
def test_an_accept_header_without_json_still_gets_json(agent, accept):
    """schemathesis's negative cases once sent `Accept:` (empty): a 500 on every REST route."""
    client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    me = client.get("/api/v1/agents/me", HTTP_ACCEPT=accept)
    assert me.status_code == 200, me.content[:300]
    assert me["Content-Type"] == "application/json" and me.json()["agent_id"] == agent.id
    unknown = client.get(f"/api/v1/agents/{uuid.uuid4()}", HTTP_ACCEPT=accept)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "AGENT_NOT_FOUND"


@pytest.mark.django_db(transaction=True)
def test_chunked_bodies_over_the_limit_are_413_not_400(broker, agent):
    def chunks():
        for _ in range(17):
            yield b" " * 65536  # 1.06 MiB of whitespace, sent without Content-Length

    for path in ("/a2a/", "/api/v1/agents"):
        response = httpx.post(
            broker.url + path,
            content=chunks(),
            headers={"Authorization": f"Bearer {agent.token}", "Content-Type": "application/json"},
            timeout=30,
        )
        assert response.status_code == 413, (path, response.text[:300])
        assert response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


@pytest.mark.parametrize(
    "configuration", [True, "x", [1], {"historyLength": "many"}, {"historyLength": -1}]
)
def test_a_bad_configuration_refuses_the_send_before_anything_is_delivered(
    agent, peer, configuration
):
    # It used to deliver the message and then answer 500 (non-object) or -32602 (bad
    # historyLength): the client was told "failed" about a message its peer had received.
    params = {"message": message(to=peer.id), "configuration": configuration}
    assert rpc(agent, "SendMessage", params)["error"]["code"] == -32602
    assert not Task.objects.exists()
