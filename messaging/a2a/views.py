"""The A2A JSON-RPC endpoints as Django views: the broker's (`POST /` and `POST /a2a/`) and each
agent's own (`POST /a2a/agents/<id>/`, docs/PEERS.md).

Plain views over the method tables (messaging/a2a/methods.py, messaging/a2a/peer.py). The
broker's view calls the same function the hot path serves in front of Django
(messaging/a2a/endpoint.py). The envelope, the method names and the error answers are
messaging/a2a/jsonrpc.py's. A long-held call — a streaming method, a blocking send to an
agent — is never served here: these views answer it 421 for the proxy to hand it to the
stream processes (messaging/stream/handoff.py).
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.csrf import csrf_exempt

from agents.auth import client_address
from hikyaku import parsers
from hikyaku.errors import HikyakuError

from ..stream.handoff import call_refused
from . import endpoint, jsonrpc, peer


def _respond(body: dict[str, Any], status: int = 200, headers=()) -> HttpResponse:
    response = HttpResponse(parsers.dumps(body), content_type="application/json", status=status)
    for name, value in headers:
        response[name] = value
    return response


def _error(request_id: Any, exc: HikyakuError | DatabaseError, method: str) -> HttpResponse:
    answer = jsonrpc.error_answer(request_id, exc, method=method)
    return _respond(answer.body, answer.status, answer.headers)


def _envelope(request: HttpRequest) -> jsonrpc.Envelope | HttpResponse:
    try:
        return jsonrpc.parse(request.body)
    except jsonrpc.EnvelopeError as exc:
        return _respond(exc.response)


def _not_post() -> HttpResponse:
    body = jsonrpc.response(
        None, jsonrpc.error_object(jsonrpc.INVALID_REQUEST, "Use POST with a JSON-RPC 2.0 body.")
    )
    return _respond(body, status=405)


@csrf_exempt
def broker_jsonrpc(request: HttpRequest) -> HttpResponse:
    """The broker's endpoint (messaging/a2a/endpoint.py) for requests that reach Django."""
    if request.method != "POST":
        if request.path == "/" and request.method in ("GET", "HEAD"):
            return HttpResponseRedirect("/ui/")
        return _not_post()
    answer = endpoint.broker(header=request.headers.get, body=request.body)
    request.hikyaku_log = answer.log
    response = HttpResponse(answer.body, content_type="application/json", status=answer.status)
    for name, value in answer.headers:
        response[name] = value
    return response


@csrf_exempt
def agent_jsonrpc(request: HttpRequest, agent_id: str) -> HttpResponse:
    if request.method in ("GET", "HEAD"):
        return HttpResponseRedirect(f"/a2a/agents/{agent_id}/.well-known/agent-card.json")
    if request.method != "POST":
        return _not_post()
    if not peer.is_json(request.content_type or ""):
        return _error(None, peer.content_type_refused(), "")
    envelope = _envelope(request)
    if isinstance(envelope, HttpResponse):
        return envelope
    request_id, method = envelope.request_id, envelope.method
    version = request.headers.get("A2A-Version")
    if envelope.streaming or peer.waits_for_answer(method, envelope.params, version):
        # Long-held: served by the stream processes, never in a web thread
        # (messaging/stream/handoff.py).
        return call_refused(request_id, method)
    try:
        call = peer.open_call(
            agent_id=agent_id,
            version=version,
            authorization=request.headers.get("Authorization"),
            x_agent_id=request.headers.get("X-Agent-Id"),
            address=client_address(request.META),
            params=envelope.params,
        )
        request.hikyaku_log = {
            "tenant_id": str(call.agent.tenant_id),
            "agent_id": str(call.agent.id),
            "caller": str(call.sender.agent.id) if call.sender.agent else call.sender.caller_id,
            "rpc_method": method,
        }
        handler = peer.PEER_METHODS.get(method)
        if handler is None:
            return _respond(jsonrpc.method_not_found(request_id, method))
        result = handler(call)
    except (HikyakuError, DatabaseError) as exc:
        return _error(request_id, exc, method)
    return _respond(jsonrpc.result(request_id, result))
