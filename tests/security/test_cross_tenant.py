"""The cross-tenant matrix (docs/PROTOCOL.md §1, §5 "Isolation"): another tenant's ids behave exactly
like ids that do not exist.

Every route of the URLconf and every JSON-RPC method is classified below. Each one that takes
an id has probes; every probe is run by an agent of tenant B with each kind of tenant A's ids
(active and deregistered agents, unread/completed/broadcast tasks, broadcast summaries) and
with a random id, and the two answers must be identical — status, headers and body — once the
id is replaced by a placeholder. Task probes are also run by an agent of tenant A that is not a
party of the task. Afterwards tenant A's data must be untouched.

`test_every_route_is_classified` and `test_every_rpc_method_is_classified` fail when a route
or method is added without being classified here, so new surfaces cannot skip the matrix.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from django.test import Client
from django.urls import URLResolver, get_resolver

from agents import services as agent_services
from agents.models import Agent
from messaging.a2a.methods import METHODS
from messaging.models import Task, TaskEvent
from messaging.stream.a2a import STREAMING_METHODS
from tenants.models import ApiKey, Membership, User
from tenants.selectors import api_key_by_raw
from tenants.services import add_member
from tests import factories
from tests.messaging.rpc import act, result, send

pytestmark = pytest.mark.django_db

AGENT_IDS = ("active agent", "deregistered agent")
KEY_IDS = ("api key",)
TASK_IDS = ("unread task", "completed task", "broadcast delivery", "broadcast summary")


@dataclass
class Probe:
    """One way of handing an id to the broker. `call(world, caller, the_id)` → response."""

    ids: tuple[str, ...]
    call: Callable[[World, factories.TestAgent, str], Any]
    # Read-only, and succeeds with the caller's own id: the positive control that proves the
    # probe reaches its target (a mistyped path would be "not found" both ways).
    control: bool = False


@dataclass
class Route:
    why: str
    probes: dict[str, Probe] = field(default_factory=dict)


# Calling helpers -------------------------------------------------------------------------


def rpc(method: str, params: Callable[[str, World, factories.TestAgent], dict], version="1.0"):
    def call(world: World, caller: factories.TestAgent, the_id: str, path: str = "/a2a/"):
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": method,
            "params": params(the_id, world, caller),
        }
        if method in STREAMING_METHODS:
            # Only the stream processes serve these (a web process hands them over with a
            # 421 before reading them): over HTTP to a live broker.
            headers = {"Authorization": f"Bearer {caller.token}"}
            if version:
                headers["A2A-Version"] = version
            return over_http(world.live_url, path, body, headers)
        extra = {"HTTP_AUTHORIZATION": f"Bearer {caller.token}"}
        if version:
            extra["HTTP_A2A_VERSION"] = version
        return Client().post(path, json.dumps(body), content_type="application/json", **extra)

    return call


@dataclass
class OverHttp:
    """What `normalised` reads of a response, for one received over HTTP."""

    status_code: int
    headers: dict[str, str]
    content: bytes
    cookies: dict = field(default_factory=dict)


def over_http(base: str | None, path: str, body: dict, headers: dict[str, str]) -> OverHttp:
    assert base, "a stream-tier probe needs world.live_url (a live broker)"
    with httpx.stream("POST", base + path, json=body, headers=headers, timeout=10) as response:
        content = b""
        for chunk in response.iter_raw():
            content += chunk
            if response.headers["content-type"].startswith("text/event-stream"):
                break  # an open stream: its first frame says enough
    return OverHttp(response.status_code, dict(response.headers), content)


def rest(method: str, path: str, body: dict | None = None):
    def call(world: World, caller: factories.TestAgent, the_id: str):
        client = Client(HTTP_AUTHORIZATION=f"Bearer {caller.token}")
        url = path.format(id=the_id)
        if body is None:
            return getattr(client, method)(url)
        return getattr(client, method)(url, json.dumps(body), content_type="application/json")

    return call


def with_key(world: World, caller: factories.TestAgent, the_id: str, path: str = "/api/v1/agents"):
    """The compat identity: caller's tenant key with another id in X-Agent-Id."""
    key = world.b_key if caller.tenant.pk == world.b.tenant.pk else world.a_key
    return Client().get(path, HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_X_AGENT_ID=the_id)


