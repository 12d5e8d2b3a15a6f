"""The servers `make bench` measures side by side, each with its own processes and CPU meter.

- `Production`: Hikyaku as production runs it — granian WSGI (bench/wsgi.py: the product's
  application plus the floor view), Postgres, and the bench's own redis-server.
- `OldBroker`: the broker Hikyaku replaces, built from its source archive at run time
  (`old-broker.sh build`, never committed here) and started with `old-broker.sh start`: one
  uvicorn process and a private redis-server without persistence. It speaks only the 0.3
  dialect (API key + X-Agent-Id).
- `Embedded`: `make run`'s server — uvicorn on `hikyaku.asgi`, a SQLite file, the in-memory
  channel layer and eager Celery, with the settings' defaults (debug off, as `make run` has it).

Each keeps its servers up for the whole run; every round mints a new tenant key so that each
measurement starts from empty inboxes and its own agents. Their CPU is read the same way
(bench/cpu.py): every process the design runs, and nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import testbed

from . import a2a
from .cpu import CpuMeter
from .server import (
    ROOT,
    ServerConfig,
    ServerProcess,
    manage,
    prepare_database,
    server_env,
    web_server,
)

OLD_BROKER_SCRIPT = Path("tools") / "old-broker" / "old-broker.sh"


def _stop_pid(pid: int, timeout_s: float = 15) -> None:
    """SIGTERM one process we started, then SIGKILL if it lingers."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Production:
    name = "hikyaku"
    label = "Hikyaku (granian WSGI, Postgres, Redis)"
    dialects = (a2a.V03, a2a.V1)

    def __init__(self, cfg: ServerConfig, redis_port: int):
        # A private redis-server without persistence, so that its CPU is the design's alone.
        self.redis = testbed.RedisServer(port=redis_port, log=cfg.log_dir / "redis.log")
        cfg.redis_url = self.redis.url
        self.cfg = cfg
        self.env = server_env(cfg)
        self.web: ServerProcess | None = None
        self.keys = 0

    @property
    def base_url(self) -> str:
        return self.cfg.base_url

    def start(self) -> None:
        self.redis.start()
        prepare_database(self.cfg, self.env)
        self.web = web_server(self.cfg, self.env)
        self.web.start()

    def new_key(self) -> str:
        self.keys += 1
        created = manage(
            self.env, "createapikey", "--create", "--tenant", f"bench-{self.keys}", "--json"
        )
        return json.loads(created)["api_key"]

    def meter(self) -> CpuMeter:
        assert self.web is not None and self.redis.alive
        return CpuMeter(
            roots={"web": self.web.pid},
            database=self.cfg.database_name,
            count_reaped_postgres=self.cfg.conn_max_age == 0,
            redis_pids={self.redis.pid},
        )

    def stop(self) -> None:
        if self.web is not None:
            self.web.stop()
        self.redis.stop()

    def describe(self) -> dict:
        return {
            "server": f"granian --interface wsgi --workers {self.cfg.workers} --blocking-threads "
            f"{self.cfg.threads} bench.wsgi:application (hikyaku.wsgi + the floor view)",
            "database": f"Postgres {self.cfg.database_name} (conn_max_age {self.cfg.conn_max_age})",
            "redis": f"private redis-server on port {self.redis.port}",
        }


