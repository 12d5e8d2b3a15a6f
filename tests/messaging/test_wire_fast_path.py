"""The wire format's plain-Python path gives exactly what a2a-sdk's path gives.

`parse_message`, `task_v03`, `message_v03` and `stream_response_v03` answer the common shapes
without protobuf or pydantic (messaging/a2a/protojson.py, render_v03.py). Hypothesis generates
messages and task bodies of every shape that path handles, and each result must equal the sdk's
to the type of every number (1 is not 1.0) and to the order of every key but those inside a
protobuf Struct (whose order protobuf itself does not keep). The shapes it does not handle must
reach the sdk path, so they are answered, or refused, exactly as before.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from a2a.compat.v0_3 import conversions
from a2a.types import Message, StreamResponse, Task
from django.test import Client
from google.protobuf.json_format import ParseDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hikyaku import parsers
from hikyaku.errors import InvalidRequest
from messaging.a2a import protojson, render_v03, wire
from messaging.a2a.protojson import Unhandled
from messaging.a2a.wire import Dialect
from messaging.models import TaskEvent
from tests.messaging import rpc

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
V1, V03 = Dialect.V1_0, Dialect.V0_3


# What the sdk paths give (the definitions the fast path must match) ---------------------------


def sdk_parse(raw: Any, dialect: Dialect, ignore_unknown_fields: bool = False) -> Any:
    """parse_message through a2a-sdk's types only (after the checks every path makes first),
    as a result or as the error it raises."""
    try:
        if isinstance(raw, dict):
            wire.check_file_bytes(raw, dialect)
        return wire.parse_message_sdk(raw, dialect, ignore_unknown_fields=ignore_unknown_fields)
    except Exception as exc:  # noqa: BLE001 - the error is the result to compare
        return outcome_of_error(exc)


def outcome_of_error(exc: Exception) -> tuple[Any, ...]:
    return (type(exc), str(exc), getattr(exc, "details", None))


def parse(raw: Any, dialect: Dialect, ignore_unknown_fields: bool = False) -> Any:
    try:
        return wire.parse_message(raw, dialect, ignore_unknown_fields=ignore_unknown_fields)
    except Exception as exc:  # noqa: BLE001
        return outcome_of_error(exc)


def sdk_task_v03(body: dict[str, Any]) -> dict[str, Any]:
    return conversions.to_compat_task(ParseDict(body, Task())).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


def sdk_message_v03(body: dict[str, Any]) -> dict[str, Any]:
    return conversions.to_compat_message(ParseDict(body, Message())).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


def sdk_stream_response_v03(result: dict[str, Any], request_id: Any) -> dict[str, Any]:
    compat = conversions.to_compat_stream_response(
        ParseDict(result, StreamResponse()), request_id
    ).model_dump(mode="json", by_alias=True, exclude_none=True)
    body = result.get("statusUpdate") or result.get("artifactUpdate")
    if body and "metadata" in body:
        compat["result"]["metadata"] = body["metadata"]
    return compat


# Equality to the type of every number and the order of every key ------------------------------

STRUCT_KEYS = {"metadata", "data"}  # their values went through a protobuf Struct or Value


def key_order(value: Any) -> Any:
    if isinstance(value, dict):
        return [(k, None if k in STRUCT_KEYS else key_order(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [key_order(v) for v in value]
    return None


def assert_same(fast: Any, sdk: Any) -> None:
    assert json.dumps(fast, sort_keys=True) == json.dumps(sdk, sort_keys=True)
    assert key_order(fast) == key_order(sdk)


# Generated JSON -----------------------------------------------------------------------------

texts = st.text(max_size=12) | st.sampled_from(["", "héllo", "日本語", "emoji 🎉", "a\nb\u2028"])
numbers = (
    st.integers(min_value=-(2**80), max_value=2**80)
    | st.sampled_from([0, -1, 2**53 + 1, -(2**63), 2**64 - 1, 2**64 + 1, 10**300, -(10**308)])
    | st.floats(allow_nan=False, allow_infinity=False)
)
scalars = st.none() | st.booleans() | numbers | texts
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
objects = st.dictionaries(texts, json_values, max_size=5)
ids = st.text(min_size=1, max_size=40)
base64_texts = st.binary(max_size=24).map(lambda b: base64.b64encode(b).decode())


@st.composite
def shuffled(draw: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """An object with each optional field present or not, in any order (`fields` maps a key
    to a strategy; a key ending in `!` is always present)."""
    items = []
    for key, strategy in fields.items():
        required = key.endswith("!")
        if required or draw(st.booleans()):
            items.append((key.rstrip("!"), draw(strategy)))
    return dict(draw(st.permutations(items)))


def part_v1(content: str) -> st.SearchStrategy[dict[str, Any]]:
    values = {
        "text": texts,
        "data": json_values.filter(lambda v: v is not None),
        "url": texts,
        "raw": base64_texts,
    }
    return shuffled(
        {f"{content}!": values[content], "metadata": objects, "filename": texts, "mediaType": texts}
    )


parts_v1 = st.sampled_from(["text", "data", "url", "raw"]).flatmap(part_v1)
messages_v1 = shuffled(
    {
        "messageId!": ids,
        "contextId": texts,
        "taskId": texts,
        "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", "ROLE_UNSPECIFIED"]),
        "parts": st.lists(parts_v1, max_size=4),
        "metadata": objects,
        "extensions": st.lists(texts, max_size=2),
        "referenceTaskIds": st.lists(texts, max_size=2),
    }
)

optional_texts = st.none() | texts
parts_v03 = st.one_of(
    shuffled({"kind!": st.just("text"), "text!": texts, "metadata": st.none() | objects}),
    shuffled(
        {
            "kind!": st.just("data"),
            "data!": objects,
            "metadata": st.none() | objects.filter(lambda m: "data_part_compat" not in m),
        }
    ),
    shuffled(
        {
            "kind!": st.just("file"),
            "file!": st.one_of(
                shuffled(
                    {"bytes!": base64_texts, "mimeType": optional_texts, "name": optional_texts}
                ),
                shuffled({"uri!": texts, "mimeType": optional_texts, "name": optional_texts}),
            ),
            "metadata": st.none() | objects,
        }
    ),
)
messages_v03 = shuffled(
    {
        "messageId!": ids,
        "role!": st.sampled_from(["user", "agent"]),
        "parts!": st.lists(parts_v03, max_size=4),
        "kind": st.just("message"),
        "contextId": optional_texts,
        "taskId": optional_texts,
        "metadata": st.none() | objects,
        "extensions": st.none() | st.lists(texts, max_size=2),
        "referenceTaskIds": st.none() | st.lists(texts, max_size=2),
        "somethingElse": json_values,  # pydantic ignores unknown fields
    }
)

# Stored messages and task bodies (1.0 ProtoJSON as the broker keeps and renders it).
stored_parts = st.sampled_from(["text", "data", "url", "raw"]).flatmap(part_v1)
stored_messages = shuffled(
    {
        "messageId": texts,
        "contextId": texts,
        "taskId": texts,
        "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", "ROLE_UNSPECIFIED"]),
        "parts": st.lists(stored_parts, max_size=3),
        "metadata": objects,
        "extensions": st.lists(texts, max_size=2),
        "referenceTaskIds": st.lists(texts, max_size=2),
    }
)
artifacts = shuffled(
    {
        "artifactId": texts,
        "name": texts,
        "description": texts,
        "parts": st.lists(stored_parts, max_size=3),
        "metadata": objects,
        "extensions": st.lists(texts, max_size=2),
    }
)
fractions = st.sampled_from(["", ".0", ".5", ".120", ".123456", ".000001", ".123456789"]) | (
    st.integers(min_value=0, max_value=10**9 - 1).flatmap(
        lambda n: st.integers(min_value=1, max_value=9).map(lambda w: "." + str(n).zfill(9)[:w])
    )
)
timestamps = st.one_of(
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat().replace("+00:00", "Z")),
    st.tuples(st.datetimes(), fractions).map(
        lambda t: t[0].replace(microsecond=0).isoformat() + t[1] + "Z"
    ),
)
states = st.sampled_from([*render_v03._STATES])
statuses = shuffled({"state": states, "message": stored_messages, "timestamp": timestamps})
task_bodies = shuffled(
    {
        "id!": texts,
        "contextId!": texts,
        "status!": statuses,
        "artifacts": st.lists(artifacts, max_size=3),
        "history": st.lists(stored_messages, max_size=3),
        "metadata": objects,
    }
)
request_ids = st.none() | st.integers(min_value=-(2**70), max_value=2**70) | texts
update_metadata = shuffled({"eventId!": st.integers(min_value=1), "kind!": texts}) | objects
stream_results = st.one_of(
    shuffled(
        {"taskId": texts, "contextId": texts, "status!": statuses, "metadata": update_metadata}
    ).map(lambda b: {"statusUpdate": b}),
    shuffled(
        {
            "taskId": texts,
            "contextId": texts,
            "artifact!": artifacts,
            "append": st.booleans(),
            "lastChunk": st.booleans(),
            "metadata": update_metadata,
        }
    ).map(lambda b: {"artifactUpdate": b}),
    task_bodies.map(lambda b: {"task": b}),
    stored_messages.map(lambda b: {"message": b}),
)


# The properties -----------------------------------------------------------------------------


@PROPERTY
@given(raw=messages_v1, ignore=st.booleans())
def test_a_1_0_message_parses_as_the_sdk_parses_it(raw, ignore):
    fast = protojson.message_v1(raw, ignore_unknown_fields=ignore)
    assert_same(fast, sdk_parse(raw, V1, ignore))
    assert_same(wire.parse_message(raw, V1, ignore_unknown_fields=ignore), fast)


@PROPERTY
@given(raw=messages_v1, extra=st.dictionaries(st.sampled_from(["kind", "x-y", "Foo"]), json_values))
def test_unknown_fields_of_a_1_0_message_are_dropped_where_the_endpoint_ignores_them(raw, extra):
    raw = {**raw, **extra}
    fast = protojson.message_v1(raw, ignore_unknown_fields=True)
    assert_same(fast, sdk_parse(raw, V1, ignore_unknown_fields=True))


@PROPERTY
@given(raw=messages_v03)
def test_a_0_3_message_parses_as_the_sdk_parses_it(raw):
    fast = protojson.message_v03(raw)
    assert_same(fast, sdk_parse(raw, V03))
    assert_same(wire.parse_message(raw, V03), fast)


@PROPERTY
@given(body=task_bodies)
def test_a_task_renders_in_0_3_as_the_sdk_renders_it(body):
    fast = render_v03.task(body)
    assert_same(fast, sdk_task_v03(body))
    assert_same(wire.task_v03(body), fast)


@PROPERTY
@given(body=stored_messages)
def test_a_message_renders_in_0_3_as_the_sdk_renders_it(body):
    fast = render_v03.message(body)
    assert_same(fast, sdk_message_v03(body))
    assert_same(wire.message_v03(body), fast)


@PROPERTY
@given(result=stream_results, request_id=request_ids)
def test_a_stream_update_renders_in_0_3_as_the_sdk_renders_it(result, request_id):
    render_v03.stream_response(result, request_id)  # handled, not a fallback
    assert_same(
        wire.stream_response_v03(result, request_id), sdk_stream_response_v03(result, request_id)
    )


def test_a_typical_task_renders_in_0_3_as_the_sdk_renders_it():
    """What `task_v1` gives for a delivered, then blocked task: every part kind, integers in
    data and metadata (floats in 0.3), a status message, history and artifacts."""
    message = {
        "messageId": "m-1",
        "role": "ROLE_USER",
        "parts": [
            {"text": "hello ☃"},
            {"data": {"ticket": 42, "tags": ["a", ""], "nested": {"n": [1, 2.5, None]}}},
            {"url": "https://example.com/f.txt", "mediaType": "text/plain", "filename": "f.txt"},
            {"raw": base64.b64encode(b"\x00\xffbytes").decode(), "metadata": {"size": 7}},
            {"data": [1, 2]},
        ],
        "metadata": {"destination": "agent-b", "priority": 1},
    }
    question = {"messageId": "m-2", "role": "ROLE_AGENT", "parts": [{"text": "which?"}]}
    ids = {"taskId": "t-1", "contextId": "agent-b"}
    body = {
        "id": "t-1",
        "contextId": "agent-b",
        "status": {
            "state": "TASK_STATE_INPUT_REQUIRED",
            "timestamp": _stamp(datetime(2026, 3, 1, 12, 0, 0, 120000, tzinfo=UTC)),
            "message": {**question, **ids},
        },
        "artifacts": [{"artifactId": "message-1", "name": "message", "parts": message["parts"]}],
        "history": [{**message, **ids}, {**question, **ids}],
        "metadata": {"fromAgentId": "a", "type": "unicast", "awaiting": "sender", "count": 3},
    }
    fast = wire.task_v03(body)
    assert fast["status"]["timestamp"] == "2026-03-01T12:00:00.120Z"
    assert fast["metadata"]["count"] == 3.0 and isinstance(fast["metadata"]["count"], float)
    assert fast["artifacts"][0]["parts"][4] == {
        "data": {"value": [1.0, 2.0]},
        "kind": "data",
        "metadata": {"data_part_compat": True},
    }
    assert_same(fast, sdk_task_v03(body))


def test_text_choices_come_back_as_plain_strings():
    """An event row made in this process carries its kind as a TextChoices member; protobuf
    gives plain strings back, and so does the fast path."""
    kind = TaskEvent.Kind.ACK
    body = {
        **TASK,
        "metadata": {"kind": kind},
        "history": [{"messageId": kind, "role": "ROLE_USER"}],
    }
    fast = render_v03.task(body)
    assert type(fast["metadata"]["kind"]) is str and type(fast["history"][0]["messageId"]) is str
    assert_same(fast, sdk_task_v03(body))
    update = {
        "statusUpdate": {"taskId": "t", "status": {}, "metadata": {"kind": kind, "eventId": 3}}
    }
    render_v03.stream_response(update, 1)  # handled, not a fallback
    assert_same(wire.stream_response_v03(update, 1), sdk_stream_response_v03(update, 1))


def _stamp(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


# The shapes the fast path leaves to the sdk ---------------------------------------------------

LONG_ID = "x" * (wire.MAX_MESSAGE_ID_LENGTH + 1)
TEXT = [{"text": "hi"}]
FALLBACK_V1 = [
    {"message_id": "m", "parts": TEXT},  # a proto field name
    {"messageId": "m", "role": 1, "parts": TEXT},  # an enum number
    {"messageId": "m", "role": "user", "parts": TEXT},  # the other dialect's spelling
    {"messageId": "m", "parts": [{"raw": "-_8"}]},  # base64 that protobuf normalises
    {"messageId": "m", "parts": [{"raw": "QQ"}]},  # unpadded
    {"messageId": "m", "parts": [{"raw": "QR=="}]},  # stray bits protobuf drops
    {"messageId": "m", "parts": TEXT, "[ext.name]": 1},  # an extension name
    {"messageId": 7, "parts": TEXT},  # a wrong type
    {"messageId": "m", "parts": {"text": "hi"}},
    {"messageId": "m", "parts": [{"text": 5}]},
    {"messageId": "m", "parts": TEXT, "metadata": ["not", "an", "object"]},
    {"messageId": "m", "parts": TEXT, "extensions": [None]},
    {"messageId": "m", "parts": TEXT, "contextId": None},  # null
    {"messageId": "m", "parts": [{"data": None}]},
    {"messageId": "m", "parts": [{"text": "a", "url": "u"}]},  # two contents
    {"messageId": "m", "parts": [{"filename": "f"}]},  # no content
    {"messageId": "", "parts": TEXT},  # no id
    {"parts": TEXT},
    {"messageId": LONG_ID, "parts": TEXT},
    {"messageId": "m", "parts": [{"data": {"n": 10**400}}]},  # no float holds it
    {"messageId": "m", "parts": TEXT, "metadata": {"n": float("inf")}},
    {"messageId": "m", "parts": TEXT, "metadata": {"s": "\ud800"}},  # an unpaired surrogate
    {"messageId": "m", "parts": [{"data": json.loads("[" * 60 + "]" * 60)}]},  # deep
]
FALLBACK_V03 = [
    {"message_id": "m", "role": "user", "parts": []},
    {"messageId": "m", "role": "ROLE_USER", "parts": []},
    {"messageId": "m", "role": "user", "kind": "task", "parts": []},
    {"messageId": "m", "role": "user", "parts": [{"text": "no kind"}]},
    {"messageId": "m", "role": "user", "parts": [{"kind": "text", "text": "a", "x": 1}]},
    {
        "messageId": "m",
        "role": "user",
        "parts": [{"kind": "file", "file": {"uri": "u", "bytes": ""}}],
    },
    {"messageId": "m", "role": "user", "parts": [{"kind": "file", "file": {"bytes": "QQ"}}]},
    {"messageId": "m", "role": "user", "parts": [{"kind": "file", "file": {"bytes": "QR=="}}]},
    {
        "messageId": "m",
        "role": "user",
        "parts": [{"kind": "file", "file": {"uri": "u", "mime_type": "t"}}],
    },
    {
        "messageId": "m",
        "role": "user",
        "parts": [{"kind": "data", "data": {"value": 1}, "metadata": {"data_part_compat": True}}],
    },
    {"messageId": "m", "role": "user", "parts": [{"kind": "data", "data": [1]}]},
    {"messageId": "m", "role": "user", "parts": None},
    {"messageId": None, "role": "user", "parts": []},
    {"messageId": "", "role": "user", "parts": []},
    {"messageId": LONG_ID, "role": "user", "parts": []},
    {"messageId": "m", "role": "user", "parts": [], "metadata": {"n": -(10**400)}},
    {"messageId": "m", "role": "user", "parts": [], "extensions": "e"},
]


@pytest.mark.parametrize("raw", FALLBACK_V1, ids=range(len(FALLBACK_V1)))
@pytest.mark.parametrize("ignore", [False, True])
def test_other_1_0_shapes_take_the_sdk_path(raw, ignore):
    with pytest.raises(Unhandled):
        message = protojson.message_v1(raw, ignore_unknown_fields=ignore)
        if 0 < len(message.get("messageId", "")) <= wire.MAX_MESSAGE_ID_LENGTH:
            return
        raise Unhandled
    assert parse(raw, V1, ignore) == sdk_parse(raw, V1, ignore)


@pytest.mark.parametrize("raw", FALLBACK_V03, ids=range(len(FALLBACK_V03)))
def test_other_0_3_shapes_take_the_sdk_path(raw):
    with pytest.raises(Unhandled):
        message = protojson.message_v03(raw)
        if 0 < len(message.get("messageId", "")) <= wire.MAX_MESSAGE_ID_LENGTH:
            return
        raise Unhandled
    assert parse(raw, V03) == sdk_parse(raw, V03)


def test_an_unknown_field_is_an_error_unless_the_endpoint_ignores_them():
    raw = {"messageId": "m", "parts": [{"text": "a", "kind": "text"}], "kind": "message"}
    with pytest.raises(Unhandled):
        protojson.message_v1(raw)
    assert parse(raw, V1) == sdk_parse(raw, V1)
    assert parse(raw, V1)[0] is InvalidRequest
    assert_same(protojson.message_v1(raw, ignore_unknown_fields=True), sdk_parse(raw, V1, True))


def test_errors_keep_their_wording():
    assert parse({"messageId": "m", "parts": [{"filename": "f"}]}, V1) == (
        InvalidRequest,
        "message.parts[0] needs text, data, url or raw content.",
        {"field": "message.parts[0]"},
    )
    assert parse({"messageId": "", "role": "user", "parts": []}, V03)[1] == (
        "message.messageId is required."
    )
    assert (
        parse({"role": "user", "parts": []}, V03)[1] == "Invalid message.messageId: Field required"
    )


def test_a_number_no_float_holds_is_a_clear_error():
    """Protobuf's Struct cannot hold a 400-digit integer: -32602, not an HTTP 500."""
    data = {"messageId": "m", "parts": [{"data": {"n": 10**400}}]}
    meta = {"messageId": "m", "role": "user", "parts": [], "metadata": {"n": 10**400}}
    for raw, dialect in ((data, V1), (meta, V03)):
        with pytest.raises(InvalidRequest) as caught:
            wire.parse_message(raw, dialect)
        assert caught.value.details == {"field": "message"}
        assert "a number is too large" in str(caught.value)


