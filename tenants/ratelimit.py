"""Per-credential rate limiting (DESIGN.md §4.6): a fixed one-minute window per API key or
agent token, counted in Redis when configured (shared by every process) and in process
memory otherwise (the embedded single-process default)."""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings

from hikyaku.errors import RateLimited

log = logging.getLogger(__name__)

_local: dict[tuple[str, int], int] = {}
_local_lock = threading.Lock()
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
    window = int(time.time() // 60)
    if settings.REDIS_URL:
        key = f"hikyaku:rl:{credential_hash[:32]}:{window}"
        try:
            pipe = _redis_client().pipeline(transaction=False)
            pipe.incr(key)
            pipe.expire(key, 120)
            count = pipe.execute()[0]
        except Exception as exc:
            log.warning("rate limiting skipped, redis unavailable: %s", exc.__class__.__name__)
            return
    else:
        with _local_lock:
            count = _local.get((credential_hash, window), 0) + 1
            _local[(credential_hash, window)] = count
            if len(_local) > 100_000:
                for stale in [k for k in _local if k[1] < window]:
                    del _local[stale]
    if count > limit:
        retry_after = 60 - int(time.time()) % 60
        raise RateLimited(
            f"Rate limit of {limit} requests per minute exceeded; retry in {retry_after} s.",
            details={"retry_after": retry_after},
        )
