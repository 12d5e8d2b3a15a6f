"""The benchmark's own wiring: what `make bench` compares must be what it claims to compare.

- The floor view is the benchmark's, mounted by bench/wsgi.py on the agents' middleware chain;
  the product's URLs and WSGI application know nothing of it.
- The load generators send every planned request once with exactly its own headers: the 0.3
  path's API key + X-Agent-Id and no A2A-Version, the 1.0 path's agent token and A2A-Version.
- A ratio is taken within a round and the median of the rounds' ratios meets the target or not;
  only Hikyaku's lost/duplicated/cross-delivered messages fail the run.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.db import connection
from django.middleware.csrf import CsrfViewMiddleware

import testbed
from bench import a2a, load, report
from bench.phases import PhaseResult


def wsgi_call(application, method: str, path: str, body: bytes = b""):
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_HOST": "localhost",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": io.StringIO(),
        "wsgi.url_scheme": "http",
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.version": (1, 0),
    }
    captured = {}

    def start_response(status, response_headers, exc_info=None):
        captured["status"] = int(status.split()[0])
        captured["headers"] = {name.lower(): value for name, value in response_headers}

    out = b"".join(application(environ, start_response))
    return captured["status"], captured["headers"], out


@pytest.fixture
def allow_localhost(settings):
    settings.ALLOWED_HOSTS = ["localhost"]


@pytest.mark.django_db
def test_the_product_does_not_serve_the_floor(allow_localhost):
    from hikyaku.wsgi import application

    status, _, out = wsgi_call(application, "POST", "/bench/floor", b'{"id": "x"}')
    assert status == 404
    assert json.loads(out)["error"]["code"] == "NOT_FOUND"


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    "connection.vendor != 'postgresql'", reason="the floor's table is Postgres SQL (jsonb)"
)
def test_the_bench_serves_the_floor_on_the_agents_chain(allow_localhost, settings):
    settings.ROOT_URLCONF = "bench.urls"  # what bench/settings.py changes, and nothing else
    from bench import floor, wsgi

    floor.ensure_table()
    status, headers, out = wsgi_call(wsgi.application, "POST", "/bench/floor", b'{"n": 1}')
    assert status == 200, out
    row_id = json.loads(out)["id"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT body FROM bench_floor WHERE id = %s", [row_id])
        (body,) = cursor.fetchone()
    assert (json.loads(body) if isinstance(body, str) else body) == {"n": 1}
    # The chain of agents' JSON-RPC calls: security headers, no session or CSRF.
    assert headers["x-content-type-options"] == "nosniff" and headers["x-request-id"]
    assert "set-cookie" not in headers

    def has_csrf(handler) -> bool:
        return any(isinstance(m.__self__, CsrfViewMiddleware) for m in handler._view_middleware)

    assert not has_csrf(wsgi.floor_handler)
    assert has_csrf(wsgi.product.get_wsgi_application())  # the full chain has it


class Recorder(BaseHTTPRequestHandler):
    """A keep-alive HTTP/1.1 server that records every POST and answers a JSON-RPC result."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, dict[str, str], str]] = []
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 - the http.server API
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        with self.lock:
            self.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        out = b'{"jsonrpc":"2.0","id":1,"result":{}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def recorder():
    Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", Recorder.seen
    server.shutdown()
    server.server_close()


class FakeAgent:
    def __init__(self, n: int):
        self.id, self.token, self.api_key = f"agent-{n}", f"hka_token{n}", "hky_tenantkey"


@pytest.mark.parametrize("generator", ["wrk", "python"])
def test_every_planned_request_goes_once_with_exactly_its_headers(recorder, generator):
    if generator == "wrk" and not load.wrk_path():
        pytest.skip("wrk is not installed")
    base_url, seen = recorder
    rows = []
    for n in range(12):
        dialect = a2a.V03 if n % 2 else a2a.V1
        agent = FakeAgent(n)
        body = dialect.send_message(message_id=f"m{n}", destination="agent-0", text=f"t{n}")
        headers = dialect.credentials(agent)
        rows.append(load.PlanRow(f"m{n}", dialect.path, headers, a2a.compact(body)))
    result = load.run_plan(base_url, rows, concurrency=3, expect='"result"', generator=generator)
    assert sorted(result.ok) == sorted(r.id for r in rows) and not result.failed
    by_id = {json.loads(body)["params"]["message"]["messageId"]: (p, h) for p, h, body in seen}
    assert len(seen) == len(rows) == len(by_id)
    for n in range(12):
        path, headers = by_id[f"m{n}"]
        if n % 2:  # the 0.3 path, as the old broker's clients send it
            assert path == "/"
            assert headers["authorization"] == "Bearer hky_tenantkey"
            assert headers["x-agent-id"] == f"agent-{n}"
            assert "a2a-version" not in headers
        else:
            assert path == "/a2a/"
            assert headers["authorization"] == f"Bearer hka_token{n}"
            assert headers["a2a-version"] == "1.0"
            assert "x-agent-id" not in headers


def phase(name: str, cpu_ms_per_op: float, ops: int = 100) -> PhaseResult:
    latency = {"p50": 1.0, "p99": 2.0}
    return PhaseResult(name, ops, 1.0, {"total": cpu_ms_per_op * ops}, "wrk", 0.0, latency)


