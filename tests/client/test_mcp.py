"""The MCP tools through the MCP SDK's own client: over stdio (spawning `hikyaku-mcp`) and over
Streamable HTTP (the broker's `/mcp`), against a real broker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from tests.client.conftest import HIKYAKU_MCP, LIVE_DB, Agent, base_env

pytestmark = LIVE_DB

TOOLS = {
    "whoami", "agents", "send", "broadcast", "poll", "ack", "accept", "complete", "reject",
    "fail", "block", "reply", "comment", "cancel", "get_task", "outbox", "register", "deregister",
}  # fmt: skip


def over_stdio(env: dict[str, str]) -> AbstractAsyncContextManager[Client]:
    return Client(stdio_client(StdioServerParameters(command=HIKYAKU_MCP, env=env)))


def over_http(url: str, headers: dict[str, str]) -> AbstractAsyncContextManager[Client]:
    http = httpx2.AsyncClient(headers=headers, timeout=30)
    return Client(streamable_http_client(f"{url}/mcp", http_client=http))


def stdio_for(agent: Agent, **extra: str):
    return over_stdio({**agent.env, "HIKYAKU_API_KEY": agent.api_key, **extra})


def http_for(agent: Agent):
    return over_http(agent.url, {"Authorization": f"Bearer {agent.token}"})


async def call(client: Client, tool: str, **arguments) -> CallToolResult:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {result.content[0].text}"
    assert result.content[0].type == "text" and result.content[0].text
    return result


async def poll_for(client: Client, task_id: str, tries: int = 20) -> dict:
    """Poll until an item about `task_id` comes back (a stream delivers asynchronously)."""
    for _ in range(tries):
        result = await call(client, "poll", wait=1)
        for item in result.structured_content["items"]:
            if item["task"]["id"] == task_id:
                return item
    raise AssertionError(f"poll never returned {task_id}")


def run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(coro(), 120))


async def exercise_every_tool(client: Client, me: Agent, peer: Agent) -> None:
    tools = await client.list_tools()
    assert {t.name for t in tools.tools} == TOOLS
    assert all(t.description and len(t.description) < 140 for t in tools.tools)

    who = await call(client, "whoami")
    assert who.structured_content["agent"]["agent_id"] == me.agent_id
    listed = await call(client, "agents")
    assert peer.agent_id in {a["agent_id"] for a in listed.structured_content["agents"]}
    detail = await call(client, "agents", id=peer.agent_id)
    assert detail.structured_content["agent"]["name"] == peer.name

    # A task I send: the peer asks me a question, I reply, the peer completes it.
    mine = await call(client, "send", to=peer.name, text="Fix the build")  # a name is an address
    t1 = mine.structured_content["task"]["id"]
    assert mine.structured_content["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    peer.run_json("accept", t1)
    peer.run_json("block", t1, "--question", "Which branch?")
    update = await poll_for(client, t1)
    assert update["event"] == "task-update"
    assert update["task"]["metadata"]["awaiting"] == "sender"
    assert "[blocked]" in (await call(client, "get_task", task_id=t1)).content[0].text
    waiting = await call(client, "outbox", status="blocked")
    assert [t["id"] for t in waiting.structured_content["tasks"]] == [t1]
    replied = await call(client, "reply", task_id=t1, text="main")
    assert replied.structured_content["task"]["status"]["state"] == "TASK_STATE_WORKING"
    peer.run_json("complete", t1, "--text", "fixed")
    done = await call(client, "get_task", task_id=t1)
    assert done.structured_content["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "fixed" in done.content[0].text
    sent = await call(client, "outbox", status="completed")
    assert [t["id"] for t in sent.structured_content["tasks"]] == [t1]

    # Tasks I receive, one per verb.
    def incoming(text: str) -> str:
        return peer.send(me.agent_id, text)["id"]

    t2 = incoming("Review PR #42")
    unread = await call(client, "poll", status="unread", wait=10)
    assert [i["task"]["id"] for i in unread.structured_content["items"]] == [t2]
    news = unread.structured_content["items"][0]
    assert news["event"] == "message" and "Review PR #42" in str(news["task"]["artifacts"])
    await call(client, "accept", task_id=t2)
    await call(client, "comment", task_id=t2, text="looking")
    blocked = await call(client, "block", task_id=t2, question="Which file?")
    assert blocked.structured_content["task"]["metadata"]["awaiting"] == "sender"
    peer.run_json("reply", t2, "--text", "app.py")
    completed = await call(client, "complete", task_id=t2, text="LGTM", data={"approved": True})
    result = completed.structured_content["task"]["artifacts"][-1]["parts"]
    assert result == [{"text": "LGTM"}, {"data": {"approved": True}}]

    t3, t4, t5 = incoming("three"), incoming("four"), incoming("five")
    rejected = await call(client, "reject", task_id=t3, reason="not mine")
    assert rejected.structured_content["task"]["status"]["state"] == "TASK_STATE_REJECTED"
    acked = await call(client, "ack", task_id=t4)
    assert acked.structured_content["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    await call(client, "accept", task_id=t5)
    failed = await call(client, "fail", task_id=t5, reason="flaky")
    assert failed.structured_content["task"]["status"]["state"] == "TASK_STATE_FAILED"

    t6 = (await call(client, "send", to=peer.agent_id, text="never mind")).structured_content
    canceled = await call(client, "cancel", task_id=t6["task"]["id"])
    assert canceled.structured_content["task"]["status"]["state"] == "TASK_STATE_CANCELED"

    summary = await call(client, "broadcast", text="deploying")
    assert summary.structured_content["task"]["metadata"]["type"] == "broadcast_summary"

    refused = await client.call_tool(
        "get_task", {"task_id": "00000000-0000-0000-0000-000000000000"}
    )
    assert refused.is_error and "-32001" in refused.content[0].text

    # Names are unique among a tenant's live agents: each run's helper has its own.
    helper = f"helper-{uuid.uuid4().hex[:8]}"
    registered = await call(
        client, "register", name=helper, description="spawned", api_key=me.api_key
    )
    assert registered.structured_content["agent_token"].startswith("hka_")
    assert registered.structured_content["adopted"] is False

    gone = await call(client, "deregister")
    assert gone.structured_content == {"status": "deregistered"}


def test_every_tool_over_stdio(register):
    me, peer = register("mcp-me"), register("peer")
    run(lambda: session_with(stdio_for(me), lambda c: exercise_every_tool(c, me, peer)))


def test_every_tool_over_streamable_http(register):
    me, peer = register("mcp-me"), register("peer")
    run(lambda: session_with(http_for(me), lambda c: exercise_every_tool(c, me, peer)))


async def session_with(factory, body) -> None:
    async with factory as client:
        await body(client)


def test_poll_filters_never_lose_items(register):
    me, peer = register("mcp-me"), register("peer")

    async def body(client: Client) -> None:
        await call(client, "poll")  # the buffer is live (and empty)
        ids = [peer.send(me.agent_id, f"m{i}")["id"] for i in range(3)]
        first = await call(client, "poll", page_size=1, wait=5)
        assert len(first.structured_content["items"]) == 1
        none = await call(client, "poll", status="completed")
        assert none.structured_content["items"] == []
        future = await call(client, "poll", since="2999-01-01T00:00:00Z")
        assert future.structured_content["items"] == []
        seen = [i["task"]["id"] for i in first.structured_content["items"]]
        for _ in range(10):
            rest = await call(client, "poll", wait=1)
            seen += [i["task"]["id"] for i in rest.structured_content["items"]]
            if len(seen) >= 3:
                break
        assert sorted(seen) == sorted(ids)  # each exactly once
        again = await call(client, "poll")
        assert again.structured_content["items"] == []
        assert again.content[0].text.startswith("Nothing new.")

    run(lambda: session_with(stdio_for(me), body))


def test_stdio_poll_backfills_what_arrived_before_it_started(register):
    me, peer = register("mcp-me"), register("peer")
    waiting = peer.send(me.agent_id, "while you were out")

    async def body(client: Client) -> None:
        polled = await call(client, "poll")
        assert [i["task"]["id"] for i in polled.structured_content["items"]] == [waiting["id"]]
        assert polled.content[0].text.startswith("1 item(s)")
        assert (
            "NEW task" in polled.content[0].text and "while you were out" in polled.content[0].text
        )

    run(lambda: session_with(stdio_for(me), body))


def test_stdio_server_with_only_a_key_adopts_the_agent_it_registers(client_broker, api_key):
    env = base_env(HIKYAKU_URL=client_broker.url, HIKYAKU_API_KEY=api_key)

    async def body(client: Client) -> None:
        before = await client.call_tool("whoami", {})
        assert before.is_error and "HIKYAKU_AGENT_ID" in before.content[0].text
        registered = await call(client, "register", name="newcomer", description="x")
        assert registered.structured_content["adopted"] is True
        who = await call(client, "whoami")
        assert who.structured_content["agent"]["name"] == "newcomer"
        assert (await call(client, "poll")).structured_content["items"] == []

    run(lambda: session_with(over_stdio(env), body))


def test_http_accepts_the_key_with_x_agent_id(register):
    me = register("mcp-me")
    headers = {"Authorization": f"Bearer {me.api_key}", "X-Agent-Id": me.agent_id}

    async def body(client: Client) -> None:
        who = await call(client, "whoami")
        assert who.structured_content["agent"]["agent_id"] == me.agent_id

    run(lambda: session_with(over_http(me.url, headers), body))


def test_http_refuses_missing_or_bad_credentials_and_foreign_hosts(client_broker, register):
    me = register("mcp-me")
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    url = f"{client_broker.url}/mcp"
    for auth in ({}, {"Authorization": "Bearer hka_" + "x" * 40}, {"Authorization": "Basic x"}):
        response = httpx.post(url, json=initialize, headers={**headers, **auth})
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert response.json()["error"]["code"] == "UNAUTHORIZED"
    key_without_agent = {"Authorization": f"Bearer {me.api_key}"}
    assert (
        httpx.post(url, json=initialize, headers={**headers, **key_without_agent}).status_code
        == 401
    )
    foreign = {"Authorization": f"Bearer {me.token}", "Host": "evil.example"}
    assert httpx.post(url, json=initialize, headers={**headers, **foreign}).status_code == 400
    ok = httpx.post(
        url, json=initialize, headers={**headers, "Authorization": f"Bearer {me.token}"}
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["result"]["serverInfo"]["name"] == "hikyaku"


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_tool_errors_are_one_readable_line(register, transport):
    me = register("mcp-me")
    factory = stdio_for(me) if transport == "stdio" else http_for(me)

    async def body(client: Client) -> None:
        result = await client.call_tool("send", {"to": "nobody", "text": "x"})
        assert result.is_error
        (content,) = result.content
        assert "Destination agent not found: nobody" in content.text
        assert "\n" not in content.text
        empty = await client.call_tool("send", {"to": me.agent_id})
        assert empty.is_error and "Give text or data." in empty.content[0].text
        taken = await client.call_tool(
            "register", {"name": me.name, "description": "again", "api_key": me.api_key}
        )
        assert taken.is_error and "\n" not in taken.content[0].text
        assert f"An agent named '{me.name}' is already registered" in taken.content[0].text
        assert "AGENT_NAME_TAKEN" in taken.content[0].text

    run(lambda: session_with(factory, body))


def test_stdio_poll_never_echoes_the_agents_own_actions(register):
    """After accept, complete, ack, block, comment or reject, the next poll does not report
    the agent's own change. The answer and the stream's echo race on two connections, so the
    loop repeats it; a message sent after the actions marks the point by which every echo has
    arrived (the stream is in event order)."""
    me, peer = register("mcp-me"), register("peer")

    def incoming(text: str) -> str:
        return peer.send(me.agent_id, text)["id"]

    async def news_until(client: Client, task_id: str) -> list[dict]:
        items: list[dict] = []
        for _ in range(30):
            result = await call(client, "poll", wait=1)
            items += result.structured_content["items"]
            if any(item["task"]["id"] == task_id for item in items):
                return items
        raise AssertionError(f"poll never returned {task_id}")

    async def body(client: Client) -> None:
        task = incoming("first")
        assert [i["task"]["id"] for i in await news_until(client, task)] == [task]
        for round in range(12):
            await call(client, "accept", task_id=task)
            if round % 3 == 1:
                await call(client, "comment", task_id=task, text="looking")
                await call(client, "block", task_id=task, question="which one?")
            await call(client, "complete", task_id=task, text=f"done {round}")
            acked, rejected = incoming(f"ack me {round}"), incoming(f"reject me {round}")
            items = await news_until(client, rejected)
            assert sorted(i["task"]["id"] for i in items) == sorted([acked, rejected]), items
            assert {i["event"] for i in items} == {"message"}
            await call(client, "ack", task_id=acked)
            await call(client, "reject", task_id=rejected, reason="no")
            task = incoming(f"next {round}")
            items = await news_until(client, task)
            assert [(i["event"], i["task"]["id"]) for i in items] == [("message", task)], items

    run(lambda: session_with(stdio_for(me), body))
