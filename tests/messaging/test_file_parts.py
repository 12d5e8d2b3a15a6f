"""A file part's content must be base64: what is not is refused, never stored as an empty file
(both dialects' parsers decode leniently). Over HTTP against the broker, as the old 0.3 client
and an A2A 1.0 client send them."""

from __future__ import annotations

import uuid

import httpx
import pytest

from messaging.models import Task
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def send(broker, agent, to: str, part: dict, *, version: str | None) -> dict:
    headers = {"Authorization": f"Bearer {agent.token}"}
    if version:
        headers["A2A-Version"] = version
    message = {
        "messageId": uuid.uuid4().hex,
        "role": "user" if version is None else "ROLE_USER",
        "parts": [{"kind": "text", "text": "see file"} if version is None else {"text": "see"}]
        + [part],
        "metadata": {"destination": to},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    response = httpx.post(f"{broker.url}/", json=body, headers=headers, timeout=10)
    assert response.status_code == 200
    return response.json()


@pytest.mark.parametrize("content", ["%%%", "aGVsbG8=!", "a", "aGVs bG8="])
def test_a_03_file_part_that_is_not_base64_is_refused(broker, tenant, content):
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    part = {"kind": "file", "file": {"bytes": content, "name": "x.bin"}}
    error = send(broker, alice, bob.id, part, version=None)["error"]
    assert error["code"] == -32602
    assert "message.parts[1].file.bytes is not base64" in error["message"]
    assert not Task.objects.exists()


@pytest.mark.parametrize("content", ["%%%", "a"])
def test_a_10_raw_part_that_is_not_base64_is_refused(broker, tenant, content):
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    error = send(broker, alice, bob.id, {"raw": content, "filename": "x.bin"}, version="1.0")
    assert error["error"]["code"] == -32602
    assert "message.parts[1].raw is not base64" in error["error"]["message"]
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    "content, stored",
    [
        ("aGVsbG8=", "aGVsbG8="),  # "hello"
        ("aGVs\nbG8=", "aGVsbG8="),  # a MIME encoder's line break
    ],
)
def test_base64_03_file_parts_are_kept_exactly(broker, tenant, content, stored):
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    part = {"kind": "file", "file": {"bytes": content, "name": "x.bin"}}
    task = send(broker, alice, bob.id, part, version=None)["result"]["task"]
    assert task["artifacts"][0]["parts"][1]["file"]["bytes"] == stored


@pytest.mark.parametrize("content", ["aGVsbG8", "aGVs_-bG8="])
def test_03_file_parts_are_standard_padded_base64(broker, tenant, content):
    """0.3 decodes the standard alphabet only, and would drop `_` and `-` silently."""
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    part = {"kind": "file", "file": {"bytes": content, "name": "x.bin"}}
    error = send(broker, alice, bob.id, part, version=None)["error"]
    assert "is not base64" in error["message"] and "standard alphabet, padded" in error["message"]
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    "content, stored",
    [
        ("aGVsbG8=", "aGVsbG8="),
        ("aGVsbG8", "aGVsbG8="),  # padding left out
        ("_-8=", "/+8="),  # the URL-safe alphabet
    ],
)
def test_base64_10_raw_parts_are_kept(broker, tenant, content, stored):
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    task = send(broker, alice, bob.id, {"raw": content}, version="1.0")["result"]["task"]
    assert task["artifacts"][0]["parts"][1]["raw"] == stored
