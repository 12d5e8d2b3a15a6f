"""MCP over Streamable HTTP at `/mcp` (docs/PROTOCOL.md §10): the `hikyaku-mcp` tools, served by the
broker so an MCP client needs no local process.

How to mount it (hikyaku/asgi.py does this): route HTTP requests for `/mcp` to `app`, and run
`lifespan()` once from the outer ASGI app's lifespan (the MCP session manager must be started
exactly once per process, before the first request):

    if scope["type"] == "lifespan":   await mcp_http.serve_lifespan(receive, send)
    elif mcp_http.handles(scope):     await mcp_http.app(scope, receive, send)
    else:                             await django_app(scope, receive, send)

A server that never sends lifespan events still works: the first request starts the manager.

Every request is authenticated before the MCP layer sees it, with the same function as every
other surface (`agents.auth.authenticate_agent`: `Bearer <agent token>`, or the tenant key plus
`X-Agent-Id`), and answered 401 with `WWW-Authenticate: Bearer` otherwise. The Host header is
checked against ALLOWED_HOSTS here (this path bypasses Django's request handling), so the MCP
SDK's own localhost-only DNS-rebinding guard is off: bearer credentials are never sent by a
browser on its own, so a rebinding page cannot use them.

The tools are `hikyaku_client.mcp_tools`, the very functions of the stdio server, worded for this
surface (`mcp_profiles.HTTP`: no buffer, credentials from headers) and limited to the profile
`HIKYAKU_MCP_TOOLS` names in the broker's environment. Each tool call
runs on a `HikyakuClient` whose transport calls the broker's WSGI app in-process with the
caller's own credentials, so MCP goes through exactly the same views, services, limits and
policy as REST and JSON-RPC. The server is stateless (`stateless_http`, JSON responses): any
process can answer any request, and `poll` answers "what is waiting for you" from the
database, since there is no per-session stream to buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
from django.conf import settings
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.http.request import split_domain_port, validate_host
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.authentication import AuthCredentials

from agents.auth import AgentIdentity, authenticate_agent, bearer_secret
from hikyaku import client_address
from hikyaku.errors import HikyakuError, InvalidRequest
from hikyaku_client.config import Credentials
from hikyaku_client.http import HikyakuClient
from hikyaku_client.mcp_profiles import HTTP, select_tools
from hikyaku_client.mcp_tools import StatelessSession, build_server

from .stream import sse

log = logging.getLogger(__name__)

PATH = "/mcp"


def handles(scope: dict[str, Any]) -> bool:
    """Whether an ASGI scope is an HTTP request for the MCP endpoint."""
    return scope["type"] == "http" and scope["path"].rstrip("/") == PATH


class InProcessTransport(httpx.AsyncBaseTransport):
    """An httpx transport that answers from the broker's own WSGI app, in a worker thread.

    Request/response views cost far less CPU under WSGI than under Django's ASGI handler
    (docs/MEASUREMENTS.md), and a worker thread keeps the event loop free while the view runs."""

    def __init__(self, *, remote_addr: str = "127.0.0.1") -> None:
        # The outer request's client: per-address limits count it, not this process.
        self._wsgi = httpx.WSGITransport(app=_wsgi_app(), remote_addr=remote_addr)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        sync_request = httpx.Request(
            request.method, request.url, headers=request.headers, content=body
        )

        def call() -> tuple[int, list[tuple[bytes, bytes]], bytes]:
            response = self._wsgi.handle_request(sync_request)
            return response.status_code, response.headers.raw, response.read()

        status, headers, content = await anyio.to_thread.run_sync(call)
        return httpx.Response(status, headers=headers, content=content)


_wsgi = None


def _wsgi_app():
    global _wsgi
    if _wsgi is None:
        _wsgi = get_wsgi_application()
    return _wsgi


@contextlib.asynccontextmanager
async def _resolve(ctx: Context) -> AsyncIterator[StatelessSession]:
    """The session of one tool call: the caller's credentials, forwarded in-process."""
    request = ctx.request_context.request
    if request is None:  # not reachable over HTTP; guards against a misconfigured transport
        raise RuntimeError("The /mcp tools need the HTTP request.")
    user = request.scope.get("user")
    agent_id = user.access_token.subject if isinstance(user, AuthenticatedUser) else None
    secret = bearer_secret(request.headers.get("authorization"))
    token = secret if secret.startswith("hka_") else None
    credentials = Credentials(
        url=f"{request.url.scheme}://{request.headers.get('host', 'localhost')}",
        api_key=None if token else secret,
        agent_token=token,
        agent_id=agent_id or request.headers.get("x-agent-id"),
    )
    # The in-process request is seen as the outer one was (https behind a TLS proxy).
    proto = request.headers.get("x-forwarded-proto") or request.url.scheme
    client = HikyakuClient(
        credentials,
        transport=InProcessTransport(remote_addr=client_address.from_scope(request.scope)),
        retries=0,
        headers={"X-Forwarded-Proto": proto},
    )
    try:
        yield StatelessSession(client)
    finally:
        await client.aclose()


