"""The driver that runs a feed as an open HTTP response.

`serve` is the lean ASGI driver: the stream is a coroutine on the event loop that sleeps on an
asyncio.Event until the hub wakes it, then reads through the bounded DB pool. No thread and
no Redis connection is held per stream. Web (WSGI) processes serve no streams: they hand them
to the stream processes (messaging/stream/handoff.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError

from hikyaku import metrics
from hikyaku.errors import ServiceUnavailable

from . import sse
from .batch import Batch
from .db import run_db
from .feeds import Feed
from .hub import hub

log = logging.getLogger(__name__)

# A client that does not drain what we write within this time is dropped (it may reconnect
# with Last-Event-ID); otherwise a stalled reader would pin its frames in memory forever.
WRITE_TIMEOUT_SECONDS = 30.0


async def _wait_for_disconnect(receive: sse.Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class _Writer:
    def __init__(self, send: sse.Send) -> None:
        self.send = send
        self.last_write = time.monotonic()

    async def __call__(self, frames: Iterable[bytes]) -> None:
        body = b"".join(frames)
        if not body:
            return
        async with asyncio.timeout(WRITE_TIMEOUT_SECONDS):
            await self.send({"type": "http.response.body", "body": body, "more_body": True})
        self.last_write = time.monotonic()


async def serve(
    feed: Feed, receive: sse.Receive, send: sse.Send, *, kind: str, started: bool = False
) -> None:
    """Run `feed` as an SSE response until the client leaves, the feed ends, or the hub
    closes it. Registers with the hub before the feed's first read, so nothing committed
    after that read can be missed. `started`: the response start was already sent."""
    with metrics.stream_open(kind):
        await _serve(feed, receive, send, started=started)


async def _serve(feed: Feed, receive: sse.Receive, send: sse.Send, *, started: bool) -> None:
    await hub.ensure_started()
    sub = hub.subscribe(feed)
    disconnect = asyncio.ensure_future(_wait_for_disconnect(receive))
    disconnect.add_done_callback(lambda _: sub.close("disconnected"))
    write = _Writer(send)
    try:
        try:
            batch: Batch = await run_db(feed.open)
        except DatabaseError as exc:
            log.warning("stream not opened: database unavailable (%s)", exc.__class__.__name__)
            if not started:
                await sse.send_error(send, ServiceUnavailable())
            return
        if not started:
            await sse.start(send)
            started = True
        sub.advance(feed.cursor)
        await write(batch.frames)
        if batch.closed is None:
            await _run(feed, sub, write, more=batch.more)
        reason = sub.closed if batch.closed is None else batch.closed
        if reason and reason != "disconnected":
            await write(feed.closing_frames(reason))
    except TimeoutError:
        log.info("stream closed: the client did not read in %ss", WRITE_TIMEOUT_SECONDS)
    finally:
        hub.unsubscribe(sub)
        disconnect.cancel()
        if started and sub.closed != "disconnected":
            try:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except Exception:  # noqa: S110 - the client is gone; nothing left to tell it
                pass


async def _run(feed: Feed, sub, write: _Writer, *, more: bool) -> None:
    keepalive = settings.HIKYAKU_STREAM_KEEPALIVE_SECONDS
    last_check = time.monotonic()
    failures = 0
    while sub.closed is None:
        if not more:
            now = time.monotonic()
            deadline = write.last_write + keepalive
            if feed.check_seconds is not None:
                deadline = min(deadline, last_check + feed.check_seconds)
            try:
                async with asyncio.timeout(max(deadline - now, 0.0)):
                    await sub.wake.wait()
            except TimeoutError:
                now = time.monotonic()
                if feed.check_seconds is not None and now - last_check >= feed.check_seconds:
                    last_check = now
                    try:
                        reason = await run_db(feed.check)
                    except DatabaseError:
                        reason = None  # keep the stream; check again next time
                    if reason:
                        sub.close(reason)
                        return
                    sub.wake.set()  # and read, which also picks up late commits
                if now - write.last_write >= keepalive:
                    await write([sse.comment("keepalive")])
                continue
        if sub.closed is not None:
            return
        hint = sub.take_hint()
        try:
            batch = await hub.read(feed)
        except (OperationalError, InterfaceError, DatabaseError) as exc:
            failures += 1
            if failures == 1:
                log.warning("stream read failed (%s); retrying", exc.__class__.__name__)
            more = False
            await asyncio.sleep(min(0.2 * 2**failures, 5.0))
            sub.wake.set()
            continue
        failures = 0
        sub.advance(max(hint, feed.cursor) if sub.exact else feed.cursor)
        await write(batch.frames)
        if batch.closed is not None:
            sub.close(batch.closed)
            return
        more = batch.more
