"""Redis dies, and so do the processes around it: nothing acknowledged is lost (docs/PROTOCOL.md §5).

Redis carries the doorbells, the shared rate-limit counters and the Celery queue, never a
message. Each scenario runs real server processes against a private redis-server that it
SIGKILLs mid-load:

- sends keep succeeding at their first attempt while Redis is dead (a failed doorbell never
  turns a committed send into an error — the broker we replace answered 500 to all 195 sends
  of that window), and every message is stored exactly once;
- every recipient's SSE stream still carries every event exactly once, caught up from the
  database while the doorbell is silent, and live delivery recovers when Redis is back; a
  stream server SIGKILLed mid-load loses nothing either: its clients resume with
  Last-Event-ID;
- a Celery worker SIGKILLed in the middle of webhook POSTs: a new worker and beat's sweeper
  deliver every event, and the delivery rows show the interrupted attempts.
"""

from __future__ import annotations

import queue
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from django.db import connection

from messaging.models import Task, TaskEvent, WebhookDelivery
from messaging.push import delivery
from tests import factories, live
from tests.backends import postgres_suite_only
from tests.messaging.receiver import Receiver
from tests.messaging.test_streams import send, subscribe
from tests.reliability.harness import (
    Celery,
    PrivateRedis,
    SendLoad,
    Server,
    record,
)

