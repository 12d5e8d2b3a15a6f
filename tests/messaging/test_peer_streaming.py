"""Streaming and push notifications on an agent's own endpoint, end to end: the a2a-sdk 1.3
client resolves the agent's card on a real broker process and streams
(SendStreamingMessage, SubscribeToTask) while a real responder process (our client package on
the agent's inbox stream, conformance/responder.py) works the task; raw SSE where the test
itself plays the agent, to pin the caller's view event by event."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import (
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError

from agents import services as agent_services
from tests import factories
from tests.live import BrokerProcess, SSEClient
from tests.messaging import rpc

pytestmark = pytest.mark.django_db(transaction=True)

CALLER_TOKEN = "hkc_" + "s" * 40


async def connect(broker: BrokerProcess, agent, *, token: str | None = None, streaming=True):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx.AsyncClient(headers=headers, timeout=30)
    return await create_client(
        f"{broker.url}/a2a/agents/{agent.id}",
        client_config=ClientConfig(httpx_client=http, streaming=streaming),
    )


def say(prefix: str, text: str = "hello", *, task_id: str | None = None) -> Message:
    message = Message(
        message_id=f"{prefix}-{uuid.uuid4().hex[:8]}", role=Role.ROLE_USER, parts=[Part(text=text)]
    )
    if task_id:
        message.task_id = task_id
    return message


async def stream(client, message: Message, **config) -> list[StreamResponse]:
    request = SendMessageRequest(message=message)
    if config:
        request.configuration.CopyFrom(SendMessageConfiguration(**config))
    async with asyncio.timeout(20):
        return [r async for r in client.send_message(request)]


def kinds(responses: list[StreamResponse]) -> list[str]:
    return [r.WhichOneof("payload") for r in responses]


def states(responses: list[StreamResponse]) -> list[int]:
    found = []
    for r in responses:
        if r.HasField("task"):
            found.append(r.task.status.state)
        elif r.HasField("status_update"):
            found.append(r.status_update.status.state)
    return found


def test_a_streaming_send_follows_the_task_until_it_is_completed(peer_broker, bob):
    async def scenario():
        client = await connect(peer_broker, bob)
        responses = await stream(client, say("tck-stream-001", "stream it"))
        await client.close()
        return responses

    responses = asyncio.run(scenario())
    assert kinds(responses)[0] == "task" and kinds(responses)[-2:] == [
        "artifact_update",
        "status_update",
    ]
    task = responses[0].task
    # The responder may already have accepted it when the stream opens; never INPUT_REQUIRED.
    assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    assert task.context_id == bob.id
    assert states(responses)[-2:] == [TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED]
    artifact = responses[-2].artifact_update
    assert artifact.task_id == task.id and artifact.context_id == bob.id
    assert artifact.artifact.parts[0].text == "Stream hello from TCK"
    assert responses[-1].status_update.task_id == task.id


def test_a_question_ends_the_stream_and_the_answer_streams_to_completion(peer_broker, bob):
    async def scenario():
        client = await connect(peer_broker, bob)
        asked = await stream(client, say("tck-input-required", "fix the build"))
        task_id = asked[0].task.id
        answered = await stream(client, say("tck-complete-task", "main branch", task_id=task_id))
        await client.close()
        return asked, answered

    asked, answered = asyncio.run(scenario())
    # Interrupted: the stream ends with the agent's question.
    question = asked[-1].status_update
    assert question.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert question.status.message.parts[0].text == "Please provide more input."
    assert answered[0].task.id == asked[0].task.id
    assert answered[0].task.status.state in (
        TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_COMPLETED,
    )
    assert states(answered)[-1] == TaskState.TASK_STATE_COMPLETED
    texts = [m.parts[0].text for m in answered[0].task.history if m.role == Role.ROLE_USER]
    assert texts == ["fix the build", "main branch"]


def test_a_rejection_ends_the_stream_with_its_reason(peer_broker, bob):
    async def scenario():
        client = await connect(peer_broker, bob)
        responses = await stream(client, say("tck-reject-task"))
        await client.close()
        return responses

    responses = asyncio.run(scenario())
    assert states(responses)[-1] == TaskState.TASK_STATE_REJECTED
    assert responses[-1].status_update.status.message.parts[0].text == "rejected"


def test_subscribe_follows_a_long_running_task_from_the_current_state(peer_broker, bob):
    async def scenario():
        sender = await connect(peer_broker, bob, streaming=False)
        sent = [
            r
            async for r in sender.send_message(
                SendMessageRequest(
                    message=say("test-resubscribe-message-id", "take your time"),
                    configuration=SendMessageConfiguration(return_immediately=True),
                )
            )
        ][0]
        client = await connect(peer_broker, bob)
        async with asyncio.timeout(20):
            responses = [r async for r in client.subscribe(SubscribeToTaskRequest(id=sent.task.id))]
        for c in (sender, client):
            await c.close()
        return sent.task, responses

    task, responses = asyncio.run(scenario())
    assert kinds(responses)[0] == "task" and responses[0].task.id == task.id
    assert responses[0].task.status.state in (
        TaskState.TASK_STATE_SUBMITTED,
        TaskState.TASK_STATE_WORKING,
    )
    assert states(responses)[-1] == TaskState.TASK_STATE_COMPLETED
    assert responses[-2].artifact_update.artifact.parts[0].text == "Done."


def test_canceling_ends_the_callers_streams(peer_broker, bob):
    async def scenario():
        client = await connect(peer_broker, bob)
        responses = []
        async with asyncio.timeout(20):
            async for response in client.send_message(
                SendMessageRequest(message=say("test-resubscribe-message-id"))
            ):
                responses.append(response)
                if len(responses) == 1:
                    await client.cancel_task(CancelTaskRequest(id=response.task.id))
        await client.close()
        return responses

    responses = asyncio.run(scenario())
    assert states(responses)[-1] == TaskState.TASK_STATE_CANCELED
    assert kinds(responses).count("artifact_update") == 0


def test_other_callers_cannot_subscribe(peer_broker, bob, agent, stranger):
    async def scenario():
        owner = await connect(peer_broker, bob, streaming=False)
        sent = [
            r
            async for r in owner.send_message(
                SendMessageRequest(
                    message=say("tck-input-required"),
                    configuration=SendMessageConfiguration(return_immediately=True),
                )
            )
        ][0]
        request = SendMessageRequest(message=say("tck-complete-task"))
        done = [r async for r in owner.send_message(request)]
        outcomes = {}
        others = (
            ("caller token", CALLER_TOKEN),
            ("tenant agent", agent.token),
            ("another tenant's agent", stranger.token),
        )
        for name, token in others:
            other = await connect(peer_broker, bob, token=token)
            try:
                [r async for r in other.subscribe(SubscribeToTaskRequest(id=sent.task.id))]
            except TaskNotFoundError:
                outcomes[name] = "not found"
            await other.close()
        client = await connect(peer_broker, bob)
        with pytest.raises(TaskNotFoundError):
            [r async for r in client.subscribe(SubscribeToTaskRequest(id=str(uuid.uuid4())))]
        with pytest.raises(UnsupportedOperationError):
            [r async for r in client.subscribe(SubscribeToTaskRequest(id=done[0].task.id))]
        for c in (owner, client):
            await c.close()
        return outcomes

    assert asyncio.run(scenario()) == {
        "caller token": "not found",
        "tenant agent": "not found",
        "another tenant's agent": "not found",
    }


def notified(receiver, state: str, timeout: float = 15.0):
    """The first notification that shows the task in `state`."""
    deadline = time.monotonic() + timeout
    count = 1
    while True:
        requests = receiver.wait_for(count, timeout=max(deadline - time.monotonic(), 0.1))
        for request in requests:
            if request.json.get("statusUpdate", {}).get("status", {}).get("state") == state:
                return request
        count = len(requests) + 1


def test_push_configs_are_the_callers_own_and_notify_in_its_view(peer_broker, bob, receiver):
    async def scenario():
        client = await connect(peer_broker, bob, token=CALLER_TOKEN, streaming=False)
        sent = [
            r
            async for r in client.send_message(
                SendMessageRequest(
                    message=say("test-resubscribe-message-id"),
                    configuration=SendMessageConfiguration(return_immediately=True),
                )
            )
        ][0]
        task_id = sent.task.id
        config = TaskPushNotificationConfig(
            task_id=task_id,
            id="hook",
            url=receiver.url,
            authentication=AuthenticationInfo(scheme="Bearer", credentials="s3cret"),
        )
        created = await client.create_task_push_notification_config(config)
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="hook")
        )
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        stranger = await connect(peer_broker, bob, streaming=False)
        with pytest.raises(TaskNotFoundError):
            await stranger.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="hook")
            )
        with pytest.raises(TaskNotFoundError):
            await stranger.create_task_push_notification_config(config)
        await stranger.close()
        await client.close()
        return task_id, created, got, listed

    task_id, created, got, listed = asyncio.run(scenario())
    assert created.url == got.url == receiver.url and got.id == "hook"
    assert [c.id for c in listed.configs] == ["hook"]
    # The responder completes the task after a pause: the notification shows it as the
    # caller sees it, with the configured credentials.
    notification = notified(receiver, "TASK_STATE_COMPLETED")
    assert notification.headers["Authorization"] == "Bearer s3cret"
    update = notification.json["statusUpdate"]
    assert update["taskId"] == task_id and update["contextId"] == bob.id
    assert update["status"]["state"] == "TASK_STATE_COMPLETED"

    async def delete():
        client = await connect(peer_broker, bob, token=CALLER_TOKEN, streaming=False)
        request = DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="hook")
        await client.delete_task_push_notification_config(request)
        await client.delete_task_push_notification_config(request)  # idempotent
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        await client.close()
        return listed

    assert list(asyncio.run(delete()).configs) == []


# The caller's view, event by event (the test plays the agent) -----------------------------


def peer_stream(broker: BrokerProcess, agent, method: str, params: dict) -> SSEClient:
    return SSEClient(
        f"{broker.url}/a2a/agents/{agent.id}/",
        method="POST",
        headers={"A2A-Version": "1.0", "Authorization": f"Bearer {CALLER_TOKEN}"},
        json_body={"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params},
    )


def test_the_stream_shows_the_callers_view_and_ends_when_the_agent_asks(peer_broker, tenant):
    carol = factories.agent(tenant, name="carol")
    agent_services.set_agent_public(agent=carol.model, public=True)
    message = {**rpc.message("build it"), "contextId": "conversation-1"}
    sent = peer_stream(peer_broker, carol, "SendStreamingMessage", {"message": message})
    try:
        task = sent.next().json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"  # unread
        assert task["contextId"] == "conversation-1"
        assert [a["name"] for a in task.get("artifacts", [])] == []
        rpc.act(carol, task["id"], "accept", "on it")
        working = sent.next().json()["result"]["statusUpdate"]
        assert working["status"]["state"] == "TASK_STATE_WORKING"
        assert working["contextId"] == "conversation-1"
        assert working["status"]["message"]["parts"] == [{"text": "on it"}]
        rpc.act(carol, task["id"], "block", "which branch?")
        asked = sent.next().json()["result"]["statusUpdate"]
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert sent.closed.wait(5)  # interrupted: the caller has to answer
    finally:
        sent.close()
    # Subscribing to a task that waits for the caller runs until the next interruption.
    subscribed = peer_stream(peer_broker, carol, "SubscribeToTask", {"id": task["id"]})
    try:
        first = subscribed.next().json()["result"]["task"]
        assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        reply = {**rpc.message("main", task_id=task["id"])}
        answered = httpx.post(
            f"{peer_broker.url}/a2a/agents/{carol.id}/",
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "SendMessage",
                "params": {"message": reply, "configuration": {"returnImmediately": True}},
            },
            headers={"A2A-Version": "1.0", "Authorization": f"Bearer {CALLER_TOKEN}"},
        ).json()["result"]["task"]
        assert answered["status"]["state"] == "TASK_STATE_WORKING"
        update = subscribed.next().json()["result"]["statusUpdate"]
        assert update["status"]["state"] == "TASK_STATE_WORKING"
        assert update["status"]["message"]["parts"] == [{"text": "main"}]
        assert not subscribed.closed.wait(0.3)
        rpc.act(carol, task["id"], "complete", "built")
        artifact = subscribed.next().json()["result"]["artifactUpdate"]
        assert artifact["artifact"]["parts"] == [{"text": "built"}]
        assert artifact["contextId"] == "conversation-1"
        done = subscribed.next().json()["result"]["statusUpdate"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        assert subscribed.closed.wait(5)
    finally:
        subscribed.close()


def test_a_stream_ends_when_the_agent_is_unpublished(peer_broker, tenant):
    carol = factories.agent(tenant, name="carol")
    agent_services.set_agent_public(agent=carol.model, public=True)
    sent = peer_stream(peer_broker, carol, "SendStreamingMessage", {"message": rpc.message()})
    try:
        sent.next()
        agent_services.set_agent_public(agent=carol.model, public=False)
        error = sent.next(timeout=10)
        assert error.event == "error" and error.json()["error"]["code"] == -32001
        assert sent.closed.wait(5)
    finally:
        sent.close()


def test_the_0_3_dialect_streams_in_the_callers_view_too(peer_broker, tenant):
    carol = factories.agent(tenant, name="carol")
    agent_services.set_agent_public(agent=carol.model, public=True)
    message = {
        "kind": "message",
        "messageId": uuid.uuid4().hex,
        "role": "user",
        "parts": [{"kind": "text", "text": "compat"}],
    }
    stream = SSEClient(
        f"{peer_broker.url}/a2a/agents/{carol.id}/",
        method="POST",
        json_body={
            "jsonrpc": "2.0",
            "id": "c-1",
            "method": "message/stream",
            "params": {"message": message},
        },
    )
    try:
        task = stream.next().json()["result"]
        assert task["kind"] == "task" and task["status"]["state"] == "submitted"
        rpc.act(carol, task["id"], "reject", "not today")
        update = stream.next().json()["result"]
        assert update["kind"] == "status-update" and update["final"] is True
        assert update["status"]["state"] == "rejected"
        assert stream.closed.wait(5)
    finally:
        stream.close()
