"""The floor: the cheapest durable write a Django view can do under our server.

`POST /bench/floor` parses the JSON body and INSERTs it as one row (autocommit, so the commit
is durable exactly like a send's). It runs through the same middleware chain as agents'
JSON-RPC calls, the same WSGI server and the same database as the broker, so "our cost / floor
cost" says how much the messaging layer adds on top of "Django + one durable INSERT". The
benchmark mounts it itself (bench/settings.py, bench/urls.py, bench/wsgi.py): the product's
URLs and WSGI application do not know it.
"""

from __future__ import annotations

import json

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

TABLE_SQL = """
CREATE TABLE IF NOT EXISTS bench_floor (
    id bigserial PRIMARY KEY,
    body jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""


def ensure_table() -> None:
    """Create the floor's table with raw SQL (it is no model and has no migration)."""
    with connection.cursor() as cursor:
        cursor.execute(TABLE_SQL)


@csrf_exempt
@require_POST
def floor_insert(request: HttpRequest) -> HttpResponse:
    try:
        payload = json.loads(request.body)
    except ValueError:
        return JsonResponse({"error": "invalid json"}, status=400)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO bench_floor (body) VALUES (%s) RETURNING id", [json.dumps(payload)]
        )
        (row_id,) = cursor.fetchone()
    return JsonResponse({"id": row_id})


FLOOR_PATH = "/bench/floor"
urlpatterns = [path(FLOOR_PATH.lstrip("/"), floor_insert, name="bench-floor")]