pytestmark = [
    pytest.mark.slow,
    postgres_suite_only(
        "Redis and Celery faults of the production topology (Postgres, Redis, granian, Celery "
        "workers); the embedded default has no Redis"
    ),
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
        database_url=live.suite_database_url(),
        env={
            "REDIS_URL": redis.url,
            "HIKYAKU_RATE_LIMIT_PER_MINUTE": "100000",
            "HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE": "100000",
        },
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


# Streams: the database is the delivery guarantee, Redis only the doorbell --------------------

STREAM_TOTAL = 1200
RECIPIENTS = 4
# A slow catch-up scan: while Redis is up, an event that arrives within half a second can only
# have come through the doorbell; while it is down, the scan is the only way events arrive.
SCAN_SECONDS = 3.0


def stream_cluster(tenant, redis: PrivateRedis) -> tuple[Server, Server]:
    """A uvicorn stream server and a granian web server sharing the test database and `redis`
    (the production split: sends go to `web`, subscriptions to `stream`)."""
    env = {
        "REDIS_URL": redis.url,
        "HIKYAKU_RATE_LIMIT_PER_MINUTE": "100000",
        "HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE": "100000",
        "HIKYAKU_STREAM_SCAN_SECONDS": str(SCAN_SECONDS),
    }
    database_url = live.suite_database_url()
    stream = Server(kind="uvicorn-asgi", database_url=database_url, env=env).start()
    web = Server(kind="granian-wsgi", database_url=database_url, env=env).start()
    return stream, web


def open_streams(server: Server, recipients, last_ids: dict[str, str] | None = None) -> dict:
    """One SSE stream per recipient, resuming after `last_ids[recipient id]` when given."""
    streams = {}
    for recipient in recipients:
        headers = {}
        if last_ids and last_ids.get(recipient.id):
            headers["Last-Event-ID"] = last_ids[recipient.id]
        streams[recipient.id] = subscribe(server, recipient, **headers)
    return streams


def expected_tasks(load: SendLoad) -> dict[str, set[str]]:
    """recipient id -> the task ids of the sends acknowledged to its inbox."""
    expected: dict[str, set[str]] = {}
    for entry in load.entries:
        expected.setdefault(entry.recipient_id, set()).update(entry.task_ids)
    return expected


def receive(streams: dict, received: dict[str, list], expected: dict, *, timeout: float) -> None:
    """Read every stream until it has carried each of its expected tasks (or `timeout`), then
    half a second more, so a duplicate sent after the last new event is caught too."""
    deadline = time.monotonic() + timeout
    for recipient_id, stream in streams.items():
        events = received.setdefault(recipient_id, [])
        while {e.json()["id"] for e in events} < expected.get(recipient_id, set()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                events.append(stream.next(timeout=min(left, 1.0)))
            except queue.Empty:
                continue
        events.extend(stream.drain(0.5))


def check_exactly_once(received: dict[str, list], expected: dict[str, set[str]]) -> int:
    """Every stream carried every task sent to its agent, each under one event id, once, in
    increasing event-id order, and nothing else. Returns how many events were checked."""
    checked = 0
    for recipient_id, tasks in expected.items():
        events = received[recipient_id]
        assert {e.event for e in events} == {"message"}
        ids = [int(e.id) for e in events]
        repeated = [i for i, n in Counter(ids).items() if n > 1]
        assert not repeated, f"{len(repeated)} event ids delivered twice to {recipient_id}"
        assert ids == sorted(ids), "events out of order"
        task_ids = [e.json()["id"] for e in events]
        missing = tasks - set(task_ids)
        assert not missing, f"{len(missing)} of {len(tasks)} tasks never reached the stream"
        assert set(task_ids) == tasks and len(task_ids) == len(tasks)
        checked += len(events)
    return checked


def live_latency(web: Server, sender, recipient, stream) -> float:
    """Seconds from sending a probe through `web` to its event on `stream`."""
    started = time.monotonic()
    task = send(web, sender, recipient.id, "probe")
    event = stream.next(timeout=SCAN_SECONDS * 3)
    assert event.json()["id"] == task["id"]
    return time.monotonic() - started


@dataclass
class StreamedLoad:
    """A private Redis, a stream server and a web server on it, one SSE stream per recipient
    and a send load towards them (`streamed_load`)."""

    redis: PrivateRedis
    stream_server: Server
    web: Server
    senders: list
    recipients: list
    streams: dict = field(default_factory=dict)
    load: SendLoad | None = None


@contextmanager
def streamed_load(tenant) -> Iterator[StreamedLoad]:
    """Start everything, with the load running; stop it all on the way out (the streams open
    at that moment included: a test that reopens them stores the new ones in `streams`)."""
    redis = PrivateRedis().start()
    senders = [factories.agent(tenant, name=f"sender-{i}") for i in range(CLIENTS)]
    recipients = [factories.agent(tenant, name=f"recipient-{i}") for i in range(RECIPIENTS)]
    stream_server, web = stream_cluster(tenant, redis)
    world = StreamedLoad(redis, stream_server, web, senders, recipients)
    try:
        world.streams = open_streams(stream_server, recipients)
        world.load = SendLoad(
            url=lambda: web.url,
            senders=[(a.id, a.token) for a in senders],
            recipients=[r.id for r in recipients],
            total=STREAM_TOTAL,
        ).start()
        yield world
    finally:
        for stream in world.streams.values():
            stream.close()
        web.stop()
        stream_server.stop()
        redis.kill()


@pytest.mark.django_db(transaction=True)
def test_streams_catch_up_from_the_database_when_redis_dies(tenant):
    with streamed_load(tenant) as world:
        redis, web, streams, load = world.redis, world.web, world.streams, world.load
        senders, recipients = world.senders, world.recipients
        load.wait_for(300)
        redis.kill()
        killed_at = time.monotonic()
        acknowledged_at_kill = load.acknowledged
        load.wait_for(900)
        sent_while_dead = load.acknowledged - acknowledged_at_kill
        # Still without Redis, so without doorbells: the streams catch up from the database
        # (their periodic scan) with every send acknowledged so far.
        received: dict[str, list] = {}
        so_far = expected_tasks(load)
        receive(streams, received, so_far, timeout=SCAN_SECONDS * 4)
        for recipient_id, tasks in so_far.items():
            missing = tasks - {e.json()["id"] for e in received[recipient_id]}
            assert not missing, f"{len(missing)} tasks not caught up while Redis was dead"
        caught_up_while_dead = sum(len(events) for events in received.values())
        redis.start()  # the same port again
        down_for = time.monotonic() - killed_at
        load.join()

        expected = expected_tasks(load)
        started = time.monotonic()
        receive(streams, received, expected, timeout=30)
        caught_up_in = time.monotonic() - started
        checked = check_exactly_once(received, expected)

        # Live delivery recovers once redis-py has reconnected: probes arrive well within the
        # scan interval, which only the doorbell can do.
        recovered_at = time.monotonic() + 30
        while live_latency(web, senders[0], recipients[0], streams[recipients[0].id]) >= 0.5:
            assert time.monotonic() < recovered_at, "live delivery did not recover"
        latencies = [
            live_latency(web, senders[0], recipient, streams[recipient.id])
            for recipient in recipients
            for _ in range(3)
        ]
        assert max(latencies) < 0.5, latencies
        assert all(s.drain(0.3) == [] for s in streams.values())

    outcomes = load.outcomes()
    assert outcomes == Counter({"ok": STREAM_TOTAL}), outcomes
    assert sent_while_dead >= 300
    record(
        f"redis-kill-streams-{connection.vendor}",
        {
            "scenario": "SIGKILL redis mid-load while every recipient holds an SSE stream on "
            "the uvicorn stream server; sends through a granian web server; restart redis",
            "database": connection.vendor,
            "load": f"{STREAM_TOTAL} sends, {CLIENTS} client threads, {RECIPIENTS} SSE streams",
            "faults": 1,
            "redis_down_seconds": round(down_for, 1),
            "sent_while_redis_was_dead": sent_while_dead,
            "events_streamed_while_redis_was_dead": caught_up_while_dead,
            "send_outcomes": dict(outcomes),
            "streams_caught_up_seconds_after_load": round(caught_up_in, 1),
            "live_latency_ms_after_restart_max": round(max(latencies) * 1000, 1),
            "messages_checked": checked,
            "lost": 0,
            "duplicated": 0,
        },
    )


@pytest.mark.django_db(transaction=True)
def test_streams_resume_with_last_event_id_across_a_stream_server_sigkill(tenant):
    with streamed_load(tenant) as world:
        stream_server, streams, load = world.stream_server, world.streams, world.load
        load.wait_for(400)
        stream_server.kill()
        killed_at = time.monotonic()
        # What each client had read completely when its connection died: it resumes there.
        received: dict[str, list] = {}
        for recipient_id, stream in streams.items():
            assert stream.closed.wait(10), "the stream outlived its server"
            received[recipient_id] = stream.drain(0.1)
            stream.close()
        before_kill = sum(len(events) for events in received.values())
        assert before_kill > 0
        stream_server.start()  # the same port again
        down_for = time.monotonic() - killed_at
        last_ids = {rid: events[-1].id for rid, events in received.items() if events}
        streams = world.streams = open_streams(stream_server, world.recipients, last_ids)
        load.join()

        expected = expected_tasks(load)
        receive(streams, received, expected, timeout=30)
        checked = check_exactly_once(received, expected)

    outcomes = load.outcomes()
    assert outcomes == Counter({"ok": STREAM_TOTAL}), outcomes
    record(
        f"stream-server-sigkill-{connection.vendor}",
        {
            "scenario": "SIGKILL the uvicorn stream server mid-load; every SSE client "
            "reconnects with Last-Event-ID",
            "database": connection.vendor,
            "load": f"{STREAM_TOTAL} sends, {CLIENTS} client threads, {RECIPIENTS} SSE streams",
            "faults": 1,
            "stream_server_down_seconds": round(down_for, 1),
            "events_before_kill": before_kill,
            "send_outcomes": dict(outcomes),
            "messages_checked": checked,
            "lost": 0,
            "duplicated": 0,
        },
    )


# Webhooks: a Celery worker SIGKILLed mid-delivery --------------------------------------------

HOOKED_SENDS = 10
WEBHOOK_TIMEOUT = 5  # the lease of a claimed row is 3 × this + 30 s


def wait_for_deliveries(count: int, *, timeout: float) -> list[WebhookDelivery]:
    deadline = time.monotonic() + timeout
    while True:
        rows = list(WebhookDelivery.objects.order_by("pk"))
        if len(rows) >= count and all(r.outcome != "pending" for r in rows):
            return rows
        if time.monotonic() > deadline:
            pending = [(r.pk, r.attempts, r.last_error) for r in rows if r.outcome == "pending"]
            raise AssertionError(f"{len(pending)} deliveries still pending: {pending}")
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_killed_mid_webhook_delivery_is_retried(tenant):
    redis = PrivateRedis().start()
    receiver = Receiver(hang_seconds=60).start()  # stalls: the first POSTs never get an answer
    alice = factories.agent(tenant, name="alice")
    bob = factories.agent(tenant, name="bob", webhook_url=receiver.url)
    env = {
        "DATABASE_URL": live.suite_database_url(),
        "REDIS_URL": redis.url,
        "CELERY_BROKER_URL": redis.url,
        "HIKYAKU_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
        "HIKYAKU_WEBHOOK_TIMEOUT_SECONDS": str(WEBHOOK_TIMEOUT),
        "HIKYAKU_WEBHOOK_BACKOFF_SECONDS": "0.2",
        "HIKYAKU_WEBHOOK_BACKOFF_CAP_SECONDS": "1",
        "HIKYAKU_WEBHOOK_SWEEP_SECONDS": "1",
        "HIKYAKU_WEBHOOK_SWEEP_GRACE_SECONDS": "1",
    }
    web = Server(kind="granian-wsgi", database_url=env["DATABASE_URL"], env=env).start()
    first = Celery(kind="worker", name="first", env=env).start()
    second = Celery(kind="worker", name="second", env=env)
    beat = Celery(kind="beat", name="beat", env=env)
    try:
        tasks = [send(web, alice, bob.id, f"hooked {n}")["id"] for n in range(HOOKED_SENDS)]
        # Both pool processes of the first worker are stuck in a POST (prefetch 1: the other
        # messages wait in Redis). Kill the whole worker.
        in_flight = receiver.wait_for(2, timeout=30)
        time.sleep(0.5)
        first.kill()
        killed_at = time.monotonic()
        interrupted = {r.headers["X-Hikyaku-Delivery-Id"] for r in in_flight}
        assert len(receiver.requests) == 2
        rows = {str(r.pk): r for r in WebhookDelivery.objects.all()}
        assert len(rows) == HOOKED_SENDS
        for pk in interrupted:  # the rows show the attempts that never finished
            assert (rows[pk].outcome, rows[pk].attempts) == ("pending", 1)
            assert rows[pk].last_error == delivery.UNFINISHED

        receiver.hang_seconds = 0  # the receiver recovers too
        second.start()
        beat.start()
        rows_after = wait_for_deliveries(HOOKED_SENDS, timeout=90)
        recovered_in = time.monotonic() - killed_at
    finally:
        beat.stop()
        second.stop()
        first.kill()
        web.stop()
        receiver.stop()
        redis.kill()

    # Every event was delivered: each row is `delivered`, and the receiver answered 200 to a
    # POST for each event (the interrupted POSTs are extra, told apart by their event id).
    assert {r.outcome for r in rows_after} == {"delivered"}
    events = TaskEvent.objects.filter(task_id__in=tasks, kind="created")
    assert {r.event_id for r in rows_after} == set(events.values_list("pk", flat=True))
    answered = [r for r in receiver.requests if r not in in_flight]
    assert len(answered) == HOOKED_SENDS
    assert sorted(int(r.headers["X-Hikyaku-Event-Id"]) for r in answered) == sorted(
        r.event_id for r in rows_after
    )
    # The delivery rows count the interrupted attempts.
    attempts = {str(r.pk): r.attempts for r in rows_after}
    assert {pk: attempts[pk] for pk in interrupted} == {pk: 2 for pk in interrupted}
    assert {a for pk, a in attempts.items() if pk not in interrupted} == {1}
    assert all(r.last_status == 200 and r.last_error == "" for r in rows_after)
    record(
        f"celery-worker-sigkill-{connection.vendor}",
        {
            "scenario": "SIGKILL a Celery worker with two webhook POSTs in flight to a stalled "
            "receiver; start another worker and beat",
            "database": connection.vendor,
            "load": f"{HOOKED_SENDS} sends to an agent with a webhook, 1 worker of 2 processes",
            "faults": 1,
            "interrupted_attempts": len(interrupted),
            "recovered_seconds_after_kill": round(recovered_in, 1),
            "webhook_posts_received": len(receiver.requests),
            "delivery_attempts": sum(attempts.values()),
            # At-least-once: the interrupted POSTs reached the receiver but were never
            # answered; each event was answered 200 exactly once.
            "posts_never_answered": len(receiver.requests) - HOOKED_SENDS,
            "messages_checked": HOOKED_SENDS,
            "lost": 0,
            "duplicated": 0,
        },
    )