def with_token(path: str):
    """The caller's own agent token with another id in X-Agent-Id."""

    def call(world: World, caller: factories.TestAgent, the_id: str):
        return Client().get(
            path, HTTP_AUTHORIZATION=f"Bearer {caller.token}", HTTP_X_AGENT_ID=the_id
        )

    return call


def staff_only(path: str):
    """A tenant member who is not staff (the admin is for operators only)."""

    def call(world: World, caller: factories.TestAgent, the_id: str):
        client = Client()
        client.force_login(world.b_user)
        return client.get(path.format(id=the_id))

    return call


FIXED_ID = "00000000-0000-4000-8000-000000000000"


def ui(method: str, path: str, form: dict | None = None):
    """A page of the web UI, as an owner of tenant B logged in with a session.

    `{id}` in the path or form is the probed id, `{mine}` tenant B's slug, `{any}` a fixed
    id (for routes probed by their tenant slug) and `{my_task}` a task of tenant B."""

    def call(world: World, caller: factories.TestAgent, the_id: str):
        client = Client()
        client.force_login(world.b_user)
        values = {
            "id": the_id,
            "mine": world.b.tenant.slug,
            "any": FIXED_ID,
            "my_task": world.own["unread task"],
        }
        url = path.format(**values)
        if method == "get":
            return client.get(url)
        data = {k: v.format(**values) for k, v in (form or {}).items()}
        return client.post(url, data)

    return call


def ui_tenant_route(why: str, path: str, *methods: str, form: dict | None = None) -> Route:
    """A page under /ui/t/<slug>/ without object ids: probed with tenant A's slug."""
    return Route(
        why,
        {
            method.upper(): Probe(
                ("tenant slug",),
                ui(method, path.format(slug="{id}"), form),
                control=method == "get",
            )
            for method in methods
        },
    )


def ui_object_route(
    why: str, path: str, kinds: tuple[str, ...], *methods: str, form: dict | None = None
) -> Route:
    """A page of one object of the tenant: probed with A's slug, and with B's slug and A's ids."""
    probes = {
        f"{method.upper()} tenant slug": Probe(
            ("tenant slug",), ui(method, path.format(slug="{id}", obj="{any}"), form)
        )
        for method in methods
    }
    probes.update(
        {
            method.upper(): Probe(
                kinds,
                ui(method, path.format(slug="{mine}", obj="{id}"), form),
                control=method == "get",
            )
            for method in methods
        }
    )
    return Route(why, probes)


def message(the_id: str | None = None, **fields: Any) -> dict:
    body = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "x"}]}
    body.update(fields)
    return body


def send_to(the_id, world, caller):
    return {"message": message(metadata={"destination": the_id})}


def follow_up(action: str | None):
    def params(the_id, world, caller):
        meta = {"action": action} if action else {}
        return {"message": message(taskId=the_id, metadata=meta)}

    return params


def reply_to(the_id, world, caller):
    return {
        "message": message(
            referenceTaskIds=[the_id], metadata={"destination": world.caller_peer(caller).id}
        )
    }


def task_param(name: str, **extra: Any):
    return lambda the_id, world, caller: {name: the_id, **extra}


def task_ids_param(the_id, world, caller):
    return {"taskId": the_id, "id": the_id, "pushNotificationConfigId": the_id}


