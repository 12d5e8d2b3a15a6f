"""The doorbell rung from sync code arrives through a real channels-redis pub/sub layer, and a
Redis that is gone never fails the write that rang it (docs/PROTOCOL.md §5).

Both Redis tests use a private redis-server (the `redis_server` fixture): pub/sub channels are
shared by every database of a server, so the machine's Redis would carry other runs' doorbells.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
import redis
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.db import transaction

from hikyaku import resp
from messaging import events
from messaging.models import Task
from tests import factories
from tests.messaging import rpc


@pytest.fixture
def redis_layer(settings, redis_server, monkeypatch):
    """The settings of a deployment with Redis (REDIS_URL and the channels-redis layer) on the
    private server, with fresh clients for it (the previous ones come back afterwards)."""
    from channels.layers import channel_layers

    from tenants import ratelimit

    settings.REDIS_URL = redis_server.url
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [redis_server.url], "prefix": "hikyaku-test"},
        }
    }
    channel_layers.backends.clear()
    monkeypatch.setattr(events, "_redis_client", None)
    monkeypatch.setattr(ratelimit, "_redis", None)
    yield redis_server
    channel_layers.backends.clear()


class GroupMember:
    """A member of the doorbell group through channels-redis, as a stream process is: receives
    `count` messages on a thread of its own, subscribed once `started` returns."""

    def __init__(self, url: str, count: int) -> None:
        self.url, self.count = url, count
        self.received: list[dict] = []
        self._subscribed = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._listen()))

    async def _listen(self) -> None:
        layer = RedisPubSubChannelLayer(hosts=[self.url], prefix="hikyaku-test")
        channel = await layer.new_channel()
        await layer.group_add(events.DOORBELL_GROUP, channel)
        self._subscribed.set()
        for _ in range(self.count):
            self.received.append(await asyncio.wait_for(layer.receive(channel), timeout=5))
        await layer.flush()

    def started(self) -> GroupMember:
        self._thread.start()
        assert self._subscribed.wait(5)
        time.sleep(0.2)  # the subscription is confirmed asynchronously by Redis
        return self

    def join(self) -> list[dict]:
        self._thread.join(10)
        return self.received


@pytest.mark.django_db(transaction=True)
def test_sync_ring_reaches_a_channels_redis_group_member(redis_layer):
    member = GroupMember(redis_layer.url, count=1).started()
    events.ring_after_commit(agent_ids=["a1", "a2"], event_id=42)  # outside a transaction: now
    assert member.join() == [{"type": "doorbell", "agents": ["a1", "a2"], "event": 42}]


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
def test_a_dead_redis_never_fails_the_caller(redis_layer, tenant, caplog, monkeypatch):
    """A send whose doorbell cannot reach Redis (killed) is answered with its task and stored;
    the doorbell's failure is a logged refused connection to that Redis, nothing else."""
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    redis_layer.kill()
    monkeypatch.setattr(events, "_last_failure_logged", -1e9)  # log this failure, not throttled

    with caplog.at_level(logging.WARNING, logger="messaging.events"):
        response = rpc.call(alice, "SendMessage", {"message": rpc.message("hi", to=bob.id)})

    assert response.status_code == 200, response.content
    task = response.json()["result"]["task"]
    assert Task.objects.filter(pk=task["id"], recipient=bob.model).exists()
    [failure] = [r for r in caplog.records if r.getMessage().startswith("doorbell not rung")]
    # The publish reached for the dead server (not an error of the layer before it).
    assert isinstance(failure.args[0], ConnectionRefusedError), failure.args


@pytest.mark.django_db(transaction=True)
def test_a_dropped_publishing_connection_is_replaced_and_the_doorbell_still_arrives(redis_layer):
    """Each request thread keeps its publishing connection; when Redis drops it (a restart,
    an idle timeout), the next doorbell goes out on a new one instead of being lost."""
    member = GroupMember(redis_layer.url, count=2).started()
    events.ring_after_commit(agent_ids=["a1"], event_id=1)
    admin = redis.Redis.from_url(redis_layer.url)
    assert admin.client_kill_filter(_type="normal", skipme=True) >= 1  # ours among them
    events.ring_after_commit(agent_ids=["a2"], event_id=2)
    assert [d["event"] for d in member.join()] == [1, 2]


def test_the_publishing_connection_stays_in_step_after_an_error_reply(redis_server):
    connection = resp.Connection(resp.Server.from_url(redis_server.url), timeout=1)
    try:
        with pytest.raises(RuntimeError, match="unknown command"):
            connection.call(resp.command("NOSUCHCOMMAND"))
        assert connection.call(resp.command("PING")) == b"PONG"
        assert connection.call(resp.command("PUBLISH", "nobody-listens", b"x" * 10_000)) == 0
    finally:
        connection.close()


def test_a_connection_logs_in_to_the_urls_database_and_pipelines_replies_in_order(redis_server):
    """Keys (the rate limiter's counts) land in the database the URL names, as with redis-py;
    replies to commands sent in one write come back in order, an error among them raised
    only once all are read."""
    server = resp.Server.from_url(redis_server.url_for(7))
    assert server.db == 7
    assert resp.Server.from_url(redis_server.url_for(0) + "?db=3").db == 3
    connection = resp.Connection(server, timeout=1)
    key = "hikyaku-test:resp-db"
    admin = redis.Redis.from_url(redis_server.url_for(7))
    admin.delete(key)
    try:
        assert connection.pipeline(
            resp.command("INCRBY", key, "5"), resp.command("EXPIRE", key, "120")
        ) == [5, 1]
        assert int(admin.get(key)) == 5 and 0 < admin.ttl(key) <= 120
        assert redis.Redis.from_url(redis_server.url_for(0)).get(key) is None
        with pytest.raises(RuntimeError, match="not an integer"):
            connection.pipeline(resp.command("INCRBY", key, "x"), resp.command("INCRBY", key, "1"))
        assert int(admin.get(key)) == 6  # the second command ran; the connection is in step
        assert connection.call(resp.command("PING")) == b"PONG"
    finally:
        admin.delete(key)
        connection.close()
