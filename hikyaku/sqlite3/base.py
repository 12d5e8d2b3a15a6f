"""Django's SQLite backend, with the writers of one process taking turns on a lock
(docs/ARCHITECTURE.md, "SQLite writers").

SQLite lets one connection at a time write. A transaction that finds the write lock taken
sleeps in SQLite's busy handler, in steps that grow to 100 ms, and tries again; under
concurrent sends in one server process those sleeps, not the writes (about a millisecond
each), made the slowest sends take hundreds of milliseconds. So a transaction first takes
this process's lock, which wakes the next waiter the moment the holder commits, and only
then runs `BEGIN IMMEDIATE`. Other processes (a management command, a second server) still
meet the busy handler, which stays the backstop: the lock orders this process's writers and
nothing relies on it for correctness. A waiter that has not had it after `WRITERS_TIMEOUT`
goes ahead anyway, so no thread ever waits on it for good.
"""

from __future__ import annotations

import threading

from django.db.backends.sqlite3 import base

WRITERS = threading.Lock()
# How long a transaction waits for the lock before it goes ahead into SQLite's own locking
# (whose wait is the `timeout` option).
WRITERS_TIMEOUT = 30.0


class DatabaseWrapper(base.DatabaseWrapper):
    _holds_writers = False

    def _start_transaction_under_autocommit(self) -> None:
        self._holds_writers = WRITERS.acquire(timeout=WRITERS_TIMEOUT)
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._release_writers()
            raise

    def _release_writers(self) -> None:
        if self._holds_writers:
            self._holds_writers = False
            WRITERS.release()

    def _commit(self) -> None:
        try:
            super()._commit()
        finally:
            self._release_writers()

    def _rollback(self) -> None:
        try:
            super()._rollback()
        finally:
            self._release_writers()

    def _close(self) -> None:
        try:
            super()._close()
        finally:
            self._release_writers()