TASK_PROBES_BY_METHOD: dict[str, dict[str, Probe]] = {
    "SendMessage": {
        "destination": Probe(AGENT_IDS, rpc("SendMessage", send_to)),
        "taskId ack": Probe(TASK_IDS, rpc("SendMessage", follow_up(None))),
        "taskId accept": Probe(TASK_IDS, rpc("SendMessage", follow_up("accept"))),
        "taskId comment": Probe(TASK_IDS, rpc("SendMessage", follow_up("comment"))),
        "taskId reply": Probe(TASK_IDS, rpc("SendMessage", follow_up("reply"))),
        "referenceTaskIds": Probe(TASK_IDS, rpc("SendMessage", reply_to)),
        "0.3 destination": Probe(
            AGENT_IDS,
            rpc(
                "message/send",
                lambda i, w, c: {
                    "message": {
                        "messageId": uuid.uuid4().hex,
                        "role": "user",
                        "parts": [{"kind": "text", "text": "x"}],
                        "metadata": {"destination": i},
                    }
                },
                version=None,
            ),
        ),
    },
    "GetTask": {
        "id": Probe(TASK_IDS, rpc("GetTask", task_param("id")), control=True),
        "id, historyLength": Probe(
            TASK_IDS, rpc("GetTask", task_param("id", historyLength=5)), control=True
        ),
        "0.3 id": Probe(TASK_IDS, rpc("tasks/get", task_param("id"), version=None), control=True),
    },
    "CancelTask": {
        "id": Probe(TASK_IDS, rpc("CancelTask", task_param("id"))),
        "0.3 id": Probe(TASK_IDS, rpc("tasks/cancel", task_param("id"), version=None)),
    },
    "ListTasks": {
        "inbox contextId": Probe(
            AGENT_IDS, rpc("ListTasks", task_param("contextId")), control=True
        ),
        "outbox contextId": Probe(
            AGENT_IDS,
            rpc("ListTasks", task_param("contextId", metadata={"box": "outbox"})),
            control=True,
        ),
    },
    "SendStreamingMessage": {
        "taskId": Probe(TASK_IDS, rpc("SendStreamingMessage", follow_up("comment"))),
        "destination": Probe(AGENT_IDS, rpc("SendStreamingMessage", send_to)),
    },
    "SubscribeToTask": {"id": Probe(TASK_IDS, rpc("SubscribeToTask", task_param("id")))},
    "push config": {
        "taskId": Probe(TASK_IDS, rpc("GetTaskPushNotificationConfig", task_ids_param))
    },
}

# Every JSON-RPC method, by the probes above that cover it.
RPC_METHODS = {
    "SendMessage": "SendMessage",
    "message/send": "SendMessage",
    "GetTask": "GetTask",
    "tasks/get": "GetTask",
    "CancelTask": "CancelTask",
    "tasks/cancel": "CancelTask",
    "ListTasks": "ListTasks",
    "tasks/list": "ListTasks",
    "SendStreamingMessage": "SendStreamingMessage",
    "message/stream": "SendStreamingMessage",
    "SubscribeToTask": "SubscribeToTask",
    "tasks/resubscribe": "SubscribeToTask",
    "CreateTaskPushNotificationConfig": "push config",
    "GetTaskPushNotificationConfig": "push config",
    "ListTaskPushNotificationConfigs": "push config",
    "DeleteTaskPushNotificationConfig": "push config",
    "tasks/pushNotificationConfig/set": "push config",
    "tasks/pushNotificationConfig/get": "push config",
    "tasks/pushNotificationConfig/list": "push config",
    "tasks/pushNotificationConfig/delete": "push config",
}


def json_rpc(path: str) -> Route:
    return Route(
        "the A2A JSON-RPC endpoint: ids travel in params (RPC_METHODS)",
        {
            f"{method}: {name}": Probe(
                probe.ids,
                lambda w, c, i, call=probe.call: call(w, c, i, path=path),
                control=probe.control,
            )
            for method, probes in TASK_PROBES_BY_METHOD.items()
            for name, probe in probes.items()
        },
    )


