"""Postgres crashes and restarts during a send load; the broker is never restarted.

The test starts a private Postgres cluster (never the machine's), migrates it, and serves the
broker from it. Eight client threads send 2,000 messages while a reader thread polls the REST
API, the inbox (JSON-RPC ListTasks) and /readyz. Mid-load, Postgres is restarted with
`pg_ctl restart -m immediate` (a crash and recovery), and later stopped immediately and
started again after a pause. Then:

- every answer during the outage was clean: a 503 with the surface's error shape (REST
  envelope `UNAVAILABLE`, JSON-RPC error object), never a 500, never a traceback, never a
  dropped connection;
- the same server process recovered by itself: later requests succeed;
- every send that was acknowledged is stored exactly once, and every send retried with its
  messageId after an error ended up stored exactly once too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter

import httpx
import pytest

from tests.backends import postgres_suite_only
from tests.live import ROOT
from tests.reliability.harness import (
    PrivatePostgres,
    SendLoad,
    Server,
    record,
    wait_until,
)
from tests.security.checks import assert_no_traceback

pytestmark = [
    pytest.mark.slow,
    postgres_suite_only(
        "the scenario runs its own Postgres cluster, whatever the suite's database"
    ),
    pytest.mark.skipif(not PrivatePostgres.available(), reason="needs Postgres 15 binaries"),
]

TOTAL = 2000
CLIENTS = 8


@pytest.fixture
def postgres():
    cluster = PrivatePostgres().start()
    try:
        env = {"DATABASE_URL": cluster.url, "PATH": "/usr/bin:/bin"}
        manage = [sys.executable, "manage.py"]
        subprocess.run([*manage, "migrate", "--no-input", "-v0"], cwd=ROOT, env=env, check=True)
        yield cluster
    finally:
        cluster.destroy()


def create_key(cluster: PrivatePostgres) -> str:
    out = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "createapikey",
            "--create",
            "--tenant",
            "reliability",
            "--json",
        ],
        cwd=ROOT,
        env={"DATABASE_URL": cluster.url, "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
    )
    return json.loads(out.stdout)["api_key"]


def register(url: str, key: str, name: str) -> tuple[str, str]:
    response = httpx.post(
        f"{url}/api/v1/agents",
        json={"name": name, "description": ""},
        headers={"Authorization": f"Bearer {key}"},
    )
    response.raise_for_status()
    body = response.json()
    return body["agent_id"], body["agent_token"]


class Reader(threading.Thread):
    """Reads every surface in a loop and keeps every answer's status and shape."""

    def __init__(self, url: str, agent: tuple[str, str]) -> None:
        super().__init__(daemon=True)
        self.url, (self.agent_id, self.token) = url, agent
        self.answers: Counter = Counter()
        self.bad: list[tuple[str, int, bytes]] = []
        self.stop = threading.Event()

    def check(self, name: str, response: httpx.Response) -> None:
        self.answers[(name, response.status_code)] += 1
        try:
            assert response.status_code in (200, 503), response.status_code
            assert_no_traceback(response.content)
            body = response.json()
            if response.status_code == 503:
                if name != "readyz":  # a client is told to try again shortly
                    assert response.headers["Retry-After"] == "1", dict(response.headers)
                if name == "rpc":
                    assert body["error"]["code"] == -32603, body
                    assert "temporarily unavailable" in body["error"]["message"], body
                elif name == "readyz":
                    assert body["checks"]["database"] == "unavailable", body
                else:
                    assert body["error"]["code"] == "UNAVAILABLE", body
        except (AssertionError, ValueError, KeyError):
            self.bad.append((name, response.status_code, response.content[:500]))

    def run(self) -> None:
        auth = {"Authorization": f"Bearer {self.token}"}
        rpc = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "ListTasks",
            "params": {"contextId": self.agent_id, "pageSize": 5},
        }
        with httpx.Client(base_url=self.url, timeout=10) as http:
            while not self.stop.is_set():
                try:
                    self.check("rest", http.get("/api/v1/agents", headers=auth))
                    self.check(
                        "rpc", http.post("/a2a/", json=rpc, headers={**auth, "A2A-Version": "1.0"})
                    )
                    self.check("readyz", http.get("/readyz"))
                except httpx.HTTPError as exc:
                    self.answers[("transport", exc.__class__.__name__)] += 1
                    self.bad.append(("transport", 0, repr(exc).encode()))
                time.sleep(0.02)


