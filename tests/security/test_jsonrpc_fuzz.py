"""Malformed JSON-RPC, generated: never a 5xx, always a JSON-RPC error object or a 4xx envelope.

Hypothesis drives the endpoint in-process (thousands of requests in seconds): random JSON and
random bytes as the body, well-formed envelopes with wrong types in every parameter of every
method, mutations of a valid SendMessage at every path, batches, duplicate keys, NaN/Infinity
literals, non-UTF-8 bytes, huge and deeply nested bodies, in both wire dialects. A last test
replays the nastiest fixed bodies against a real server process, where the ASGI server parses
the request itself.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from messaging.a2a.methods import METHODS
from tests.security.checks import assert_rpc_answer

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(["", "*", "0", "TASK_STATE_COMPLETED", "ack", str(uuid.uuid4())])
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
dialects = st.sampled_from([None, "1.0", "0.3", "2.0"])
paths = st.sampled_from(["/a2a/", "/"])


def post(agent, body: bytes | str, *, version: str | None, path: str = "/a2a/"):
    extra = {"HTTP_AUTHORIZATION": f"Bearer {agent.token}"}
    if version is not None:
        extra["HTTP_A2A_VERSION"] = version
    response = Client(raise_request_exception=False).post(
        path, body, content_type="application/json", **extra
    )
    return assert_rpc_answer(response.status_code, response.content)


def envelope(method: Any, params: Any, request_id: Any = 1) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


@FUZZ
@given(body=json_values, version=dialects, path=paths)
def test_any_json_value_as_the_body(agent, body, version, path):
    post(agent, json.dumps(body), version=version, path=path)


@FUZZ
@given(body=st.binary(max_size=300), version=dialects)
def test_any_bytes_as_the_body(agent, body, version):
    post(agent, body, version=version)


@FUZZ
@given(
    method=st.sampled_from(sorted(METHODS)) | st.text(max_size=20),
    params=st.dictionaries(
        st.sampled_from(
            [
                "id",
                "message",
                "contextId",
                "status",
                "pageSize",
                "pageToken",
                "historyLength",
                "includeArtifacts",
                "statusTimestampAfter",
                "since",
                "metadata",
                "configuration",
                "taskId",
            ]
        ),
        json_values,
        max_size=5,
    ),
    request_id=json_values,
    version=dialects,
)
def test_wrong_types_in_every_param_of_every_method(agent, method, params, request_id, version):
    if "contextId" in params and params["contextId"] == "me":
        params["contextId"] = agent.id
    post(agent, envelope(method, params, request_id), version=version)


def valid_message(to: str) -> dict[str, Any]:
    return {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"text": "hello"}, {"data": {"k": [1, 2]}}],
        "metadata": {"destination": to},
        "referenceTaskIds": [],
    }


def paths_of(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths_of(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths_of(item, (*prefix, index))
    return found


def replaced(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = replaced(value[path[0]], path[1:], new)
    return copy


@FUZZ
@given(data=st.data(), version=dialects)
def test_a_valid_send_with_any_one_value_replaced(agent, peer, data, version):
    message = valid_message(peer.id)
    if version in (None, "0.3"):
        message["role"] = "user"
        message["parts"] = [{"kind": "text", "text": "hello"}]
    target = data.draw(st.sampled_from(paths_of(message)))
    mutated = replaced(message, target, data.draw(json_values))
    mutated_params = {"message": mutated, "configuration": data.draw(json_values)}
    post(agent, envelope("SendMessage", mutated_params), version=version)


@FUZZ
@given(
    action=st.sampled_from(
        ["ack", "accept", "complete", "reject", "fail", "block", "reply", "comment"]
    )
    | st.text(max_size=10)
    | json_values,
    task_id=st.sampled_from(["own", "random", "summary"]) | json_values,
    parts=json_values,
)
def test_lifecycle_follow_ups_with_any_action_task_and_parts(agent, peer, action, task_id, parts):
    sent = post(agent, envelope("SendMessage", {"message": valid_message(peer.id)}), version="1.0")
    task_ids = {"own": sent["result"]["task"]["id"], "random": str(uuid.uuid4())}
    message = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "taskId": task_ids.get(task_id, task_id) if isinstance(task_id, str) else task_id,
        "parts": parts,
        "metadata": {"action": action},
    }
    post(peer, envelope("SendMessage", {"message": message}), version="1.0")


@FUZZ
@given(requests=st.lists(json_values, max_size=5), version=dialects)
def test_batches_are_refused(agent, requests, version):
    body = post(agent, json.dumps(requests), version=version)
    assert body["error"]["code"] in (-32600, -32700)  # NaN inside: not JSON at all


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    keys=st.lists(st.sampled_from(["jsonrpc", "id", "method", "params"]), min_size=2, max_size=8),
    values=st.lists(
        st.sampled_from(['"2.0"', '"1.0"', '"GetTask"', '{"id": "x"}', "[]", "1", "null", "NaN"]),
        min_size=8,
        max_size=8,
    ),
)
def test_duplicate_keys(agent, keys, values):
    members = ", ".join(f'"{key}": {values[i]}' for i, key in enumerate(keys))
    post(agent, "{" + members + "}", version="1.0")


def send_body(peer_id: str, text: str) -> str:
    return envelope(
        "SendMessage", {"message": {**valid_message(peer_id), "parts": [{"text": text}]}}
    )


NASTY_BODIES = {
    "deep-arrays-10000": "[" * 10_000 + "]" * 10_000,
    "deep-objects-10000": '{"a":' * 10_000 + "1" + "}" * 10_000,
    "deep-params": envelope("GetTask", {"id": "x"})[:-1]
    + ', "x": '
    + "[" * 10_000
    + "]" * 10_000
    + "}",
    "nan-literals": '{"jsonrpc": "2.0", "id": NaN, "method": "GetTask", "params": {"id": Infinity}}',
    "huge-number": '{"jsonrpc": "2.0", "id": 1'
    + "0" * 5000
    + ', "method": "GetTask", "params": {}}',
    "float-overflow": '{"jsonrpc": "2.0", "id": 1e999, "method": "GetTask", "params": {}}',
    "latin-1": '{"jsonrpc": "2.0", "id": "\xe9", "method": "GetTask", "params": {}}'.encode(
        "latin-1"
    ),
    "invalid-utf8": b'{"jsonrpc": "2.0", "id": "\xff\xfe", "method": "GetTask", "params": {}}',
    "utf16-bom": '{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}}'.encode("utf-16"),
    "lone-surrogate": '{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "\\udc00"}}',
    "nul": '{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "\\u0000"}}',
    "empty": "",
    "whitespace": " \n\t ",
    "truncated": envelope("GetTask", {"id": "x"})[:-3],
    "trailing-garbage": envelope("GetTask", {"id": "x"}) + "}}",
    "batch": "[" + ",".join([envelope("GetTask", {"id": "x"})] * 50) + "]",
    "empty-batch": "[]",
    "params-array": envelope("GetTask", [1, 2, 3]),
    "method-object": envelope({"m": 1}, {}),
    "id-object": envelope("GetTask", {}, {"x": 1}),
    "id-bool": envelope("GetTask", {}, True),
    "id-float": envelope("GetTask", {}, 1.5),
    "huge-string-900k": None,  # filled in below: a message just under the body limit
    "many-parts": None,
    "huge-metadata": None,
}


def nasty_bodies(peer_id: str) -> dict[str, bytes | str]:
    bodies = dict(NASTY_BODIES)
    bodies["huge-string-900k"] = send_body(peer_id, "x" * 900_000)
    many = {**valid_message(peer_id), "parts": [{"text": "p"}] * 5000}
    bodies["many-parts"] = envelope("SendMessage", {"message": many})
    meta = {**valid_message(peer_id)}
    meta["metadata"] = {"destination": peer_id, "blob": "m" * 200_000}
    bodies["huge-metadata"] = envelope("SendMessage", {"message": meta})
    return bodies


@pytest.mark.parametrize("name", sorted(NASTY_BODIES))
@pytest.mark.parametrize("version", [None, "1.0"])
def test_nasty_bodies_in_process(agent, peer, name, version):
    body = post(agent, nasty_bodies(peer.id)[name], version=version)
    if name in ("huge-string-900k", "many-parts", "huge-metadata"):
        assert body["error"]["code"] == -32602


@pytest.mark.django_db(transaction=True)
def test_nasty_bodies_and_headers_against_a_real_server(broker, agent, peer):
    bodies = nasty_bodies(peer.id)
    bodies["over-1-mib"] = send_body(peer.id, "x" * (1024 * 1024))
    header_sets = [
        {"Authorization": f"Bearer {agent.token}", "A2A-Version": "1.0"},
        {"Authorization": f"Bearer {agent.token}"},
        {"Authorization": f"Bearer {agent.token}", "A2A-Version": b"\xff\xfe"},
        {"Authorization": f"Bearer {agent.token}", "X-Agent-Id": b"\xe9" * 40},
        {"Authorization": b"Bearer \xe9\xe9\xe9"},
        {"Authorization": f"Bearer {agent.token}", "Content-Type": "text/plain; charset=utf-7"},
    ]
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        for name, body in bodies.items():
            for headers in header_sets:
                content = body.encode() if isinstance(body, str) else body
                response = http.post(
                    "/a2a/",
                    content=content,
                    headers={"Content-Type": "application/json", **headers},
                )
                assert_rpc_answer(response.status_code, response.content)
                if name == "over-1-mib":
                    assert response.status_code == 413, name
        for method in ("GET", "PUT", "DELETE", "PATCH", "OPTIONS"):
            response = http.request(
                method, "/a2a/", headers={"Authorization": f"Bearer {agent.token}"}
            )
            assert response.status_code < 500 and b"traceback" not in response.content.lower()
