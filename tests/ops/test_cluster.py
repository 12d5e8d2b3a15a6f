"""`make cluster`: the whole topology on this machine's Postgres and Redis, started and stopped."""

import json
import os
import subprocess
import sys
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from testbed import recreate_database
from tests.backends import postgres_suite_only
from tests.ops.processes import BIN, REPO, base_env, free_ports


def cluster_urls() -> tuple[str, str]:
    """A database of its own next to the suite's, and the suite's Redis database."""
    database = os.environ.get("DATABASE_URL", "")
    if not database.startswith("postgres"):
        database = "postgres://postgres@127.0.0.1:5432/hikyaku_test"
    parts = urlsplit(database)
    database = urlunsplit(parts._replace(path=parts.path + "_cluster"))
    return database, os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/3"


@pytest.fixture
def cluster_env(tmp_path):
    database, redis_url = cluster_urls()
    try:
        recreate_database(database, create=False)
        redis.Redis.from_url(redis_url, socket_connect_timeout=2).ping()
    except (psycopg.OperationalError, redis.ConnectionError) as exc:
        pytest.skip(f"needs the machine's Postgres and Redis on 127.0.0.1: {exc}")
    proxy, web1, web2, stream = free_ports(4)
    env = base_env(
        CLUSTER_DIR=str(tmp_path / "run"),
        CLUSTER_PROXY_PORT=str(proxy),
        CLUSTER_WEB_PORTS=f"{web1},{web2}",
        CLUSTER_STREAM_PORT=str(stream),
        DATABASE_URL=database,
        REDIS_URL=redis_url,
        CELERY_BROKER_URL=redis_url,
    )
    yield env
    cluster("stop", env)
    recreate_database(database, create=False)


def cluster(command: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/cluster.py", command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_without_nginx_the_cluster_says_so_and_starts_nothing(cluster_env, tmp_path):
    started = cluster("start", {**cluster_env, "CLUSTER_NGINX": "/nonexistent/nginx"})
    assert started.returncode == 1 and "No nginx found" in started.stdout
    assert not (tmp_path / "run" / "cluster.json").exists()


@postgres_suite_only(
    "`make cluster` is the production topology on this machine's Postgres and Redis, whatever "
    "the suite's database"
)
def test_the_cluster_starts_serves_shares_state_and_stops(cluster_env, tmp_path):
    started = cluster("start", cluster_env)
    assert started.returncode == 0, started.stdout + started.stderr
    run_dir = tmp_path / "run"
    state = json.loads((run_dir / "cluster.json").read_text())
    assert set(state) == {"proxy", "web-1", "web-2", "stream", "worker", "beat"}
    for name, entry in state.items():
        assert (run_dir / f"{name}.pid").read_text().strip() == str(entry["pid"])

    web1, web2 = (f"http://127.0.0.1:{p}" for p in cluster_env["CLUSTER_WEB_PORTS"].split(","))
    stream = f"http://127.0.0.1:{cluster_env['CLUSTER_STREAM_PORT']}"
    proxy = f"http://127.0.0.1:{cluster_env['CLUSTER_PROXY_PORT']}"
    for base in (proxy, web1, web2, stream):
        ready = httpx.get(f"{base}/readyz", timeout=10).json()
        assert ready == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}

    # nginx runs deploy/nginx.conf pointed at these processes: a stream through the proxy
    # is served by the stream process, which a web process hands it to (docs/ARCHITECTURE.md).
    conf = (run_dir / "nginx.conf").read_text()
    for port in (*cluster_env["CLUSTER_WEB_PORTS"].split(","), cluster_env["CLUSTER_STREAM_PORT"]):
        assert f"server 127.0.0.1:{port};" in conf
    refused = httpx.get(f"{web1}/api/v1/subscribe", timeout=10)
    assert refused.status_code == 421
    through = httpx.get(f"{proxy}/api/v1/subscribe", timeout=10)
    assert through.status_code == 401 and through.json()["error"]["code"] == "UNAUTHORIZED"

    # A key made by the operator command registers an agent on web-1; web-2 sees it.
    secret_key = (run_dir / "secret_key").read_text()
    command_env = {**cluster_env, "DJANGO_SECRET_KEY": secret_key, "DJANGO_DEBUG": "false"}
    key = subprocess.run(
        [sys.executable, "manage.py", "createapikey", "--create", "--tenant", "cluster"],
        cwd=REPO,
        env=command_env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    registered = httpx.post(
        f"{web1}/api/v1/agents",
        json={"name": "alice", "description": "in the cluster"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
    )
    assert registered.status_code == 201, registered.text
    agent = registered.json()
    seen = httpx.get(
        f"{web2}/api/v1/agents/{agent['agent_id']}",
        headers={"Authorization": f"Bearer {agent['agent_token']}"},
        timeout=10,
    )
    assert seen.status_code == 200 and seen.json()["name"] == "alice"

    # Every process counts into one directory: web-1's /metrics includes web-2's request.
    text = httpx.get(f"{web1}/metrics", timeout=10).text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[
        ("hikyaku_http_requests_total", (("method", "GET"), ("route", "api-agent"), ("status", "200")))
    ] == 1  # fmt: skip

    # The worker answers its broker; beat is scheduling.
    ping = subprocess.run(
        [str(BIN / "celery"), "-A", "hikyaku", "inspect", "ping", "--timeout", "10",
         "--destination", f"cluster-{cluster_env['CLUSTER_STREAM_PORT']}@{os.uname().nodename}"],
        cwd=REPO, env=command_env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ping.returncode == 0 and "pong" in ping.stdout, ping.stdout + ping.stderr
    assert "beat: Starting" in (run_dir / "beat.log").read_text()

    assert cluster("status", cluster_env).returncode == 0
    again = cluster("start", cluster_env)
    assert again.returncode != 0 and "already running" in again.stdout

    stopped = cluster("stop", cluster_env)
    assert stopped.returncode == 0 and "Stopped 6 process(es)" in stopped.stdout
    assert not any(alive(entry["pid"]) for entry in state.values())
    assert not list(run_dir.glob("*.pid"))
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{web1}/healthz", timeout=2)
    assert cluster("status", cluster_env).returncode != 0
