"""Webhooks delivered by a real Celery worker process through a Redis broker.

The production topology in miniature: a broker process (uvicorn) that enqueues to Redis after
commit, a `celery -A hikyaku worker` process that POSTs, and a receiver on 127.0.0.1. Both
processes run against the test database. Each run uses its own queue name, so parallel runs
sharing a Redis cannot steal each other's tasks.

The queue is CELERY_BROKER_URL, else REDIS_URL (the Postgres suite's Redis), else a private
redis-server of this module's own (the SQLite suite sets neither). Skipped only when none of
them can be had (no redis-server installed and neither variable set).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from agents import services as agent_services
from messaging.models import WebhookDelivery
from messaging.push import payloads
from messaging.push.fairness import WAITING
from testbed import Celery, RedisServer
from tests import factories, live
from tests.live import ROOT, BrokerProcess
from tests.messaging.receiver import Receiver
from tests.messaging.rpc import message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(scope="module")
def queue_url() -> Iterator[str]:
    url = os.environ.get("CELERY_BROKER_URL") or os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    if not RedisServer.available():
        pytest.skip("needs CELERY_BROKER_URL, REDIS_URL or redis-server on PATH")
    server = RedisServer().start()
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
def celery_env(queue_url) -> dict[str, str]:
    return {
        "CELERY_BROKER_URL": queue_url,
        "CELERY_TASK_DEFAULT_QUEUE": f"hikyaku-test-{uuid.uuid4().hex[:12]}",
        "HIKYAKU_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
        "HIKYAKU_WEBHOOK_BACKOFF_SECONDS": "0.2",
        "HIKYAKU_WEBHOOK_BACKOFF_CAP_SECONDS": "1",
        "HIKYAKU_WEBHOOK_MAX_ATTEMPTS": "3",
    }


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker, celery_env) -> Iterator[Celery]:
    env = {
        **os.environ,
        **celery_env,
        "DATABASE_URL": live.suite_database_url(),
        "HIKYAKU_LOG_FORMAT": "text",
    }
    queue = celery_env["CELERY_TASK_DEFAULT_QUEUE"]
    log = ROOT / "test-artifacts" / f"celery-{queue}.log"  # of this run: readiness reads it
    worker = Celery(kind="worker", env=env, log=log, queue=queue).start()
    yield worker
    worker.stop(timeout=15)


@pytest.fixture(scope="module")
def queued_broker(django_db_setup, celery_env) -> Iterator[BrokerProcess]:
    """A broker process that enqueues deliveries to Redis instead of running them itself."""
    server = BrokerProcess(env=celery_env).start()
    yield server
    server.stop()


def send_over_http(broker: BrokerProcess, sender, body: dict) -> dict:
    response = httpx.post(
        f"{broker.url}/a2a/",
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": body},
        headers={"Authorization": f"Bearer {sender.token}", "A2A-Version": "1.0"},
        timeout=10,
    )
    assert "result" in response.json(), response.text
    return response.json()["result"]


def wait_for_outcome(count: int, timeout: float = 30) -> list[WebhookDelivery]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = list(WebhookDelivery.objects.order_by("pk"))
        if len(rows) >= count and all(r.outcome != "pending" for r in rows):
            return rows
        time.sleep(0.1)
    raise AssertionError(f"deliveries not finished: {list(WebhookDelivery.objects.values())}")


def test_a_celery_worker_delivers_and_retries_until_success(
    worker, queued_broker, tenant, agent, receiver
):
    receiver.statuses = [500, 200]
    bob = factories.agent(tenant, name="bob", webhook_url=receiver.url)
    task = send_over_http(queued_broker, agent, {"message": message("via worker", to=bob.id)})
    requests = receiver.wait_for(2, timeout=30)
    (row,) = wait_for_outcome(1)
    assert (row.outcome, row.attempts, row.last_status) == ("delivered", 2, 200)
    assert requests[1].at - requests[0].at >= 0.15  # backed off before retrying
    body = requests[1].json
    assert body["task"]["id"] == task["task"]["id"]
    secret = agent_services.webhook_secret(agent=bob.refresh())
    assert payloads.verify(secret, requests[1].body, requests[1].headers["X-Hikyaku-Signature"])
    time.sleep(1)
    assert len(receiver.requests) == 2  # stopped on success


def test_a_celery_worker_delivers_push_configs_and_gives_up(
    worker, queued_broker, tenant, agent, peer, receiver
):
    receiver.statuses = [500]
    task = send_over_http(queued_broker, agent, {"message": message("x", to=peer.id)})["task"]
    response = httpx.post(
        f"{queued_broker.url}/a2a/",
        json={
            "jsonrpc": "2.0",
            "id": 2,
            "method": "CreateTaskPushNotificationConfig",
            "params": {"taskId": task["id"], "url": receiver.url, "token": "tok"},
        },
        headers={"Authorization": f"Bearer {agent.token}", "A2A-Version": "1.0"},
        timeout=10,
    )
    assert response.json()["result"]["token"] == "tok"
    send_over_http(
        queued_broker,
        peer,
        {"message": {**message("on it", action="accept"), "taskId": task["id"]}},
    )
    requests = receiver.wait_for(3, timeout=30)
    (row,) = wait_for_outcome(1)
    assert (row.outcome, row.attempts) == ("failed", 3)
    assert all(r.headers["X-A2A-Notification-Token"] == "tok" for r in requests)
    assert requests[0].json["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"


def test_a_tenants_slow_receiver_does_not_delay_another_tenants_webhooks(
    worker, queued_broker, tenant, other_tenant
):
    """The fairness scenario (docs/WEBHOOKS.md, Fairness) through Redis and a real worker:
    12 messages to a receiver that answers after 10 s (each attempt times out after the
    default 5 s) hold up another tenant's webhook by at most a second."""
    slow, fast = Receiver(hang_seconds=10).start(), Receiver().start()
    try:
        alice = factories.agent(tenant, name="alice")
        bob = factories.agent(tenant, name="bob", webhook_url=slow.url)
        carol = factories.agent(other_tenant, name="carol")
        dave = factories.agent(other_tenant, name="dave", webhook_url=fast.url)
        for n in range(12):
            send_over_http(queued_broker, alice, {"message": message(f"slow {n}", to=bob.id)})
        slow.wait_for(2, timeout=30)
        time.sleep(0.5)  # the worker has taken (and set aside) every one of the 12
        sent_at = time.monotonic()
        send_over_http(queued_broker, carol, {"message": message("fast", to=dave.id)})
        (arrived,) = fast.wait_for(1, timeout=15)
        assert arrived.at - sent_at <= 1.0
        assert len(slow.requests) == 2  # the tenant's cap (HIKYAKU_WEBHOOK_TENANT_CONCURRENCY)
        waiting = WebhookDelivery.objects.filter(agent_id=bob.id, last_error=WAITING)
        assert waiting.count() == 10
    finally:
        slow.stop()  # what is left is refused at once, so the worker is idle again soon
        fast.stop()
