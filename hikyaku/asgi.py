"""ASGI entry point: serves the whole broker (`make run`) and the stream processes.

A small path dispatcher in front of Django. Streams go to the lean handlers of
messaging.stream, which hold no thread per open stream (stock Django ASGI holds one per
streaming response: docs/MEASUREMENTS.md); everything else goes to Django's ASGI handler:

- `GET /api/v1/subscribe`                      → the agent's SSE inbox
- `GET /ui/t/<slug>/events/`, `GET /ui/t/<slug>/agents/<id>/events/`
                                                → the web UI's session streams
- `POST /` and `POST /a2a/` whose JSON-RPC method is SendStreamingMessage, SubscribeToTask,
  message/stream or tasks/resubscribe           → A2A streaming (the body is read here; any
  other request gets it replayed to Django unchanged)
- `POST /a2a/agents/<id>/` with one of those methods
                                                → A2A streaming on an agent's own endpoint
                                                  (messaging/stream/peer.py), likewise
- `POST /a2a/agents/<id>/` with a SendMessage that waits for the agent's answer
                                                → the blocking send, waiting on the hub
                                                  (messaging/stream/answers.py), likewise
- `/mcp`                                        → MCP over Streamable HTTP (messaging/mcp_http.py)

The lifespan protocol starts and stops the per-process stream hub and the MCP session
manager (both also start lazily on first use, for servers without lifespan support).
"""

import json
import os

from django.conf import settings
from django.core.asgi import get_asgi_application

from hikyaku.sqlite_backup import hold_server_lock

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")
django_application = get_asgi_application()
# On the embedded SQLite default, `manage.py restore` refuses while this process runs.
hold_server_lock(settings.DATABASES["default"])

from messaging import mcp_http  # noqa: E402  (needs the app registry set up above)
from messaging.stream import a2a, answers, inbox, peer, web  # noqa: E402
from messaging.stream.hub import hub  # noqa: E402

RPC_PATHS = ("/", "/a2a/")
# Cheap pre-check before decoding a body: every streaming method name contains one of these.
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


def _streaming_call(body: bytes) -> dict | None:
    if not any(marker in body for marker in STREAMING_MARKERS):
        return None
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(payload, dict) and payload.get("method") in a2a.STREAMING_METHODS:
        return payload
    return None


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
    if mcp_http.handles(scope):
        await mcp_http.app(scope, receive, send)
        return
    if scope["type"] == "http":
        path, method = scope["path"], scope["method"]
        if path == "/api/v1/subscribe":
            await inbox.subscribe(scope, receive, send)
            return
        if path.startswith("/ui/t/") and web.PATH.match(path) and method == "GET":
            await web.tenant_stream(scope, receive, send)
            return
        peer_path = peer.PATH.match(path) if path.startswith("/a2a/agents/") else None
        if method == "POST" and (path in RPC_PATHS or peer_path):
            body, messages = await _read_body(receive)
            fits = len(body) <= settings.HIKYAKU_MAX_BODY_BYTES
            payload = _streaming_call(body) if fits else None
            if payload is not None and peer_path:
                await peer.agent_stream(scope, receive, send, payload, peer_path["agent_id"])
                return
            if payload is not None:
                await a2a.jsonrpc_stream(scope, receive, send, payload)
                return
            waiting = answers.waiting_send(body, scope) if peer_path and fits else None
            if waiting is not None:
                await answers.agent_send(scope, receive, send, waiting, peer_path["agent_id"])
                return
            receive = _replay(messages, receive)
    await django_application(scope, receive, send)
