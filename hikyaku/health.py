"""Liveness and readiness endpoints for load balancers and orchestrators.

`/healthz` says the process answers. `/readyz` says it can serve: 200 when the database
answers, 503 (never 500) when it does not. Redis is reported but does not fail readiness:
it only carries doorbells and the Celery queue, sends still commit without it (docs/PROTOCOL.md §5),
and pulling every web process out of the load balancer because Redis blinked would turn a
delay into an outage.
"""

import logging

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse

log = logging.getLogger(__name__)


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception as exc:  # any failure means "not ready", never a 500
        log.warning("readiness: database unavailable: %s", exc.__class__.__name__)
        # Drop the broken connection so the next check (or request) reconnects.
        try:
            connection.close()
        except Exception:
            pass
        return False


def _redis_ok() -> bool:
    import redis

    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1
        )
        try:
            client.ping()
        finally:
            client.close()
        return True
    except Exception as exc:
        log.warning("readiness: redis unavailable: %s", exc.__class__.__name__)
        return False


def readyz(request: HttpRequest) -> JsonResponse:
    checks = {"database": "ok" if _database_ok() else "unavailable"}
    if settings.REDIS_URL:
        checks["redis"] = "ok" if _redis_ok() else "unavailable"
    if checks["database"] != "ok":
        status, code = "unavailable", 503
    elif any(value != "ok" for value in checks.values()):
        status, code = "degraded", 200
    else:
        status, code = "ok", 200
    return JsonResponse({"status": status, "checks": checks}, status=code)
