"""SQL queries and in-process CPU of one operation of each kind (run by bench/run.py).

Runs inside Django (`python -m bench.queries`, with the benchmark's environment) on its own
tenant in the benchmark database, through the full middleware stack with Django's test
client, so no network or WSGI server is involved. Prints one JSON object: for every operation
the number of SQL statements, the statements themselves (shortened), and the median CPU of
the request in this process — the web-process share of the cost, attributable line by line.

Two rows are not requests but the parts every request is built from, called directly:
`authenticate_agent_token` (what authenticating an agent token costs, one statement) and
`statement_round_trip` (`SELECT 1` through Django's cursor: the least any statement costs the
web process, whatever it does). A request's CPU minus these says what is left to cut.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from typing import Any


def _cpu_ms() -> float:
    return time.thread_time() * 1000


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")
    import django

    django.setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from agents.auth import authenticate_agent
    from bench import a2a
    from tenants import services as tenant_services

    tenant = tenant_services.get_or_create_tenant(slug=f"queries-{uuid.uuid4().hex[:8]}")
    key = tenant_services.create_api_key(tenant=tenant, label="bench queries").raw_key
    client = Client()
    out: dict[str, Any] = {}

    def measure(name: str, fn, inputs: list[Any]) -> list[Any]:
        """`fn` of each input (made beforehand, so that it is not counted): the results, and
        under `name` the queries of the last call and the median CPU."""
        results, cpu = [], []
        for value in inputs:
            with CaptureQueriesContext(connection) as ctx:
                t0 = _cpu_ms()
                results.append(fn(value))
                cpu.append(_cpu_ms() - t0)
        out[name] = {
            "queries": len(ctx.captured_queries),
            "sql": [q["sql"][:160] for q in ctx.captured_queries],
            "median_cpu_ms_in_process": round(statistics.median(cpu), 3),
        }
        return results

    def call(name: str, path: str, body: Any, token: str, repeat: int = 1) -> list[Any]:
        """POST `body` (or bodies from a callable) `repeat` times; keep the last queries."""

        def post(data: str):
            return client.post(
                path,
                data=data,
                content_type="application/json",
                headers={"authorization": f"Bearer {token}", "a2a-version": "1.0"},
            )

        payloads = [json.dumps(body(i) if callable(body) else body) for i in range(repeat)]
        responses = measure(name, post, payloads)
        for resp in responses:
            if resp.status_code not in (200, 201):
                raise SystemExit(f"{name}: HTTP {resp.status_code} {resp.content[:300]!r}")
        return [resp.json() for resp in responses]

    agents = []
    for i in range(20):
        reg = call(
            "register",
            "/api/v1/agents",
            {"name": f"q-{i}", "description": "query counting"},
            key,
        )[0]
        agents.append(reg)
    alice, bob = agents[0], agents[1]

    def send(i: int) -> dict:
        mid = f"q-{uuid.uuid4().hex}"
        text = a2a.message_text(mid, bob["agent_id"], 256)
        return a2a.send_message(message_id=mid, destination=bob["agent_id"], text=text)

    sends = call("send", "/a2a/", send, alice["agent_token"], repeat=200)
    listed = call(
        "list_page_of_100",
        "/a2a/",
        a2a.list_inbox(agent_id=bob["agent_id"]),
        bob["agent_token"],
        repeat=20,
    )
    assert len(listed[-1]["result"]["tasks"]) == 100, listed[-1]
    task_ids = [s["result"]["task"]["id"] for s in sends]
    call(
        "ack",
        "/a2a/",
        lambda i: a2a.ack(message_id=f"ack-{task_ids[i]}", task_id=task_ids[i]),
        bob["agent_token"],
        repeat=200,
    )
    call(
        "list_empty",
        "/a2a/",
        a2a.list_inbox(agent_id=alice["agent_id"]),
        alice["agent_token"],
        repeat=20,
    )

    def bcast(i: int) -> dict:
        mid = f"qb-{uuid.uuid4().hex}"
        return a2a.send_message(message_id=mid, destination="*", text=f"bench {mid} to *")

    call("broadcast_to_19", "/a2a/", bcast, alice["agent_token"], repeat=20)

    def round_trip(_: None) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()

    authorization = f"Bearer {alice['agent_token']}"
    measure(
        "authenticate_agent_token",
        lambda _: authenticate_agent(authorization=authorization, agent_id=None),
        [None] * 200,
    )
    measure("statement_round_trip", round_trip, [None] * 200)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
