"""Database work for the stream handlers: a small bounded thread pool, never a thread per stream.

The ORM is synchronous and Django connections belong to threads, so every query of a stream
runs through `run_db` on one of a few worker threads (HIKYAKU_STREAM_DB_THREADS). Each worker
keeps its connection between calls: nothing in these threads fires Django's
request_started/finished signals, so CONN_MAX_AGE=0 does not apply to them and a process holds
at most that many connections whatever its number of streams. A connection the database
closed while it sat idle (a restart, pg_terminate_backend, an idle timeout) is noticed before
the next call without a round trip and replaced; one broken during a read is closed and the
read retried once on a fresh one.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import select
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection

log = logging.getLogger(__name__)

T = TypeVar("T")

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        with _executor_lock:
            if _executor is None:
                _executor = ThreadPoolExecutor(
                    max_workers=settings.HIKYAKU_STREAM_DB_THREADS,
                    thread_name_prefix="hikyaku-stream-db",
                )
    return _executor


def ready_connection() -> None:
    """For a thread that keeps its connection across calls, before each call: what
    close_old_connections() does, minus the CONN_MAX_AGE expiry (a connection an error left
    unusable is closed, to be opened again by the next query), plus closing a connection the
    server has hung up on since its last use."""
    if connection.errors_occurred:
        if connection.connection is not None and connection.is_usable():
            connection.errors_occurred = False
        else:
            connection.close()
    elif _hung_up():
        log.info("the database closed an idle connection; opening a new one")
        connection.close()


def _hung_up() -> bool:
    """Whether an idle Postgres connection has something to read. Between calls nothing is
    owed to it, so a readable socket is the server's goodbye (the FATAL message a terminated
    backend sends, or the end of the stream): a poll of the socket, no round trip, where
    Django's health check would cost a `SELECT 1` per call."""
    raw = connection.connection
    if raw is None or connection.vendor != "postgresql" or connection.in_atomic_block:
        return False
    try:
        if raw.closed:
            return True
        # poll, not select: a stream process holding thousands of sockets has fds past 1024.
        poller = select.poll()
        poller.register(raw.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


def _call(fn: Callable[..., T], args: tuple, retry: bool) -> T:
    ready_connection()
    try:
        return fn(*args)
    except (OperationalError, InterfaceError):
        # Typically a connection the database closed (restart, failover, idle timeout).
        connection.close()
        if not retry:
            raise
        log.info("stream database connection was broken; retrying on a new one")
        return fn(*args)


async def run_db(fn: Callable[..., T], *args: Any, retry: bool = True) -> T:
    """Run `fn(*args)` on a stream DB thread. Pass retry=False for writes.

    A plain executor call rather than asgiref's sync_to_async, whose bookkeeping cost about
    as much CPU as a stream's whole read: Django's database connections are true thread
    locals (not context-local). The caller's context variables (the client's address, which
    authentication throttles by) go along: copying a context costs next to nothing."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    return await loop.run_in_executor(executor(), context.run, _call, fn, args, retry)


# The inbox read on the event loop ------------------------------------------------------------


@functools.cache
def on_postgres() -> bool:
    """Whether the database is Postgres, whose driver can read on the loop (`loop_fetch`);
    SQLite's reads stay on the DB threads. Asked once: on the loop every `connection.x` goes
    through a thread-local lookup."""
    return connection.vendor == "postgresql"


class _Socket:
    """A Postgres connection's socket as the loop watches it: registered for reading once and
    left registered between statements, where psycopg's own asyncio wait adds and removes a
    reader (two epoll changes, a selector lookup that fails by exception, a timer) for every
    wait — about a tenth of a live event's CPU here.

    The socket also turns readable between statements (a message that came after a
    statement's result, a notice, the server's goodbye before a restart): libpq takes in what
    came, and keeps it for the next statement; if the server hung up, the watch is dropped,
    or the loop would be woken on every turn, and the next statement finds the connection
    broken."""

    def __init__(self, loop: asyncio.AbstractEventLoop, pgconn: Any) -> None:
        self.loop, self.pgconn, self.fileno = loop, pgconn, pgconn.socket
        self.watching = False
        self.future: asyncio.Future[int] | None = None

    def _ready(self, state: int) -> None:
        future = self.future
        if future is None:
            if state == _READY_R:
                try:
                    # Between statements: take what came off the socket (libpq keeps it
                    # for the next statement), so it does not stay readable.
                    self.pgconn.consume_input()
                except Exception:  # the server hung up
                    self.unwatch()
        elif not future.done():
            future.set_result(state)
        # else: the loop polled again before the waiting statement ran on; it reads next.

    def unwatch(self) -> None:
        if self.watching:
            self.loop.remove_reader(self.fileno)
            self.watching = False

    async def run(self, gen: Any) -> Any:
        """What psycopg's wait does with one of its generators (it yields what to wait for
        and is sent what is ready), until it returns."""
        try:
            state = next(gen)
            while True:
                ready = _poll(self.fileno, state)
                if not ready:
                    ready = await self._wait(state)
                state = gen.send(ready)
        except StopIteration as stop:
            return stop.value
        except OSError as exc:
            raise psycopg.OperationalError("connection socket closed") from exc

    async def _wait(self, state: int) -> int:
        if not self.watching:
            self.loop.add_reader(self.fileno, self._ready, _READY_R)
            self.watching = True
        if state & _WAIT_W:  # a full send buffer: rare, watched for this wait only
            self.loop.add_writer(self.fileno, self._ready, _READY_W)
        self.future = self.loop.create_future()
        try:
            return await self.future
        finally:
            self.future = None
            if state & _WAIT_W:
                self.loop.remove_writer(self.fileno)


_WAIT_R, _WAIT_W = psycopg.waiting.WAIT_R, psycopg.waiting.WAIT_W
_READY_R, _READY_W = psycopg.waiting.READY_R, psycopg.waiting.READY_W


def _poll(fileno: int, state: int) -> int:
    """What of `state` (psycopg's Wait flags) the socket can do now, without waiting: a
    write nearly always can, so a write does not go round the loop."""
    if not state & _WAIT_W:
        return 0
    poller = select.poll()
    poller.register(fileno, (select.POLLIN if state & _WAIT_R else 0) | select.POLLOUT)
    ready = 0
    for _, events in poller.poll(0):
        if events & (select.POLLIN | select.POLLERR | select.POLLHUP):
            ready |= _READY_R
        if events & select.POLLOUT:
            ready |= _READY_W
    return ready & state


class _LoopConnection:
    """One psycopg AsyncConnection per stream process, used by one read at a time (the hub
    reads the woken inbox streams batch after batch). It is opened with the parameters and
    the type adapters of Django's own connections, so rows come back exactly as a DB thread
    would read them. Autocommit: each statement is its own snapshot, as on the DB threads."""

    def __init__(self) -> None:
        self._conn: Any = None
        # One cursor for the connection's life: it keeps the type adapters it looked up, which
        # a new cursor per read would look up again.
        self._cursor: Any = None
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one both belong to

    async def _connect(self) -> Any:
        params = dict(connection.get_connection_params())
        params.pop("cursor_factory", None)  # the async default binds parameters server-side
        conn = await _PgConnection.connect(**params, autocommit=True)
        if connection.timezone_name is not None:
            await conn.execute(
                "SELECT set_config('TimeZone', %s, false)", [connection.timezone_name]
            )
        conn.watch(asyncio.get_running_loop())
        return conn

    async def close(self) -> None:
        conn, self._conn, self._cursor = self._conn, None, None
        if conn is not None:
            conn.unwatch()  # before its socket is closed
            try:
                await conn.close()
            except Exception:  # noqa: S110 - it is being thrown away
                pass

    async def fetchall(self, sql: str, params: list[Any]) -> list[tuple]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # A new loop (a server started again in the same process): the old connection
            # belonged to the old loop and is left to be collected.
            self._conn = self._cursor = None
            self._lock, self._loop = asyncio.Lock(), loop
        async with self._lock:
            for attempt in (1, 2):
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = await self._connect()
                        self._cursor = self._conn.cursor()
                    await self._cursor.execute(sql, params)
                    return await self._cursor.fetchall()
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    # Typically a connection the database closed (restart, failover, idle
                    # timeout): read again once on a new one, as the DB threads do.
                    await self.close()
                    if attempt == 2:
                        raise OperationalError(str(exc)) from exc
                    log.info("stream loop connection was broken; retrying on a new one")
                except psycopg.Error as exc:
                    raise DatabaseError(str(exc)) from exc
        raise AssertionError("unreachable")


class _PgConnection(psycopg.AsyncConnection):
    """An AsyncConnection whose statements wait through a `_Socket`."""

    _socket: _Socket | None = None

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        self._socket = _Socket(loop, self.pgconn)

    def unwatch(self) -> None:
        if self._socket is not None:
            self._socket.unwatch()
            self._socket = None

    async def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        if self._socket is None or timeout is not None:
            return await super().wait(gen, interval=interval, timeout=timeout)
        try:
            return await self._socket.run(gen)
        except BaseException:
            # Cancelled or failed half way through a statement: the connection's state is
            # unknown, so it is not used again.
            self.unwatch()
            self.pgconn.finish()
            raise


_loop_connection = _LoopConnection()


async def loop_fetch(sql: str, params: list[Any]) -> list[tuple]:
    """Every row of one statement, on the loop's own connection (Postgres only)."""
    return await _loop_connection.fetchall(sql, params)


async def close_loop_connection() -> None:
    await _loop_connection.close()
