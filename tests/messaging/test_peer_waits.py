"""Blocking SendMessage on an agent's own endpoint, as `make run` serves it (one uvicorn process
on hikyaku.asgi): the send waits on the stream hub (messaging/waiting.py), with no thread per
wait, until the agent answers, the timeout runs out or the client leaves. The topology with
web processes in front: tests/reliability/test_long_held.py."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents import services as agent_services
from messaging.models import Task
from tests import factories
from tests.live import BrokerProcess

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 3.0  # the brokers' HIKYAKU_BLOCKING_TIMEOUT_SECONDS


def start_broker(**env: str) -> BrokerProcess:
    return BrokerProcess(
        env={
            "HIKYAKU_ANONYMOUS_RATE_LIMIT_PER_MINUTE": "0",
            "HIKYAKU_BLOCKING_TIMEOUT_SECONDS": str(TIMEOUT),
            **env,
        }
    ).start()


@pytest.fixture(scope="module")
def broker_waits(django_db_setup, django_db_blocker) -> Iterator[BrokerProcess]:
    server = start_broker()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def broker_one_slot(django_db_setup, django_db_blocker) -> Iterator[BrokerProcess]:
    """At most one blocking send waits at a time (HIKYAKU_MAX_BLOCKING_WAITS)."""
    server = start_broker(HIKYAKU_MAX_BLOCKING_WAITS="1")
    yield server
    server.stop()


@pytest.fixture
def bob(tenant) -> factories.TestAgent:
    bob = factories.agent(tenant, name="bob")
    agent_services.set_agent_public(agent=bob.model, public=True)
    return bob


def envelope(method: str, params: dict, request_id: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def say(text: str, **fields) -> dict:
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], **fields}


class BlockingSend:
    """A blocking SendMessage to `agent`'s endpoint, in a thread; `took` once it answered."""

    def __init__(self, broker: BrokerProcess, agent: factories.TestAgent, text: str) -> None:
        self.text = text
        self.url = f"{broker.url}/a2a/agents/{agent.id}/"
        self.response: httpx.Response | None = None
        self.answered_at: float | None = None
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.thread.start()

    def _send(self) -> None:
        body = envelope("SendMessage", {"message": say(self.text)})
        headers = {"A2A-Version": "1.0"}
        self.response = httpx.post(self.url, json=body, headers=headers, timeout=30)
        self.answered_at = time.monotonic()

    def join(self, timeout: float = 20) -> dict:
        self.thread.join(timeout)
        assert self.response is not None, "no answer"
        assert self.response.status_code == 200, self.response.text
        return self.response.json()["result"]

    @property
    def took(self) -> float:
        assert self.answered_at is not None
        return self.answered_at - self.started


def delivered(text: str, timeout: float = 5) -> Task:
    """The task a send with this text created, once it is stored."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = Task.objects.filter(message__parts__0__text=text).first()
        if task is not None:
            return task
        time.sleep(0.05)
    raise AssertionError(f"no task with {text!r}")


def answer(
    broker: BrokerProcess, agent: factories.TestAgent, task: Task, action: str, text: str = "ok"
) -> None:
    """The agent acts on its task through the broker, as an agent does."""
    message = say(text, taskId=str(task.id), metadata={"action": action})
    response = httpx.post(
        f"{broker.url}/a2a/",
        json=envelope("SendMessage", {"message": message}),
        headers={"Authorization": f"Bearer {agent.token}", "A2A-Version": "1.0"},
        timeout=10,
    )
    assert "result" in response.json(), response.text


def test_a_blocking_send_returns_as_soon_as_the_agent_answers(broker_waits, bob):
    send = BlockingSend(broker_waits, bob, "review this")
    task = delivered("review this")
    answer(broker_waits, bob, task, "accept")  # working on it: still owes the answer
    time.sleep(0.5)
    assert send.answered_at is None
    answered = time.monotonic()
    answer(broker_waits, bob, task, "complete", "looks good")
    result = send.join()
    assert result["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert result["task"]["artifacts"][0]["parts"] == [{"text": "looks good"}]
    # Woken by the answer's doorbell, not by the timeout.
    assert send.answered_at - answered < 1.0
    assert Task.objects.filter(recipient=bob.model).count() == 1


def test_a_question_to_the_caller_ends_the_wait(broker_waits, bob):
    send = BlockingSend(broker_waits, bob, "fix the build")
    task = delivered("fix the build")
    answer(broker_waits, bob, task, "accept")
    answer(broker_waits, bob, task, "block", "which branch?")
    assert send.join()["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert send.took < TIMEOUT


def test_a_blocking_send_gives_up_after_the_timeout(broker_waits, bob):
    send = BlockingSend(broker_waits, bob, "nobody home")
    assert send.join()["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert TIMEOUT <= send.took < TIMEOUT + 2


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Threads:")).split()[1])


def open_waits(broker: BrokerProcess) -> float:
    """hikyaku_stream_connections{surface="wait"} on the broker's /metrics."""
    text = httpx.get(f"{broker.url}/metrics", timeout=5).text
    return next(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "hikyaku_stream_connections" and sample.labels == {"surface": "wait"}
    )