ROUTES: dict[str, Route] = {
    "healthz": Route("public liveness, no ids"),
    "readyz": Route("public readiness, no ids"),
    "metrics": Route("operator metrics (loopback or token), aggregate counters, no ids"),
    ".well-known/agent-card.json": Route("the broker's public card, no ids"),
    "api/schema/": Route("public OpenAPI schema, no ids"),
    "api/docs/": Route("public API docs page, no ids"),
    "api/v1/agents": Route(
        "tenant-scoped list and registration; ids only in X-Agent-Id",
        {"X-Agent-Id with the caller's tenant key": Probe(AGENT_IDS, with_key, control=True)},
    ),
    "api/v1/agents/me": Route(
        "the caller's own profile: ids only in X-Agent-Id",
        {
            "X-Agent-Id with the caller's tenant key": Probe(
                AGENT_IDS,
                lambda w, c, i: with_key(w, c, i, path="/api/v1/agents/me"),
                control=True,
            ),
            "X-Agent-Id with the caller's token": Probe(
                AGENT_IDS, with_token("/api/v1/agents/me"), control=True
            ),
        },
    ),
    "api/v1/agents/<str:agent_id>": Route(
        "agent detail, update, deregistration",
        {
            "GET": Probe(AGENT_IDS, rest("get", "/api/v1/agents/{id}"), control=True),
            "PATCH": Probe(
                AGENT_IDS, rest("patch", "/api/v1/agents/{id}", {"description": "pwned"})
            ),
            "DELETE": Probe(AGENT_IDS, rest("delete", "/api/v1/agents/{id}")),
        },
    ),
    "api/v1/agents/<str:agent_id>/token": Route(
        "agent token rotation",
        {"POST": Probe(AGENT_IDS, rest("post", "/api/v1/agents/{id}/token", {}))},
    ),
    "api/v1/tasks/<str:task_id>/events": Route(
        "a task's timeline",
        {"GET": Probe(TASK_IDS, rest("get", "/api/v1/tasks/{id}/events"), control=True)},
    ),
    "": json_rpc("/"),
    "a2a/": json_rpc("/a2a/"),
    "ui/": Route("web UI home: the user's own memberships, no ids"),
    "ui/tenants/new/": Route("creates a tenant of one's own, no ids"),
    "ui/t/<slug:slug>/": ui_tenant_route("tenant overview", "/ui/t/{slug}/", "get"),
    "ui/t/<slug:slug>/members/": ui_tenant_route("members", "/ui/t/{slug}/members/", "get"),
    "ui/t/<slug:slug>/members/add/": ui_tenant_route(
        "add a member",
        "/ui/t/{slug}/members/add/",
        "post",
        form={"email": "mallory@example.com", "role": "owner"},
    ),
    "ui/t/<slug:slug>/leave/": ui_tenant_route("leave", "/ui/t/{slug}/leave/", "get", "post"),
    "ui/t/<slug:slug>/keys/": ui_tenant_route("keys", "/ui/t/{slug}/keys/", "get"),
    "ui/t/<slug:slug>/keys/new/": ui_tenant_route(
        "create a key",
        "/ui/t/{slug}/keys/new/",
        "get",
        "post",
        form={"label": "x", "expires": "never", "once": "0123456789abcdef"},
    ),
    "ui/t/<slug:slug>/keys/<uuid:key_id>/revoke/": ui_object_route(
        "revoke a key", "/ui/t/{slug}/keys/{obj}/revoke/", KEY_IDS, "get", "post"
    ),
    "ui/t/<slug:slug>/agents/": ui_tenant_route("agents", "/ui/t/{slug}/agents/", "get"),
    "ui/t/<slug:slug>/agents/<uuid:agent_id>/": ui_object_route(
        "agent page", "/ui/t/{slug}/agents/{obj}/", AGENT_IDS, "get"
    ),
    "ui/t/<slug:slug>/agents/<uuid:agent_id>/disable/": ui_object_route(
        "disable an agent", "/ui/t/{slug}/agents/{obj}/disable/", AGENT_IDS, "post"
    ),
    "ui/t/<slug:slug>/agents/<uuid:agent_id>/enable/": ui_object_route(
        "enable an agent", "/ui/t/{slug}/agents/{obj}/enable/", AGENT_IDS, "post"
    ),
    "ui/t/<slug:slug>/agents/<uuid:agent_id>/deregister/": ui_object_route(
        "deregister an agent", "/ui/t/{slug}/agents/{obj}/deregister/", AGENT_IDS, "get", "post"
    ),
    "ui/t/<slug:slug>/agents/<uuid:agent_id>/inbox/": ui_object_route(
        "an agent's inbox", "/ui/t/{slug}/agents/{obj}/inbox/", AGENT_IDS, "get"
    ),
    "ui/t/<slug:slug>/agents/<uuid:agent_id>/sent/": ui_object_route(
        "an agent's sent tasks", "/ui/t/{slug}/agents/{obj}/sent/", AGENT_IDS, "get"
    ),
    "ui/t/<slug:slug>/tasks/<uuid:task_id>/": ui_object_route(
        "a task's page", "/ui/t/{slug}/tasks/{obj}/", TASK_IDS, "get"
    ),
    "ui/t/<slug:slug>/tasks/<uuid:task_id>/act/": Route(
        "act on a task for one of its agents: the task in the path, the agent in the form",
        {
            **ui_object_route(
                "",
                "/ui/t/{slug}/tasks/{obj}/act/",
                TASK_IDS,
                "post",
                form={"action": "{any}:comment", "text": "x", "once": "0123456789abcdef"},
            ).probes,
            "POST for agent": Probe(
                AGENT_IDS,
                ui(
                    "post",
                    "/ui/t/{mine}/tasks/{my_task}/act/",
                    {"action": "{id}:comment", "text": "x", "once": "0123456789abcdef"},
                ),
            ),
        },
    ),
    "ui/t/<slug:slug>/tasks/<uuid:task_id>/files/<str:digest>/": Route(
        "a task's file, found by its task and a digest of its content: another tenant's task"
        " or file is 404 like an unknown one (tests/webui/test_isolation.py walks it)"
    ),
    "ui/t/<slug:slug>/send/": Route(
        "send as one of the tenant's agents: ids in the query and the form",
        {
            "GET tenant slug": Probe(("tenant slug",), ui("get", "/ui/t/{id}/send/"), control=True),
            "GET ?from=&to=": Probe(
                AGENT_IDS, ui("get", "/ui/t/{mine}/send/?from={id}&to={id}"), control=True
            ),
            "POST sender": Probe(
                AGENT_IDS,
                ui(
                    "post",
                    "/ui/t/{mine}/send/",
                    {"sender": "{id}", "to": "*", "text": "hi", "once": "0123456789abcdef"},
                ),
            ),
            "POST to": Probe(
                AGENT_IDS,
                ui(
                    "post",
                    "/ui/t/{mine}/send/",
                    {"sender": "{id}", "to": "{id}", "text": "hi", "once": "0123456789abcdef"},
                ),
            ),
        },
    ),
    "favicon.ico": Route("a redirect to a static file, no ids"),
    # Surfaces merged after this matrix was written; each has its own cross-tenant tests.
    "a2a/agents/": Route(
        "the card directory: a tenant's own agents, or public ones anonymously"
        " (tests/agents/test_peer_cards.py::test_directory_*)"
    ),
    "a2a/agents/<str:agent_id>/.well-known/agent-card.json": Route(
        "an agent's card: another tenant's private agent is 404"
        " (tests/agents/test_peer_cards.py::test_private_card_needs_a_credential_of_its_tenant)"
    ),
    "a2a/agents/<str:agent_id>/": Route(
        "an agent's own JSON-RPC endpoint: another tenant's private agent is 404"
        " (tests/messaging/test_peer_endpoint.py::test_other_tenants_get_404_from_a_private_agent);"
        " every caller sees only its own tasks there, streams and push configs included"
        " (test_peer_endpoint.py::test_push_config_crud_is_scoped_to_the_callers_own_tasks,"
        " test_peer_streaming.py::test_other_callers_cannot_subscribe)"
    ),
    "a2a/agents/<str:agent_id>": Route("the same endpoint without its trailing slash"),
    "api/v1/agents/<str:agent_id>/policy": Route(
        "operator policy by tenant key: another tenant's agent reads like an unknown one"
        " (tests/agents/test_policy_admin_and_api.py)"
    ),
    "api/v1/agents/<str:agent_id>/webhook-secret": Route(
        "an agent's own signing secret: others are refused"
        " (tests/agents/test_credentials.py::test_an_agent_reads_and_rotates_its_webhook_secret)"
    ),
    "api/v1/subscribe": Route(
        "the SSE inbox: the caller's own events only"
        " (tests/messaging/test_streams.py::test_streams_never_carry_another_tenants_events)"
    ),
    "ui/t/<slug:slug>/events/": Route(
        "a tenant's session stream: members only, others 404"
        " (tests/messaging/test_stream_web.py::test_outsiders_get_401_or_404)"
    ),
    "ui/t/<slug:slug>/agents/<uuid:agent_id>/events/": Route(
        "one agent's session stream (tests/messaging/test_stream_web.py)"
    ),
}

