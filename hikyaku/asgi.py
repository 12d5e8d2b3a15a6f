"""ASGI entry point: serves the whole broker (`make run`) and the stream processes.

A small path dispatcher in front of Django. Streams go to the lean handlers of
messaging.stream, which hold no thread per open stream (stock Django ASGI holds one per
streaming response: docs/MEASUREMENTS.md); everything else goes to Django's ASGI handler:

- `GET /api/v1/subscribe`                      → the agent's SSE inbox
- `GET /ui/t/<slug>/events/`, `GET /ui/t/<slug>/agents/<id>/events/`
                                                → the web UI's session streams
- `POST /` and `POST /a2a/` whose JSON-RPC method is SendStreamingMessage, SubscribeToTask,
  message/stream or tasks/resubscribe           → A2A streaming (the body is read and parsed
  here, by messaging/a2a/jsonrpc.py; any other request, a body that does not parse
  included, gets it replayed to Django unchanged, which answers it as a WSGI process would)
- `POST /a2a/agents/<id>/` with one of those methods
                                                → A2A streaming on an agent's own endpoint
                                                  (messaging/stream/peer.py), likewise
- `POST /a2a/agents/<id>/` with a SendMessage that waits for the agent's answer
                                                → the blocking send, waiting on the hub
                                                  (messaging/stream/answers.py), likewise
- `/mcp`                                        → MCP over Streamable HTTP (messaging/mcp_http.py)
- any other `POST /` and `POST /a2a/`, and      → the agents' hot path (hikyaku/lean.py) on a
  `GET /api/v1/agents`                            small pool of threads that keep their
                                                  database connections (HIKYAKU_API_THREADS)

The lifespan protocol starts and stops the per-process stream hub and the MCP session
manager (both also start lazily on first use, for servers without lifespan support).
"""

import asyncio
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.core.asgi import get_asgi_application

from hikyaku import client_address, heap
from hikyaku.sqlite_backup import hold_server_lock

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")
django_application = get_asgi_application()
# On the embedded SQLite default, `manage.py restore` refuses while this process runs.
hold_server_lock(settings.DATABASES["default"])

from hikyaku import error_pages, lean  # noqa: E402
from messaging import mcp_http  # noqa: E402  (needs the app registry set up above)
from messaging.a2a import jsonrpc  # noqa: E402
from messaging.stream import a2a, answers, inbox, peer, sse, web  # noqa: E402
from messaging.stream.db import ready_connection  # noqa: E402
from messaging.stream.hub import hub  # noqa: E402

log = logging.getLogger(__name__)

RPC_PATHS = ("/", "/a2a/")
# Cheap pre-check before parsing a body: every streaming method name contains one of these.
STREAMING_MARKERS = (b"tream", b"ubscribe")


async def _read_body(receive) -> tuple[bytes, list[dict]]:
    """The request body, and the messages read (to replay when the body is too large)."""
    chunks, messages, size = [], [], 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return b"", messages
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > settings.HIKYAKU_MAX_BODY_BYTES or not message.get("more_body"):
            return b"".join(chunks), messages


def _streaming_call(body: bytes) -> jsonrpc.Envelope | None:
    """The streaming request a body holds, or None for Django to answer: another method, or a
    body that is not one valid JSON-RPC request — which Django refuses with the parser and
    the answers of every other tier (messaging/a2a/jsonrpc.py)."""
    if len(body) > settings.HIKYAKU_MAX_BODY_BYTES:
        return None
    if not any(marker in body for marker in STREAMING_MARKERS):
        return None
    try:
        envelope = jsonrpc.parse(body)
    except jsonrpc.EnvelopeError:
        return None
    return envelope if envelope.streaming else None


async def _guarded(handler, scope, receive, send, *args) -> None:
    """Run a stream handler; should it fail before its answer started, answer as Django
    answers an unexpected error (hikyaku/error_pages.py), never in plain text."""
    started = False

    async def tracked(message: dict) -> None:
        nonlocal started
        started = started or message["type"] == "http.response.start"
        await send(message)

    try:
        await handler(scope, receive, tracked, *args)
    except Exception:
        log.exception("stream handler failed: %s %s", scope["method"], scope["path"])
        if started:
            raise
        await sse.send_json(send, 500, error_pages.machine_body(scope["path"], 500))


