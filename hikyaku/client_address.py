"""The client's address, and the request being handled's, for limits that are per address.

`from_meta` is the rule (docs/PEERS.md): the connection's peer, or the entry
HIKYAKU_TRUSTED_PROXY_HOPS from the end of X-Forwarded-For (each trusted proxy appends the
address it saw). `current` holds the address of the request this code runs for: set by
`client_address_middleware` for everything Django serves and by hikyaku.asgi for the
streams it serves itself, so authentication can throttle failures per address
(agents.auth) without every surface passing the address along.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.utils.decorators import sync_and_async_middleware

current: ContextVar[str | None] = ContextVar("hikyaku_client_address", default=None)


def from_meta(meta: Mapping[str, str]) -> str:
    """The client's address from a WSGI environ or a request's META."""
    hops = settings.HIKYAKU_TRUSTED_PROXY_HOPS
    if hops > 0:
        forwarded = [a.strip() for a in meta.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        forwarded = [a for a in forwarded if a]
        if len(forwarded) >= hops:
            return forwarded[-hops]
    return meta.get("REMOTE_ADDR") or "unknown"


def from_scope(scope: Mapping[str, Any]) -> str:
    """The client's address from an ASGI scope."""
    client = scope.get("client")
    meta = {"REMOTE_ADDR": client[0] if client else ""}
    for name, value in scope.get("headers") or ():
        if name == b"x-forwarded-for":
            meta["HTTP_X_FORWARDED_FOR"] = value.decode("latin-1")
            break
    return from_meta(meta)


@sync_and_async_middleware
def client_address_middleware(get_response: Callable) -> Callable:
    """Set `current` for the request (sync and async capable: no thread hop under ASGI)."""
    if iscoroutinefunction(get_response):

        async def middleware_async(request):
            token = current.set(from_meta(request.META))
            try:
                return await get_response(request)
            finally:
                current.reset(token)

        return middleware_async

    def middleware(request):
        token = current.set(from_meta(request.META))
        try:
            return get_response(request)
        finally:
            current.reset(token)

    return middleware