@pytest.mark.parametrize("kind", Server.KINDS)
def test_postgres_restart_mid_load_fails_cleanly_and_recovers(postgres, kind):
    key = create_key(postgres)
    server = Server(kind=kind, database_url=postgres.url)
    server.start()
    pid = server.pid
    try:
        senders = [register(server.url, key, f"sender-{i}") for i in range(CLIENTS)]
        recipients = [register(server.url, key, f"recipient-{i}") for i in range(4)]
        reader = Reader(server.url, recipients[0])
        reader.start()
        load = SendLoad(
            url=lambda: server.url,
            senders=senders,
            recipients=[r[0] for r in recipients],
            total=TOTAL,
        ).start()
        outages = []
        load.wait_for(500)
        outages.append(round(postgres.restart_immediate(), 2))  # crash + recovery
        load.wait_for(1200)
        started = time.monotonic()
        postgres.crash()
        time.sleep(2.0)  # a longer outage: every surface must answer 503 meanwhile
        postgres.start_again()
        outages.append(round(time.monotonic() - started, 2))
        load.join()
        reader.stop.set()
        reader.join(10)
        # The same process, never restarted, serves again.
        wait_until(
            lambda: httpx.get(f"{server.url}/readyz").status_code == 200,
            timeout=30,
            what="readiness after the restarts",
        )
        assert server.proc.poll() is None and server.pid == pid and server.starts == 1
    finally:
        server.stop()

    outcomes = load.outcomes()
    unclean = [o for o in outcomes if o not in ("ok", "http-503-rpc--32603")]
    assert not unclean, outcomes  # no 500, no dropped connection, no other error
    for entry in load.entries:
        for attempt in entry.attempts:
            assert_no_traceback(attempt.body)
    assert not reader.bad, reader.bad[:5]
    assert all(e.acknowledged for e in load.entries)

    rows = postgres.query(
        "SELECT t.message_id, t.id::text, count(e.id), extract(epoch FROM t.created_at) "
        "FROM messaging_task t "
        "LEFT JOIN messaging_taskevent e ON e.task_id = t.id AND e.kind = 'created' "
        "WHERE t.message_id IS NOT NULL GROUP BY t.message_id, t.id"
    )
    stored = Counter(row[0] for row in rows)
    assert len(rows) == TOTAL and set(stored.values()) == {1}, "lost or duplicated sends"
    assert {row[2] for row in rows} == {1}
    task_of = {row[0]: row[1] for row in rows}
    committed_unacknowledged = load.committed_before_failing({r[0]: float(r[3]) for r in rows})
    for entry in load.entries:
        assert entry.task_ids == {task_of[entry.message_id]}

    answers = {f"{name} {status}": n for (name, status), n in reader.answers.items()}
    assert any(status == 503 for (_, status) in reader.answers), "the outage was never seen"
    record(
        f"postgres-restart-{kind}",
        {
            "scenario": f"Postgres immediate restart + crash/2 s pause, {kind} server kept running",
            "load": f"{TOTAL} sends, {CLIENTS} client threads + 1 reader (REST, RPC, readyz)",
            "faults": len(outages),
            "outage_seconds": outages,
            "elapsed_seconds": round(load.elapsed, 1),
            "send_outcomes": dict(outcomes),
            "reader_answers": answers,
            "retried_sends": len(load.retried()),
            "committed_but_answered_503": len(committed_unacknowledged),
            "messages_checked": TOTAL,
            "lost": 0,
            "duplicated": 0,
            "server_restarts": 0,
        },
    )