_api_pool: ThreadPoolExecutor | None = None
_api_pool_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """Threads for the hot path: a fixed few, each keeping its database connection (not a
    thread per request, as Django's ASGI handler starts: docs/MEASUREMENTS.md)."""
    global _api_pool
    if _api_pool is None:
        with _api_pool_lock:
            if _api_pool is None:
                _api_pool = ThreadPoolExecutor(
                    max_workers=settings.HIKYAKU_API_THREADS, thread_name_prefix="hikyaku-api"
                )
    return _api_pool


def _answer_in_thread(scope, headers: dict[str, str], body: bytes, address: str):
    ready_connection()
    return lean.answer(
        path=scope["path"],
        header=lambda name: headers.get(name.lower()),
        body=body,
        address=address,
        method=scope["method"],
        # As Django's ASGIRequest reads it (UTF-8), but never an error.
        query=scope.get("query_string", b"").decode(errors="replace"),
        signal=False,
    )


def _headers(scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


async def _lean(scope, body: bytes, send, headers: dict[str, str] | None = None) -> None:
    """Answer a hot-path request (hikyaku/lean.py)."""
    headers = headers if headers is not None else _headers(scope)
    loop = asyncio.get_running_loop()
    address = client_address.current.get() or client_address.from_scope(scope)
    served = await loop.run_in_executor(_pool(), _answer_in_thread, scope, headers, body, address)
    status, response_headers, out = served
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response_headers],
        }
    )
    await send({"type": "http.response.body", "body": out})


def _replay(messages: list[dict], receive):
    pending = list(messages)

    async def replayed():
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


async def _lifespan(receive, send) -> None:
    message = await receive()
    if message["type"] != "lifespan.startup":
        return
    phase = "startup"
    try:
        await hub.ensure_started()
        async with mcp_http.lifespan():
            await send({"type": "lifespan.startup.complete"})
            phase = "shutdown"
            while (await receive())["type"] != "lifespan.shutdown":
                pass
            await hub.stop()
    except Exception as exc:
        # A failure while stopping is a failed shutdown, not a failed startup.
        await send({"type": f"lifespan.{phase}.failed", "message": str(exc)})
        return
    await send({"type": "lifespan.shutdown.complete"})


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    # Each request runs in a task of its own, so this reaches only this request's handlers
    # (their authentication throttles failures per address: agents/limits.py).
    client_address.current.set(client_address.from_scope(scope))
    if mcp_http.handles(scope):
        await mcp_http.app(scope, receive, send)
        return
    if scope["type"] == "http":
        path, method = scope["path"], scope["method"]
        if path == "/api/v1/subscribe":
            await _guarded(inbox.subscribe, scope, receive, send)
            return
        if path.startswith("/ui/t/") and web.PATH.match(path) and method == "GET":
            await _guarded(web.tenant_stream, scope, receive, send)
            return
        peer_path = peer.PATH.match(path) if path.startswith("/a2a/agents/") else None
        if method == "POST" and (path in RPC_PATHS or peer_path):
            body, messages = await _read_body(receive)
            envelope = _streaming_call(body)
            if envelope is not None and peer_path:
                agent_id = peer_path["agent_id"]
                await _guarded(peer.agent_stream, scope, receive, send, envelope, agent_id)
                return
            if envelope is not None:
                await _guarded(a2a.jsonrpc_stream, scope, receive, send, envelope)
                return
            if not peer_path and lean.applies(method, path, len(body)):
                await _lean(scope, body, send)
                return
            fits = len(body) <= settings.HIKYAKU_MAX_BODY_BYTES
            waiting = answers.waiting_send(body, scope) if peer_path and fits else None
            if waiting is not None:
                await _guarded(
                    answers.agent_send, scope, receive, send, waiting, peer_path["agent_id"]
                )
                return
            receive = _replay(messages, receive)
        elif method == "GET" and (method, path) in lean.ROUTES:
            headers = _headers(scope)
            length = headers.get("content-length")
            declared = int(length) if length and length.isdigit() else None
            if "transfer-encoding" not in headers and lean.applies(
                method, path, declared, headers.get("host")
            ):
                await _lean(scope, b"", send, headers)
                return
    await django_application(scope, receive, send)


# Everything this process needs is loaded: keep it out of the collector's full passes.
heap.settle()
