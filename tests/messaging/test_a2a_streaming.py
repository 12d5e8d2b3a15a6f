"""A2A streaming (SendStreamingMessage, SubscribeToTask) in both dialects: the a2a-sdk 1.3
client against a real server process, raw 0.3 SSE, and the WSGI polling fallback."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import (
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError
from google.protobuf.struct_pb2 import Struct

from agents import services as agent_services
from messaging.models import Task
from tests import factories
from tests.live import SSEClient
from tests.messaging import rpc

live = pytest.mark.django_db(transaction=True)


async def client_for(broker, agent, *, streaming: bool = True):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {agent.token}"}, timeout=30)
    return await create_client(
        broker.url, client_config=ClientConfig(httpx_client=http, streaming=streaming)
    )


def outgoing(text: str, *, to: str) -> Message:
    metadata = Struct()
    metadata.update({"destination": to})
    return Message(
        message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)], metadata=metadata
    )


async def act(broker, agent, task_id: str, action: str, text: str = "ok") -> None:
    message = rpc.message(text, task_id=task_id, action=action)
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(
            f"{broker.url}/a2a/",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": message},
            },
            headers={"Authorization": f"Bearer {agent.token}", "A2A-Version": "1.0"},
        )
    assert "result" in response.json(), response.json()


@pytest.fixture
def pair(tenant):
    return factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")


def kinds(responses) -> list[str]:
    return [r.WhichOneof("payload") for r in responses]


@live
def test_sdk_streaming_send_follows_the_task_until_it_is_completed(broker, pair):
    alice, bob = pair

    async def scenario():
        client = await client_for(broker, alice)
        responses = []
        async with asyncio.timeout(20):
            async for response in client.send_message(
                SendMessageRequest(message=outgoing("build it", to=bob.id))
            ):
                responses.append(response)
                if len(responses) == 1:
                    task_id = response.task.id
                    await act(broker, bob, task_id, "accept", "on it")
                    await act(broker, bob, task_id, "complete", "built ✓")
        return responses

    responses = asyncio.run(scenario())
    assert kinds(responses) == ["task", "status_update", "artifact_update", "status_update"]
    task = responses[0].task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert task.context_id == bob.id
    working, artifact, done = responses[1:]
    assert working.status_update.status.state == TaskState.TASK_STATE_WORKING
    assert working.status_update.status.message.parts[0].text == "on it"
    assert artifact.artifact_update.artifact.parts[0].text == "built ✓"
    assert done.status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert {r.status_update.task_id for r in (working, done)} == {task.id}


@live
def test_sdk_subscribe_starts_with_the_current_task_and_ends_at_a_terminal_state(broker, pair):
    alice, bob = pair

    async def scenario():
        sender = await client_for(broker, alice, streaming=False)
        [sent] = [
            r
            async for r in sender.send_message(
                SendMessageRequest(message=outgoing("hi", to=bob.id))
            )
        ]
        client = await client_for(broker, alice)
        responses = []
        async with asyncio.timeout(20):
            async for response in client.subscribe(SubscribeToTaskRequest(id=sent.task.id)):
                responses.append(response)
                if len(responses) == 1:
                    await act(broker, bob, sent.task.id, "ack")
        return sent.task, responses

    task, responses = asyncio.run(scenario())
    assert kinds(responses) == ["task", "status_update"]
    assert responses[0].task.id == task.id
    assert responses[0].task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert responses[1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


@live
def test_sdk_subscribe_refuses_terminal_unknown_and_other_tenants_tasks(broker, pair, stranger):
    alice, bob = pair
    done = rpc.send(alice, bob.id, "x")
    rpc.act(bob, done["id"], "ack")
    foreign = rpc.send(stranger, stranger.id, "mine")

    async def subscribe(task_id):
        client = await client_for(broker, alice)
        return [r async for r in client.subscribe(SubscribeToTaskRequest(id=task_id))]

    with pytest.raises(UnsupportedOperationError):
        asyncio.run(subscribe(done["id"]))
    with pytest.raises(TaskNotFoundError):
        asyncio.run(subscribe(str(uuid.uuid4())))
    with pytest.raises(TaskNotFoundError):
        asyncio.run(subscribe(foreign["id"]))


@live
def test_0_3_message_stream_uses_the_compat_shapes(broker, pair):
    alice, bob = pair
    stream = SSEClient(
        f"{broker.url}/a2a/",
        method="POST",
        headers={"Authorization": f"Bearer {alice.token}"},
        json_body={
            "jsonrpc": "2.0",
            "id": "req-1",
            "method": "message/stream",
            "params": {
                "message": {
                    "kind": "message",
                    "messageId": uuid.uuid4().hex,
                    "role": "user",
                    "parts": [{"kind": "text", "text": "compat stream"}],
                    "metadata": {"destination": bob.id},
                }
            },
        },
    )
    try:
        first = stream.next().json()
        assert first["id"] == "req-1"
        task = first["result"]
        assert task["kind"] == "task" and task["status"]["state"] == "input-required"
        rpc.act(bob, task["id"], "reject", "no thanks")
        update = stream.next().json()["result"]
        assert update["kind"] == "status-update"
        assert update["status"]["state"] == "rejected"
        assert update["final"] is True
        assert update["status"]["message"]["parts"] == [{"kind": "text", "text": "no thanks"}]
        assert isinstance(update["metadata"]["eventId"], int)
        assert stream.closed.wait(5)
    finally:
        stream.close()


@live
def test_streaming_a_broadcast_yields_its_summary_and_ends(broker, pair):
    alice, _ = pair
    stream = SSEClient(
        f"{broker.url}/",
        method="POST",
        headers={"Authorization": f"Bearer {alice.token}", "A2A-Version": "1.0"},
        json_body={
            "jsonrpc": "2.0",
            "id": 3,
            "method": "SendStreamingMessage",
            "params": {"message": rpc.message("all hands", to="*")},
        },
    )
    try:
        summary = stream.next().json()["result"]["task"]
        assert summary["metadata"]["type"] == "broadcast_summary"
        assert stream.closed.wait(5)
        assert stream.drain(0.1) == []
    finally:
        stream.close()


@live
def test_upfront_errors_are_plain_json_rpc_responses(broker, pair):
    alice, _ = pair
    body = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "SendStreamingMessage",
        "params": {"message": rpc.message("x", to=str(uuid.uuid4()))},
    }
    unknown = httpx.post(
        f"{broker.url}/a2a/",
        json=body,
        headers={"Authorization": f"Bearer {alice.token}", "A2A-Version": "1.0"},
    )
    assert unknown.status_code == 200
    assert unknown.json()["error"]["code"] == -32602
    anonymous = httpx.post(f"{broker.url}/a2a/", json=body)
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == -32000
    missing_id = httpx.post(
        f"{broker.url}/a2a/",
        json={"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {}},
        headers={"Authorization": f"Bearer {alice.token}", "A2A-Version": "1.0"},
    )
    assert missing_id.json()["error"]["code"] == -32602
    # A non-streaming request on the same paths still reaches Django unchanged.
    normal = httpx.post(
        f"{broker.url}/a2a/",
        json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": "nope"}},
        headers={"Authorization": f"Bearer {alice.token}", "A2A-Version": "1.0"},
    )
    assert normal.json()["error"]["code"] == -32001


@live
def test_a2a_stream_ends_with_an_error_event_when_credentials_are_revoked(broker, pair):
    alice, bob = pair
    task = rpc.send(alice, bob.id, "watch me")
    stream = SSEClient(
        f"{broker.url}/a2a/",
        method="POST",
        headers={"Authorization": f"Bearer {alice.token}", "A2A-Version": "1.0"},
        json_body={
            "jsonrpc": "2.0",
            "id": 5,
            "method": "SubscribeToTask",
            "params": {"id": task["id"]},
        },
    )
    try:
        assert stream.next().json()["result"]["task"]["id"] == task["id"]
        agent_services.rotate_agent_token(agent=alice.refresh())
        error = stream.next(timeout=6)
        assert error.event == "error"
        assert error.json()["error"]["code"] == -32000
        assert stream.closed.wait(5)
    finally:
        stream.close()


@pytest.mark.django_db
def test_a_web_process_hands_streaming_methods_to_the_stream_processes(tenant):
    """A web (WSGI) process has no stream handler: its view answers 421 with a JSON-RPC error
    at once, before authenticating or sending anything (messaging/stream/handoff.py)."""
    alice = factories.agent(tenant, name="alice")
    bob = factories.agent(tenant, name="bob")
    task = rpc.result(alice, "SendMessage", {"message": rpc.message("hi", to=bob.id)})["task"]
    calls = [
        ("SendStreamingMessage", {"message": rpc.message("via a web process", to=bob.id)}),
        ("SubscribeToTask", {"id": task["id"]}),
        ("message/stream", {"message": rpc.message("0.3 name", to=bob.id)}),
        ("tasks/resubscribe", {"id": task["id"]}),
    ]
    for method, params in calls:
        response = rpc.call(alice, method, params)
        assert response.status_code == 421, response.content
        assert response["Content-Type"] == "application/json"
        body = response.json()
        assert body["id"] is not None and body["error"]["code"] == -32004
        assert body["error"]["message"].startswith(f"{method} is not served here")
    assert Task.objects.filter(tenant=tenant).count() == 1  # nothing was sent


@live
def test_the_dispatcher_passes_other_requests_to_django_unchanged(broker, pair):
    alice, bob = pair
    tricky = "please SendStreamingMessage and SubscribeToTask, résumé ✓"
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": "x",
            "method": "SendMessage",
            "params": {"message": rpc.message(tricky, to=bob.id)},
        }
    ).encode()

    def chunks():
        yield body[:10]
        yield body[10:]

    # Chunked (no Content-Length), with streaming method names in the text: still Django's.
    response = httpx.post(
        f"{broker.url}/a2a/",
        content=chunks(),
        headers={"Authorization": f"Bearer {alice.token}", "A2A-Version": "1.0"},
    )
    task = response.json()["result"]["task"]
    assert task["artifacts"][0]["parts"][0]["text"] == tricky
    parse_error = httpx.post(
        f"{broker.url}/",
        content=b'{"method": "SendStreamingMessage", oops',
        headers={"Authorization": f"Bearer {alice.token}"},
    )
    assert parse_error.json()["error"]["code"] == -32700
