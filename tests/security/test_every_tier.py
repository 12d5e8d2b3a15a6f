"""Bad input gets the same clean answer from every tier.

Each case used to answer a plain-text 500 (or to misbehave) on the ASGI path — the stream
tier, and everything under `make run` — where the WSGI tier answered correctly, or the
other way round. Every test runs against both tiers (the `tier` fixture of tests/tiers.py),
each a real server process: the ASGI app under uvicorn and the production WSGI app under
granian. Run the file on SQLite and on Postgres.
"""

from __future__ import annotations

import json
import uuid

import pytest
from django.conf import settings
from django.test import Client

from messaging.models import PushConfig, Task
from tenants import services as tenant_services
from tests import factories
from tests.messaging.rpc import message

pytestmark = pytest.mark.django_db(transaction=True)

DEEP = 100_000  # far beyond Python's recursion limit
CALLER_TOKEN = "hkc_" + "c" * 40


def headers(agent=None, version: str | None = "1.0", **extra: str) -> dict[str, str]:
    found = {"Authorization": f"Bearer {agent.token}"} if agent is not None else {}
    if version is not None:
        found["A2A-Version"] = version
    return {**found, **extra}


def envelope(method: str, params: dict, request_id: int = 7) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def rpc_error(answer, status: int = 200) -> dict:
    assert answer.status == status, (answer.status, answer.body[:500])
    assert answer.headers["content-type"].startswith("application/json"), answer.headers
    body = answer.json()
    assert body["jsonrpc"] == "2.0" and "result" not in body, body
    return body["error"]


@pytest.fixture
def endpoints(agent, peer):
    """The JSON-RPC endpoints a streaming method reaches: the broker's two and an agent's."""
    return ["/a2a/", "/", f"/a2a/agents/{peer.id}/"]


# Parse errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["SendStreamingMessage", "SubscribeToTask", "SendMessage"])
def test_deeply_nested_bodies_naming_a_stream_are_parse_errors(
    tier, agent, peer, endpoints, method
):
    # The text names a stream, so the dispatcher in front of Django parses even SendMessage.
    msg = message("please stream this", to=peer.id)
    deep = "[" * DEEP + "]" * DEEP
    body = envelope(method, {"message": msg, "id": "x"})[:-2] + f', "deep": {deep}}}}}'
    for path in endpoints:
        error = rpc_error(tier.post(path, body, headers(agent)))
        assert error["code"] == -32700, (path, error)
    assert not Task.objects.exists()


def test_a_lone_surrogate_in_a_subscription_is_a_parse_error(tier, agent, endpoints):
    body = '{"jsonrpc": "2.0", "id": 7, "method": "SubscribeToTask", "params": {"id": "\\ud800"}}'
    for path in endpoints:
        assert rpc_error(tier.post(path, body, headers(agent)))["code"] == -32700, path


@pytest.mark.parametrize(
    "value", ["NaN", "-Infinity", "1e400", '"a\\u0000b"'], ids=["nan", "infinity", "1e400", "nul"]
)
def test_values_json_does_not_allow_in_a_streamed_message_are_parse_errors(
    tier, agent, peer, endpoints, value
):
    msg = message(to=peer.id, parts=[{"data": {"n": 0}}])
    body = envelope("SendStreamingMessage", {"message": msg}).replace('"n": 0', f'"n": {value}')
    for path in endpoints:
        assert rpc_error(tier.post(path, body, headers(agent)))["code"] == -32700, path
    assert not Task.objects.exists()  # NUL was stored on SQLite by the stream tier


def test_nul_in_a_streamed_text_is_refused_and_nothing_is_stored(tier, agent, peer, endpoints):
    body = envelope("SendStreamingMessage", {"message": message("a\x00b", to=peer.id)})
    for path in endpoints:
        assert rpc_error(tier.post(path, body, headers(agent)))["code"] == -32700, path
    assert not Task.objects.exists()


