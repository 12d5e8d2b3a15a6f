"""`hikyaku whoami` and the MCP `whoami` tool show GET /api/v1/agents/me: tenant, credential,
relations, ceiling and the tenant's policy revision (a real broker, the real CLI and the MCP
SDK's client)."""

from __future__ import annotations

import httpx

from tests.client.conftest import LIVE_DB, base_env, hikyaku
from tests.client.test_mcp import call, http_for, run, stdio_for

pytestmark = LIVE_DB


def restrict(agent, *, send_to: list[str]) -> None:
    """An operator's policy change (tenant key), as `curl -X PUT …/policy` makes it."""
    response = httpx.put(
        f"{agent.url}/api/v1/agents/{agent.agent_id}/policy",
        json={"send_to": send_to, "disclosure_ceiling": "restricted"},
        headers={"Authorization": f"Bearer {agent.api_key}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text


def test_the_cli_shows_tenant_relations_ceiling_and_revision(register):
    alice, bob = register("alice"), register("bob")
    before = alice.run_json("whoami")
    assert before["send_to"] == {"anyone": True, "agents": []}
    assert before["tenant"]["slug"].startswith("client-")
    restrict(alice, send_to=[bob.agent_id])

    text = alice.run("whoami")
    assert text.returncode == 0, text.stderr
    rows = {}
    for line in text.stdout.splitlines():
        for key in ("send to", "receive from", "ceiling", "credential", "policy rev", "tenant"):
            if line.startswith(key + " "):
                rows[key] = line[len(key) :].strip()
    assert rows["send to"] == f"bob ({bob.agent_id[:8]})"
    assert rows["receive from"] == "anyone"
    assert rows["ceiling"] == "restricted"
    assert rows["credential"].startswith(f"agent_token {alice.token[:12]}…")
    assert rows["policy rev"] == str(before["policy_revision"] + 1)
    assert rows["tenant"].endswith(f"({before['tenant']['slug']})")
    assert alice.run_json("whoami")["policy_revision"] == before["policy_revision"] + 1


def test_the_cli_needs_only_the_token(register):
    alice = register("alice")
    env = base_env(HIKYAKU_URL=alice.url, HIKYAKU_AGENT_TOKEN=alice.token)
    result = hikyaku("--json", "whoami", env=env)
    assert result.returncode == 0, result.stderr
    assert result.json()["agent_id"] == alice.agent_id


def test_the_mcp_whoami_tool_over_stdio_and_http(register):
    alice, bob = register("alice"), register("bob")
    restrict(alice, send_to=[bob.agent_id])

    async def check(connect) -> None:
        async with connect as client:
            result = await call(client, "whoami")
            text = result.content[0].text
            assert f"You may send to bob ({bob.agent_id[:8]}) and receive from anyone" in text
            assert "disclosure ceiling restricted" in text and "policy revision" in text
            agent = result.structured_content["agent"]
            assert agent["send_to"]["agents"][0]["name"] == "bob"
            assert agent["policy_revision"] >= 1

    run(lambda: check(stdio_for(alice)))
    run(lambda: check(http_for(alice)))