# Whole subtrees classified at once (their routes come from third-party apps).
PREFIXES: dict[str, Route] = {
    "admin/": Route(
        "Django admin: staff only, not a tenant surface; probed as a non-staff tenant member",
        {
            "agent change page": Probe(AGENT_IDS, staff_only("/admin/agents/agent/{id}/change/")),
            "task change page": Probe(TASK_IDS, staff_only("/admin/messaging/task/{id}/change/")),
        },
    ),
    "accounts/": Route("django-allauth login/signup flows: no tenant objects"),
}


def url_routes() -> list[str]:
    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            else:
                yield prefix + str(pattern.pattern)

    return sorted(set(walk(get_resolver().url_patterns)))


def test_every_route_is_classified():
    routes = url_routes()
    unclassified = [r for r in routes if r not in ROUTES and not r.startswith(tuple(PREFIXES))]
    assert not unclassified, (
        "Routes missing from the cross-tenant matrix (classify them in "
        f"tests/security/test_cross_tenant.py): {unclassified}"
    )
    stale = [r for r in ROUTES if r not in routes]
    assert not stale, f"Classified routes that no longer exist: {stale}"


def test_every_rpc_method_is_classified():
    # Streaming methods are answered by the stream dispatcher (hikyaku/asgi.py), not METHODS.
    served = set(METHODS) | set(STREAMING_METHODS)
    assert served == set(RPC_METHODS), served ^ set(RPC_METHODS)
    assert set(RPC_METHODS.values()) <= set(TASK_PROBES_BY_METHOD)


