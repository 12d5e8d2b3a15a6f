"""The cache backend used with Redis: Django's, minus the errors while Redis is away.

The cache holds only throttling state (the web UI's login limits). Like the API's rate
limiter (tenants/ratelimit.py), it lets a request through when Redis does not answer: a
minute without login throttling is better than a login page that fails for everyone while
Redis restarts.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.cache.backends.redis import RedisCache
from redis.exceptions import RedisError

log = logging.getLogger(__name__)


def _degraded(operation: str, exc: Exception) -> None:
    log.warning("cache %s failed, redis unavailable: %s", operation, exc.__class__.__name__)


class ForgivingRedisCache(RedisCache):
    """RedisCache whose reads miss and whose writes succeed while Redis is unreachable."""

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        try:
            return super().get(key, default, version)
        except RedisError as exc:
            _degraded("get", exc)
            return default

    def set(self, key: Any, value: Any, timeout: Any = ..., version: int | None = None) -> None:
        try:
            if timeout is ...:
                super().set(key, value, version=version)
            else:
                super().set(key, value, timeout, version)
        except RedisError as exc:
            _degraded("set", exc)

    def add(self, key: Any, value: Any, timeout: Any = ..., version: int | None = None) -> bool:
        try:
            if timeout is ...:
                return super().add(key, value, version=version)
            return super().add(key, value, timeout, version)
        except RedisError as exc:
            _degraded("add", exc)
            return True  # as if the key (a lock, say) were taken by this caller

    def delete(self, key: Any, version: int | None = None) -> bool:
        try:
            return super().delete(key, version)
        except RedisError as exc:
            _degraded("delete", exc)
            return False
