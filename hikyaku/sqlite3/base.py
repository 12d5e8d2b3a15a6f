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

Statements' placeholders are converted to SQLite's once per statement text (`_qmark`), not
on every run, since every statement of a write transaction runs with that lock held.
"""

from __future__ import annotations

import functools
import threading

from django.db.backends.sqlite3 import base

WRITERS = threading.Lock()
# How long a transaction waits for the lock before it goes ahead into SQLite's own locking
# (whose wait is the `timeout` option).
WRITERS_TIMEOUT = 30.0


@functools.lru_cache(maxsize=512)
def _qmark(query: str) -> str:
    """Django's conversion of a statement's "format" placeholders (%s) to SQLite's "qmark"
    ones (?), kept per text: a regular expression over the whole text, run for every statement
    inside the write transaction otherwise. The texts a process runs are few (values are
    always parameters); past the bound they are converted again, never wrongly. Django's own
    conversion, which uses nothing of its cursor for this style."""
    return base.SQLiteCursorWrapper.convert_query(None, query)


class CursorWrapper(base.SQLiteCursorWrapper):
    def convert_query(self, query, *, param_names=None):
        if param_names is None:
            return _qmark(query)
        return super().convert_query(query, param_names=param_names)


class DatabaseWrapper(base.DatabaseWrapper):
    _holds_writers = False

    def create_cursor(self, name=None):
        return self.connection.cursor(factory=CursorWrapper)

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