class Embedded:
    name = "embedded"
    label = "Hikyaku embedded default (make run: uvicorn, SQLite)"
    dialects = (a2a.V1,)

    def __init__(self, host: str, port: int, log_dir: Path):
        self.host, self.port, self.log_dir = host, port, log_dir
        self.dir = Path(tempfile.mkdtemp(prefix="hikyaku-bench-embedded-", dir=log_dir))
        # `make run`'s environment: none of the production variables, the settings' defaults.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_", "CELERY_", "HIKYAKU_"))
        }
        env.update(
            {
                # A file of its own rather than the checkout's hikyaku.sqlite3 (same engine
                # and the same PRAGMAs: settings apply them to any SQLite database).
                "DATABASE_URL": f"sqlite:///{self.dir / 'hikyaku.sqlite3'}",
                "HIKYAKU_RATE_LIMIT_PER_MINUTE": "100000000",  # as for production, see server.py
                "HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE": "100000000",
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.env = env
        self.web: ServerProcess | None = None
        self.keys = 0

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        manage(self.env, "migrate", "--no-input", "-v0")
        cmd = testbed.uvicorn_argv(self.port, host=self.host, graceful_seconds=3)
        log = self.log_dir / "embedded.log"
        self.web = ServerProcess("embedded", cmd, self.env, self.base_url, log)
        self.web.start()

    def new_key(self) -> str:
        self.keys += 1
        created = manage(
            self.env, "createapikey", "--create", "--tenant", f"bench-{self.keys}", "--json"
        )
        return json.loads(created)["api_key"]

    def meter(self) -> CpuMeter:
        assert self.web is not None
        return CpuMeter(
            roots={"web": self.web.pid},
            database=None,
            count_reaped_postgres=False,
            redis_pids=set(),
        )

    def stop(self) -> None:
        if self.web is not None:
            self.web.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def describe(self) -> dict:
        return {
            "server": "uvicorn hikyaku.asgi:application (one process, as `make run`)",
            "database": "SQLite file (WAL, synchronous=FULL), in-memory channel layer, eager Celery",
            "settings": "defaults: DJANGO_DEBUG unset (off), request log on",
        }


def find_old_broker() -> Path | None:
    """old-broker.sh from $OLD_BROKER_DIR, else shared/tools/ beside the checkout (or above)."""
    if os.environ.get("OLD_BROKER_DIR"):
        script = Path(os.environ["OLD_BROKER_DIR"]) / "old-broker.sh"
        return script if script.exists() else None
    for parent in ROOT.parents:
        script = parent / "shared" / OLD_BROKER_SCRIPT
        if script.exists():
            return script
    return None


class OldBroker:
    name = "old"
    label = "old broker (FastAPI/uvicorn, Redis only, not durable)"
    dialects = (a2a.V03,)

    def __init__(self, script: Path, host: str, port: int, redis_port: int, log_dir: Path):
        self.script, self.host, self.port, self.redis_port = script, host, port, redis_port
        self.build_home = Path(
            os.environ.get("OLD_BROKER_HOME", Path.home() / ".cache" / "hikyaku-old")
        )
        # Its pid files live in $OLD_BROKER_HOME/run: a home of our own (sharing the built
        # venv) keeps anyone else's `old-broker.sh stop` away from the processes we start.
        self.home = Path(tempfile.mkdtemp(prefix="hikyaku-bench-old-", dir=log_dir))
        self.broker_pid = self.redis_pid = 0
        self.first_key = ""

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _run(self, *args: str, home: Path, timeout: float) -> str:
        out = subprocess.run(
            ["bash", str(self.script), *args],
            env={**os.environ, "OLD_BROKER_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if out.returncode != 0:
            raise RuntimeError(f"old-broker.sh {' '.join(args)} failed:\n{out.stdout}{out.stderr}")
        return out.stdout

    def built(self) -> bool:
        python = self.build_home / "venv" / "bin" / "python"
        return python.exists() and (
            subprocess.run([str(python), "-c", "import hikyaku_registry"]).returncode == 0
        )

    def build(self) -> None:
        print(f"Building the old broker in {self.build_home} (old-broker.sh build) ...", flush=True)
        self._run("build", home=self.build_home, timeout=900)

    def start(self) -> None:
        if not self.built():
            self.build()
        (self.home / "venv").symlink_to(self.build_home / "venv")
        if self.host != "127.0.0.1":
            raise SystemExit("old-broker.sh serves on 127.0.0.1 only")
        out = self._run("start", str(self.port), str(self.redis_port), home=self.home, timeout=60)
        fields = dict(word.split("=", 1) for word in out.split() if "=" in word)
        self.broker_pid, self.redis_pid = int(fields["broker_pid"]), int(fields["redis_pid"])
        self.first_key = fields["key"]
        if not testbed.ports.listening(self.port, self.host):
            raise RuntimeError(f"the old broker does not listen; see {self.home}/run")

    def new_key(self) -> str:
        if self.first_key:
            key, self.first_key = self.first_key, ""
            return key
        python = self.home / "venv" / "bin" / "python"
        mkkey = self.script.with_name("mkkey.py")
        out = subprocess.run(
            [str(python), str(mkkey), "--redis-url", f"redis://127.0.0.1:{self.redis_port}/0"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip().splitlines()[-1]

    def meter(self) -> CpuMeter:
        return CpuMeter(
            roots={"web": self.broker_pid},
            database=None,
            count_reaped_postgres=False,
            redis_pids={self.redis_pid},
        )

    def stop(self) -> None:
        for pid in (self.broker_pid, self.redis_pid):
            if pid:
                _stop_pid(pid)
        shutil.rmtree(self.home, ignore_errors=True)

    def describe(self) -> dict:
        return {
            "server": "uvicorn hikyaku_registry.main:app (one process), himkt/hikyaku e3bccb5",
            "database": "none: Redis only, without persistence (not durable)",
            "redis": f"private redis-server on port {self.redis_port}",
            "built_from": str(self.script.parent),
            "port": urlsplit(self.base_url).port,
        }
