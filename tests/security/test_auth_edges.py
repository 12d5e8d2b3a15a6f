"""Authentication edge cases on every agent surface (docs/PROTOCOL.md §2).

Each surface is one callable that performs a harmless request as "the agent" with the given
headers; each case builds headers from a small world and says whether they must work. Every
(surface, case) pair is a test: a refusal is HTTP 401 with `WWW-Authenticate: Bearer` and the
surface's own error shape (REST envelope or JSON-RPC error object), and never echoes the secret.
A route added to the broker is added to SURFACES or to NOT_AGENT_SURFACES
(`test_every_route_is_a_surface_or_says_why_not` fails until it is).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agents import services as agent_services
from agents import tokens as agent_tokens
from agents.models import Agent
from messaging.models import Task
from tenants.models import ApiKey
from tenants.selectors import api_key_by_raw
from tests import factories
from tests.messaging.rpc import send

pytestmark = pytest.mark.django_db


@dataclass
class World:
    tenant: object
    key: str
    agent: factories.TestAgent
    peer: factories.TestAgent
    stranger: factories.TestAgent
    stranger_key: str
    task_id: str


@pytest.fixture
def world(tenant, other_tenant) -> World:
    key = factories.api_key(tenant)
    agent = factories.agent(tenant, name="alice")
    peer = factories.agent(tenant, name="bob")
    stranger = factories.agent(other_tenant, name="mallory")
    task = send(agent, peer.id, "hello")
    return World(
        tenant=tenant,
        key=key,
        agent=agent,
        peer=peer,
        stranger=stranger,
        stranger_key=factories.api_key(other_tenant),
        task_id=task["id"],
    )


def _headers(authorization: str | None = None, agent_id: str | None = None) -> dict[str, str]:
    headers = {}
    if authorization is not None:
        headers["HTTP_AUTHORIZATION"] = authorization
    if agent_id is not None:
        headers["HTTP_X_AGENT_ID"] = agent_id
    return headers


# Surfaces: (name, kind, call). kind is "rest" or "rpc" (the shape of a refusal).


def _rpc(path: str, version: str | None, method: str, params: Callable[[World], dict]):
    def call(w: World, headers: dict):
        if version:
            headers = {**headers, "HTTP_A2A_VERSION": version}
        body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params(w)}
        return Client().post(path, json.dumps(body), content_type="application/json", **headers)

    return call


def _json(method: str, path: Callable[[World], str], body: dict | None = None):
    def call(w: World, headers: dict):
        client = Client()
        if body is None:
            return getattr(client, method)(path(w), **headers)
        return getattr(client, method)(
            path(w), json.dumps(body), content_type="application/json", **headers
        )

    return call


def _send_params(w: World) -> dict:
    return {
        "message": {
            "messageId": uuid.uuid4().hex,
            "role": "ROLE_USER",
            "parts": [{"text": "hi"}],
            "metadata": {"destination": w.peer.id},
        }
    }


SURFACES = {
    "rest list agents": ("rest", _json("get", lambda w: "/api/v1/agents")),
    "rest get agent": ("rest", _json("get", lambda w: f"/api/v1/agents/{w.peer.id}")),
    "rest patch self": (
        "rest",
        _json("patch", lambda w: f"/api/v1/agents/{w.agent.id}", {"description": "new"}),
    ),
    "rest delete self": ("rest", _json("delete", lambda w: f"/api/v1/agents/{w.agent.id}")),
    "rest rotate token": (
        "rest",
        _json("post", lambda w: f"/api/v1/agents/{w.agent.id}/token", {}),
    ),
    "rest task events": ("rest", _json("get", lambda w: f"/api/v1/tasks/{w.task_id}/events")),
    "rest whoami": ("rest", _json("get", lambda w: "/api/v1/agents/me")),
    "rpc 1.0 ListTasks": (
        "rpc",
        _rpc("/a2a/", "1.0", "ListTasks", lambda w: {"contextId": w.agent.id}),
    ),
    "rpc 1.0 GetTask": ("rpc", _rpc("/a2a/", "1.0", "GetTask", lambda w: {"id": w.task_id})),
    "rpc 1.0 SendMessage": ("rpc", _rpc("/a2a/", "1.0", "SendMessage", _send_params)),
    "rpc 0.3 root tasks/get": ("rpc", _rpc("/", None, "tasks/get", lambda w: {"id": w.task_id})),
    "rpc unknown method": ("rpc", _rpc("/a2a/", "1.0", "NoSuchMethod", lambda w: {})),
}


# Cases: name -> (setup returning headers, expected "ok" or 401).


def _expired_key(w: World) -> str:
    created = factories.api_key(w.tenant, expires_at=timezone.now() + timedelta(minutes=5))
    ApiKey.objects.filter(pk=api_key_by_raw(created).pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    return created


def _revoked_key(w: World) -> str:
    agent_services.revoke_api_key(api_key=api_key_by_raw(w.key))  # another key stays active
    return w.key


def _rotate_keys(w: World) -> tuple[str, str]:
    new = factories.api_key(w.tenant)
    agent_services.revoke_api_key(api_key=api_key_by_raw(w.key))
    return w.key, new


def _rotate_token(w: World) -> tuple[str, str]:
    return w.agent.token, agent_services.rotate_agent_token(agent=w.agent.model)


def _token_expiring_in(w: World, delta: timedelta) -> str:
    raw = agent_tokens.replace_agent_token(
        agent=w.agent.model, expires_at=timezone.now() + timedelta(minutes=5)
    )
    Agent.objects.filter(pk=w.agent.id).update(token_expires_at=timezone.now() + delta)
    return raw


def _revoked_token(w: World) -> str:
    agent_tokens.revoke_agent_token(agent=w.agent.model)
    return w.agent.token


def _reissued_token(w: World) -> tuple[str, str]:
    agent_tokens.revoke_agent_token(agent=w.agent.model)
    return w.agent.token, agent_tokens.issue_agent_token(agent=w.agent.model)


def _require_tokens(w: World) -> None:
    w.tenant.require_agent_tokens = True
    w.tenant.save(update_fields=["require_agent_tokens"])


def _set(status: str):
    def setup(w: World) -> None:
        if status == "disabled":
            agent_services.set_agent_enabled(agent=w.agent.model, enabled=False)
        else:
            agent_services.deregister_agent(agent=w.agent.model)

    return setup


def _keep_a_second_key(w: World) -> None:
    factories.api_key(w.tenant)


CASES: dict[str, tuple[Callable[[World], dict], str]] = {
    "token": (lambda w: _headers(f"Bearer {w.agent.token}"), "ok"),
    "token lower-case bearer": (lambda w: _headers(f"bearer {w.agent.token}"), "ok"),
    "token upper-case bearer": (lambda w: _headers(f"BEARER {w.agent.token}"), "ok"),
    "token extra spaces": (lambda w: _headers(f"Bearer   {w.agent.token}  "), "ok"),
    "token + matching X-Agent-Id": (
        lambda w: _headers(f"Bearer {w.agent.token}", w.agent.id),
        "ok",
    ),
    "token + upper-case X-Agent-Id": (
        lambda w: _headers(f"Bearer {w.agent.token}", w.agent.id.upper()),
        "ok",
    ),
    "key + X-Agent-Id": (lambda w: _headers(f"Bearer {w.key}", w.agent.id), "ok"),
    "key + X-Agent-Id, lower-case bearer": (
        lambda w: _headers(f"bearer {w.key}", w.agent.id),
        "ok",
    ),
    "token + mismatched X-Agent-Id": (
        lambda w: _headers(f"Bearer {w.agent.token}", w.peer.id),
        401,
    ),
    "token + other tenant's X-Agent-Id": (
        lambda w: _headers(f"Bearer {w.agent.token}", w.stranger.id),
        401,
    ),
    "token + garbage X-Agent-Id": (
        lambda w: _headers(f"Bearer {w.agent.token}", "'; DROP TABLE agents;--"),
        401,
    ),
    "key, no X-Agent-Id": (lambda w: _headers(f"Bearer {w.key}"), 401),
    "key + empty X-Agent-Id": (lambda w: _headers(f"Bearer {w.key}", "  "), 401),
    "key + garbage X-Agent-Id": (lambda w: _headers(f"Bearer {w.key}", "not-a-uuid"), 401),
    "key + random X-Agent-Id": (lambda w: _headers(f"Bearer {w.key}", str(uuid.uuid4())), 401),
    "key + other tenant's agent": (lambda w: _headers(f"Bearer {w.key}", w.stranger.id), 401),
    "other tenant's key + my agent": (
        lambda w: _headers(f"Bearer {w.stranger_key}", w.agent.id),
        401,
    ),
    "expired key": (lambda w: _headers(f"Bearer {_expired_key(w)}", w.agent.id), 401),
    "revoked key": (
        lambda w: (_keep_a_second_key(w), _headers(f"Bearer {_revoked_key(w)}", w.agent.id))[1],
        401,
    ),
    "rotated key, old one": (
        lambda w: _headers(f"Bearer {_rotate_keys(w)[0]}", w.agent.id),
        401,
    ),
    "rotated key, new one": (
        lambda w: _headers(f"Bearer {_rotate_keys(w)[1]}", w.agent.id),
        "ok",
    ),
    "rotated token, old one": (lambda w: _headers(f"Bearer {_rotate_token(w)[0]}"), 401),
    "rotated token, new one": (lambda w: _headers(f"Bearer {_rotate_token(w)[1]}"), "ok"),
    "expiring token, before expiry": (
        lambda w: _headers(f"Bearer {_token_expiring_in(w, timedelta(minutes=5))}"),
        "ok",
    ),
    "expired token": (
        lambda w: _headers(f"Bearer {_token_expiring_in(w, -timedelta(seconds=1))}"),
        401,
    ),
    "revoked token": (lambda w: _headers(f"Bearer {_revoked_token(w)}"), 401),
    "revoked token, reissued: old one": (
        lambda w: _headers(f"Bearer {_reissued_token(w)[0]}"),
        401,
    ),
    "revoked token, reissued: new one": (
        lambda w: _headers(f"Bearer {_reissued_token(w)[1]}"),
        "ok",
    ),
    "revoked token, key + X-Agent-Id still works": (
        lambda w: (_revoked_token(w), _headers(f"Bearer {w.key}", w.agent.id))[1],
        "ok",
    ),
    "require agent tokens: key + X-Agent-Id": (
        lambda w: (_require_tokens(w), _headers(f"Bearer {w.key}", w.agent.id))[1],
        401,
    ),
    "require agent tokens: token": (
        lambda w: (_require_tokens(w), _headers(f"Bearer {w.agent.token}"))[1],
        "ok",
    ),
    "disabled agent's token": (
        lambda w: (_set("disabled")(w), _headers(f"Bearer {w.agent.token}"))[1],
        401,
    ),
    "deregistered agent's token": (
        lambda w: (_set("deregistered")(w), _headers(f"Bearer {w.agent.token}"))[1],
        401,
    ),
    "deregistered agent via key": (
        lambda w: (_set("deregistered")(w), _headers(f"Bearer {w.key}", w.agent.id))[1],
        401,
    ),
    "no Authorization": (lambda w: _headers(), 401),
    "empty Authorization": (lambda w: _headers(""), 401),
    "scheme only": (lambda w: _headers("Bearer"), 401),
    "no space after scheme": (lambda w: _headers(f"Bearer{w.agent.token}"), 401),
    "no scheme": (lambda w: _headers(w.agent.token), 401),
    "Basic scheme": (
        lambda w: _headers("Basic " + base64.b64encode(f"x:{w.agent.token}".encode()).decode()),
        401,
    ),
    "Token scheme": (lambda w: _headers(f"Token {w.agent.token}"), 401),
    "two credentials": (lambda w: _headers(f"Bearer {w.agent.token} {w.key}"), 401),
    "well-formed unknown token": (lambda w: _headers("Bearer hka_" + "A" * 40), 401),
    "well-formed unknown key": (lambda w: _headers("Bearer hky_" + "0" * 32, w.agent.id), 401),
    "truncated token": (lambda w: _headers(f"Bearer {w.agent.token[:-1]}"), 401),
    "token with a trailing byte": (lambda w: _headers(f"Bearer {w.agent.token}x"), 401),
    "upper-cased key": (lambda w: _headers(f"Bearer {w.key.upper()}", w.agent.id), 401),
    "huge garbage": (lambda w: _headers("Bearer " + "x" * 8000), 401),
}


def assert_refused(kind: str, response, secrets: list[str]) -> None:
    assert response.status_code == 401, response.content[:500]
    assert response["WWW-Authenticate"].startswith("Bearer")
    body = response.json()
    if kind == "rest":
        assert set(body) == {"error"} and body["error"]["code"] == "UNAUTHORIZED", body
    else:
        assert body["jsonrpc"] == "2.0" and body["id"] == 7, body
        assert body["error"]["data"][0]["reason"] == "UNAUTHENTICATED", body
    for secret in secrets:
        assert secret not in response.content.decode(), "a credential was echoed"


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_authentication_on_every_surface(world, surface, case):
    kind, call = SURFACES[surface]
    build, expected = CASES[case]
    headers = build(world)
    response = call(world, headers)
    if expected == "ok":
        assert response.status_code < 400, response.content[:500]
        if kind == "rpc":
            body = response.json()
            assert "result" in body or body["error"]["code"] == -32601, body
    else:
        assert_refused(kind, response, [world.key, world.agent.token])


# Registration needs only a tenant key ----------------------------------------------------


REGISTRATION_CASES: dict[str, tuple[Callable[[World], dict], object]] = {
    "key": (lambda w: _headers(f"Bearer {w.key}"), 201),
    "key, lower-case bearer": (lambda w: _headers(f"bearer {w.key}"), 201),
    "key + any X-Agent-Id": (lambda w: _headers(f"Bearer {w.key}", "whatever"), 201),
    "key of a tenant requiring agent tokens": (
        lambda w: (_require_tokens(w), _headers(f"Bearer {w.key}"))[1],
        201,
    ),
    "agent token": (lambda w: _headers(f"Bearer {w.agent.token}"), 401),
    "expired key": (lambda w: _headers(f"Bearer {_expired_key(w)}"), 401),
    "revoked key": (
        lambda w: (_keep_a_second_key(w), _headers(f"Bearer {_revoked_key(w)}"))[1],
        401,
    ),
    "rotated key, old one": (lambda w: _headers(f"Bearer {_rotate_keys(w)[0]}"), 401),
    "no Authorization": (lambda w: _headers(), 401),
    "Basic scheme": (lambda w: _headers("Basic Zm9vOmJhcg=="), 401),
    "no scheme": (lambda w: _headers(w.key), 401),
    "well-formed unknown key": (lambda w: _headers("Bearer hky_" + "f" * 32), 401),
}


@pytest.mark.parametrize("case", sorted(REGISTRATION_CASES))
def test_registration_authentication(world, case):
    build, expected = REGISTRATION_CASES[case]
    response = Client().post(
        "/api/v1/agents",
        json.dumps({"name": "newcomer", "description": ""}),
        content_type="application/json",
        **build(world),
    )
    if expected == 201:
        assert response.status_code == 201, response.content
    else:
        assert_refused("rest", response, [world.key, world.agent.token])


def test_a_refusal_looks_the_same_whatever_was_wrong(world):
    """No oracle: a revoked, expired or unknown key, or a deregistered agent, read alike."""
    bodies = set()
    for case in ("expired key", "revoked key", "well-formed unknown key", "rotated key, old one"):
        headers = CASES[case][0](world)
        bodies.add(Client().get("/api/v1/agents", **headers).content)
    assert len(bodies) == 1, bodies
    assert Task.objects.count() == 1


# Every route is an agent surface above, or says why it is not --------------------------

SURFACE_ROUTES = {
    "api/v1/agents": ("rest list agents",),
    "api/v1/agents/me": ("rest whoami",),
    "api/v1/agents/<str:agent_id>": ("rest get agent", "rest patch self", "rest delete self"),
    "api/v1/agents/<str:agent_id>/token": ("rest rotate token",),
    "api/v1/tasks/<str:task_id>/events": ("rest task events",),
    "": ("rpc 0.3 root tasks/get",),
    "a2a/": ("rpc 1.0 ListTasks", "rpc 1.0 GetTask", "rpc 1.0 SendMessage"),
}
NOT_AGENT_SURFACES = {
    "healthz": "public",
    "readyz": "public",
    "metrics": "operator access rule (tests/ops)",
    ".well-known/agent-card.json": "public",
    "api/schema/": "public",
    "api/docs/": "public",
    "favicon.ico": "public",
    "api/v1/agents/<str:agent_id>/policy": "tenant key only (tests/agents/test_policy_admin_and_api.py)",
    "api/v1/agents/<str:agent_id>/webhook-secret": "tests/agents/test_credentials.py",
    "api/v1/subscribe": "streams: tests/messaging/test_streams.py, test_credentials_streams.py",
    "a2a/agents/": "cards: tests/agents/test_peer_cards.py",
    "a2a/agents/<str:agent_id>/.well-known/agent-card.json": "tests/agents/test_peer_cards.py",
    "a2a/agents/<str:agent_id>/": "peer callers: tests/messaging/test_peer_endpoint.py",
    "a2a/agents/<str:agent_id>": "the same endpoint without its slash",
}
PEOPLE_PREFIXES = ("admin/", "accounts/", "ui/")  # sessions, not agent credentials


def test_every_route_is_a_surface_or_says_why_not():
    from tests.security.test_cross_tenant import url_routes

    routes = [r for r in url_routes() if not r.startswith(PEOPLE_PREFIXES)]
    missing = [r for r in routes if r not in SURFACE_ROUTES and r not in NOT_AGENT_SURFACES]
    assert not missing, f"Routes missing from the auth-edge matrix: {missing}"
    assert {s for names in SURFACE_ROUTES.values() for s in names} <= set(SURFACES)
