"""Per-credential rate limiting (docs/PROTOCOL.md §4.6): a fixed one-minute window per API key or
agent token, shared by every process through Redis when configured, and in process memory
otherwise (the embedded single-process default).

With Redis, each process counts locally and adds its count to the shared window at most
every FLUSH_EVERY requests or FLUSH_SECONDS per credential, instead of one round trip per
request; a request is refused when the shared count plus this process's unflushed count
exceeds the limit. A limit can therefore be overshot by at most FLUSH_EVERY requests per
process — the price of not paying a Redis round trip on every request.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from django.conf import settings

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


def check_rate(credential_hash: str, *, limit: int | None = None) -> None:
    """Count one request for this credential (or any stable key, e.g. an anonymous caller's
    address); raise RateLimited over `limit` (default HIKYAKU_RATE_LIMIT_PER_MINUTE).

    A Redis failure lets the request through: losing rate limiting for a moment is better
    than refusing every agent while Redis restarts."""
    if limit is None:
        limit = settings.HIKYAKU_RATE_LIMIT_PER_MINUTE
    if limit <= 0:
        return
    now = time.time()
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
            pipe = _redis_client().pipeline(transaction=False)
            key = f"hikyaku:rl:{credential_hash[:32]}:{window}"
            pipe.incrby(key, pending)
            pipe.expire(key, 120)
            shared = pipe.execute()[0]
        except Exception as exc:
            log.warning("rate limiting degraded, redis unavailable: %s", exc.__class__.__name__)
            shared = None
        with _lock:
            if shared is not None:
                state.shared = max(state.shared, shared)
            else:
                state.pending += pending  # keep counting locally until Redis is back
    count = state.shared + state.pending
    if count > limit:
        retry_after = 60 - int(now) % 60
        raise RateLimited(
            f"Rate limit of {limit} requests per minute exceeded; retry in {retry_after} s.",
            details={"retry_after": retry_after},
        )