def test_a_number_no_float_holds_is_a_json_rpc_error(agent, peer):
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {**rpc.message(to=str(peer.id)), "parts": [{"data": {"n": 10**400}}]}
            },
        }
    )
    response = Client(raise_request_exception=False).post(
        "/a2a/",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agent.token}",
        HTTP_A2A_VERSION="1.0",
    )
    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32602


TASK = {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}
FALLBACK_TASKS = [
    {**TASK, "status": {"state": 2}},  # an enum number
    {**TASK, "status": {"state": "working"}},  # not a 1.0 name: the sdk refuses it
    {**TASK, "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-01-01T10:00:00+02:00"}},
    {**TASK, "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-02-30T10:00:00Z"}},
    {
        **TASK,
        "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-01-01T10:00:00.1234567891Z"},
    },
    {"id": "t", "contextId": "c"},  # no status
    {**TASK, "kind": "task"},  # an unknown field: the sdk refuses it
    {**TASK, "metadata": None},
    {**TASK, "history": [{"messageId": "m", "parts": [{"data": None}]}]},
    {**TASK, "history": [{"messageId": "m", "parts": [{"raw": "QQ"}]}]},
    {**TASK, "history": [{"messageId": "m", "role": 2}]},
    {**TASK, "artifacts": [{"artifactId": "a", "parts": [{"text": "a", "data": {}}]}]},
    {**TASK, "artifacts": [{"artifactId": "a", "parts": [{}]}]},  # no content: the sdk refuses it
    {**TASK, "metadata": {"n": 10**400}},
]


