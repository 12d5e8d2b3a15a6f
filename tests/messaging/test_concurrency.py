"""Two concurrent actions on one task never both succeed (docs/PROTOCOL.md §4.4)."""

import threading
import uuid

import httpx
import pytest

from messaging.models import Task, TaskEvent
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def test_ack_cancel_and_a_second_ack_race_and_exactly_one_wins(broker, tenant):
    alice = factories.agent(tenant, name="alice")
    bob = factories.agent(tenant, name="bob")
    headers = {"A2A-Version": "1.0"}

    def body(method, params):
        return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}

    def ack(task_id):
        return body(
            "SendMessage",
            {
                "message": {
                    "messageId": uuid.uuid4().hex,
                    "role": "ROLE_USER",
                    "taskId": task_id,
                    "parts": [{"text": "ack"}],
                }
            },
        )

    with httpx.Client(base_url=broker.url, headers=headers, timeout=30) as http:
        for round_ in range(50):
            sent = http.post(
                "/a2a/",
                json=body(
                    "SendMessage",
                    {
                        "message": {
                            "messageId": uuid.uuid4().hex,
                            "role": "ROLE_USER",
                            "parts": [{"text": f"r{round_}"}],
                            "metadata": {"destination": bob.id},
                        }
                    },
                ),
                headers={"Authorization": f"Bearer {alice.token}"},
            )
            task_id = sent.json()["result"]["task"]["id"]
            calls = [
                (bob.token, ack(task_id)),
                (alice.token, body("CancelTask", {"id": task_id})),
                (bob.token, ack(task_id)),
            ]
            barrier = threading.Barrier(len(calls))
            outcomes: list[dict] = [None] * len(calls)

            def fire(i, token, payload, barrier=barrier, outcomes=outcomes):
                with httpx.Client(base_url=broker.url, headers=headers, timeout=30) as own:
                    barrier.wait()
                    outcomes[i] = own.post(
                        "/a2a/", json=payload, headers={"Authorization": f"Bearer {token}"}
                    ).json()

            threads = [
                threading.Thread(target=fire, args=(i, t, p)) for i, (t, p) in enumerate(calls)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wins = [o for o in outcomes if "result" in o]
            losses = [o for o in outcomes if "error" in o]
            assert len(wins) == 1, outcomes
            assert {o["error"]["code"] for o in losses} <= {-32002, -32004}
            task = Task.objects.get(pk=task_id)
            assert task.state in ("completed", "canceled")
            assert TaskEvent.objects.filter(task_id=task_id).count() == 2