# The world --------------------------------------------------------------------------------


@dataclass
class World:
    a: factories.TestAgent  # tenant A's active agent, sender of every A task
    a_peer: factories.TestAgent  # tenant A's recipient
    a_outsider: factories.TestAgent  # tenant A, party of no task
    a_key: str
    b: factories.TestAgent  # tenant B's agent: the attacker
    b_peer: factories.TestAgent
    b_key: str
    b_user: Any
    ids: dict[str, str]  # tenant A's, by kind
    own: dict[str, str]  # tenant B's, by kind (positive controls)
    live_url: str | None = None  # a live broker, for the stream tier's probes

    def caller_peer(self, caller: factories.TestAgent) -> factories.TestAgent:
        return self.b_peer if caller.model.tenant_id == self.b.model.tenant_id else self.a_peer


@pytest.fixture
def world(tenant, other_tenant) -> World:
    a = factories.agent(tenant, name="alice")
    a_peer = factories.agent(tenant, name="bob")
    gone = factories.agent(tenant, name="gone")
    unread = send(a, a_peer.id, "secret plans")
    done = send(a, a_peer.id, "old news")
    act(a_peer, done["id"])
    summary = result(a, "SendMessage", {"message": {**message(), "metadata": {"destination": "*"}}})
    delivery = Task.objects.get(broadcast_id__isnull=False, recipient=a_peer.model)
    agent_services.deregister_agent(agent=gone.model)
    a_outsider = factories.agent(tenant, name="carol")  # after the broadcast: party of nothing
    b = factories.agent(other_tenant, name="mallory")
    b_peer = factories.agent(other_tenant, name="trudy")
    b_task = send(b, b_peer.id, "b's own traffic")
    b_key = factories.api_key(other_tenant)
    b_user = User.objects.create_user("mallory@example.com", None)  # no password hashing
    add_member(tenant=other_tenant, user=b_user, role=Membership.Role.OWNER)
    a_key = factories.api_key(tenant)
    return World(
        a=a,
        a_peer=a_peer,
        a_outsider=a_outsider,
        a_key=a_key,
        b=b,
        b_peer=b_peer,
        b_key=b_key,
        b_user=b_user,
        ids={
            "active agent": a.id,
            "deregistered agent": gone.id,
            "unread task": unread["id"],
            "completed task": done["id"],
            "broadcast delivery": str(delivery.pk),
            "broadcast summary": summary["task"]["id"],
            "tenant slug": tenant.slug,
            "api key": str(api_key_by_raw(a_key).pk),
        },
        own={
            "active agent": b.id,
            "unread task": b_task["id"],
            "tenant slug": other_tenant.slug,
            "api key": str(api_key_by_raw(b_key).pk),
        },
    )


