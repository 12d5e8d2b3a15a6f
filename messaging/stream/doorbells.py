"""The stream process's doorbell listener on Redis: one pub/sub subscription, read directly.

messaging.events publishes each doorbell with one plain PUBLISH in the channels-redis wire
format on the pub/sub channel of the doorbell group. Receiving it through the channel layer
(channels-redis over redis-py's asyncio client: a polling receive loop, per-message
timeouts, a queue per channel) cost ~0.5 ms of the stream process's CPU per doorbell here —
as much as the whole read of the event it announces. This subscriber reads the same channel
with a small RESP parser in an asyncio protocol and hands each decoded doorbell to the hub
at once: a few microseconds.

A lost connection (Redis restarted or unreachable) is reconnected with backoff and
re-subscribed; doorbells published meanwhile are lost, which the hub's catch-up scan covers
(an event is late, never lost).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any

from hikyaku.resp import Incomplete, Server, command, parse

log = logging.getLogger(__name__)


class _Subscriber(asyncio.Protocol):
    def __init__(self, channel: bytes, on_message: Callable[[bytes], None]) -> None:
        self.channel = channel
        self.on_message = on_message
        self.buffer = b""
        self.subscribed: asyncio.Future = asyncio.get_running_loop().create_future()
        self.lost: asyncio.Future = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.subscribed.done():
            self.subscribed.set_exception(exc or ConnectionError("Redis closed the connection"))
        if not self.lost.done():
            self.lost.set_result(exc)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        offset = 0
        try:
            while offset < len(self.buffer):
                value, offset = parse(self.buffer, offset)
                self._handle(value)
        except Incomplete:
            pass
        self.buffer = self.buffer[offset:]

    def _handle(self, value: Any) -> None:
        if isinstance(value, RuntimeError):  # AUTH refused, for instance
            if not self.subscribed.done():
                self.subscribed.set_exception(value)
            return
        if not isinstance(value, list) or len(value) < 3:
            return  # +OK of AUTH, etc.
        kind = value[0]
        if kind == b"message" and value[1] == self.channel:
            try:
                self.on_message(value[2])
            except Exception:
                log.exception("doorbell not handled")
        elif kind == b"subscribe" and not self.subscribed.done():
            self.subscribed.set_result(None)


async def listen(url: str, channel: str, on_message: Callable[[bytes], None]) -> None:
    """Subscribe to `channel` on the Redis at `url` and call `on_message(payload)` for each
    message, reconnecting for ever (until cancelled)."""
    server = Server.from_url(url)
    if server is None:
        log.error(
            "doorbells need a redis:// or rediss:// REDIS_URL; streams will only notice new "
            "events by their periodic scan"
        )
        return
    backoff = 0.5
    while True:
        transport = None
        try:
            context = ssl.create_default_context() if server.tls else None
            transport, protocol = await asyncio.wait_for(
                asyncio.get_running_loop().create_connection(
                    lambda: _Subscriber(channel.encode(), on_message),
                    server.host,
                    server.port,
                    ssl=context,
                ),
                timeout=5,
            )
            sock = transport.get_extra_info("socket")
            if sock is not None:  # notice a peer that vanished without closing
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            transport.write(server.hello())
            transport.write(command("SUBSCRIBE", channel))
            await asyncio.wait_for(protocol.subscribed, timeout=5)
            log.info("stream hub listening for doorbells on Redis")
            backoff = 0.5
            await protocol.lost
            log.warning("doorbell subscription lost; reconnecting")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(
                "doorbell listener cannot reach Redis (%s); retrying in %.1fs, streams catch "
                "up from the database meanwhile",
                exc.__class__.__name__,
                backoff,
            )
            await asyncio.sleep(backoff)
            # At most 2 s: a connection attempt costs nothing, and live delivery should
            # resume as soon as Redis does.
            backoff = min(backoff * 2, 2.0)
        finally:
            if transport is not None:
                transport.close()
