"""Several server processes sharing the database and Redis: fan-out across processes, and a
Redis outage that delays events but never loses them."""

from __future__ import annotations

import time

import pytest

from tests import factories
from tests.messaging.test_streams import send, subscribe, texts

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_stream_on_one_process_receives_a_message_sent_through_another(
    broker_factory, redis_server, tenant
):
    # A slow catch-up scan, so delivery within a second can only come from the Redis doorbell.
    env = {"REDIS_URL": redis_server.url, "HIKYAKU_STREAM_SCAN_SECONDS": "10"}
    first, second = broker_factory(env=env), broker_factory(env=env)
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    stream = subscribe(first, bob)
    try:
        for n in range(5):
            started = time.monotonic()
            send(second, alice, bob.id, f"across {n}")
            assert texts([stream.next(timeout=1)]) == [f"across {n}"]
            assert time.monotonic() - started < 1
    finally:
        stream.close()


def test_a_redis_outage_delays_events_but_loses_none_and_live_delivery_recovers(
    broker_factory, redis_server, tenant
):
    env = {"REDIS_URL": redis_server.url, "HIKYAKU_STREAM_SCAN_SECONDS": "4"}
    first, second = broker_factory(env=env), broker_factory(env=env)
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    stream = subscribe(first, bob)
    try:
        send(second, alice, bob.id, "before")
        assert texts([stream.next(timeout=1)]) == ["before"]

        redis_server.stop()
        during = [f"during {n}" for n in range(10)]
        for text in during:
            send(second, alice, bob.id, text)  # asserts the send succeeded
        received = stream.take(10, timeout=12)
        assert texts(received) == during
        ids = [int(e.id) for e in received]
        assert ids == sorted(ids) and len(set(ids)) == 10

        redis_server.start()
        deadline = time.monotonic() + 20
        while True:  # wait until the doorbell path is back (redis-py reconnects by itself)
            started = time.monotonic()
            send(second, alice, bob.id, "probe")
            assert texts([stream.next(timeout=6)]) == ["probe"]
            if time.monotonic() - started < 0.5:
                break
            assert time.monotonic() < deadline, "live delivery did not recover"
        for n in range(5):
            started = time.monotonic()
            send(second, alice, bob.id, f"after {n}")
            assert texts([stream.next(timeout=1)]) == [f"after {n}"]
            assert time.monotonic() - started < 0.5
        assert stream.drain(0.5) == []
    finally:
        stream.close()
