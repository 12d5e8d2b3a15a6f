"""The doorbell rung from sync code arrives through a real channels-redis pub/sub layer."""

import asyncio
import threading
import time

import pytest
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.db import transaction

from messaging import events

REDIS_URL = "redis://127.0.0.1:6379/11"


@pytest.mark.django_db(transaction=True)
def test_sync_ring_reaches_a_channels_redis_group_member(settings):
    settings.REDIS_URL = REDIS_URL
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": "hikyaku-test"},
        }
    }
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    received: list[dict] = []
    subscribed = threading.Event()

    async def listen():
        layer = RedisPubSubChannelLayer(hosts=[REDIS_URL], prefix="hikyaku-test")
        channel = await layer.new_channel()
        await layer.group_add(events.DOORBELL_GROUP, channel)
        subscribed.set()
        received.append(await asyncio.wait_for(layer.receive(channel), timeout=5))
        await layer.flush()

    thread = threading.Thread(target=lambda: asyncio.run(listen()))
    thread.start()
    assert subscribed.wait(5)
    time.sleep(0.2)  # the subscription is confirmed asynchronously by Redis
    events.ring_after_commit(agent_ids=["a1", "a2"], event_id=42)  # outside a transaction: now
    thread.join(10)
    channel_layers.backends.clear()
    assert received == [{"type": "doorbell", "agents": ["a1", "a2"], "event": 42}]


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_rings_nothing(settings):
    settings.REDIS_URL = ""
    rung: list[dict] = []
    events.add_local_listener(rung.append)
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            events.ring_after_commit(agent_ids=["a1"], event_id=1)
            raise RuntimeError("rollback")
        with transaction.atomic():
            events.ring_after_commit(agent_ids=["a2"], event_id=2)
    finally:
        events.remove_local_listener(rung.append)
    assert rung == [{"type": "doorbell", "agents": ["a2"], "event": 2}]


@pytest.mark.django_db(transaction=True)
def test_a_dead_redis_never_fails_the_caller(settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    events._redis_client = None
    try:
        events.ring_after_commit(agent_ids=["a1"], event_id=1)  # logs, does not raise
    finally:
        events._redis_client = None