def snapshot(tenant) -> list:
    """Everything of tenant A a probe could have changed."""
    agents = Agent.objects.filter(tenant=tenant).order_by("id")
    tasks = Task.objects.filter(tenant=tenant).order_by("id")
    return [
        list(agents.values_list("id", "status", "description", "token_hash", "webhook_url")),
        list(tasks.values_list("id", "state", "awaiting", "history", "artifacts", "metadata")),
        TaskEvent.objects.filter(tenant=tenant).count(),
        list(ApiKey.objects.filter(tenant=tenant).values_list("id", "revoked_at", "expires_at")),
        list(Membership.objects.filter(tenant=tenant).values_list("user_id", "role")),
    ]


# Values that differ on every render of a page: CSRF tokens, one-time form tokens, cookies.
PER_RENDER = re.compile(r'(value="|csrftoken=|sessionid=|messages=)[A-Za-z0-9:_\-]{16,}')


def normalised(response, the_id: str) -> tuple:
    def clean(text: str) -> str:
        for variant in (the_id, the_id.upper(), the_id.replace("-", "")):
            text = text.replace(variant, "<id>")
        text = re.sub(r"expires=[^;]*", "expires=<time>", text)
        return PER_RENDER.sub(r"\1<token>", text)

    headers = {
        k: clean(v)
        for k, v in response.headers.items()
        if k.lower() not in ("content-length", "expires", "date", "x-request-id")
    }
    cookies = {name: clean(morsel.OutputString()) for name, morsel in response.cookies.items()}
    return (
        response.status_code,
        headers,
        cookies,
        clean(response.content.decode("utf-8", "replace")),
    )


MATRIX = [
    (route_name, probe_name, id_kind)
    for route_name, route in {**ROUTES, **PREFIXES}.items()
    for probe_name, probe in route.probes.items()
    for id_kind in probe.ids
]
# The streaming methods' probes, which only a live stream process answers.
STREAM_MATRIX = [m for m in MATRIX if m[1].split(": ")[0] in STREAMING_METHODS]
WEB_MATRIX = [m for m in MATRIX if m not in STREAM_MATRIX]


