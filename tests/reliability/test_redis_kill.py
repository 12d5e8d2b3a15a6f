"""Redis dies during a send load: sends keep succeeding (DESIGN.md §5, FACTS.md "Faults").

Redis carries the doorbells and the shared rate-limit counters, never a message. The broker
runs against a private redis-server that is SIGKILLed mid-load and started again later; every
send must succeed at its first attempt throughout (a failed doorbell never turns a committed
send into an error — the broker we replace answered 500 to all 195 sends of that window), and
every message is stored exactly once.

Streams catching up from the database after the outage, and a Celery worker killed in the
middle of a webhook delivery, need the streams and trust work: see the skipped placeholders
at the end, which say what each will assert.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from django.db import connection

from messaging.models import Task
from tests import factories, live
from tests.reliability.harness import PrivateRedis, SendLoad, Server, port_in_range, record

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PrivateRedis.available(), reason="needs redis-server"),
]

TOTAL = 2000
CLIENTS = 8


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", Server.KINDS)
def test_sends_succeed_while_redis_is_dead(tenant, kind):
    redis = PrivateRedis().start()
    senders = [factories.agent(tenant, name=f"sender-{i}") for i in range(CLIENTS)]
    recipients = [factories.agent(tenant, name=f"recipient-{i}") for i in range(4)]
    server = Server(
        kind=kind,
        database_url=live.test_database_url(),
        port=port_in_range(8800, 8899),
        env={"REDIS_URL": redis.url, "HIKYAKU_RATE_LIMIT_PER_MINUTE": "100000"},
    ).start()
    try:
        load = SendLoad(
            url=lambda: server.url,
            senders=[(a.id, a.token) for a in senders],
            recipients=[r.id for r in recipients],
            total=TOTAL,
        ).start()
        load.wait_for(600)
        redis.kill()
        killed_at = time.monotonic()
        acknowledged_at_kill = load.acknowledged
        load.wait_for(1300)
        sent_while_dead = load.acknowledged - acknowledged_at_kill
        down_for = time.monotonic() - killed_at
        redis.start()  # the same port again
        load.join()
    finally:
        server.stop()
        redis.kill()

    outcomes = load.outcomes()
    assert outcomes == Counter({"ok": TOTAL}), outcomes  # not one error, not one retry
    tasks = Task.objects.filter(tenant=tenant).exclude(message_id=None)
    assert tasks.count() == TOTAL
    assert Counter(tasks.values_list("message_id", flat=True)).most_common(1)[0][1] == 1
    assert sent_while_dead >= 500
    record(
        f"redis-kill-{kind}-{connection.vendor}",
        {
            "scenario": f"SIGKILL redis mid-load, restart it later ({kind} server)",
            "database": connection.vendor,
            "load": f"{TOTAL} sends, {CLIENTS} client threads",
            "faults": 1,
            "redis_down_seconds": round(down_for, 1),
            "sent_while_redis_was_dead": sent_while_dead,
            "elapsed_seconds": round(load.elapsed, 1),
            "send_outcomes": dict(outcomes),
            "messages_checked": TOTAL,
            "lost": 0,
            "duplicated": 0,
        },
    )


@pytest.mark.skip(
    reason="waits for the streams work (SSE /api/v1/subscribe) to land on main: it will hold "
    "one SSE stream per recipient on the stream server, SIGKILL redis mid-load and assert "
    "that every stream still receives every event id exactly once, caught up from the "
    "database (and resumes with Last-Event-ID across a stream-server SIGKILL)"
)
def test_streams_catch_up_from_the_database_when_redis_dies():
    raise NotImplementedError


@pytest.mark.skip(
    reason="waits for the trust work (webhooks delivered by Celery) to land on main: it will "
    "run a real Celery worker against a private redis, point an agent's webhook at a local "
    "receiver that stalls, SIGKILL the worker mid-delivery, start another, and assert that "
    "every event is delivered (acks_late + reject_on_worker_lost), with the attempts visible "
    "as delivery rows"
)
def test_a_celery_worker_killed_mid_webhook_delivery_is_retried():
    raise NotImplementedError
