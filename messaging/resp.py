"""The little of Redis's wire protocol (RESP2) the doorbell speaks, both ways.

messaging.events publishes each doorbell with one PUBLISH written to a plain socket, and the
stream processes' listener (messaging/stream/doorbells.py) reads the subscription with
`parse`: redis-py spent ~50 µs of CPU on a PUBLISH that costs ~8 µs on a socket of our own,
a tenth of a send's web CPU (docs/ARCHITECTURE.md, "Doorbell, not storage").
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit


def command(*parts: str | bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


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
    """Where a `redis://` or `rediss://` URL points, and how to log in."""

    host: str
    port: int
    tls: bool
    auth: tuple[str, ...]  # AUTH's arguments; empty without a password

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
        return cls(
            parts.hostname or "127.0.0.1", parts.port or 6379, parts.scheme == "rediss", auth
        )

    def hello(self) -> bytes:
        """What a new connection sends first (AUTH when there is a password)."""
        return command("AUTH", *self.auth) if self.auth else b""


class Connection:
    """A blocking connection for one thread: commands out, one reply each, in order."""

    def __init__(self, server: Server, timeout: float) -> None:
        sock = socket.create_connection((server.host, server.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if server.tls:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=server.host)
            self.sock, self.buffer = sock, b""
            hello = server.hello()
            if hello:
                self.call(hello)
        except BaseException:
            sock.close()
            raise

    def call(self, request: bytes) -> Any:
        """Send one command and return its reply; an error reply raises RuntimeError, a
        closed or silent connection OSError."""
        self.sock.sendall(request)
        while True:
            if b"\r\n" in self.buffer:  # a reply may be whole (parse says)
                try:
                    value, offset = parse(self.buffer, 0)
                except Incomplete:
                    pass
                else:
                    self.buffer = self.buffer[offset:]
                    if isinstance(value, RuntimeError):
                        raise value
                    return value
            data = self.sock.recv(4096)
            if not data:
                raise ConnectionResetError("Redis closed the connection")
            self.buffer += data

    def close(self) -> None:
        self.sock.close()
