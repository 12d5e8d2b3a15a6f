"""The 0.3 dialect, with raw HTTP bodies exactly as the old broker's client sends them
(docs/COMPAT.md): no A2A-Version header, key + X-Agent-Id, POST /."""

import uuid

import httpx
import pytest

from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world(tenant):
    key = factories.api_key(tenant)
    return key, factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")


def rpc(broker, key: str, agent_id: str, method: str, params: dict) -> dict:
    payload = {"jsonrpc": "2.0", "method": method, "params": params, "id": str(uuid.uuid4())}
    response = httpx.post(
        f"{broker.url}/",
        json=payload,
        headers={"Authorization": f"Bearer {key}", "X-Agent-Id": agent_id},
        timeout=10,
    )
    assert response.status_code == 200
    return response.json()


def old_send(broker, key, sender, to, text):
    return rpc(
        broker,
        key,
        sender,
        "SendMessage",
        {
            "message": {
                "messageId": str(uuid.uuid4()),
                "role": "user",
                "parts": [{"kind": "text", "text": text}],
                "metadata": {"destination": to},
            },
        },
    )


def old_ack(broker, key, agent_id, task_id):
    return rpc(
        broker,
        key,
        agent_id,
        "SendMessage",
        {
            "message": {
                "messageId": str(uuid.uuid4()),
                "role": "user",
                "taskId": task_id,
                "parts": [{"kind": "text", "text": "ack"}],
            },
        },
    )


def test_old_client_send_poll_ack_round_trip(broker, world):
    key, alice, bob = world
    sent = old_send(broker, key, alice.id, bob.id, "hello from 0.3")["result"]["task"]
    assert sent["kind"] == "task"
    assert sent["status"]["state"] == "input-required"
    assert sent["contextId"] == bob.id
    assert sent["metadata"]["fromAgentId"] == alice.id and sent["metadata"]["type"] == "unicast"
    assert sent["artifacts"][0]["parts"] == [{"kind": "text", "text": "hello from 0.3"}]

    polled = rpc(broker, key, bob.id, "ListTasks", {"contextId": bob.id})["result"]["tasks"]
    assert [t["id"] for t in polled] == [sent["id"]]
    assert polled[0]["artifacts"][0]["parts"][0]["text"] == "hello from 0.3"
    assert polled[0]["history"][0]["role"] == "user"

    acked = old_ack(broker, key, bob.id, sent["id"])["result"]["task"]
    assert acked["status"]["state"] == "completed"
    assert acked["history"][-1]["role"] == "agent"

    pending = rpc(
        broker, key, bob.id, "ListTasks", {"contextId": bob.id, "status": "input-required"}
    )
    assert pending["result"]["tasks"] == []


def test_old_client_since_filter(broker, world):
    key, alice, bob = world
    first = old_send(broker, key, alice.id, bob.id, "one")["result"]["task"]
    second = old_send(broker, key, alice.id, bob.id, "two")["result"]["task"]
    since = second["status"]["timestamp"]
    tasks = rpc(broker, key, bob.id, "ListTasks", {"contextId": bob.id, "since": since})["result"][
        "tasks"
    ]
    assert [t["id"] for t in tasks] == [second["id"]]
    assert first["id"] != second["id"]


def test_old_client_get_and_cancel_wrap_the_task(broker, world):
    key, alice, bob = world
    sent = old_send(broker, key, alice.id, bob.id, "oops")["result"]["task"]
    got = rpc(broker, key, alice.id, "GetTask", {"id": sent["id"]})["result"]
    assert got["task"]["id"] == sent["id"]
    canceled = rpc(broker, key, alice.id, "CancelTask", {"id": sent["id"]})["result"]
    assert canceled["task"]["status"]["state"] == "canceled"


def test_slash_method_names(broker, world):
    key, alice, bob = world
    sent = rpc(
        broker,
        key,
        alice.id,
        "message/send",
        {
            "message": {
                "kind": "message",
                "messageId": "x1",
                "role": "user",
                "parts": [{"kind": "text", "text": "hi"}],
                "metadata": {"destination": bob.id},
            },
        },
    )["result"]["task"]
    assert (
        rpc(broker, key, bob.id, "tasks/get", {"id": sent["id"]})["result"]["task"]["id"]
        == sent["id"]
    )
    assert (
        rpc(broker, key, alice.id, "tasks/cancel", {"id": sent["id"]})["result"]["task"]["status"][
            "state"
        ]
        == "canceled"
    )


def test_old_client_broadcast(broker, world):
    key, alice, bob = world
    summary = old_send(broker, key, alice.id, "*", "all hands")["result"]["task"]
    assert summary["status"]["state"] == "completed"
    assert summary["metadata"]["type"] == "broadcast_summary"
    data = summary["artifacts"][0]["parts"][0]
    assert data["kind"] == "data" and len(data["data"]["deliveryTaskIds"]) == 1


def test_unknown_method_in_0_3(broker, world):
    key, alice, _ = world
    body = rpc(broker, key, alice.id, "tasks/frobnicate", {})
    assert body["error"]["code"] == -32601
    assert "tasks/frobnicate" in body["error"]["message"]


def test_unknown_task_in_0_3(broker, world):
    key, alice, _ = world
    body = rpc(broker, key, alice.id, "GetTask", {"id": str(uuid.uuid4())})
    assert body["error"]["code"] == -32001


def test_0_3_data_and_file_parts(broker, world):
    key, alice, bob = world
    parts = [
        {"kind": "data", "data": {"pr": 12, "files": ["a.py"]}},
        {"kind": "file", "file": {"uri": "https://example.com/log.txt", "mimeType": "text/plain"}},
        {"kind": "file", "file": {"bytes": "aGVsbG8=", "name": "hello.txt"}},
    ]
    rpc(
        broker,
        key,
        alice.id,
        "SendMessage",
        {
            "message": {
                "messageId": "p1",
                "role": "user",
                "parts": parts,
                "metadata": {"destination": bob.id},
            }
        },
    )
    (task,) = rpc(broker, key, bob.id, "ListTasks", {"contextId": bob.id})["result"]["tasks"]
    got = task["artifacts"][0]["parts"]
    assert got[0]["kind"] == "data" and got[0]["data"]["files"] == ["a.py"]
    assert got[1]["file"]["uri"] == "https://example.com/log.txt"
    assert got[2]["file"]["bytes"] == "aGVsbG8="


@pytest.mark.parametrize("version", ["0.3", "1.0"])
def test_a_follow_up_may_have_no_parts_but_a_new_message_may_not(broker, world, version):
    """Old clients acknowledge with `"parts": []`; the replaced broker accepted that."""
    key, alice, bob = world
    sent = old_send(broker, key, alice.id, bob.id, "hello")["result"]["task"]
    role = "user" if version == "0.3" else "ROLE_USER"
    headers = {"Authorization": f"Bearer {key}", "X-Agent-Id": bob.id, "A2A-Version": version}

    def call(message):
        payload = {"jsonrpc": "2.0", "method": "SendMessage", "params": {"message": message}}
        return httpx.post(f"{broker.url}/", json={**payload, "id": 1}, headers=headers).json()

    acked = call({"messageId": str(uuid.uuid4()), "role": role, "taskId": sent["id"], "parts": []})
    task = acked["result"]["task"]
    assert task["status"]["state"] == ("completed" if version == "0.3" else "TASK_STATE_COMPLETED")
    new = call(
        {
            "messageId": str(uuid.uuid4()),
            "role": role,
            "parts": [],
            "metadata": {"destination": alice.id},
        }
    )
    assert new["error"]["code"] == -32602 and "part" in new["error"]["message"]