@pytest.mark.parametrize("body", FALLBACK_TASKS, ids=range(len(FALLBACK_TASKS)))
def test_other_task_shapes_take_the_sdk_path(body):
    with pytest.raises(Unhandled):
        render_v03.task(body)
    try:
        expected = sdk_task_v03(body)
    except Exception as exc:  # noqa: BLE001
        with pytest.raises(type(exc)) as caught:
            wire.task_v03(body)
        assert str(caught.value) == str(exc)
    else:
        assert_same(wire.task_v03(body), expected)


FALLBACK_RESULTS = [
    ({"statusUpdate": {"taskId": "t", "status": {"state": 3}}}, 1),
    ({"statusUpdate": {"taskId": "t", "status": {}}, "task": TASK}, 1),  # two payloads
    ({"artifactUpdate": {"taskId": "t", "artifact": {"artifactId": "a"}, "append": "yes"}}, 1),
    ({"artifactUpdate": {"taskId": "t"}}, 1),  # no artifact
    ({"statusUpdate": {"taskId": "t", "status": {}}}, 1.5),  # an odd request id
]


@pytest.mark.parametrize(
    ("result", "request_id"), FALLBACK_RESULTS, ids=range(len(FALLBACK_RESULTS))
)
def test_other_stream_updates_take_the_sdk_path(result, request_id):
    with pytest.raises(Unhandled):
        render_v03.stream_response(result, request_id)
    try:
        expected = sdk_stream_response_v03(result, request_id)
    except Exception as exc:  # noqa: BLE001
        with pytest.raises(type(exc)):
            wire.stream_response_v03(result, request_id)
    else:
        assert_same(wire.stream_response_v03(result, request_id), expected)


