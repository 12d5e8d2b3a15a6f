"""Server-Sent Events framing and the few raw-ASGI responses the stream handlers send."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from hikyaku.errors import HikyakuError, RateLimited, Unauthenticated

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Scope = dict[str, Any]

HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


# Characters that JSON leaves raw but that line splitters treat as line ends (Python's
# str.splitlines(), hence httpx's iter_lines() and the a2a-sdk client): escaped, so one JSON
# document stays on one `data:` line for every SSE client. The JSON value is unchanged.
_LINE_BREAKERS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).translate(_LINE_BREAKERS)


def event(data: Any, *, name: str | None = None, event_id: int | None = None) -> bytes:
    """One SSE event. `data` is JSON-encoded unless it is already a string."""
    text = data if isinstance(data, str) else dumps(data)
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if name:
        lines.append(f"event: {name}")
    lines.extend(f"data: {line}" for line in text.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


def comment(text: str) -> bytes:
    return f": {text}\n\n".encode()


def header(scope: Scope, name: bytes) -> str | None:
    """A request header (name in lower case) as text, or None."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def query(scope: Scope) -> dict[str, str]:
    """The query string's parameters (the last value of each)."""
    parsed = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    return {key: values[-1] for key, values in parsed.items()}


async def start(send: Send, extra: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [*HEADERS, *extra]})


async def send_json(
    send: Send, status: int, body: Any, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    payload = dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload, "more_body": False})


def error_headers(error: HikyakuError) -> list[tuple[bytes, bytes]]:
    """The headers an error implies (the raw-ASGI twin of hikyaku.errors.decorate)."""
    if isinstance(error, Unauthenticated):
        return [(b"www-authenticate", b'Bearer realm="hikyaku"')]
    if isinstance(error, RateLimited) and error.details:
        return [(b"retry-after", str(error.details.get("retry_after", 60)).encode())]
    return []


async def send_error(send: Send, error: HikyakuError) -> None:
    """A REST error envelope (docs/PROTOCOL.md §3)."""
    await send_json(send, error.status, error.envelope(), error_headers(error))
