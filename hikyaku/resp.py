"""The little of Redis's wire protocol (RESP2) the request path speaks, both ways.

messaging.events publishes each doorbell with one PUBLISH written to a plain socket, the rate
limiter (tenants/ratelimit.py) adds its counts with INCRBY and EXPIRE on one, and the stream
processes' listener (messaging/stream/doorbells.py) reads the subscription with `parse`:
redis-py spent ~50 µs of CPU on a PUBLISH that costs ~8 µs on a socket of our own, a tenth
of a send's web CPU (docs/ARCHITECTURE.md, "Doorbell, not storage").
"""

from __future__ import annotations

import functools
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


def command(*parts: str | bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


@functools.cache
def server_at(url: str) -> Server | None:
    """`Server.from_url`, once per URL."""
    return Server.from_url(url)


class Incomplete(Exception):
    pass


def parse(buffer: bytes, at: int) -> tuple[Any, int]:
    """One RESP2 value from `buffer` at `at`: (value, next offset); Incomplete if it has not
    all arrived yet. An error reply is returned as a RuntimeError, not raised."""
    end = buffer.find(b"\r\n", at)
    if end < 0:
        raise Incomplete
    kind, line = buffer[at : at + 1], buffer[at + 1 : end]
    if kind == b"$":
        size = int(line)
        if size < 0:
            return None, end + 2
        stop = end + 2 + size
        if len(buffer) < stop + 2:
            raise Incomplete
        return buffer[end + 2 : stop], stop + 2
    if kind == b"*":
        items, offset = [], end + 2
        for _ in range(int(line)):
            item, offset = parse(buffer, offset)
            items.append(item)
        return items, offset
    if kind == b":":
        return int(line), end + 2
    if kind == b"-":
        return RuntimeError(line.decode(errors="replace")), end + 2
    return line, end + 2  # "+" simple string


@dataclass(frozen=True)
class Server:
    """Where a `redis://` or `rediss://` URL points, how to log in, and which database
    (`/5` or `?db=5`, as redis-py reads it) keys are in."""

    host: str
    port: int
    tls: bool
    auth: tuple[str, ...]  # AUTH's arguments; empty without a password
    db: int = 0

    @classmethod
    def from_url(cls, url: str) -> Server | None:
        """None for what a plain TCP connection cannot reach (a unix socket URL)."""
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            return None
        auth: tuple[str, ...] = ()
        if parts.password is not None:
            auth = (unquote(parts.password),)
            if parts.username:
                auth = (unquote(parts.username), *auth)
        # As redis-py reads it: `?db=` first, else the path.
        db = parse_qs(parts.query).get("db", [""])[0] or parts.path.strip("/")
        return cls(
            parts.hostname or "127.0.0.1",
            parts.port or 6379,
            parts.scheme == "rediss",
            auth,
            int(db) if db.isdigit() else 0,
        )

    def hello(self) -> bytes:
        """What a new connection sends first (AUTH when there is a password)."""
        return command("AUTH", *self.auth) if self.auth else b""


class Connection:
    """A blocking connection for one thread: commands out, one reply each, in order. It
    logs in and selects the URL's database first (keys live in one; PUBLISH ignores it)."""

    def __init__(self, server: Server, timeout: float) -> None:
        sock = socket.create_connection((server.host, server.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if server.tls:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=server.host)
            self.sock, self.buffer = sock, b""
            greeting = [server.hello()] if server.auth else []
            if server.db:
                greeting.append(command("SELECT", str(server.db)))
            if greeting:
                self.pipeline(*greeting)
        except BaseException:
            sock.close()
            raise

    def call(self, request: bytes) -> Any:
        """Send one command and return its reply; an error reply raises RuntimeError, a
        closed or silent connection OSError."""
        return self.pipeline(request)[0]

    def pipeline(self, *requests: bytes) -> list[Any]:
        """Send commands in one write and return their replies, in order. An error reply
        raises RuntimeError once every reply is read (the connection stays in step)."""
        self.sock.sendall(b"".join(requests))
        replies = [self._reply() for _ in requests]
        for reply in replies:
            if isinstance(reply, RuntimeError):
                raise reply
        return replies

    def _reply(self) -> Any:
        while True:
            if b"\r\n" in self.buffer:  # a reply may be whole (parse says)
                try:
                    value, offset = parse(self.buffer, 0)
                except Incomplete:
                    pass
                else:
                    self.buffer = self.buffer[offset:]
                    return value
            data = self.sock.recv(4096)
            if not data:
                raise ConnectionResetError("Redis closed the connection")
            self.buffer += data

    def close(self) -> None:
        self.sock.close()


class Kept(threading.local):
    """Each thread's connection to one Redis, kept for the thread's life (a few per web
    process: one per request thread). Commands on a kept connection that Redis dropped since
    (a restart, an idle timeout) are sent once more on a new one; after any other failure the
    connection's state is unknown, so it is closed and the failure raised."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.connection: Connection | None = None
        self.server: Server | None = None

    def pipeline(self, server: Server, *requests: bytes) -> list[Any]:
        if self.server != server:  # the URL changed (tests do that)
            self.drop()
        reused = self.connection is not None
        while True:
            if self.connection is None:
                self.connection = Connection(server, timeout=self.timeout)
                self.server = server
            try:
                return self.connection.pipeline(*requests)
            except BaseException as exc:
                self.drop()
                if not (reused and isinstance(exc, ConnectionError)):
                    raise
                reused = False

    def drop(self) -> None:
        connection, self.connection, self.server = self.connection, None, None
        if connection is not None:
            connection.close()
