"""One webhook POST through the SSRF guard, with a hard per-attempt deadline.

httpcore (httpx's transport layer) is used directly because it lets us plug in the network
backend: `GuardedBackend.connect_tcp` resolves the host once, refuses it unless every address
is allowed (agents/destinations.py), and connects to one of exactly those addresses. TLS still
verifies the certificate against the URL's host name (httpcore passes it as SNI after the
connection), so pinning the address changes nothing for HTTPS. Redirects are not followed
(a redirect is a failed attempt), and no proxy from the environment is used.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpcore

from agents.destinations import DestinationRefused, ResolutionFailed, resolve, split_url

MAX_RESPONSE_BYTES = 4096  # what the log keeps of an error response


@dataclass(frozen=True)
class Result:
    status: int | None  # HTTP status, None when no response came
    error: str  # "" on a 2xx
    outcome: str  # delivered, http_error, timeout, connection_error, refused

    @property
    def ok(self) -> bool:
        return self.outcome == "delivered"


class GuardedBackend(httpcore.SyncBackend):
    """Connects only to addresses the SSRF guard allows, resolved once per connection."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        last_error: Exception | None = None
        for _family, address in resolve(host, port):
            try:
                return super().connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last_error = exc
        assert last_error is not None
        raise last_error


_pool: httpcore.ConnectionPool | None = None
_pool_lock = threading.Lock()


def _connection_pool() -> httpcore.ConnectionPool:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = httpcore.ConnectionPool(
                    ssl_context=ssl.create_default_context(),
                    network_backend=GuardedBackend(),
                    max_connections=50,
                    keepalive_expiry=30,
                )
    return _pool


def post(url: str, *, body: bytes, headers: dict[str, str], timeout: float) -> Result:
    """POST `body`; never raises. The whole attempt (connect, send, wait for and read the
    response) is bounded by about `timeout` seconds: each step gets what is left of it."""
    try:
        split_url(url)
    except DestinationRefused as exc:
        return Result(None, str(exc), "refused")
    deadline = time.monotonic() + timeout

    def left() -> float:
        return max(0.05, deadline - time.monotonic())

    request_headers = [(k.encode(), v.encode()) for k, v in headers.items()]
    try:
        with _connection_pool().stream(
            "POST",
            url,
            headers=request_headers,
            content=body,
            extensions={
                "timeout": {"connect": left(), "read": left(), "write": left(), "pool": left()}
            },
        ) as response:
            received = b""
            for chunk in response.iter_stream():
                if time.monotonic() > deadline:
                    raise httpcore.ReadTimeout("response body too slow")
                if len(received) < MAX_RESPONSE_BYTES:
                    received += chunk[: MAX_RESPONSE_BYTES - len(received)]
            status = response.status
    except DestinationRefused as exc:
        return Result(None, str(exc), "refused")
    except ResolutionFailed as exc:  # transient as often as not: retried
        return Result(None, str(exc), "connection_error")
    except httpcore.TimeoutException as exc:
        return Result(None, f"timed out after {timeout:g}s ({exc.__class__.__name__})", "timeout")
    except (httpcore.NetworkError, httpcore.ProtocolError, OSError) as exc:
        return Result(None, f"{exc.__class__.__name__}: {exc}"[:500], "connection_error")
    except httpcore.UnsupportedProtocol as exc:
        return Result(None, str(exc), "refused")
    if 200 <= status < 300:
        return Result(status, "", "delivered")
    snippet = received.decode("utf-8", "replace").strip().replace("\n", " ")[:300]
    return Result(status, f"HTTP {status}" + (f": {snippet}" if snippet else ""), "http_error")
