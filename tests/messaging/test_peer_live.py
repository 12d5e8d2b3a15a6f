"""Agents as A2A peers end to end: the a2a-sdk 1.3 client resolves an agent's card on a real
broker process and talks to the agent through it, while a real responder process (the TCK
responder, conformance/responder.py) works the agent's inbox with the lifecycle verbs."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError

from messaging.models import Task
from tests.live import BrokerProcess

pytestmark = pytest.mark.django_db(transaction=True)


def run(coro):
    return asyncio.run(coro)


async def connect(broker: BrokerProcess, agent, *, token: str | None = None, polling=False):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx.AsyncClient(headers=headers, timeout=30)
    return await create_client(
        f"{broker.url}/a2a/agents/{agent.id}",
        client_config=ClientConfig(httpx_client=http, streaming=False, polling=polling),
    )


def say(prefix: str, text: str = "hello", *, task_id: str | None = None) -> Message:
    message = Message(
        message_id=f"{prefix}-{uuid.uuid4().hex[:8]}", role=Role.ROLE_USER, parts=[Part(text=text)]
    )
    if task_id:
        message.task_id = task_id
    return message


async def send(client, message: Message):
    (response,) = [r async for r in client.send_message(SendMessageRequest(message=message))]
    return response


def test_card_resolution_and_a_completed_task(peer_broker, bob):
    async def scenario():
        client = await connect(peer_broker, bob)
        response = await send(client, say("tck-complete-task", "say hello"))
        task = response.task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.context_id == bob.id
        assert [p.text for a in task.artifacts for p in a.parts] == ["Hello from TCK"]
        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        await client.close()

    run(scenario())


def test_question_answer_and_completion(peer_broker, bob):
    async def scenario():
        client = await connect(peer_broker, bob)
        asked = (await send(client, say("tck-input-required", "fix the build"))).task
        assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert asked.status.message.parts[0].text == "Please provide more input."
        answer = say("tck-complete-task", "use the main branch", task_id=asked.id)
        done = (await send(client, answer)).task
        assert done.id == asked.id
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        texts = [m.parts[0].text for m in done.history if m.role == Role.ROLE_USER]
        assert texts == ["fix the build", "use the main branch"]
        await client.close()

    run(scenario())


def test_rejection(peer_broker, bob):
    async def scenario():
        client = await connect(peer_broker, bob)
        task = (await send(client, say("tck-reject-task"))).task
        assert task.status.state == TaskState.TASK_STATE_REJECTED
        assert task.status.message.parts[0].text == "rejected"
        with pytest.raises(UnsupportedOperationError):
            await send(client, say("tck-complete-task", task_id=task.id))
        await client.close()

    run(scenario())


def test_a_message_only_reply(peer_broker, bob):
    async def scenario():
        client = await connect(peer_broker, bob)
        response = await send(client, say("tck-message-response", "ping"))
        assert response.HasField("message")
        assert response.message.role == Role.ROLE_AGENT
        assert response.message.parts[0].text == "Direct message response"
        assert response.message.context_id == bob.id
        await client.close()

    run(scenario())


def test_non_blocking_send_then_cancel(peer_broker, bob):
    async def scenario():
        client = await connect(peer_broker, bob, polling=True)
        task = (await send(client, say("tck-input-required"))).task
        assert task.status.state in (
            TaskState.TASK_STATE_SUBMITTED,
            TaskState.TASK_STATE_WORKING,
            TaskState.TASK_STATE_INPUT_REQUIRED,
        )
        canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        await client.close()

    run(scenario())


def test_callers_see_only_their_own_tasks(peer_broker, bob, agent):
    async def scenario():
        anonymous = await connect(peer_broker, bob)
        private = await connect(peer_broker, bob, token="hkc_" + uuid.uuid4().hex + "x" * 8)
        colleague = await connect(peer_broker, bob, token=agent.token)
        task = (await send(anonymous, say("tck-complete-task"))).task
        mine = (await send(colleague, say("tck-artifact-data"))).task
        assert mine.artifacts[0].parts[0].data.struct_value["count"] == 42
        for other in (private, colleague):
            with pytest.raises(TaskNotFoundError):
                await other.get_task(GetTaskRequest(id=task.id))
        listed = await colleague.list_tasks(ListTasksRequest())
        assert [t.id for t in listed.tasks] == [mine.id]
        for client in (anonymous, private, colleague):
            await client.close()

    run(scenario())
    # The colleague is recorded as the sender: the task is in its outbox too.
    assert str(Task.objects.get(sender__isnull=False).sender_id) == agent.id
