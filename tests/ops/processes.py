"""Helpers for the operations tests that run real server processes on loopback ports (the
processes themselves come from the process toolkit, testbed/)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from testbed import ROOT, Process, ProcessError, free_port, free_ports, http_ok
from testbed.broker import BIN, granian_argv

__all__ = ["BIN", "REPO", "base_env", "free_port", "free_ports", "granian_wsgi", "manage"]

REPO = ROOT


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


@contextmanager
def running(
    command: Sequence[str], *, env: dict[str, str], log: Path, ready_url: str | None = None
) -> Iterator[Process]:
    """Run `command` in its own session until `ready_url` answers (200 or 503: the process
    serves, whatever its readiness says); stop it (and its children) afterwards."""
    process = Process(command, env=env, log=log)
    try:
        process.start(http_ok(ready_url, (200, 503)) if ready_url else None, timeout=30)
    except ProcessError as error:
        raise AssertionError(str(error)) from None
    try:
        yield process
    finally:
        process.stop()


def granian_wsgi(port: int) -> list[str]:
    return granian_argv(port)
