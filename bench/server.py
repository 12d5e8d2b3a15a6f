"""Starts the broker the way production runs it, on the benchmark's own database.

Request/response: granian in WSGI mode serving `hikyaku.wsgi:application` (docs/ARCHITECTURE.md,
Serving topology). Streams, when a phase needs them: uvicorn serving `hikyaku.asgi:application`.
Both share Postgres and Redis. The database is dropped and recreated for every run so that
runs are comparable; Redis is used on its own logical database, which is flushed.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis

import testbed
from testbed.process import Ready

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@dataclass
class ServerConfig:
    database_url: str
    redis_url: str
    host: str
    port: int
    stream_port: int
    workers: int
    threads: int
    conn_max_age: int
    log_dir: Path

    @property
    def database_name(self) -> str:
        return urlsplit(self.database_url).path.lstrip("/")

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def stream_url(self) -> str:
        return f"http://{self.host}:{self.stream_port}"


def server_env(cfg: ServerConfig) -> dict[str, str]:
    """The environment of every server process and management command of the run."""
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "hikyaku.settings",
            "DJANGO_DEBUG": "false",
            "DJANGO_SECRET_KEY": "bench-" + secrets.token_hex(24),
            "DJANGO_ALLOWED_HOSTS": f"{cfg.host},localhost,127.0.0.1",
            "DATABASE_URL": cfg.database_url,
            "DATABASE_CONN_MAX_AGE": str(cfg.conn_max_age),
            "REDIS_URL": cfg.redis_url,
            "CELERY_BROKER_URL": cfg.redis_url,
            # The per-key limit (1,200/min by default) would stop the benchmark's one tenant
            # after a second; the limiter still runs, it just never trips.
            "HIKYAKU_RATE_LIMIT_PER_MINUTE": "100000000",
            "HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE": "100000000",  # the tenant's budget, likewise
            "HIKYAKU_READ_DOT_ENV": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def reset_database(cfg: ServerConfig) -> None:
    """Drop and recreate the benchmark database (it holds nothing but benchmark data)."""
    name = cfg.database_name
    if not name.replace("_", "").isalnum() or "bench" not in name:
        raise SystemExit(f"Refusing to drop database {name!r}: its name must contain 'bench'.")
    testbed.recreate_database(cfg.database_url)


def reset_redis(cfg: ServerConfig) -> None:
    redis.Redis.from_url(cfg.redis_url).flushdb()


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def prepare_database(cfg: ServerConfig, env: dict[str, str]) -> str:
    """Fresh database, migrations, the floor's table and a tenant key; returns the key."""
    reset_database(cfg)
    reset_redis(cfg)
    manage(env, "migrate", "--no-input", "-v0")
    manage(env, "shell", "-c", "from bench.floor import ensure_table; ensure_table()")
    created = json.loads(manage(env, "createapikey", "--create", "--tenant", "bench", "--json"))
    return created["api_key"]


class ServerProcess(testbed.Process):
    """One server process tree we started (and are the only ones to stop), ready once
    `<url>/healthz` answers. It stays in our process group, so Ctrl-C stops it too."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], url: str, log: Path):
        super().__init__(cmd, env=env, log=log, name=name, own_session=False, fresh_log=True)
        self.url = url

    def start(self, ready: Ready | None = None, *, timeout: float = 60) -> ServerProcess:
        port = urlsplit(self.url).port or 80
        if testbed.ports.listening(port, urlsplit(self.url).hostname or "127.0.0.1"):
            raise SystemExit(f"Port {port} is taken; choose another with --port.")
        try:
            super().start(ready or testbed.http_ok(f"{self.url}/healthz"), timeout=timeout)
        except testbed.ProcessError as error:
            raise SystemExit(f"The {self.name} server did not start: {error}") from None
        return self

    def stop(self, timeout: float = 15) -> None:
        super().stop(timeout)


def web_server(cfg: ServerConfig, env: dict[str, str]) -> ServerProcess:
    """granian serving the product's WSGI application plus the floor view (bench/wsgi.py)."""
    env = {**env, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    cmd = testbed.granian_argv(
        cfg.port,
        host=cfg.host,
        app="bench.wsgi:application",
        workers=cfg.workers,
        threads=cfg.threads,
        extra=["--log-level", "warning"],
    )
    return ServerProcess("web", cmd, env, cfg.base_url, cfg.log_dir / "web.log")


def stream_server(cfg: ServerConfig, env: dict[str, str]) -> ServerProcess:
    cmd = testbed.uvicorn_argv(
        cfg.stream_port, host=cfg.host, graceful_seconds=3, extra=["--log-level", "warning"]
    )
    return ServerProcess("streams", cmd, env, cfg.stream_url, cfg.log_dir / "streams.log")


def environment(cfg: ServerConfig) -> dict:
    """What the figures were measured on."""
    info: dict = {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "kernel": os.uname().release,
        "python": sys.version.split()[0],
        "loadavg_at_start": [round(v, 2) for v in os.getloadavg()],
        "granian": _version([str(BIN / "granian"), "--version"]),
        "wrk": _version(["wrk", "-v"]),
        "git_commit": _version(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
        "server": {
            "web": f"granian --interface wsgi --workers {cfg.workers} "
            f"--blocking-threads {cfg.threads} bench.wsgi:application (hikyaku.wsgi + floor)",
            "conn_max_age": cfg.conn_max_age,
        },
    }
    parts = urlsplit(cfg.database_url)
    admin_url = urlunsplit((parts.scheme, parts.netloc, "/postgres", parts.query, ""))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        info["postgres"] = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]
            for name in (
                "server_version",
                "synchronous_commit",
                "fsync",
                "wal_sync_method",
                "shared_buffers",
            )
        }
    info["redis"] = redis.Redis.from_url(cfg.redis_url).info("server").get("redis_version")
    return info


def _cpu_model() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def _version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except OSError:
        return "absent"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else ""