def checks(lost: int = 0) -> dict:
    keys = ("expected", "received", "duplicated", "cross_delivered", "unexpected")
    keys += ("failed_sends", "failed_acks", "undrained_agents")
    return {**dict.fromkeys(keys, 0), "lost": lost, "examples": {}}


def test_ratios_are_taken_within_each_round_and_their_median_meets_the_target():
    # ours / old by round: 1/2 = 0.5, 3/10 = 0.3, 4/5 = 0.8 -> median 0.5, which meets
    # "<= 0.5 x"; the ratio of the medians (3 / 5 = 0.6) would not.
    rounds = [
        {
            "round": i,
            "hikyaku-1.0": {"phases": {"send": phase("send", ours)}, "checks": checks()},
            "old-0.3": {"phases": {"send": phase("send", old)}, "checks": checks(lost=1)},
        }
        for i, (ours, old) in enumerate([(1, 2), (3, 10), (4, 5)], start=1)
    ]
    summary = report.summarize(rounds, environment={}, config={}, designs={}, notes=[])
    target = next(
        t
        for t in summary["targets"]
        if (t["figure"], t["ours"], t["reference"]) == ("send_cpu_ms", "hikyaku-1.0", "old-0.3")
    )
    assert target["ratios_by_round"] == [0.5, 0.3, 0.8]
    assert target["median_ratio"] == 0.5 and target["met"] is True
    assert summary["medians"]["old-0.3"]["send_cpu_ms"]["median"] == 5
    # The old broker's lost message is reported (and fails its own check), not the run.
    old_check = next(t for t in summary["targets"] if t["ours"] == "old-0.3" and not t["reference"])
    assert old_check["met"] is False
    assert not report.checks_failed(summary)
    rounds[1]["hikyaku-1.0"]["checks"] = checks(lost=1)
    assert report.checks_failed(
        report.summarize(rounds, environment={}, config={}, designs={}, notes=[])
    )


@pytest.fixture
def micro_env():
    """The environment `python -m bench.micro` runs in as a reader runs it: a scratch database
    of its own, thousands of requests from one key and one tenant (the limiters must not
    trip). Yields the environment; the database is dropped afterwards."""
    if connection.vendor != "postgresql":
        pytest.skip("bench.micro reads the CPU of the Postgres backend that serves it")
    suite_url = urlsplit(os.environ["DATABASE_URL"])
    scratch = urlunsplit(suite_url._replace(path=f"/hikyaku_micro_{uuid.uuid4().hex[:8]}"))
    testbed.recreate_database(scratch)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HIKYAKU_", "REDIS_"))}
        env["DATABASE_URL"] = scratch
        # Limits its few requests exceed, standing for the defaults its thousands exceed.
        env["HIKYAKU_RATE_LIMIT_PER_MINUTE"] = env["HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE"] = "5"
        yield env
    finally:
        testbed.recreate_database(scratch, create=False)


def _micro(env: dict, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.micro", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout.splitlines()


def test_the_micro_benchmark_runs_to_its_table(micro_env):
    table = _micro(
        micro_env, "--sends", "40", "--broadcasts", "2", "--agents", "3", "--rounds", "1"
    )
    assert any(line.startswith("send, per message") for line in table), table
    assert any(line.startswith("poll+ack, per message") for line in table), table


def test_the_micro_benchmark_measures_the_embedded_default_on_sqlite(tmp_path):
    """With a SQLite DATABASE_URL the database works in the measuring thread: the table has
    the whole cost in the web column, and the sends land in that file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIKYAKU_", "REDIS_"))}
    database = tmp_path / "micro.sqlite3"
    env["DATABASE_URL"] = f"sqlite:///{database}"
    env["HIKYAKU_RATE_LIMIT_PER_MINUTE"] = env["HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE"] = "5"
    table = _micro(env, "--sends", "40", "--broadcasts", "2", "--agents", "3", "--rounds", "1")
    rows = {line.split(",")[0]: line.split()[-3:] for line in table if ", per " in line}
    assert set(rows) == {"send", "poll+ack", "broadcast"}, table
    for web, db, total in rows.values():
        assert float(web) > 0 and float(db) == 0 and total == web, table
    with sqlite3.connect(database) as db:
        (tasks,) = db.execute("SELECT count(*) FROM messaging_task").fetchone()
    # The 40 sends, and each broadcast's own task and its deliveries to the two others.
    assert tasks == 40 + 2 * (1 + 2), tasks


def test_the_group_commit_replay_writes_every_send_it_measures(micro_env):
    """`--group-commit K` runs a captured send's statement again, alone and K per
    transaction: each replay must write a task (a statement matching nothing would measure
    the cost of doing nothing)."""
    table = _micro(
        micro_env, "--group-commit", "4", "--sends", "40", "--agents", "2", "--rounds", "2"
    )
    assert any(line.startswith("autocommit, one per statement") for line in table), table
    assert any(line.startswith("4 per transaction, pipelined") for line in table), table
    with psycopg.connect(micro_env["DATABASE_URL"]) as db:
        (tasks,) = db.execute("SELECT count(*) FROM messaging_task").fetchone()
    # The captured send, the warm-up's 40, then two rounds of 40 alone and 40 grouped.
    assert tasks == 1 + 40 + 2 * (40 + 40)
