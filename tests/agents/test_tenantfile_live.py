"""Operator commands against a running broker (a real server process): what `tenantfile
apply`, `agenttoken` and `agent` change holds on the next request of every surface and on
streams already open, without a restart."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from io import StringIO
from pathlib import Path

import httpx
import httpx2
import pytest
import yaml
from django.core.management import call_command
from django.utils import timezone
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from tests import factories
from tests.live import SSEClient
from tests.messaging.test_streams import assert_closes, texts

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue().strip()


def rpc_send(broker, token: str, to: str, text: str, *, version: str | None = "1.0") -> dict:
    """SendMessage through the server (A2A 1.0 at /a2a/, or the 0.3 dialect at /)."""
    message = {
        "messageId": uuid.uuid4().hex,
        "parts": [{"text": text}] if version else [{"kind": "text", "text": text}],
        "metadata": {"destination": to},
    }
    if version:
        message["role"] = "ROLE_USER"
    else:
        message.update(role="user", kind="message")
    headers = {"Authorization": f"Bearer {token}"}
    if version:
        headers["A2A-Version"] = version
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage" if version else "message/send"}
    body["params"] = {"message": message}
    response = httpx.post(
        f"{broker.url}/a2a/" if version else f"{broker.url}/",
        json=body,
        headers=headers,
        timeout=10,
    )
    assert response.status_code == 200, response.text
    return response.json()


def without_ids(error: dict, *ids: str) -> str:
    text = str(error)
    for value in ids:
        text = text.replace(value, "<id>")
    return text


async def mcp_send(broker, token: str, to: str, text: str):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with McpClient(streamable_http_client(f"{broker.url}/mcp", http_client=http)) as client:
        return await client.call_tool("send", {"to": to, "text": text})


def mcp(coro) -> object:
    return asyncio.run(asyncio.wait_for(coro, 60))


def subscribe(broker, token: str) -> SSEClient:
    stream = SSEClient(
        f"{broker.url}/api/v1/subscribe",
        headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"},
    )
    assert stream.status == 200, stream.body
    assert stream.next().event == "ready"
    return stream


def refused(broker, token: str) -> int:
    """The status a new stream with this token gets (401 once the token stopped)."""
    response = httpx.get(
        f"{broker.url}/api/v1/subscribe",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    return response.status_code


def messages_on(stream: SSEClient, want: int, timeout: float = 8) -> list[str]:
    received: list[str] = []
    deadline = time.monotonic() + timeout
    while len(received) < want and time.monotonic() < deadline:
        received += texts(e for e in stream.drain(0.2) if e.event == "message")
    return received


def test_an_applied_send_to_restriction_refuses_the_next_send_at_once(broker, tenant, tmp_path):
    alice = factories.agent(tenant, name="alice")
    bob = factories.agent(tenant, name="bob")
    carol = factories.agent(tenant, name="carol")
    before = rpc_send(broker, alice.token, bob.id, "before")
    assert "result" in before
    task_id = before["result"]["task"]["id"]
    assert "result" in rpc_send(broker, alice.token, bob.id, "before, 0.3", version=None)
    assert not mcp(mcp_send(broker, alice.token, bob.id, "before, mcp")).is_error
    revision = httpx.get(
        f"{broker.url}/api/v1/agents/me", headers={"Authorization": f"Bearer {alice.token}"}
    ).json()["policy_revision"]

    data = yaml.safe_load(run("tenantfile", "export", "--tenant", "acme"))
    data["agents"][0]["send_to"] = ["carol"]
    path = tmp_path / "acme.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert '~ update agent alice\n    send_to: ["*"] -> ["carol"]' in run(
        "tenantfile", "apply", str(path)
    )

    # The very next send to bob is refused, in the same words as an unknown agent.
    unknown = str(uuid.uuid4())
    for version in ("1.0", None):
        refusal = rpc_send(broker, alice.token, bob.id, "after", version=version)
        assert "result" not in refusal, refusal
        baseline = rpc_send(broker, alice.token, unknown, "after", version=version)
        assert without_ids(refusal["error"], bob.id) == without_ids(baseline["error"], unknown)
    result = mcp(mcp_send(broker, alice.token, bob.id, "after, mcp"))
    assert result.is_error
    assert "result" in rpc_send(broker, alice.token, carol.id, "allowed")
    # REST: the task she sent bob is out of her reach now, and whoami tells what changed.
    headers = {"Authorization": f"Bearer {alice.token}"}
    events = httpx.get(f"{broker.url}/api/v1/tasks/{task_id}/events", headers=headers)
    assert events.status_code == 404
    me = httpx.get(f"{broker.url}/api/v1/agents/me", headers=headers).json()
    assert me["send_to"] == {
        "anyone": False,
        "agents": [{"agent_id": carol.id, "name": "carol", "status": "active"}],
    }
    assert me["policy_revision"] == revision + 1


def test_an_applied_receive_from_holds_on_an_open_stream(broker, tenant, tmp_path):
    alice = factories.agent(tenant, name="alice")
    bob = factories.agent(tenant, name="bob")
    carol = factories.agent(tenant, name="carol")
    stream = subscribe(broker, bob.token)
    try:
        assert "result" in rpc_send(broker, carol.token, bob.id, "from carol")
        assert messages_on(stream, 1) == ["from carol"]
        path = tmp_path / "acme.yaml"
        data = yaml.safe_load(run("tenantfile", "export", "--tenant", "acme"))
        data["agents"][1]["receive_from"] = ["alice"]
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        run("tenantfile", "apply", str(path))
        assert "error" in rpc_send(broker, carol.token, bob.id, "refused")
        assert "result" in rpc_send(broker, alice.token, bob.id, "from alice")
        assert messages_on(stream, 1) == ["from alice"]
        assert not stream.closed.is_set()
    finally:
        stream.close()


def test_rotate_revoke_and_issue_take_effect_on_an_open_stream(broker, tenant):
    bob = factories.agent(tenant, name="bob")
    alice = factories.agent(tenant, name="alice")
    stream = subscribe(broker, bob.token)
    try:
        new = run("agenttoken", "rotate", "--tenant", "acme", "--agent", "bob")
        assert_closes(stream)
        assert refused(broker, bob.token) == 401
    finally:
        stream.close()
    stream = subscribe(broker, new)
    try:
        assert "result" in rpc_send(broker, alice.token, bob.id, "to the new token")
        assert messages_on(stream, 1) == ["to the new token"]
        run("agenttoken", "revoke", "--tenant", "acme", "--agent", "bob")
        assert_closes(stream)
        assert refused(broker, new) == 401
    finally:
        stream.close()
    issued = run("agenttoken", "issue", "--tenant", "acme", "--agent", "bob")
    stream = subscribe(broker, issued)
    try:
        assert "result" in rpc_send(broker, alice.token, bob.id, "to the issued token")
        assert messages_on(stream, 1) == ["to the issued token"]
    finally:
        stream.close()


def test_an_expiring_token_closes_its_stream_at_expiry(broker, tenant):
    factories.agent(tenant, name="bob")
    expires = (timezone.now() + timedelta(seconds=4)).isoformat()
    token = run("agenttoken", "rotate", "--tenant", "acme", "--agent", "bob", "--expires", expires)
    stream = subscribe(broker, token)
    try:
        assert not stream.closed.is_set()
        assert_closes(stream, timeout=12)
        assert refused(broker, token) == 401
    finally:
        stream.close()


def test_disable_and_enable_take_effect_on_an_open_stream(broker, tenant):
    bob = factories.agent(tenant, name="bob")
    alice = factories.agent(tenant, name="alice")
    stream = subscribe(broker, bob.token)
    try:
        assert run("agent", "disable", "--tenant", "acme", "--agent", "bob").endswith("disabled.")
        assert_closes(stream)
        assert refused(broker, bob.token) == 401
        assert "error" in rpc_send(broker, alice.token, bob.id, "to a disabled agent")
    finally:
        stream.close()
    assert run("agent", "enable", "--tenant", "acme", "--agent", "bob").endswith("enabled.")
    stream = subscribe(broker, bob.token)  # the same token works again
    try:
        assert "result" in rpc_send(broker, alice.token, bob.id, "welcome back")
        assert messages_on(stream, 1) == ["welcome back"]
    finally:
        stream.close()


def test_a_tenant_file_created_agent_streams_once_issued_a_token(broker, tenant, tmp_path):
    alice = factories.agent(tenant, name="alice")
    path = Path(tmp_path / "t.yaml")
    path.write_text(
        "version: 1\ntenant: {slug: acme, name: Acme}\nagents:\n  - name: alice\n  - name: robot\n"
    )
    assert "hka_" not in run("tenantfile", "apply", str(path))
    token = run("agenttoken", "issue", "--tenant", "acme", "--agent", "robot")
    stream = subscribe(broker, token)
    try:
        me = httpx.get(
            f"{broker.url}/api/v1/agents/me", headers={"Authorization": f"Bearer {token}"}
        )
        robot_id = me.json()["agent_id"]
        assert "result" in rpc_send(broker, alice.token, robot_id, "hello robot")
        assert messages_on(stream, 1) == ["hello robot"]
    finally:
        stream.close()