# Invalid params ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["SendStreamingMessage", "SendMessage"])
@pytest.mark.parametrize("version", ["1.0", None])
def test_a_four_thousand_digit_integer_in_a_message_is_invalid_params(
    tier, agent, peer, endpoints, method, version
):
    big = "9" * 4000  # exact for Python, beyond any double a protobuf Struct holds
    if version is None:  # the 0.3 shape
        msg = {
            "kind": "message",
            "messageId": uuid.uuid4().hex,
            "role": "user",
            "parts": [{"kind": "data", "data": {"n": 0}}],
            "metadata": {"destination": peer.id},
        }
    else:
        msg = message(to=peer.id, parts=[{"data": {"n": 0}}])
    body = envelope(method, {"message": msg}).replace('"n": 0', f'"n": {big}')
    for path in endpoints:
        error = rpc_error(tier.post(path, body, headers(agent, version)))
        assert error["code"] == -32602 and "message" in error["message"], (path, error)
    assert not Task.objects.exists()


def test_a_four_thousand_digit_request_id_is_answered_with_it(tier, agent, endpoints):
    request_id = "9" * 4000  # beyond the 64-bit integers of the fast JSON encoder
    body = envelope("SubscribeToTask", {}).replace('"id": 7', f'"id": {request_id}')
    for path in endpoints:
        answer = tier.post(path, body, headers(agent))
        assert rpc_error(answer)["code"] == -32602, path
        assert answer.json()["id"] == int(request_id)


@pytest.mark.parametrize("configuration", [[1], "x", 5])
def test_a_streamed_send_with_a_configuration_that_is_not_an_object_is_refused(
    tier, agent, peer, endpoints, configuration
):
    params = {"message": message(to=peer.id), "configuration": configuration}
    for path in endpoints:
        error = rpc_error(tier.post(path, envelope("SendStreamingMessage", params), headers(agent)))
        assert error["code"] == -32602, (path, error)
        assert error["data"][0]["metadata"]["field"] == "configuration", error
    assert not Task.objects.exists()


# Push configs sent along with a streamed send ---------------------------------------------


@pytest.mark.parametrize("path", ["/a2a/", "/"])
def test_a_streamed_send_refuses_a_push_config_to_a_private_address(tier, agent, peer, path):
    config = {"url": "http://169.254.169.254/x"}
    params = {
        "message": message(to=peer.id),
        "configuration": {"taskPushNotificationConfig": config},
    }
    error = rpc_error(tier.post(path, envelope("SendStreamingMessage", params), headers(agent)))
    assert error["code"] == -32602, error
    assert error["message"].startswith("configuration.taskPushNotificationConfig.url: ")
    assert not Task.objects.exists() and not PushConfig.objects.exists()


@pytest.mark.parametrize("path", ["/a2a/", "/"])
def test_a_streamed_send_attaches_its_push_config_to_the_task(tier, agent, peer, path):
    config = {"url": "http://127.0.0.1:9/hook", "token": "t-1"}
    params = {
        "message": message(to=peer.id),
        "configuration": {"taskPushNotificationConfig": config},
    }
    answer = tier.post(path, envelope("SendStreamingMessage", params), headers(agent))
    assert answer.status == 200 and answer.streaming, (answer.status, answer.body[:500])
    task_id = answer.first_event()["result"]["task"]["id"]
    stored = PushConfig.objects.get(task_id=task_id)
    assert (stored.url, stored.token) == (config["url"], config["token"])


# Event ids --------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["since", "Last-Event-ID"])
@pytest.mark.parametrize("value", ["99999999999999999999", "9223372036854775808"])
def test_an_event_id_beyond_any_bigint_is_a_400(tier, agent, where, value):
    if where == "since":
        answer = tier.get(f"/api/v1/subscribe?since={value}", headers(agent))
    else:
        answer = tier.get("/api/v1/subscribe", headers(agent, **{"Last-Event-ID": value}))
    assert answer.status == 400, (answer.status, answer.body[:300])
    error = answer.json()["error"]
    assert error["code"] == "INVALID_REQUEST" and error["details"] == {"field": where}


