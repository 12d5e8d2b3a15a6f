"""Server-Sent Events framing and the few raw-ASGI responses the stream handlers send."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from hikyaku import parsers
from hikyaku.errors import HikyakuError, error_headers

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
_LINE_BREAKERS = (
    (b"\xe2\x80\xa8", b"\\u2028"),
    (b"\xe2\x80\xa9", b"\\u2029"),
    (b"\xc2\x85", b"\\u0085"),
)


def encode(value: Any) -> bytes:
    """`value` as compact UTF-8 JSON on one line (hikyaku.parsers.dumps, with the line
    breakers above escaped)."""
    data = parsers.dumps(value)
    if b"\xe2\x80" in data or b"\xc2\x85" in data:
        for raw, escaped in _LINE_BREAKERS:
            data = data.replace(raw, escaped)
    return data


def dumps(value: Any) -> str:
    return encode(value).decode()


def event(data: Any, *, name: str | None = None, event_id: int | None = None) -> bytes:
    """One SSE event. `data` is JSON-encoded unless it is already text (str or bytes, which
    may span lines)."""
    if isinstance(data, bytes | str):
        body = data.encode() if isinstance(data, str) else data
        if b"\n" in body:
            body = b"\ndata: ".join(body.split(b"\n"))
    else:
        body = encode(data)  # JSON on one line
    head = b""
    if event_id is not None:
        head += b"id: %d\n" % event_id
    if name:
        head += b"event: " + name.encode() + b"\n"
    return head + b"data: " + body + b"\n\n"


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
    send: Send, status: int, body: Any, headers: Iterable[tuple[str, str]] = ()
) -> None:
    """A JSON answer, written as the WSGI views write theirs (hikyaku.parsers.dumps)."""
    payload = parsers.dumps(body)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *(
                    (name.lower().encode("latin-1"), value.encode("latin-1"))
                    for name, value in headers
                ),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload, "more_body": False})


async def send_error(
    send: Send, error: HikyakuError, headers: Iterable[tuple[str, str]] = ()
) -> None:
    """A REST error envelope (docs/PROTOCOL.md §3) with the headers the error implies."""
    await send_json(send, error.status, error.envelope(), [*error_headers(error), *headers])
