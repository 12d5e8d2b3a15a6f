"""Helpers for tests that run real server processes on loopback ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# The brief's port ranges for this suite: servers 8300-8399, private databases 16300-16399.
SERVER_PORTS = range(8300, 8400)
DATABASE_PORTS = range(16300, 16400)


def free_port(candidates: Sequence[int] = SERVER_PORTS) -> int:
    """A loopback port in `candidates` that nothing listens on right now."""
    start = os.getpid() % len(candidates)
    for offset in range(len(candidates)):
        port = candidates[(start + offset) % len(candidates)]
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {candidates}")


def free_ports(count: int, candidates: Sequence[int] = SERVER_PORTS) -> list[int]:
    """`count` distinct free ports (free_port alone returns the same one until it is bound)."""
    ports: list[int] = []
    for _ in range(count):
        ports.append(free_port([port for port in candidates if port not in ports]))
    return ports


def base_env(**overrides: str) -> dict[str, str]:
    """The test process's environment minus the database/redis choice, plus `overrides`."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "PROMETHEUS_MULTIPROC_DIR"}
    }
    env.update(overrides)
    return env


def manage(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"manage.py {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result


def wait_for_http(url: str, *, timeout: float = 30.0, process=None, accept=(200,)) -> None:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"server exited with {process.returncode} before {url} answered")
        try:
            response = httpx.get(url, timeout=2)
            if response.status_code in accept:
                return
            last = response.status_code
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer in {timeout}s (last: {last!r})")


@contextmanager
def running(
    command: Sequence[str], *, env: dict[str, str], log: Path, ready_url: str | None = None
) -> Iterator[subprocess.Popen]:
    """Run `command` in its own session; stop it (and its children) afterwards."""
    with open(log, "ab") as output:
        process = subprocess.Popen(
            list(command),
            cwd=REPO,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        if ready_url:
            try:
                wait_for_http(ready_url, process=process, accept=(200, 503))
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n--- log ---\n{log.read_text()[-4000:]}") from None
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen, timeout: float = 10.0) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout)


def granian_wsgi(port: int) -> list[str]:
    return [
        str(BIN / "granian"),
        "--interface",
        "wsgi",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-ws",
        "hikyaku.wsgi:application",
    ]
