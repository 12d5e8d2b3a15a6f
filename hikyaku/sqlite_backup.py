"""Online backup and offline restore of the embedded SQLite database.

`manage.py backup` and `manage.py restore` are thin wrappers over `backup_database` and
`restore_database`. Postgres deployments use pg_dump / pg_restore instead (README,
Operations).

How restore knows a server is running: every server process (hikyaku.wsgi, hikyaku.asgi, a
Celery worker or beat) holds a shared `flock` on `<database>-lock` for its whole life
(`hold_server_lock`), and restore needs that lock exclusively. The kernel drops the lock when
a process dies, even by SIGKILL, so there is no stale pid file to clean up, and a server that
starts during a restore waits for it to finish. Restore also takes SQLite's own exclusive
lock, which catches any other process (a `manage.py shell`, say) that has a transaction open.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO
from urllib.parse import quote

SQLITE_HEADER = b"SQLite format 3\x00"


class SqliteOpsError(Exception):
    """A backup or restore that was refused or failed; the message says why and what to do."""


@dataclass(frozen=True)
class BackupResult:
    path: Path
    size: int


@dataclass(frozen=True)
class RestoreResult:
    restored: Path
    replaced: Path | None  # where the previous database was kept, if there was one


# --- Which database ------------------------------------------------------------------------


def sqlite_path(database: dict) -> Path | None:
    """The file of a Django DATABASES entry, or None when it is not an SQLite file."""
    if not database.get("ENGINE", "").endswith("sqlite3"):
        return None
    name = str(database.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    return Path(name)


def lock_path(database: Path) -> Path:
    # "-lock" like SQLite's own "-wal"/"-shm" companions (and ignored by git the same way).
    return database.with_name(database.name + "-lock")


# --- The server lock -----------------------------------------------------------------------

_held: IO[bytes] | None = None


def hold_server_lock(database: dict) -> None:
    """Mark this process as a server of `database` until it exits (module docstring).

    Blocks while a restore is in progress. A no-op for anything but an SQLite file, and when
    the process already holds it. Forked children (granian, Celery prefork) share the lock.
    """
    global _held
    path = sqlite_path(database)
    if path is None or _held is not None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(lock_path(path), "ab")  # noqa: SIM115 - held for the life of the process
    fcntl.flock(handle.fileno(), fcntl.LOCK_SH)
    _held = handle


def _take_exclusive_lock(path: Path) -> IO[bytes]:
    handle = open(lock_path(path), "ab")  # noqa: SIM115 - closed by the caller
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise SqliteOpsError(
            f"Refusing to restore: a Hikyaku server or worker is running on {path} "
            "(it holds the server lock). Stop every web, stream, worker and beat process, "
            "then run restore again."
        ) from None
    return handle


# --- Helpers -------------------------------------------------------------------------------


def _connect_existing(path: Path, *, timeout: float) -> sqlite3.Connection:
    """Open a database that must already exist (a plain connect would create an empty one)."""
    return sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=rw", uri=True, timeout=timeout)


def integrity_problems(connection: sqlite3.Connection) -> list[str]:
    rows = connection.execute("PRAGMA integrity_check").fetchall()
    problems = [row[0] for row in rows]
    return [] if problems == ["ok"] else problems


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy(source: sqlite3.Connection, target_path: Path) -> None:
    """Copy `source` into a new self-contained file (rollback journal, not WAL) and check it.

    One backup step (pages=-1) copies the whole database under a single read transaction, so
    the copy is a consistent snapshot even while servers keep writing (WAL readers do not
    block writers).
    """
    target = sqlite3.connect(target_path)
    try:
        source.backup(target, pages=-1)
        target.execute("PRAGMA journal_mode=DELETE")
        problems = integrity_problems(target)
        if problems:
            raise SqliteOpsError("The copy failed its integrity check: " + "; ".join(problems[:5]))
    finally:
        target.close()
    _fsync_file(target_path)


def _partial_name(final: Path) -> Path:
    return final.with_name(f".{final.name}.partial-{os.getpid()}")


# --- Backup --------------------------------------------------------------------------------


def backup_database(*, database: Path, target: Path) -> BackupResult:
    """Write a consistent, integrity-checked snapshot of `database` to the new file `target`.

    Never overwrites: `target` must not exist, and if it appears while the copy runs the
    snapshot is discarded.
    """
    if not database.is_file():
        raise SqliteOpsError(f"There is no database at {database} to back up.")
    if target.exists() or target.is_symlink():
        raise SqliteOpsError(f"{target} already exists; a backup never overwrites a file.")
    if not target.parent.is_dir():
        raise SqliteOpsError(f"The directory {target.parent} does not exist.")
    partial = _partial_name(target)
    try:
        source = _connect_existing(database, timeout=30)
        try:
            _copy(source, partial)
        finally:
            source.close()
        try:
            os.link(partial, target)  # atomic, and fails instead of replacing an existing file
        except FileExistsError:
            raise SqliteOpsError(
                f"{target} appeared while the backup ran; it was left untouched."
            ) from None
        _fsync_dir(target.parent)
        return BackupResult(path=target, size=target.stat().st_size)
    except sqlite3.Error as exc:
        raise SqliteOpsError(f"Backup failed: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)


# --- Restore -------------------------------------------------------------------------------


def check_backup_file(path: Path) -> sqlite3.Connection:
    """Open a backup for reading after checking it is an intact Hikyaku database.

    Returns an open connection (the caller closes it) so the caller can inspect it further.
    """
    if not path.is_file():
        raise SqliteOpsError(f"There is no file at {path}.")
    with open(path, "rb") as handle:
        if handle.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            raise SqliteOpsError(f"{path} is not an SQLite database.")
    try:
        connection = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        problems = integrity_problems(connection)
    except sqlite3.DatabaseError as exc:
        raise SqliteOpsError(f"{path} failed its integrity check: {exc}") from None
    if problems:
        connection.close()
        raise SqliteOpsError(f"{path} failed its integrity check: " + "; ".join(problems[:5]))
    has_migrations = connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'django_migrations'"
    ).fetchone()
    if not has_migrations:
        connection.close()
        raise SqliteOpsError(f"{path} is not a Hikyaku database (it has no migration history).")
    return connection


def _aside_name(database: Path, now: datetime) -> Path:
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    candidate = database.with_name(f"{database.stem}.replaced-{stamp}{database.suffix}")
    counter = 1
    while candidate.exists():
        candidate = database.with_name(
            f"{database.stem}.replaced-{stamp}-{counter}{database.suffix}"
        )
        counter += 1
    return candidate


def restore_database(*, database: Path, backup: Path, now: datetime | None = None) -> RestoreResult:
    """Replace `database` with a copy of `backup`; keep the replaced file aside.

    Refuses while any server holds the database (module docstring) and when the backup fails
    its checks. The backup file itself is only read.
    """
    now = now or datetime.now(UTC)
    if database.exists() and backup.exists() and database.samefile(backup):
        raise SqliteOpsError("That is the live database itself; pass a backup file.")
    check_backup_file(backup).close()
    database.parent.mkdir(parents=True, exist_ok=True)
    lock = _take_exclusive_lock(database)
    try:
        if database.exists():
            _quiesce(database)
        partial = _partial_name(database)
        try:
            source = sqlite3.connect(f"file:{quote(str(backup.resolve()))}?mode=ro", uri=True)
            try:
                _copy(source, partial)
            finally:
                source.close()
            replaced = None
            if database.exists():
                replaced = _aside_name(database, now)
                os.rename(database, replaced)
                wal = Path(f"{database}-wal")
                if wal.exists():  # committed pages not yet in the main file belong with it
                    os.rename(wal, Path(f"{replaced}-wal"))
                Path(f"{database}-shm").unlink(missing_ok=True)
            os.replace(partial, database)
            _fsync_dir(database.parent)
        except sqlite3.Error as exc:
            raise SqliteOpsError(f"Restore failed: {exc}") from exc
        finally:
            partial.unlink(missing_ok=True)
        return RestoreResult(restored=database, replaced=replaced)
    finally:
        lock.close()


def _quiesce(database: Path) -> None:
    """Make sure nobody is inside a transaction, and fold the WAL into the main file."""
    try:
        connection = _connect_existing(database, timeout=0.5)
    except sqlite3.Error as exc:
        raise SqliteOpsError(f"Cannot open the live database {database}: {exc}") from exc
    try:
        connection.execute("BEGIN EXCLUSIVE")
        connection.execute("ROLLBACK")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.OperationalError:
        raise SqliteOpsError(
            f"Refusing to restore: another process has {database} open in a transaction. "
            "Stop it (a server, worker or shell) and run restore again."
        ) from None
    finally:
        connection.close()