@pytest.mark.parametrize(
    "route_name, probe_name, id_kind", WEB_MATRIX, ids=[" | ".join(m) for m in WEB_MATRIX]
)
def test_another_tenants_ids_behave_like_ids_that_do_not_exist(
    world, route_name, probe_name, id_kind
):
    probe_for_ids(world, route_name, probe_name, id_kind)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "route_name, probe_name, id_kind", STREAM_MATRIX, ids=[" | ".join(m) for m in STREAM_MATRIX]
)
def test_on_the_stream_tier_another_tenants_ids_behave_like_ids_that_do_not_exist(
    broker, world, route_name, probe_name, id_kind
):
    world.live_url = broker.url
    probe_for_ids(world, route_name, probe_name, id_kind)


@pytest.mark.django_db(transaction=True)
def test_on_the_stream_tier_the_probes_reach_their_target_with_the_callers_own_ids(broker, world):
    world.live_url = broker.url
    for path in ("/", "/a2a/"):
        subscribed = rpc("SubscribeToTask", task_param("id"))(
            world, world.b, world.own["unread task"], path=path
        )
        streamed = rpc("SendStreamingMessage", send_to)(world, world.b, world.b_peer.id, path=path)
        for response in (subscribed, streamed):
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert b'"result"' in response.content


def test_the_stream_tier_matrix_covers_every_streaming_probe():
    assert {m[1].split(": ")[0] for m in STREAM_MATRIX} == {
        "SendStreamingMessage",
        "SubscribeToTask",
    }
    assert len(STREAM_MATRIX) == 2 * (4 + 2 + 4)  # two paths; task and agent ids


def probe_for_ids(world: World, route_name: str, probe_name: str, id_kind: str) -> None:
    probe = {**ROUTES, **PREFIXES}[route_name].probes[probe_name]
    their_id = world.ids[id_kind]
    before = snapshot(world.a.tenant)
    callers = [world.b]
    if id_kind in TASK_IDS:
        callers.append(world.a_outsider)  # same tenant, not a party: no oracle either
    for caller in callers:
        theirs = normalised(probe.call(world, caller, their_id), their_id)
        random_id = (
            "nosuch-" + uuid.uuid4().hex[:8] if id_kind == "tenant slug" else str(uuid.uuid4())
        )
        nobodys = normalised(probe.call(world, caller, random_id), random_id)
        assert theirs == nobodys, (caller.model.name, theirs, nobodys)
        status, _, _, body = theirs
        assert status < 500 and "secret plans" not in body
    assert snapshot(world.a.tenant) == before


def test_reusing_another_tenants_message_id_is_a_fresh_send(world):
    """Idempotency keys are per sender: B reusing A's messageId neither replays A's task
    nor is refused."""
    a_task = Task.objects.get(pk=world.ids["unread task"])
    params = {
        "message": message(messageId=a_task.message_id, metadata={"destination": world.b_peer.id})
    }
    b_task = result(world.b, "SendMessage", params)["task"]
    assert b_task["id"] != str(a_task.pk)
    assert "secret plans" not in json.dumps(b_task)


CONTROLS = [
    (route_name, probe_name, id_kind)
    for route_name, probe_name, id_kind in MATRIX
    if {**ROUTES, **PREFIXES}[route_name].probes[probe_name].control
    and id_kind in ("active agent", "unread task", "tenant slug", "api key")
]


@pytest.mark.parametrize(
    "route_name, probe_name, id_kind", CONTROLS, ids=[" | ".join(c) for c in CONTROLS]
)
def test_each_read_probe_reaches_its_target_with_the_callers_own_id(
    world, route_name, probe_name, id_kind
):
    probe = {**ROUTES, **PREFIXES}[route_name].probes[probe_name]
    response = probe.call(world, world.b, world.own[id_kind])
    assert response.status_code < 400, response.content[:500]
    if response["Content-Type"].startswith("application/json"):
        body = response.json()
        assert "error" not in body, body
