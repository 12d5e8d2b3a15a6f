"""Rate limiting (docs/PROTOCOL.md §4.6): a fixed one-minute window per API key or agent token,
per tenant, and per client address for failed authentications — shared by every process
through Redis when configured, and in process memory otherwise (the embedded single-process
default).

With Redis, each process counts locally and adds its count to the shared window at most
every FLUSH_EVERY requests or FLUSH_SECONDS per credential, instead of one round trip per
request; a request is refused when the shared count plus this process's unflushed count
exceeds the limit. A limit can therefore be overshot by at most FLUSH_EVERY requests per
process — the price of not paying a Redis round trip on every request. A flush is INCRBY and
EXPIRE in one write on a connection the request thread keeps (hikyaku/resp.py); when Redis
drops a kept connection the flush is sent once more, so a count may be added twice.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from django.conf import settings

from hikyaku import resp
from hikyaku.errors import RateLimited

log = logging.getLogger(__name__)

FLUSH_EVERY = 20
FLUSH_SECONDS = 0.5


@dataclass
class _Window:
    window: int
    pending: int = 0  # counted here, not yet added to the shared count
    shared: int = 0  # the shared count as of the last flush
    flushed_at: float = 0.0


_windows: dict[str, _Window] = {}
_lock = threading.Lock()
_redis = None


def _redis_client():
    global _redis
    if _redis is None:
        import redis

        _redis = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=0.25, socket_connect_timeout=0.25
        )
    return _redis


_kept = resp.Kept(timeout=0.25)


def _add(key: str, count: int) -> int:
    """Add `count` to the shared count under `key` (kept two minutes); the new total."""
    server = resp.server_at(settings.REDIS_URL)
    if server is None:  # a URL a plain socket cannot reach: redis-py's client
        pipe = _redis_client().pipeline(transaction=False)
        pipe.incrby(key, count)
        pipe.expire(key, 120)
        return pipe.execute()[0]
    total, _ = _kept.pipeline(
        server, resp.command("INCRBY", key, str(count)), resp.command("EXPIRE", key, "120")
    )
    return total


def check_rate(credential_hash: str, *, limit: int | None = None) -> None:
    """Count one request for this credential (or any stable key, e.g. an anonymous caller's
    address or a tenant); raise RateLimited over `limit` (default
    HIKYAKU_RATE_LIMIT_PER_MINUTE).

    A Redis failure lets the request through: losing rate limiting for a moment is better
    than refusing every agent while Redis restarts."""
    if limit is None:
        limit = settings.HIKYAKU_RATE_LIMIT_PER_MINUTE
    if limit <= 0:
        return
    now = time.time()
    count = _count(credential_hash, now)
    if count > limit:
        raise _limited(f"Rate limit of {limit} requests per minute exceeded", now)


def count_failure(key: str) -> None:
    """Count one failure against `key` (a budget checked by `check_budget`, not here)."""
    _count(key, time.time())


def check_budget(key: str, *, limit: int, what: str) -> None:
    """Raise RateLimited when `key` has used up `limit` this minute, counting nothing. What
    other processes counted shows once this process has flushed a count of its own for the
    key (`count_failure`), so each process lets at most one more through than the limit."""
    if limit <= 0:
        return
    now = time.time()
    with _lock:
        state = _windows.get(key)
        used = state.shared + state.pending if state and state.window == int(now // 60) else 0
    if used >= limit:
        raise _limited(f"Too many {what} (at most {limit} per minute)", now)


def _limited(reason: str, now: float) -> RateLimited:
    retry_after = 60 - int(now) % 60
    return RateLimited(f"{reason}; retry in {retry_after} s.", details={"retry_after": retry_after})


def _count(credential_hash: str, now: float) -> int:
    """Add one to this minute's count for the key; the count so far (shared and local)."""
    window = int(now // 60)
    with _lock:
        state = _windows.get(credential_hash)
        if state is None or state.window != window:
            state = _windows[credential_hash] = _Window(window=window)
            if len(_windows) > 100_000:
                for key in [k for k, w in _windows.items() if w.window < window]:
                    del _windows[key]
        state.pending += 1
        flush = bool(settings.REDIS_URL) and (
            state.pending >= FLUSH_EVERY or now - state.flushed_at >= FLUSH_SECONDS
        )
        pending = state.pending
        if flush:
            state.pending, state.flushed_at = 0, now
    if flush:
        try:
            shared = _add(f"hikyaku:rl:{credential_hash[:32]}:{window}", pending)
        except Exception as exc:
            log.warning("rate limiting degraded, redis unavailable: %s", exc.__class__.__name__)
            shared = None
        with _lock:
            if shared is not None:
                state.shared = max(state.shared, shared)
            else:
                state.pending += pending  # keep counting locally until Redis is back
    return state.shared + state.pending
