"""The doorbell: the only module that touches the channel layer.

After a transaction that wrote task events commits, `ring_after_commit` tells stream
processes which agents have news and the highest event id written. Payloads carry ids only;
streams read the events themselves from the database, so a lost doorbell delays an event
(until the next doorbell or the stream's periodic check) but never loses it. Ringing never
raises: a send that committed is a success even when Redis is down
(docs/PROTOCOL.md §5, docs/MEASUREMENTS.md "Faults").

Sync request handlers publish with one PUBLISH in the channels-redis pub/sub wire format,
written to a socket each request thread keeps (hikyaku/resp.py: ~8 µs of CPU, where
redis-py's client took ~50 µs and async_to_sync(group_send) ~10 ms); stream processes
receive it on the channel layer's group channel. On the in-memory layer (one process) the
doorbell is handed to in-process listeners directly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction

from hikyaku import metrics, resp

log = logging.getLogger(__name__)

DOORBELL_GROUP = "hikyaku.doorbell"

# {"type": "doorbell", "agents": [agent ids], "event": max event id, "tenant": tenant id}
Doorbell = dict[str, Any]

_local_listeners: list[Callable[[Doorbell], None]] = []
_redis_client = None
_redis_lock = threading.Lock()
_last_failure_logged = -1e9


def ring_after_commit(*, agent_ids: Iterable[Any], event_id: int, tenant_id: Any = None) -> None:
    """Ring for these agents (and their tenant, for the web UI's tenant-wide streams) once the
    current transaction commits (at once outside one)."""
    doorbell: Doorbell = {
        "type": "doorbell",
        "agents": sorted({str(a) for a in agent_ids if a}),
        "event": int(event_id),
    }
    if tenant_id is not None:
        doorbell["tenant"] = str(tenant_id)
    transaction.on_commit(partial(_ring, doorbell))


def add_local_listener(listener: Callable[[Doorbell], None]) -> None:
    """Receive doorbells rung in this process (used with the in-memory channel layer)."""
    _local_listeners.append(listener)


def remove_local_listener(listener: Callable[[Doorbell], None]) -> None:
    if listener in _local_listeners:
        _local_listeners.remove(listener)


def group_channel_name() -> str:
    """The Redis pub/sub channel channels-redis uses for our group (its pubsub layer names a
    group's channel `<prefix>__group__<group>`)."""
    prefix = settings.CHANNEL_LAYERS["default"].get("CONFIG", {}).get("prefix", "asgi")
    return f"{prefix}__group__{DOORBELL_GROUP}"


def _ring(doorbell: Doorbell) -> None:
    try:
        if settings.REDIS_URL:
            _publish_redis(doorbell)
        for listener in list(_local_listeners):
            listener(doorbell)
        metrics.doorbell("rung")
    except Exception as exc:  # a failed doorbell must never fail a committed write
        metrics.doorbell("failed")
        global _last_failure_logged
        now = time.monotonic()
        if now - _last_failure_logged >= 10:  # one line per outage, not one per send
            _last_failure_logged = now
            log.warning("doorbell not rung (%s); streams will catch up from the database", exc)


def _publish_redis(doorbell: Doorbell) -> None:
    from channels.layers import get_channel_layer

    # serialize() lives on the layer object itself; attributes of the per-event-loop layer
    # behind it are unreachable from sync code, which has no running loop.
    payload = get_channel_layer().serialize(doorbell)
    channel = group_channel_name()
    server = _server()
    if server is None:  # a URL a plain socket cannot reach: redis-py's client
        _client().publish(channel, payload)
        return
    _publisher.pipeline(server, resp.command("PUBLISH", channel, payload))


PUBLISH_TIMEOUT = 0.5

# Each request thread publishes on a connection of its own, kept for the thread's life.
_publisher = resp.Kept(timeout=PUBLISH_TIMEOUT)


def _server() -> resp.Server | None:
    return resp.server_at(settings.REDIS_URL)


def _client():
    global _redis_client
    if _redis_client is None:
        import redis

        with _redis_lock:
            if _redis_client is None:
                _redis_client = redis.Redis.from_url(
                    settings.REDIS_URL,
                    socket_timeout=PUBLISH_TIMEOUT,
                    socket_connect_timeout=PUBLISH_TIMEOUT,
                )
    return _redis_client
