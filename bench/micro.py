"""`python -m bench.micro`: CPU of one operation in the web process and in its Postgres backend.

For comparing two versions of the code on a machine other work shares. The full benchmark
(`bench.run`) reads the server processes' CPU while a load runs, which is the figure the
targets are about, but neighbours on the same cores inflate it by tens of percent from run
to run. This runs the same requests one at a time through Django's full middleware stack
(test client, no network, no WSGI server) — or, with `--wsgi`, through the production WSGI
application (hikyaku/wsgi.py: the agents' hot path, hikyaku/lean.py) called as a WSGI server
calls it — and reads two clocks only: this thread's CPU and
the CPU of the one Postgres backend serving it (/proc/<pid>/stat). Both count work done, not
time waited, so they move little with the machine's load. The web figure lacks the WSGI
server's own share (compare `bench.run`'s floor), and nothing here is concurrent.

`--group-commit K` measures what committing sends together would save (docs/MEASUREMENTS.md,
Postgres): it captures the statement of one send and runs it again with fresh ids, one
autocommit statement per send as the store runs it, then K per transaction in one round trip
(psycopg's pipeline), reporting this thread's and the backend's CPU per send.

Needs the benchmark's environment: DATABASE_URL (a scratch database: this migrates it and
adds a tenant per run) and optionally REDIS_URL. With a SQLite DATABASE_URL (`sqlite:////tmp/
micro.sqlite3`) it measures the embedded default's database: SQLite works in this thread, so
its share is in the web column and the database column is zero.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

TICKS = os.sysconf("SC_CLK_TCK")


def _backend_cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICKS  # utime + stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=1000)
    parser.add_argument("--broadcasts", type=int, default=50)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5, help="report the least of rounds")
    parser.add_argument(
        "--wsgi", action="store_true", help="call hikyaku.wsgi.application, not the test client"
    )
    parser.add_argument(
        "--group-commit",
        type=int,
        metavar="K",
        help="replay one send's statement alone and K per transaction, and stop",
    )
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/hikyaku_bench")
    # As in production (DEBUG records every query, which costs more than some queries do).
    os.environ.setdefault("DJANGO_DEBUG", "false")
    os.environ.setdefault("DJANGO_SECRET_KEY", f"micro-{uuid.uuid4().hex}{uuid.uuid4().hex}")
    os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "testserver,localhost")
    # Like the benchmark's web processes: one connection across requests.
    os.environ.setdefault("DATABASE_CONN_MAX_AGE", "600")
    # Thousands of requests a minute from one key and one tenant: the limiters still run, as
    # in bench.run (bench/server.py), but never trip, whatever the environment says.
    os.environ["HIKYAKU_RATE_LIMIT_PER_MINUTE"] = "100000000"
    os.environ["HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE"] = "100000000"
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from bench import a2a
    from tenants import services as tenant_services

    call_command("migrate", verbosity=0)
    tenant = tenant_services.get_or_create_tenant(slug=f"micro-{uuid.uuid4().hex[:8]}")
    key = tenant_services.create_api_key(tenant=tenant, label="bench micro").raw_key
    client = Client()

    wsgi = None
    if args.wsgi:
        from hikyaku.wsgi import application as wsgi

    def call_wsgi(path: str, payload: bytes, token: str) -> tuple[int, bytes]:
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "SERVER_NAME": "localhost",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(payload)),
            "HTTP_HOST": "localhost",
            "HTTP_AUTHORIZATION": f"Bearer {token}",
            "HTTP_A2A_VERSION": "1.0",
            "wsgi.input": io.BytesIO(payload),
            "wsgi.errors": io.StringIO(),
            "wsgi.url_scheme": "http",
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
            "wsgi.version": (1, 0),
        }
        status = []
        out = b"".join(wsgi(environ, lambda s, h, e=None: status.append(int(s.split()[0]))))
        return status[0], out

    def post(path: str, body: Any, token: str) -> dict:
        payload = json.dumps(body).encode()
        if wsgi is not None and path != "/api/v1/agents":
            status, content = call_wsgi(path, payload, token)
        else:
            resp = client.post(
                path,
                data=payload,
                content_type="application/json",
                headers={"authorization": f"Bearer {token}", "a2a-version": "1.0"},
            )
            status, content = resp.status_code, resp.content
        if status not in (200, 201):
            raise SystemExit(f"HTTP {status} {content[:300]!r}")
        data = json.loads(content)
        if "error" in data:
            raise SystemExit(f"JSON-RPC error: {data['error']}")
        return data

    agents = [
        post("/api/v1/agents", {"name": f"micro-{i}", "description": "micro"}, key)
        for i in range(args.agents)
    ]
    connection.ensure_connection()
    if args.group_commit:
        _group_commit(args, agents, post)
        return

    # On SQLite the database's work is done in this thread: its CPU is in the web figure.
    backend = connection.connection.info.backend_pid if connection.vendor == "postgresql" else None

    def backend_cpu_ms() -> float:
        return _backend_cpu_ms(backend) if backend else 0.0

    def measured(work) -> tuple[float, float, int]:
        web0, pg0 = time.thread_time() * 1000, backend_cpu_ms()
        ops = work()
        web, pg = time.thread_time() * 1000 - web0, backend_cpu_ms() - pg0
        return web / ops, pg / ops, ops

    def sends() -> int:
        for i in range(args.sends):
            src, dst = agents[i % len(agents)], agents[(i * 7 + 3) % len(agents)]
            mid = f"m-{uuid.uuid4().hex}"
            text = a2a.message_text(mid, dst["agent_id"], 256)
            post(
                "/a2a/",
                a2a.send_message(message_id=mid, destination=dst["agent_id"], text=text),
                src["agent_token"],
            )
        return args.sends

    def drain() -> int:
        acked = 0
        for agent in agents:
            while True:
                page = post(
                    "/a2a/", a2a.list_inbox(agent_id=agent["agent_id"]), agent["agent_token"]
                )
                tasks = page["result"]["tasks"]
                if not tasks:
                    break
                for task in tasks:
                    post(
                        "/a2a/",
                        a2a.ack(message_id=f"ack-{task['id']}", task_id=task["id"]),
                        agent["agent_token"],
                    )
                    acked += 1
        return acked

    def broadcasts() -> int:
        for i in range(args.broadcasts):
            mid = f"b-{uuid.uuid4().hex}"
            post(
                "/a2a/",
                a2a.send_message(message_id=mid, destination="*", text=f"micro {mid}"),
                agents[i % len(agents)]["agent_token"],
            )
        return args.broadcasts * (len(agents) - 1)

    results: dict[str, list[tuple[float, float]]] = {"send": [], "poll+ack": [], "broadcast": []}
    for _ in range(args.rounds):
        results["send"].append(measured(sends)[:2])
        results["poll+ack"].append(measured(drain)[:2])
        results["broadcast"].append(measured(broadcasts)[:2])
        measured(drain)  # empty the broadcast deliveries, unmeasured

    print(f"{'ms per op (least of rounds)':30} {'web':>7} {'pg':>7} {'total':>7}")
    for name, samples in results.items():
        # The least: interference from neighbours only ever adds CPU time.
        web = min(s[0] for s in samples)
        pg = min(s[1] for s in samples)
        per = "per delivery" if name == "broadcast" else "per message"
        print(f"{name + ', ' + per:30} {web:7.3f} {pg:7.3f} {web + pg:7.3f}")
    print(f"load average: {os.getloadavg()[0]:.2f}")


def _group_commit(args: argparse.Namespace, agents: list[dict], post) -> None:
    from django.db import connection

    from bench import a2a

    captured: list[tuple[str, list]] = []

    def capture(execute, sql, params, many, context):
        if sql.startswith("WITH v AS") and "INSERT INTO messaging_task" in sql:
            captured.append((sql, list(params)))
        return execute(sql, params, many, context)

    src, dst = agents[0], agents[1]
    mid = f"m-{uuid.uuid4().hex}"
    with connection.execute_wrapper(capture):
        answer = post(
            "/a2a/",
            a2a.send_message(
                message_id=mid,
                destination=dst["agent_id"],
                text=a2a.message_text(mid, dst["agent_id"], 256),
            ),
            src["agent_token"],
        )
    ((sql, params),) = captured
    task_id = answer["result"]["task"]["id"]
    # The task's id and the messageId are the statement's only values unique per send.
    task_at = [i for i, value in enumerate(params) if str(value) == task_id]
    message_at = [i for i, value in enumerate(params) if value == mid]

    def fresh() -> list:
        values = list(params)
        task = uuid.uuid4()  # and the context's id where it is the task's
        for i in task_at:
            values[i] = task if isinstance(params[i], uuid.UUID) else str(task)
        message_id = f"m-{uuid.uuid4().hex}"
        for i in message_at:
            values[i] = message_id
        return values

    raw = connection.connection  # autocommit, with Django's type adapters
    cursor = raw.cursor()
    pid = raw.info.backend_pid

    def replay(k: int) -> tuple[float, float]:
        batches = [[fresh() for _ in range(k)] for _ in range(args.sends // k)]
        web0, pg0 = time.thread_time() * 1000, _backend_cpu_ms(pid)
        for batch in batches:
            if k == 1:
                cursor.execute(sql, batch[0], prepare=True)
                cursor.fetchone()
                continue
            with raw.pipeline(), raw.transaction():
                for values in batch:
                    cursor.execute(sql, values, prepare=True)
        n = len(batches) * k
        return (time.thread_time() * 1000 - web0) / n, (_backend_cpu_ms(pid) - pg0) / n

    replay(1)  # prepare it, warm both sides
    sizes = (1, args.group_commit)
    samples: dict[int, list[tuple[float, float]]] = {k: [] for k in sizes}
    for _ in range(args.rounds):
        for k in sizes:
            samples[k].append(replay(k))
    print(f"{'ms per send (least of rounds)':34} {'client':>7} {'pg':>7} {'total':>7}")
    for k in sizes:
        client = min(s[0] for s in samples[k])
        pg = min(s[1] for s in samples[k])
        label = "autocommit, one per statement" if k == 1 else f"{k} per transaction, pipelined"
        print(f"{label:34} {client:7.3f} {pg:7.3f} {client + pg:7.3f}")
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
