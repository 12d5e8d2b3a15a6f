"""The client package's errors: one hierarchy, each error one readable line."""

from __future__ import annotations

import socket
from typing import Any

import httpx


class HikyakuError(Exception):
    """Anything that went wrong talking to the broker; `str()` is one readable line."""

    def __init__(self, message: str, *, code: str | int | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status

    def __str__(self) -> str:
        return self.message


class ConfigurationError(HikyakuError):
    """A missing or malformed setting (environment variable or option)."""


class ConnectionFailed(HikyakuError):
    """The broker could not be reached; the message names the URL that was tried."""


class AuthenticationFailed(HikyakuError):
    """HTTP 401: the key or token is missing, invalid, revoked or expired."""


class BrokerError(HikyakuError):
    """The broker refused the request (REST error envelope or JSON-RPC error object)."""


def error_from_response(response: httpx.Response) -> HikyakuError:
    """Translate a REST error envelope (or anything else) into one readable error."""
    code: str | None = None
    message = ""
    try:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            code = error.get("code")
            message = str(error.get("message") or "")
            details = error.get("details")
            if isinstance(details, dict) and details:
                fields = "; ".join(
                    f"{field}: {' '.join(map(str, msgs)) if isinstance(msgs, list) else msgs}"
                    for field, msgs in details.items()
                )
                message = f"{message} ({fields})" if message else fields
        elif isinstance(error, str):
            message = error
    except ValueError:
        pass
    if not message:
        message = response.reason_phrase or f"HTTP {response.status_code}"
    label = f"HTTP {response.status_code}" + (f" {code}" if code else "")
    cls = AuthenticationFailed if response.status_code == 401 else BrokerError
    return cls(f"{message} [{label}]", code=code, status=response.status_code)


def rpc_error(error: Any) -> BrokerError:
    if not isinstance(error, dict):
        return BrokerError(f"Malformed JSON-RPC error: {error!r}")
    code = error.get("code")
    message = str(error.get("message") or "JSON-RPC error")
    return BrokerError(f"{message} [JSON-RPC {code}]", code=code)


def describe_transport_error(exc: BaseException) -> str:
    """A short reason for a transport failure ("connection refused", "unknown host", …)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return "unknown host"
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror.lower()
        seen = seen.__cause__ or seen.__context__
    text = str(exc).strip()
    if "Connection refused" in text or "Errno 111" in text:
        return "connection refused"
    if "Name or service not known" in text or "nodename nor servname" in text:
        return "unknown host"
    return text.splitlines()[0] if text else type(exc).__name__