# JSON responses -----------------------------------------------------------------------------


def stdlib_json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


wide_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(min_value=-1e-3, max_value=1e-3)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=1000, deadline=None)
@given(value=wide_values)
def test_responses_are_the_bytes_the_standard_library_writes(value):
    """Key order, non-ASCII as UTF-8, escapes, floats and integers of any size: the same
    bytes as `json.dumps(ensure_ascii=False, separators=(",", ":"))`."""
    assert parsers.dumps(value) == stdlib_json(value)


@settings(max_examples=1000, deadline=None)
@given(value=wide_values)
def test_canonical_json_is_the_bytes_the_standard_library_writes(value):
    """Sorted keys (what content hashes digest, so stored idempotency keys depend on every
    byte): the same bytes as `json.dumps(sort_keys=True)`, keys outside the BMP included."""
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    assert parsers.dumps(value, sort_keys=True) == expected.encode()


def test_canonical_key_order_is_code_point_order():
    value = {"\U0001f600": 1, "\uffff": 2, "é": 3, "Z": 4, "a": {"b": 1, "B": 2}}
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    assert parsers.dumps(value, sort_keys=True) == expected.encode()
    assert parsers.dumps(value, sort_keys=True) != parsers.dumps(value)


def test_a_4000_digit_integer_is_still_encoded():
    """orjson refuses integers beyond 64 bits; the standard library writes them (a data part
    sent from the web UI keeps such a number)."""
    body = {"result": {"parts": [{"data": {"n": int("9" * 4000)}}], "note": "☃"}}
    assert parsers.dumps(body) == stdlib_json(body)
    assert json.loads(parsers.dumps(body))["result"]["parts"][0]["data"]["n"] == int("9" * 4000)


def test_small_floats_keep_the_standard_librarys_spelling():
    for value in (1e-07, 1.5e-05, 0.00012, -2.5e-9):
        assert parsers.dumps({"x": value}) == stdlib_json({"x": value})
