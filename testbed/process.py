"""A process we start, wait for, and stop: the one pattern every server here follows.

`Process` runs its command in a session (process group) of its own, so stopping it reaches
the workers it forked (granian's, Celery's pool) and nothing else, and a SIGKILL takes the
whole tree down at once, as a crashed container would. Its output goes to a log file, whose
tail is in the error when it exits before it is ready or never gets ready.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# A readiness check: true (any truthy value) once the process serves.
Ready = Callable[[], Any]


class ProcessError(RuntimeError):
    """A process exited early or did not get ready in time."""

    def __init__(self, message: str, *, exited: bool = False) -> None:
        super().__init__(message)
        self.exited = exited


def wait_until(
    predicate: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05
) -> Any:
    """Poll `predicate` until it returns something true (returned); TimeoutError after
    `timeout` seconds. Exceptions of the predicate propagate."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """The status of `GET url` (http:// only), or None when nothing answers. A plain
    http.client request: no proxy from the environment applies to loopback servers."""
    rest = url.split("://", 1)[1]
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    connection = http.client.HTTPConnection(host, int(port or 80), timeout=timeout)
    try:
        connection.request("GET", "/" + path)
        return connection.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def http_ok(url: str, accept: Sequence[int] = (200,)) -> Callable[[], bool]:
    """A readiness check: `GET url` answers one of `accept`."""
    return lambda: http_status(url) in accept


class Process:
    """One process tree that we started and are the only ones to stop.

    `own_session=False` keeps it in our process group (Ctrl-C in a terminal reaches it too, as
    the benchmarks want); stopping then signals the process itself, not a group."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
        log: Path | None = None,
        name: str | None = None,
        own_session: bool = True,
        preexec_fn: Callable[[], Any] | None = None,
        fresh_log: bool = False,
    ) -> None:
        self.argv = [str(part) for part in argv]
        self.env = dict(os.environ) if env is None else env
        self.cwd = cwd
        self.log = log
        self.name = name or Path(self.argv[0]).name
        self.own_session = own_session
        self.preexec_fn = preexec_fn
        self.fresh_log = fresh_log  # the first start truncates the log; restarts append
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    # Starting ------------------------------------------------------------------------------

    def spawn(self) -> Process:
        """Start the command without waiting for anything."""
        self.starts += 1
        if self.log is None:
            output: Any = subprocess.DEVNULL
            self.proc = self._popen(output)
        else:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            mode = "wb" if self.fresh_log and self.starts == 1 else "ab"
            with self.log.open(mode) as output:
                self.proc = self._popen(output)
        return self

    def _popen(self, output: Any) -> subprocess.Popen:
        return subprocess.Popen(
            self.argv,
            cwd=self.cwd,
            env=self.env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=self.own_session,
            preexec_fn=self.preexec_fn,
        )

    def start(self, ready: Ready | None = None, *, timeout: float = 60.0) -> Process:
        """Start the command and wait until `ready()` is true; ProcessError (with the log's
        tail) when the process exits first or `timeout` passes."""
        self.spawn()
        if ready is not None:
            self.wait_ready(ready, timeout=timeout)
        return self

    def wait_ready(self, ready: Ready, *, timeout: float = 60.0) -> None:
        def check() -> Any:
            if not self.alive:
                raise ProcessError(
                    f"{self.name} exited with {self.returncode} before it was ready{self.tail()}",
                    exited=True,
                )
            return ready()

        try:
            wait_until(check, timeout=timeout, what=f"{self.name} to be ready")
        except TimeoutError:
            self.stop()
            raise ProcessError(f"{self.name} was not ready in {timeout:g}s{self.tail()}") from None

    def tail(self, size: int = 3000) -> str:
        if self.log is None or not self.log.exists():
            return ""
        text = self.log.read_bytes()[-size:].decode("utf-8", "replace")
        return f" (see {self.log}):\n{text}"

    # State ---------------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    # Stopping ------------------------------------------------------------------------------

    def _signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        try:
            if self.own_session:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (to the whole group), then SIGKILL if it is still there after `timeout`."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL the process and everything in its group, at once."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self._signal(signal.SIGKILL)
        self.proc.wait(10)

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
