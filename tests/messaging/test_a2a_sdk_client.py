"""The a2a-sdk 1.3 client (ClientFactory, JSON-RPC transport) against a real broker process."""

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
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf.struct_pb2 import Struct

from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def run(coro):
    return asyncio.run(coro)


async def client_for(broker, agent):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {agent.token}"}, timeout=10)
    return await create_client(
        broker.url, client_config=ClientConfig(httpx_client=http, streaming=False)
    )


def outgoing(
    text: str, *, to: str | None = None, task_id: str | None = None, action: str | None = None
) -> Message:
    metadata = Struct()
    if to:
        metadata.update({"destination": to})
    if action:
        metadata.update({"action": action})
    message = Message(
        message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)], metadata=metadata
    )
    if task_id:
        message.task_id = task_id
    return message


async def send(client, message: Message):
    responses = [r async for r in client.send_message(SendMessageRequest(message=message))]
    assert len(responses) == 1 and responses[0].HasField("task")
    return responses[0].task


@pytest.fixture
def pair(tenant):
    return factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")


def test_card_resolution_send_get_and_ack(broker, pair):
    alice, bob = pair

    async def scenario():
        a, b = await client_for(broker, alice), await client_for(broker, bob)
        task = await send(a, outgoing("please review", to=bob.id))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert task.context_id == bob.id
        got = await b.get_task(GetTaskRequest(id=task.id))
        assert got.artifacts[0].parts[0].text == "please review"
        done = await send(b, outgoing("ack", task_id=task.id))
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        await a.close()
        await b.close()

    run(scenario())


def test_list_tasks_with_pagination(broker, pair):
    alice, bob = pair

    async def scenario():
        a, b = await client_for(broker, alice), await client_for(broker, bob)
        sent = [(await send(a, outgoing(f"m{i}", to=bob.id))).id for i in range(5)]
        seen, token = [], ""
        while True:
            page = await b.list_tasks(
                ListTasksRequest(context_id=bob.id, page_size=2, page_token=token)
            )
            assert page.total_size == 5
            seen += [t.id for t in page.tasks]
            token = page.next_page_token
            if not token:
                break
        assert seen == list(reversed(sent))
        filtered = await b.list_tasks(
            ListTasksRequest(context_id=bob.id, status=TaskState.TASK_STATE_WORKING)
        )
        assert list(filtered.tasks) == []
        await a.close()
        await b.close()

    run(scenario())


def test_cancel_and_error_mapping(broker, pair, other_tenant):
    alice, bob = pair
    mallory = factories.agent(other_tenant, name="mallory")

    async def scenario():
        a, b, m = [await client_for(broker, x) for x in (alice, bob, mallory)]
        task = await send(a, outgoing("oops", to=bob.id))
        canceled = await a.cancel_task(CancelTaskRequest(id=task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):
            await a.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(UnsupportedOperationError):
            await send(b, outgoing("ack", task_id=task.id))
        with pytest.raises(TaskNotFoundError):
            await b.get_task(GetTaskRequest(id=str(uuid.uuid4())))
        with pytest.raises(TaskNotFoundError):
            await m.get_task(GetTaskRequest(id=task.id))  # another tenant: not found
        with pytest.raises(InvalidParamsError, match="Destination agent not found"):
            await send(a, outgoing("to nobody", to=str(uuid.uuid4())))
        for c in (a, b, m):
            await c.close()

    run(scenario())