def test_waits_hold_no_thread_and_others_are_served_meanwhile(broker_waits, bob, agent):
    sends = [BlockingSend(broker_waits, bob, f"wait {n}") for n in range(40)]
    deadline = time.monotonic() + 10
    while Task.objects.filter(recipient=bob.model).count() < 40:
        assert time.monotonic() < deadline, "the sends were not all delivered"
        time.sleep(0.05)
    assert all(send.answered_at is None for send in sends)
    # 40 open waits: the process has not grown a thread for each (DB threads are 8).
    assert threads_of(broker_waits.proc.pid) < 30
    assert open_waits(broker_waits) == 40
    started = time.monotonic()
    health = httpx.get(f"{broker_waits.url}/healthz", timeout=5)
    agents = httpx.get(
        f"{broker_waits.url}/api/v1/agents",
        headers={"Authorization": f"Bearer {agent.token}"},
        timeout=5,
    )
    assert health.status_code == 200 and agents.status_code == 200
    assert time.monotonic() - started < 1.0
    for send in sends:
        assert send.join()["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert open_waits(broker_waits) == 0


def test_past_the_wait_limit_a_blocking_send_answers_at_once(broker_one_slot, bob):
    waiting = BlockingSend(broker_one_slot, bob, "first")
    delivered("first")
    time.sleep(0.3)
    second = BlockingSend(broker_one_slot, bob, "second")
    assert second.join()["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert second.took < 1.5 and waiting.answered_at is None  # delivered, not waited for
    assert waiting.join()["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert waiting.took >= TIMEOUT


def test_a_client_that_leaves_frees_its_wait(broker_one_slot, bob):
    body = envelope("SendMessage", {"message": say("leaving")})
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{broker_one_slot.url}/a2a/agents/{bob.id}/",
            json=body,
            headers={"A2A-Version": "1.0"},
            timeout=httpx.Timeout(5, read=0.5),
        )
    time.sleep(0.3)
    # The slot is free again: this send waits (the limit would answer it at once).
    assert BlockingSend(broker_one_slot, bob, "next").join()["task"]["status"]["state"] == (
        "TASK_STATE_SUBMITTED"
    )
    assert Task.objects.filter(recipient=bob.model).count() == 2


def test_errors_before_the_send_are_the_endpoints(broker_waits, bob, agent):
    url = f"{broker_waits.url}/a2a/agents/{bob.id}/"
    headers = {"A2A-Version": "1.0"}

    def error(params: dict, *, to: str = url, **extra) -> httpx.Response:
        return httpx.post(
            to, json=envelope("SendMessage", params), headers={**headers, **extra}, timeout=10
        )

    bad_message = error({"message": {"parts": []}})
    assert bad_message.status_code == 200 and bad_message.json()["error"]["code"] == -32602
    version = error({"message": say("x")}, **{"A2A-Version": "99.0"})
    assert version.json()["error"]["code"] == -32009
    unknown = error({"message": say("x")}, to=f"{broker_waits.url}/a2a/agents/{uuid.uuid4()}/")
    assert unknown.status_code == 401  # without credentials an unknown agent looks private
    private = error({"message": say("x")}, to=f"{broker_waits.url}/a2a/agents/{agent.id}/")
    assert private.status_code == 401 and private.json()["error"]["code"] == -32000
    assert "Bearer" in private.headers["WWW-Authenticate"]
    bad_token = error({"message": say("x")}, Authorization="Bearer hka_nope")
    assert bad_token.status_code == 401
    body = json.dumps(envelope("SendMessage", {"message": say("x")}))
    not_json = httpx.post(url, content=body, headers={**headers, "Content-Type": "text/plain"})
    assert not_json.json()["error"]["code"] == -32005
    assert not Task.objects.filter(recipient=bob.model).exists()
