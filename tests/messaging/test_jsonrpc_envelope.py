"""The JSON-RPC envelope: parse errors, versions, methods, authentication."""

import json

import pytest
from django.test import Client

from tests.messaging.rpc import call, error, message

pytestmark = pytest.mark.django_db


def post_raw(body: str, agent=None, **extra):
    if agent is not None:
        extra["HTTP_AUTHORIZATION"] = f"Bearer {agent.token}"
    return Client().post(
        "/a2a/", body, content_type="application/json", HTTP_A2A_VERSION="1.0", **extra
    )


def test_parse_error(agent):
    body = post_raw("{nope", agent).json()
    assert body["error"]["code"] == -32700 and body["id"] is None


@pytest.mark.parametrize(
    "raw",
    [
        '[{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}}]',
        '{"id": 1, "method": "GetTask", "params": {}}',
        '{"jsonrpc": "1.0", "id": 1, "method": "GetTask", "params": {}}',
        '{"jsonrpc": "2.0", "id": 1, "method": 5, "params": {}}',
        '{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": [1]}',
        '{"jsonrpc": "2.0", "id": {"x": 1}, "method": "GetTask", "params": {}}',
        '"just a string"',
        "42",
    ],
)
def test_invalid_requests_including_batches(agent, raw):
    response = post_raw(raw, agent)
    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32600


def test_unknown_method(agent):
    err = error(agent, "tasks/explode")
    assert err["code"] == -32601
    assert err["data"][0]["reason"] == "METHOD_NOT_FOUND"


@pytest.mark.parametrize("version", ["2.0", "0.2", "banana"])
def test_unsupported_versions_are_32009(agent, version):
    err = error(agent, "GetTask", {"id": "x"}, version=version)
    assert err["code"] == -32009
    assert err["data"][0] == {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "VERSION_NOT_SUPPORTED",
        "domain": "a2a-protocol.org",
        "metadata": {},
    }


@pytest.mark.parametrize("version", ["1.0", "1.1", "1"])
def test_any_1_x_version_speaks_1_0(agent, peer, version):
    from tests.messaging.rpc import result

    task = result(agent, "SendMessage", {"message": message(to=peer.id)}, version=version)["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


def test_unauthenticated_requests_get_http_401(peer):
    response = call(None, "SendMessage", {"message": message(to=peer.id)})
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]["message"]


def test_compat_two_header_identity_works_on_json_rpc(tenant, agent, peer, api_key):
    response = Client().post(
        "/a2a/",
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": message(to=peer.id)},
            }
        ),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_key}",
        HTTP_X_AGENT_ID=agent.id,
        HTTP_A2A_VERSION="1.0",
    )
    assert response.json()["result"]["task"]["metadata"]["fromAgentId"] == agent.id


def test_root_path_is_the_same_endpoint(agent, peer):
    response = call(agent, "SendMessage", {"message": message(to=peer.id)}, path="/")
    assert "result" in response.json()


@pytest.mark.parametrize(
    "msg, field",
    [
        ("not an object", "message"),
        ({"role": "ROLE_USER", "parts": [{"text": "x"}]}, "messageId"),
        ({"messageId": "m", "role": "ROLE_USER", "parts": []}, "parts"),
        ({"messageId": "m", "role": "ROLE_USER", "parts": [{}]}, "parts"),
        ({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": 5}]}, "message"),
        ({"messageId": "m", "role": "ROLE_ROBOT", "parts": [{"text": "x"}]}, "message"),
        ({"messageId": "m", "bogus": 1, "parts": [{"text": "x"}]}, "message"),
        (
            {"messageId": "m", "parts": [{"text": "x"}], "metadata": {"destination": 5}},
            "destination",
        ),
        (
            {
                "messageId": "m",
                "parts": [{"text": "x"}],
                "metadata": {"destination": "{peer}", "sensitivity": "secret"},
            },
            "sensitivity",
        ),
        ({"messageId": "m", "parts": [{"text": "x"}]}, "destination"),
    ],
)
def test_malformed_messages_are_invalid_params_naming_the_field(agent, peer, msg, field):
    if (
        isinstance(msg, dict)
        and "metadata" in msg
        and msg["metadata"].get("destination") == "{peer}"
    ):
        msg["metadata"]["destination"] = peer.id
    err = error(agent, "SendMessage", {"message": msg})
    assert err["code"] == -32602
    assert field in err["message"] or field in json.dumps(err.get("data"))


def test_missing_task_id_param(agent):
    assert error(agent, "GetTask", {})["code"] == -32602
    assert error(agent, "CancelTask", {"id": 7})["code"] == -32602


def test_push_config_methods_name_their_missing_params(agent):
    for method in (
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ):
        err = error(agent, method, {})
        assert err["code"] == -32602 and "taskId" in err["message"], (method, err)
