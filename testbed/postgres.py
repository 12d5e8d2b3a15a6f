"""A private Postgres cluster (initdb in a temporary directory) that a test may crash.

The reliability scenarios restart it the way a crash does (`pg_ctl -m immediate`) while the
broker runs against it; /readyz's test takes it away and brings it back. The machine's own
Postgres is never touched. Postgres refuses to run as root, so as root its tools run as the
`postgres` user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .ports import free_port
from .process import wait_until

PG_BIN = Path(os.environ.get("HIKYAKU_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _as_postgres(argv: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return argv


class PostgresCluster:
    """Its database `hikyaku` is at `url`. `durable=False` turns fsync off (faster to start and
    write, for tests that do not crash it)."""

    def __init__(self, *, port: int | None = None, log: Path | None = None, durable: bool = True):
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="hikyaku-pg-"))
        self.data = self.dir / "data"
        self.log = log or self.dir / "postgres.log"
        self.durable = durable
        self.initialized = False

    @staticmethod
    def unavailable_reason() -> str | None:
        """None when a private cluster can run here, else why not (a skip reason)."""
        if not (PG_BIN / "initdb").exists():
            return f"Postgres server binaries are not installed in {PG_BIN}"
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                return "runuser is missing (needed to run Postgres as root's `postgres` user)"
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                return "no `postgres` user to run a private cluster as"
        return None

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/hikyaku"

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            _as_postgres(list(argv)), check=check, capture_output=True, timeout=120
        )

    def _ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), *args, check=check)

    def start(self) -> PostgresCluster:
        """Create the cluster and its database (first call), or start it again."""
        if self.initialized:
            self._ctl("-l", str(self.log), "-w", "start")
            return self
        self.log.parent.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            self.log.touch()
            shutil.chown(self.log, "postgres", "postgres")
        self._run(
            str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "-E", "UTF8", "--no-instructions",
        )  # fmt: skip
        durability = "on" if self.durable else "off"
        # In the configuration file, so every start and restart uses them.
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.dir}'\nmax_connections = 200\n"
                f"fsync = {durability}\nsynchronous_commit = {durability}\n"
            )
        self._ctl("-l", str(self.log), "-w", "start")
        self._run(
            str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
            "hikyaku",
        )  # fmt: skip
        self.initialized = True
        return self

    def crash(self) -> None:
        """Stop at once, without a checkpoint (`-m immediate`): recovery runs at the next start."""
        self._ctl("-m", "immediate", "-w", "stop")

    def start_again(self) -> None:
        self.start()

    def restart_immediate(self) -> float:
        """A crash, then recovery (`pg_ctl restart -m immediate`); the seconds it took."""
        started = time.monotonic()
        self._ctl("-m", "immediate", "-l", str(self.log), "-w", "restart")
        return time.monotonic() - started

    def destroy(self) -> None:
        if self.initialized:
            self._ctl("-m", "immediate", "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def query(self, sql: str, *params: Any) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.url.replace("postgres://", "postgresql://", 1)) as conn:
            return conn.execute(sql, params).fetchall()


def terminate_backends(cursor: Any, pids: list[int], *, timeout: float = 10.0) -> None:
    """Terminate these Postgres backends through `cursor` (any DB-API cursor on the same
    server) and wait until they have exited: `pg_terminate_backend` only signals, and the
    connections are gone — what a restart leaves — once the backends are."""
    cursor.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", [pids])

    def exited() -> bool:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids])
        return cursor.fetchone()[0] == 0

    wait_until(exited, timeout=timeout, interval=0.02, what=f"backends {pids} to exit")


def recreate_database(url: str, *, create: bool = True) -> None:
    """Drop the database `url` names, with its open connections, and (with `create`) make it
    again, empty; through the server's maintenance database `postgres`. For scratch databases
    of a test or a benchmark run only."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = sql.Identifier(parts.path.lstrip("/"))
    maintenance = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        if create:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(name))
