"""A web process never holds a request open (docs/ARCHITECTURE.md, Serving topology).

A long-held call keeps its connection open: the streams (`GET /api/v1/subscribe`, the web
UI's event streams, `SendStreamingMessage` / `SubscribeToTask` on the broker's and the agents'
JSON-RPC endpoints) and a blocking `SendMessage` on an agent's endpoint, which waits for the
agent's answer. The stream processes (hikyaku.asgi) serve them as coroutines, with no thread
each. A web process (WSGI) has a few request threads; each such call would pin one of them
for its whole life, and a handful would stop the process serving anyone.

So Django's views never serve one. They answer it at once with 421 Misdirected Request, in
the surface's envelope, before writing anything and before authenticating it (the web UI's
streams check the session first, so outsiders get the 404 every page of a tenant gives):

- the proxy (deploy/nginx.conf) turns a 421 from the web tier into a hand-off: it sends the
  same request (method, headers, body) to the stream tier, which serves it. A client that
  streams without `Accept: text/event-stream`, or sends a blocking message, is served as if
  it had been routed there in the first place, and is authenticated and counted once;
- a client that reached a web process directly reads why, and where to go.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse, JsonResponse

from hikyaku import parsers
from hikyaku.errors import HikyakuError

from ..a2a import jsonrpc


class StreamTierOnly(HikyakuError):
    """Long-held calls are served by the stream processes, not by this web process."""

    code, status = "STREAM_TIER_ONLY", 421
    # A2A's "operation not supported" (here): a client error, not one to retry as is.
    rpc_code, rpc_reason, rpc_status = -32004, "UNSUPPORTED_OPERATION", 421


ADVICE = (
    "it holds its connection open, and this web process serves only calls answered at once. "
    "The stream processes serve it: send it through the proxy (which hands it over), or to a "
    "stream process (hikyaku.asgi)."
)


def stream_refused(what: str) -> JsonResponse:
    """The REST answer to a stream request (`what`: e.g. "GET /api/v1/subscribe")."""
    error = StreamTierOnly(f"{what} is not served here: {ADVICE}")
    return JsonResponse(error.envelope(), status=error.status)


def call_answer(request_id: Any, method: str) -> jsonrpc.Answer:
    """The JSON-RPC answer to a long-held call."""
    error = StreamTierOnly(f"{method} is not served here: {ADVICE}")
    return jsonrpc.error_answer(request_id, error, method=method)


def call_refused(request_id: Any, method: str) -> HttpResponse:
    """`call_answer` as a Django response."""
    answer = call_answer(request_id, method)
    response = HttpResponse(
        parsers.dumps(answer.body), content_type="application/json", status=answer.status
    )
    for name, value in answer.headers:
        response[name] = value
    return response