class _Holder:
    server: MCPServer | None = None
    running = False
    lock: asyncio.Lock | None = None
    background: asyncio.Task[None] | None = None


_state = _Holder()


def _new_server() -> MCPServer:
    # A bad HIKYAKU_MCP_TOOLS raises here, at startup (lifespan.startup.failed), not per request.
    server = build_server(_resolve, surface=HTTP, tools=select_tools(settings.HIKYAKU_MCP_TOOLS))
    # Creates the session manager; the Starlette app it returns is not used (we mount ourselves).
    server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        max_request_body_size=settings.HIKYAKU_MAX_BODY_BYTES,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return server


@contextlib.asynccontextmanager
async def lifespan() -> AsyncIterator[None]:
    """Run the MCP session manager; enter once per process, from the outer app's lifespan."""
    if _state.running:
        raise RuntimeError("The /mcp session manager is already running in this process.")
    server = _new_server()
    _state.server, _state.running = server, True
    try:
        async with server.session_manager.run():
            yield
    finally:
        _state.server, _state.running = None, False


async def serve_lifespan(receive: Any, send: Any) -> None:
    """Speak the ASGI lifespan protocol around `lifespan()` (for an app with no other
    lifespan work)."""
    message = await receive()
    if message["type"] != "lifespan.startup":
        return
    try:
        async with lifespan():
            await send({"type": "lifespan.startup.complete"})
            message = await receive()
    except Exception as exc:
        log.exception("MCP session manager failed")
        await send({"type": "lifespan.startup.failed", "message": str(exc)})
        return
    await send({"type": "lifespan.shutdown.complete"})


async def _ensure_running() -> MCPServer:
    """The running server; started here, for good, if the outer server sent no lifespan."""
    if _state.running and _state.server is not None:
        return _state.server
    if _state.lock is None:
        _state.lock = asyncio.Lock()
    async with _state.lock:
        if not _state.running:
            started = asyncio.Event()

            async def run_forever() -> None:
                async with lifespan():
                    started.set()
                    await asyncio.Event().wait()

            _state.background = asyncio.get_running_loop().create_task(run_forever())
            await started.wait()
    assert _state.server is not None
    return _state.server


def _authenticate(authorization: str | None, agent_id: str | None) -> AgentIdentity:
    """Runs in a worker thread: the ORM is synchronous. Closes the thread's connections as a
    request would, so idle worker threads do not hold database connections."""
    close_old_connections()
    try:
        identity = authenticate_agent(authorization=authorization, agent_id=agent_id)
        # Touch the related rows now, inside this thread, not later from the event loop.
        str(identity.tenant.pk), str(identity.agent.pk)
        return identity
    finally:
        close_old_connections()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The `/mcp` endpoint (ASGI, HTTP scopes only)."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    host, _port = split_domain_port(headers.get("host", ""))
    if not host or not validate_host(host, settings.ALLOWED_HOSTS):
        await sse.send_error(send, InvalidRequest("Invalid Host header."))
        return
    try:
        identity = await anyio.to_thread.run_sync(
            _authenticate, headers.get("authorization"), headers.get("x-agent-id")
        )
    except HikyakuError as exc:
        await sse.send_error(send, exc)
        return
    # Who the request is: the SDK binds sessions to it, and the tools read the agent id from it.
    scope["user"] = AuthenticatedUser(
        AccessToken(
            token=identity.credential_hash,
            client_id=str(identity.tenant.pk),
            subject=str(identity.agent.pk),
            scopes=[],
        )
    )
    scope["auth"] = AuthCredentials([])
    server = await _ensure_running()
    await server.session_manager.handle_request(scope, receive, send)
