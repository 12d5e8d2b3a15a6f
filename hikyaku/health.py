"""Liveness and readiness endpoints for load balancers and orchestrators."""

import logging

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse

log = logging.getLogger(__name__)


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # any failure means "not ready", never a 500
        log.warning("readiness: database unavailable: %s", exc.__class__.__name__)
        checks["database"] = "unavailable"
    if settings.REDIS_URL:
        import redis

        try:
            redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1).ping()
            checks["redis"] = "ok"
        except Exception as exc:
            log.warning("readiness: redis unavailable: %s", exc.__class__.__name__)
            checks["redis"] = "unavailable"
    ready = all(v == "ok" for v in checks.values())
    return JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503
    )