def test_an_event_id_beyond_any_bigint_is_a_400_on_the_web_ui_stream(tier, tenant):
    user = factories.user("member@example.com")
    tenant_services.add_member(tenant=tenant, user=user)
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    for query, extra in (("?since=99999999999999999999", {}), ("", {"Last-Event-ID": "1" * 20})):
        answer = tier.get(f"/ui/t/{tenant.slug}/events/{query}", {"Cookie": cookie, **extra})
        assert answer.status == 400, (answer.status, answer.body[:300])
        assert answer.json()["error"]["code"] == "INVALID_REQUEST"


def test_the_largest_event_id_opens_the_stream(tier, agent):
    answer = tier.get("/api/v1/subscribe?since=9223372036854775807", headers(agent))
    assert answer.status == 200 and answer.streaming
    assert answer.first_event()["last_event_id"] == 9223372036854775807


# No existence oracle on agents' endpoints -------------------------------------------------

PEER_CALLS = [
    (
        "SendMessage",
        {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
    ),
    (
        "SendStreamingMessage",
        {"message": {"messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
    ),
    ("GetTask", {"id": "00000000-0000-0000-0000-000000000000"}),
    ("SubscribeToTask", {"id": "00000000-0000-0000-0000-000000000000"}),
    ("ListTasks", {}),
    ("CancelTask", {"id": "00000000-0000-0000-0000-000000000000"}),
    ("CreateTaskPushNotificationConfig", {"taskId": "t", "url": "https://example.com/h"}),
    ("GetTaskPushNotificationConfig", {"taskId": "t", "id": "c"}),
    ("ListTaskPushNotificationConfigs", {"taskId": "t"}),
    ("DeleteTaskPushNotificationConfig", {"taskId": "t", "id": "c"}),
    ("GetExtendedAgentCard", {}),
    ("message/stream", {"message": {"messageId": "m-3", "role": "user", "parts": []}}),
    ("NoSuchMethod", {}),
]
COMPARED_HEADERS = ("content-type", "content-length", "www-authenticate", "retry-after")


def compared(answer) -> tuple:
    return (
        answer.status,
        {name: answer.headers.get(name) for name in COMPARED_HEADERS},
        answer.body,
    )


@pytest.mark.parametrize("credential", [None, CALLER_TOKEN], ids=["anonymous", "caller-token"])
@pytest.mark.parametrize("method,params", PEER_CALLS, ids=[m for m, _ in PEER_CALLS])
def test_a_private_agent_and_an_unknown_id_answer_byte_for_byte_alike(
    tier, tenant, credential, method, params
):
    private = factories.agent(tenant, name="private")
    extra = {"Authorization": f"Bearer {credential}"} if credential else {}
    body = envelope(method, params)
    existing = tier.post(f"/a2a/agents/{private.id}/", body, {"A2A-Version": "1.0", **extra})
    unknown = tier.post(f"/a2a/agents/{uuid.uuid4()}/", body, {"A2A-Version": "1.0", **extra})
    assert compared(existing) == compared(unknown)
    assert rpc_error(existing, 401)["code"] == -32000


@pytest.mark.parametrize("method,params", PEER_CALLS[:4], ids=[m for m, _ in PEER_CALLS[:4]])
def test_another_tenants_private_agent_and_an_unknown_id_are_the_same_404(
    tier, tenant, other_api_key, method, params
):
    private = factories.agent(tenant, name="private")
    body = envelope(method, params)
    auth = {"A2A-Version": "1.0", "Authorization": f"Bearer {other_api_key}"}
    # Ids in upper case: an answer that normalised the existing one would tell them apart.
    private_id, unknown_id = private.id.upper(), str(uuid.uuid4()).upper()
    existing = tier.post(f"/a2a/agents/{private_id}/", body, auth)
    unknown = tier.post(f"/a2a/agents/{unknown_id}/", body, auth)
    # Each answer names the id it was asked about, and nothing else differs.
    assert compared(existing) == compared(unknown)[:2] + (
        unknown.body.replace(unknown_id.encode(), private_id.encode()),
    )
    assert rpc_error(existing, 404)["code"] == -32600
