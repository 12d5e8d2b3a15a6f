"""The broker's own processes, started as production and `make run` start them.

- `uvicorn_argv`: `hikyaku.asgi` under uvicorn — `make run`'s server and the stream tier.
- `granian_argv`: `hikyaku.wsgi` under granian in WSGI mode — the request/response tier.
- `celery_argv`: a Celery worker or beat.

`Server` runs one of the first two until `/healthz` answers; `Celery` waits for the line a
worker or beat logs once it is up. The caller gives the whole environment (the database,
Redis, the knobs of its test); nothing here reads the product's settings.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .ports import free_port
from .process import Process, ProcessError, Ready, http_ok

BIN = Path(sys.executable).parent
KINDS = ("uvicorn-asgi", "granian-wsgi")
# Request threads per production web process, as docker-compose.yml sets them
# (GRANIAN_BLOCKING_THREADS; tests/ops/test_deploy.py checks that they agree).
WEB_THREADS = 4


def uvicorn_argv(
    port: int,
    *,
    host: str = "127.0.0.1",
    app: str = "hikyaku.asgi:application",
    graceful_seconds: float = 1,
    extra: Sequence[str] = (),
) -> list[str]:
    return [
        sys.executable, "-m", "uvicorn", app, "--host", host, "--port", str(port),
        "--no-access-log", "--timeout-graceful-shutdown", f"{graceful_seconds:g}", *extra,
    ]  # fmt: skip


def granian_argv(
    port: int,
    *,
    host: str = "127.0.0.1",
    app: str = "hikyaku.wsgi:application",
    workers: int = 1,
    threads: int | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    argv = [
        str(BIN / "granian"), "--interface", "wsgi", "--host", host, "--port", str(port),
        "--workers", str(workers), "--no-ws",
    ]  # fmt: skip
    if threads is not None:
        argv += ["--blocking-threads", str(threads)]
    return [*argv, *extra, app]


def celery_argv(
    kind: str,
    *,
    name: str = "worker",
    queue: str | None = None,
    concurrency: int = 8,
    schedule: Path | None = None,
) -> list[str]:
    """A Celery process as `make cluster` and docker-compose.yml run it: deliveries wait on
    receivers, so the worker runs a pool of threads (docs/WEBHOOKS.md, Who delivers)."""
    assert kind in ("worker", "beat"), kind
    argv = [sys.executable, "-m", "celery", "-A", "hikyaku", kind, "--loglevel", "INFO"]
    if kind == "beat":
        return [*argv, "--schedule", str(schedule)] if schedule else argv
    argv += ["--hostname", f"{name}@%h", "--pool", "threads", "--concurrency", str(concurrency)]
    if queue:
        argv += ["--queues", queue]
    return [*argv, "--without-gossip", "--without-mingle", "--without-heartbeat"]


class Server(Process):
    """A broker server process (`kind` one of KINDS) on a loopback port, ready once `/healthz`
    answers 200. Without a `port` it takes a free one, and takes another if that one was
    lost to someone else before the server could bind it. Its output goes to `log`, else to
    `<log_dir>/<kind>-<port>.log`."""

    def __init__(
        self,
        *,
        env: dict[str, str],
        kind: str = "uvicorn-asgi",
        port: int | None = None,
        log_dir: Path | None = None,
        log: Path | None = None,
        workers: int = 1,
        threads: int | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        assert kind in KINDS, kind
        assert log is not None or log_dir is not None, "give the server a log file or folder"
        self.kind = kind
        self.fixed_log = log
        self.fixed_port = port is not None
        self.workers, self.threads, self.extra = workers, threads, tuple(extra)
        self.log_dir = log_dir
        super().__init__([], env=env, name=kind)
        self._use_port(port or free_port())

    def _use_port(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = self.fixed_log or self.log_dir / f"{self.kind}-{port}.log"
        if self.kind == "uvicorn-asgi":
            self.argv = uvicorn_argv(port, extra=self.extra)
        else:
            self.argv = granian_argv(
                port, workers=self.workers, threads=self.threads, extra=self.extra
            )

    def start(self, ready: Ready | None = None, *, timeout: float = 60.0) -> Server:
        """Start and wait for `/healthz`. A restart keeps the port (tests restart a server
        they killed and expect it where it was)."""
        may_move = not self.fixed_port and self.starts == 0
        for attempt in range(3):
            try:
                super().start(ready or http_ok(f"{self.url}/healthz"), timeout=timeout)
                return self
            except ProcessError as error:
                lost_port = error.exited and "address already in use" in str(error).lower()
                if not (may_move and lost_port and attempt < 2):
                    raise
                self._use_port(free_port())
        return self


class Celery(Process):
    """`celery -A hikyaku worker` or `beat`, in its own process group (a SIGKILL takes the
    worker's pool down with it). Ready once it logs that it is."""

    READY = {"worker": b" ready.", "beat": b"beat: Starting"}

    def __init__(
        self,
        *,
        kind: str,
        env: dict[str, str],
        log: Path,
        name: str = "worker",
        queue: str | None = None,
        concurrency: int = 8,
    ) -> None:
        self.kind = kind
        self.options = {"name": name, "queue": queue, "concurrency": concurrency}
        # Beat keeps its schedule in a folder of its own, made at start and removed at the end.
        self.dir: Path | None = None
        super().__init__(
            celery_argv(kind, **self.options), env=env, log=log, name=f"celery {kind} {name}"
        )

    def start(self, ready: Ready | None = None, *, timeout: float = 60.0) -> Celery:
        if self.kind == "beat" and self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="hikyaku-celery-"))
            self.argv = celery_argv("beat", schedule=self.dir / "celerybeat-schedule")
        offset = self.log.stat().st_size if self.log and self.log.exists() else 0

        def logged_ready() -> bool:
            return self.READY[self.kind] in self.log.read_bytes()[offset:]

        super().start(ready or logged_ready, timeout=timeout)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        super().stop(timeout)
        self._forget_schedule()

    def kill(self) -> None:
        super().kill()
        self._forget_schedule()

    def _forget_schedule(self) -> None:
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
