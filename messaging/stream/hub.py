"""The per-process hub: one doorbell listener and one periodic check for every open stream.

Streams register the keys they care about (an agent id, or `tenant:<id>` for the web UI's
tenant-wide streams). The hub wakes them:

- on a doorbell, received by ONE listener per process: one Redis pub/sub subscription to the
  doorbell group's channel (messaging/stream/doorbells.py), whatever the number of streams,
  or an in-process listener of messaging.events on the in-memory layer;
- on a periodic scan (HIKYAKU_STREAM_SCAN_SECONDS): one query for the events written since a
  few scans ago, which wakes the streams of the agents concerned. This is what makes a lost
  doorbell (Redis down, channels-redis dropping a message) late instead of lost, without one
  query per stream.

It also re-validates the credentials of every open agent stream in one batch
(HIKYAKU_STREAM_CHECK_SECONDS) and closes those whose key was revoked or expired, whose token
was rotated, or whose agent was deregistered or disabled; likewise, in one query, the streams
on agents' own endpoints whose agent is gone or (for callers outside its tenant) unpublished.

A woken stream reads its events from the database; the hub never carries events. The inbox
streams woken together read in one batch (`read`): one statement for all of them, on the
loop's own connection on Postgres or one trip to a DB thread on SQLite
(messaging/stream/reads.py), instead of one of each per stream.

While it holds FREEZE_STREAMS streams or more, the process freezes what survives each full
collection (hikyaku.heap.FreezeSurvivors), so thousands of streams' objects are not walked
again by every later one.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import Max

from agents.auth import stale_identities
from agents.selectors import peer_reachability
from hikyaku import heap

from .. import events
from ..models import TaskEvent
from . import doorbells
from .db import close_loop_connection, run_db

if TYPE_CHECKING:
    from .batch import Batch
    from .feeds import Feed

log = logging.getLogger(__name__)

# A scan reads the events written since the watermark of this many scans ago, so an event
# whose transaction committed up to ~that many seconds after its id was allocated is still
# found even when its doorbell was lost.
SCAN_LOOKBACK = 5

# From this many open streams on, the process freezes what survives each full collection
# (hikyaku.heap.FreezeSurvivors): their objects, about a hundred tracked objects a stream,
# are then what a full collection would walk again and again while subscribers connect
# (docs/MEASUREMENTS.md, Garbage collection).
FREEZE_STREAMS = 100


class Subscription:
    """One open stream as the hub sees it."""

    __slots__ = ("feed", "keys", "exact", "identity", "wake", "floor", "hint", "closed")

    def __init__(self, feed: Feed) -> None:
        self.feed = feed
        self.keys = tuple(feed.keys)
        # Exact feeds (per agent) may skip wake-ups for event ids they have already read past;
        # tenant-wide feeds are woken by every doorbell (their ids are not commit-ordered).
        self.exact = feed.exact
        self.identity = feed.identity
        self.wake = asyncio.Event()
        self.floor = 0  # every event of ours with id <= floor has been read
        self.hint = 0  # highest event id announced since the stream last read
        self.closed: str | None = None

    def poke(self, event_id: int) -> None:
        if self.exact and event_id and event_id <= self.floor:
            return
        if event_id > self.hint:
            self.hint = event_id
        self.wake.set()

    def take_hint(self) -> int:
        hint, self.hint = self.hint, 0
        self.wake.clear()
        return hint

    def advance(self, upto: int) -> None:
        if upto > self.floor:
            self.floor = upto

    def close(self, reason: str) -> None:
        if self.closed is None:
            self.closed = reason
        self.wake.set()


def _max_event_id() -> int:
    return TaskEvent.objects.aggregate(last=Max("id"))["last"] or 0


def _scan(after: int) -> list[tuple[Any, Any, Any, str, int]]:
    """(tenant, sender, recipient, kind, highest event id) of the events written after
    `after`, grouped."""
    return list(
        TaskEvent.objects.filter(id__gt=after)
        .values_list("tenant_id", "sender_agent_id", "recipient_agent_id", "kind")
        .annotate(last=Max("id"))
        .order_by()
    )


class Hub:
    def __init__(self) -> None:
        self._by_key: dict[str, set[Subscription]] = {}
        self._all: set[Subscription] = set()
        self._tasks: list[asyncio.Task] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._start_lock: asyncio.Lock | None = None
        self._floors: deque[int] = deque(maxlen=SCAN_LOOKBACK)
        self._last_check = 0.0
        self._redis_up = True
        self._probe = None
        self._pending: list[tuple[Feed, asyncio.Future]] = []  # inbox reads not yet begun
        self._reading = False
        # The batch reads run one at a time, each in this same context: Django's connection
        # handler keeps one object per context on an event loop, so a task with a context of
        # its own would build a new one (a few per cent of a live event's CPU here).
        self._read_context = contextvars.Context()
        self._freeze = heap.FreezeSurvivors(lambda: len(self._all) >= FREEZE_STREAMS)
        self.started = False

    # Registration ---------------------------------------------------------------------

    def subscribe(self, feed: Feed) -> Subscription:
        sub = Subscription(feed)
        for key in sub.keys:
            self._by_key.setdefault(key, set()).add(sub)
        self._all.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._all.discard(sub)
        for key in sub.keys:
            subs = self._by_key.get(key)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._by_key[key]

    @property
    def stream_count(self) -> int:
        return len(self._all)

    # Waking ------------------------------------------------------------------------------

    def _poke(self, key: str, event_id: int) -> None:
        for sub in self._by_key.get(key, ()):
            sub.poke(event_id)

    def ring(self, doorbell: dict[str, Any]) -> None:
        """A doorbell (messaging.events): wake the local streams of the agents it names."""
        try:
            event_id = int(doorbell.get("event") or 0)
        except (TypeError, ValueError):
            event_id = 0
        for agent_id in doorbell.get("agents") or ():
            self._poke(str(agent_id), event_id)
        if doorbell.get("tenant"):
            self._poke(f"tenant:{doorbell['tenant']}", event_id)

    def _ring_from_thread(self, doorbell: dict[str, Any]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.ring, doorbell)

    # Reading ---------------------------------------------------------------------------

    async def read(self, feed: Feed) -> Batch:
        """`feed.fetch()` on a stream DB thread; feeds with a `read_many` (the inbox) are read
        together with the others of their kind woken meanwhile, on the loop where the
        database allows it (messaging/stream/reads.py): while one batch is being read, the
        streams woken in the meantime queue for the next."""
        if feed.read_many is None:
            return await run_db(feed.fetch)
        future = asyncio.get_running_loop().create_future()
        self._pending.append((feed, future))
        if not self._reading:
            self._reading = True
            asyncio.create_task(  # noqa: RUF006
                self._read_pending(), name="stream-batch-read", context=self._read_context
            )
        return await future

    async def _read_pending(self) -> None:
        try:
            while self._pending:
                pending, self._pending = self._pending, []
                groups: dict[Any, list[tuple[Feed, asyncio.Future]]] = {}
                for feed, future in pending:
                    if not future.done():  # its stream may have ended meanwhile
                        groups.setdefault(feed.read_many, []).append((feed, future))
                for read_many, group in groups.items():
                    try:
                        batches = await read_many([feed for feed, _ in group])
                    except Exception as exc:  # each stream retries on its own schedule
                        for _, future in group:
                            if not future.done():
                                future.set_exception(exc)
                        continue
                    for (_, future), batch in zip(group, batches, strict=True):
                        if not future.done():
                            future.set_result(batch)
        finally:
            self._reading = False

    # Life cycle --------------------------------------------------------------------------

    async def ensure_started(self) -> None:
        if self.started:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if not self.started:
                await self.start()

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            watermark = await run_db(_max_event_id)
        except Exception as exc:  # the scan will find it once the database is back
            log.warning("stream hub: no event watermark yet (%s)", exc.__class__.__name__)
            watermark = 0
        self._floors.extend([watermark] * SCAN_LOOKBACK)
        if settings.REDIS_URL:
            self._tasks.append(asyncio.create_task(self._listen_layer(), name="doorbell-listener"))
        else:
            events.add_local_listener(self._ring_from_thread)
        self._tasks.append(asyncio.create_task(self._tick_forever(), name="stream-hub-ticks"))
        self._freeze.install()
        self.started = True
        log.info(
            "stream hub started (doorbells via %s, catch-up scan every %.1fs)",
            "Redis" if settings.REDIS_URL else "in-process listeners",
            settings.HIKYAKU_STREAM_SCAN_SECONDS,
        )

    async def stop(self) -> None:
        self._freeze.remove()
        events.remove_local_listener(self._ring_from_thread)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except BaseException:  # noqa: S110 - cancelled on purpose
                pass
        self._tasks.clear()
        for sub in list(self._all):
            sub.close("shutdown")
        if self._probe is not None:
            await self._probe.aclose()
            self._probe = None
        await close_loop_connection()
        self.started = False

    # The doorbell listener (Redis) ---------------------------------------------------------

    async def _listen_layer(self) -> None:
        """One Redis subscription for the whole process, on the doorbell group's channel
        (messaging/stream/doorbells.py), decoded as the channel layer encodes it."""
        from channels.layers import get_channel_layer

        layer = get_channel_layer()

        def received(payload: bytes) -> None:
            self.ring(layer.deserialize(payload))

        await doorbells.listen(settings.REDIS_URL, events.group_channel_name(), received)

    async def _redis_reachable(self) -> bool:
        import redis.asyncio as aioredis

        if self._probe is None:
            self._probe = aioredis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1
            )
        try:
            await self._probe.ping()
            return True
        except Exception:
            return False

    # The periodic work ---------------------------------------------------------------------

    async def _tick_forever(self) -> None:
        failures = 0
        while True:
            await asyncio.sleep(settings.HIKYAKU_STREAM_SCAN_SECONDS)
            try:
                await self.scan()
                now = time.monotonic()
                if now - self._last_check >= settings.HIKYAKU_STREAM_CHECK_SECONDS:
                    self._last_check = now
                    await self.check_identities()
                    if settings.REDIS_URL:
                        await self._watch_redis()
                if failures:
                    log.info("stream hub: database reachable again")
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                if failures == 1 or failures % 30 == 0:
                    log.warning("stream hub tick failed (%s: %s)", exc.__class__.__name__, exc)

    async def scan(self) -> None:
        """Wake the streams of every agent (and tenant) with events since a few scans ago."""
        rows = await run_db(_scan, self._floors[0])
        watermark = self._floors[-1]
        for tenant_id, sender_id, recipient_id, kind, last in rows:
            watermark = max(watermark, last)
            # A new task is news for its recipient only; and a send does not lock the
            # sender's row, so its id says nothing about the sender's other events (a poke
            # with it could let a stream skip past a slower commit of its own).
            if sender_id is not None and kind != TaskEvent.Kind.CREATED:
                self._poke(str(sender_id), last)
            if recipient_id is not None:
                self._poke(str(recipient_id), last)
            self._poke(f"tenant:{tenant_id}", last)
        self._floors.append(watermark)

    async def check_identities(self) -> None:
        subs = [s for s in self._all if s.identity is not None and s.closed is None]
        if subs:
            stale = await run_db(stale_identities, [s.identity for s in subs])
            for sub in subs if stale else ():
                if (sub.identity.agent.pk, sub.identity.credential_hash) in stale:
                    sub.close("credentials")
        await self.check_callees()

    async def check_callees(self) -> None:
        subs = [s for s in self._all if s.feed.callee is not None and s.closed is None]
        if not subs:
            return
        reachable = await run_db(peer_reachability, {s.feed.callee[0] for s in subs})
        for sub in subs:
            agent_id, needs_public = sub.feed.callee
            public = reachable.get(agent_id)
            if public is None or (needs_public and not public):
                sub.close("callee")

    async def _watch_redis(self) -> None:
        up = await self._redis_reachable()
        if up and not self._redis_up:
            log.info("Redis reachable again: doorbells resume")
            await self.scan()
        elif not up and self._redis_up:
            log.warning(
                "Redis unreachable: doorbells are lost until it returns; open streams catch up "
                "from the database every %.1fs",
                settings.HIKYAKU_STREAM_SCAN_SECONDS,
            )
        self._redis_up = up


hub = Hub()
