import json
import uuid

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agents.models import Agent
from tests import factories

pytestmark = pytest.mark.django_db


def register(client: Client, key: str, body, **extra):
    return client.post(
        "/api/v1/agents",
        json.dumps(body) if not isinstance(body, str) else body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
        **extra,
    )


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body["error"]


# Registration ---------------------------------------------------------------------------


def test_register_returns_compat_fields_and_a_working_token(client, api_key):
    response = register(
        client,
        api_key,
        {
            "name": "builder",
            "description": "CI runner",
            "skills": [{"id": "build", "name": "Build"}],
        },
    )
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"agent_id", "api_key", "agent_token", "name", "registered_at"}
    assert body["api_key"] == api_key and body["name"] == "builder"
    assert body["agent_token"].startswith("hka_") and len(body["agent_token"]) == 44
    agent = Agent.objects.get(pk=body["agent_id"])
    assert agent.token_hash != body["agent_token"]  # stored only as a hash
    me = client.get(
        f"/api/v1/agents/{body['agent_id']}", HTTP_AUTHORIZATION=f"Bearer {body['agent_token']}"
    )
    assert me.status_code == 200 and me.json()["skills"] == [{"id": "build", "name": "Build"}]


def test_register_allows_an_empty_description(client, api_key):
    assert register(client, api_key, {"name": "x", "description": ""}).status_code == 201


@pytest.mark.parametrize(
    "body, field",
    [
        ({"description": "no name"}, "name"),
        ({"name": "", "description": ""}, "name"),
        ({"name": "x" * 201, "description": ""}, "name"),
        ({"name": 42, "description": ""}, None),
        ({"name": "x"}, "description"),
        ({"name": "x", "description": "d" * 2001}, "description"),
        ({"name": "x", "description": "", "skills": "build"}, "skills"),
        ({"name": "x", "description": "", "skills": [{"name": "no id"}]}, "skills"),
        (
            {"name": "x", "description": "", "skills": [{"id": "a", "name": "A", "tags": "nope"}]},
            "skills",
        ),
        ({"name": "x", "description": "", "webhook_url": "not a url"}, "webhook_url"),
    ],
)
def test_register_rejects_invalid_bodies_with_field_details(client, api_key, body, field):
    before = Agent.objects.count()
    error = assert_error(register(client, api_key, body), 400, "INVALID_REQUEST")
    if field:
        assert field in error["details"]
    assert Agent.objects.count() == before  # no partial write


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", '"a string"', "null"])
def test_register_rejects_malformed_json(client, api_key, raw):
    assert_error(register(client, api_key, raw), 400, "INVALID_REQUEST")


def test_register_needs_a_key(client):
    response = client.post("/api/v1/agents", "{}", content_type="application/json")
    assert_error(response, 401, "UNAUTHORIZED")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_register_refuses_an_agent_token(client, agent):
    assert_error(
        register(client, agent.token, {"name": "x", "description": ""}), 401, "UNAUTHORIZED"
    )


def test_body_over_the_limit_is_413(client, api_key, settings):
    settings.HIKYAKU_MAX_BODY_BYTES = 1000
    response = register(client, api_key, {"name": "x", "description": "d" * 2000})
    assert_error(response, 413, "PAYLOAD_TOO_LARGE")


# Authentication (docs/PROTOCOL.md §2) ------------------------------------------------------------


def get_agents(client: Client, authorization: str | None, agent_id: str | None = None):
    headers = {}
    if authorization is not None:
        headers["HTTP_AUTHORIZATION"] = authorization
    if agent_id is not None:
        headers["HTTP_X_AGENT_ID"] = agent_id
    return client.get("/api/v1/agents", **headers)


def test_compat_identity_is_key_plus_agent_id(client, api_key, agent):
    assert get_agents(client, f"Bearer {api_key}", agent.id).status_code == 200


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "BeArEr"])
def test_bearer_scheme_is_case_insensitive(client, api_key, agent, scheme):
    assert get_agents(client, f"{scheme} {api_key}", agent.id).status_code == 200
    assert get_agents(client, f"{scheme} {agent.token}").status_code == 200


@pytest.mark.parametrize(
    "authorization, agent_id",
    [
        (None, None),
        ("", None),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer", None),
        ("Bearer hky_00000000000000000000000000000000", "{agent}"),
        ("Bearer not-a-key", "{agent}"),
        ("Bearer {key}", None),
        ("Bearer {key}", "not-a-uuid"),
        ("Bearer {key}", "{random}"),
        ("Bearer {key}", "{stranger}"),
        ("Bearer hka_" + "x" * 40, None),
        ("Bearer {token}", "{peer}"),
    ],
)
def test_bad_credentials_are_401_with_the_envelope(
    client, api_key, agent, peer, stranger, authorization, agent_id
):
    values = {
        "key": api_key,
        "token": agent.token,
        "agent": agent.id,
        "peer": peer.id,
        "stranger": stranger.id,
        "random": str(uuid.uuid4()),
    }
    authorization = authorization.format(**values) if authorization else authorization
    agent_id = agent_id.format(**values) if agent_id else agent_id
    response = get_agents(client, authorization, agent_id)
    assert_error(response, 401, "UNAUTHORIZED")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_token_identity_accepts_a_matching_agent_id(client, agent):
    assert get_agents(client, f"Bearer {agent.token}", agent.id).status_code == 200


def test_revoked_key_stops_working_at_once(client, tenant, api_key, agent):
    factories.api_key(tenant)  # a second key keeps the agents registered
    from agents.services import revoke_api_key
    from tenants.selectors import api_key_by_raw

    assert get_agents(client, f"Bearer {api_key}", agent.id).status_code == 200
    revoke_api_key(api_key=api_key_by_raw(api_key))
    assert_error(get_agents(client, f"Bearer {api_key}", agent.id), 401, "UNAUTHORIZED")
    assert get_agents(client, f"Bearer {agent.token}").status_code == 200  # token unaffected


def test_expired_key_stops_working_at_once(client, tenant, agent):
    import time_machine
    from django.utils import timezone

    expires = timezone.now() + timezone.timedelta(minutes=5)
    key = factories.api_key(tenant, expires_at=expires)
    assert get_agents(client, f"Bearer {key}", agent.id).status_code == 200
    with time_machine.travel(expires + timezone.timedelta(seconds=1)):
        assert_error(get_agents(client, f"Bearer {key}", agent.id), 401, "UNAUTHORIZED")
        assert_error(register(client, key, {"name": "x", "description": ""}), 401, "UNAUTHORIZED")


def test_revoking_the_last_key_deregisters_the_tenants_agents(tenant, api_key, agent, peer):
    from agents.services import revoke_api_key
    from tenants.selectors import api_key_by_raw

    second = factories.api_key(tenant)
    assert revoke_api_key(api_key=api_key_by_raw(api_key)).deregistered == 0
    assert agent.refresh().status == Agent.Status.ACTIVE
    assert revoke_api_key(api_key=api_key_by_raw(second)).deregistered == 2
    for a in (agent, peer):
        model = a.refresh()
        assert model.status == Agent.Status.DEREGISTERED and model.deregistered_at is not None
    assert_error(get_agents(Client(), f"Bearer {agent.token}"), 401, "UNAUTHORIZED")


def test_require_agent_tokens_refuses_the_compat_identity(client, tenant, api_key, agent):
    tenant.require_agent_tokens = True
    tenant.save()
    assert_error(get_agents(client, f"Bearer {api_key}", agent.id), 401, "UNAUTHORIZED")
    assert get_agents(client, f"Bearer {agent.token}").status_code == 200
    # Registration still needs only the key.
    assert register(client, api_key, {"name": "new", "description": ""}).status_code == 201


def test_deregistered_agent_cannot_authenticate(client, api_key, agent, agent_client):
    assert agent_client.delete(f"/api/v1/agents/{agent.id}").status_code == 204
    assert_error(get_agents(client, f"Bearer {agent.token}"), 401, "UNAUTHORIZED")
    assert_error(get_agents(client, f"Bearer {api_key}", agent.id), 401, "UNAUTHORIZED")


def test_disabled_agent_cannot_authenticate_until_enabled(client, agent):
    from agents.services import set_agent_enabled

    set_agent_enabled(agent=agent.model, enabled=False)
    assert_error(get_agents(client, f"Bearer {agent.token}"), 401, "UNAUTHORIZED")
    set_agent_enabled(agent=agent.model, enabled=True)
    assert get_agents(client, f"Bearer {agent.token}").status_code == 200


# Listing ---------------------------------------------------------------------------------


def test_list_shows_active_agents_of_my_tenant_only(agent_client, agent, peer, stranger, tenant):
    gone = factories.agent(tenant, name="gone")
    Client(HTTP_AUTHORIZATION=f"Bearer {gone.token}").delete(f"/api/v1/agents/{gone.id}")
    body = agent_client.get("/api/v1/agents").json()
    assert [a["name"] for a in body["agents"]] == ["alice", "bob"]
    assert body["next_cursor"] is None
    first = body["agents"][0]
    assert {"agent_id", "name", "description", "registered_at", "skills", "status"} <= set(first)


def test_list_pages_with_a_cursor_and_searches_by_name(agent_client, tenant):
    for i in range(7):
        factories.agent(tenant, name=f"worker-{i}")
    seen, cursor = [], None
    while True:
        url = "/api/v1/agents?limit=3" + (f"&cursor={cursor}" if cursor else "")
        body = agent_client.get(url).json()
        seen += [a["name"] for a in body["agents"]]
        cursor = body["next_cursor"]
        if not cursor:
            break
    assert seen == ["alice"] + [f"worker-{i}" for i in range(7)]
    found = agent_client.get("/api/v1/agents?q=WORKER-3").json()["agents"]
    assert [a["name"] for a in found] == ["worker-3"]


@pytest.mark.parametrize("query", ["limit=0", "limit=501", "limit=abc", "cursor=garbage"])
def test_list_rejects_bad_parameters(agent_client, query):
    assert_error(agent_client.get(f"/api/v1/agents?{query}"), 400, "INVALID_REQUEST")


def test_list_query_count_is_constant_as_agents_grow(agent_client, tenant):
    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert agent_client.get("/api/v1/agents").status_code == 200
        return len(ctx.captured_queries)

    count()  # warm up last_seen_at
    few = count()
    for i in range(25):
        factories.agent(tenant, name=f"more-{i}")
    assert count() == few
    assert few <= 2


def test_an_agent_is_written_as_its_openapi_description_says(tenant):
    """The registry's reads write agents with `agents.wire.agent_out`; the OpenAPI document
    describes them with the serializer `AgentOut`. Both must say the same, field by field."""
    from datetime import timedelta

    from django.utils import timezone

    from agents.api import AgentOut
    from agents.wire import agent_out

    seen = factories.agent(tenant, name="Zoë ✓", description="", skills=[{"id": "é", "n": [1]}])
    Agent.objects.filter(pk=seen.id).update(last_seen_at=timezone.now() - timedelta(days=3))
    never = factories.agent(tenant, name="never-seen")
    for model in Agent.objects.filter(pk__in=[seen.id, never.id]):
        assert agent_out(model) == AgentOut(model).data
    assert set(agent_out(model)) == set(AgentOut().fields)


def test_one_agent_is_written_as_its_openapi_description_says(tenant, settings):
    """GET /api/v1/agents/<id> writes with `agents.wire.agent_detail_out`, described by
    `AgentDetailOut`: the same, its webhook URL shown to the agent itself only."""
    from django.test import RequestFactory

    from agents.api import AgentDetailOut
    from agents.wire import agent_detail_out

    settings.ALLOWED_HOSTS = ["broker.example"]
    owner = factories.agent(tenant, name="hooked").model
    Agent.objects.filter(pk=owner.pk).update(webhook_url="https://hooks.example/s3cret")
    owner.refresh_from_db()
    other = factories.agent(tenant, name="other").model
    request = RequestFactory().get("/", HTTP_HOST="broker.example")
    for viewer in (owner, other, None):
        written = agent_detail_out(owner, viewer=viewer, request=request)
        described = AgentDetailOut(owner, context={"request": request, "viewer": viewer}).data
        assert written == described
        assert written["webhook_url"] == ("https://hooks.example/s3cret" if viewer == owner else "")
    assert set(written) == set(AgentDetailOut().fields)


@pytest.mark.parametrize("q", ["a", "A", "%", "_", "\\", "50%_off", "ZOË", "o\\%", "-"])
def test_the_name_search_matches_what_the_orm_matches(tenant, q):
    """The list's one statement searches names as the ORM's `name__icontains` does on this
    database, `%`, `_` and backslashes taken literally."""
    from agents.selectors import list_active_agents

    for name in ["alpha", "ALPHA_2", "50%_off", "50x-off", "zoë", "back\\slash", "o\\%x", "plain"]:
        factories.agent(tenant, name=name)
    expected = list(
        Agent.objects.filter(tenant=tenant, status="active", name__icontains=q)
        .order_by("name", "id")
        .values_list("name", flat=True)
    )
    page, _ = list_active_agents(tenant=tenant, q=q, limit=100)
    assert [a.name for a in page] == expected


# Detail, update, delete, token ------------------------------------------------------------


def test_detail_has_status_skills_and_an_agent_card(agent_client, peer):
    body = agent_client.get(f"/api/v1/agents/{peer.id}").json()
    assert body["agent_id"] == peer.id and body["status"] == "active"
    card = body["agent_card"]
    assert card["name"] == "bob"
    assert card["supportedInterfaces"][0]["url"].endswith(f"/a2a/agents/{peer.id}/")
    assert card["supportedInterfaces"][0]["protocolBinding"] == "JSONRPC"


def test_patch_updates_my_own_description_and_skills(agent_client, agent):
    response = agent_client.patch_json(
        f"/api/v1/agents/{agent.id}",
        {"description": "new", "skills": [{"id": "review", "name": "Review"}]},
    )
    assert response.status_code == 200
    model = agent.refresh()
    assert model.description == "new" and model.skills[0]["id"] == "review"


def test_patch_rejects_unknown_or_invalid_fields(agent_client, agent):
    assert_error(
        agent_client.patch_json(f"/api/v1/agents/{agent.id}", {"name": "x"}), 400, "INVALID_REQUEST"
    )
    assert_error(
        agent_client.patch_json(f"/api/v1/agents/{agent.id}", {"skills": 5}), 400, "INVALID_REQUEST"
    )
    assert agent.refresh().name == "alice"


def test_patch_and_delete_of_a_peer_are_forbidden(agent_client, peer):
    assert_error(
        agent_client.patch_json(f"/api/v1/agents/{peer.id}", {"description": "x"}), 403, "FORBIDDEN"
    )
    assert_error(agent_client.delete(f"/api/v1/agents/{peer.id}"), 403, "FORBIDDEN")
    assert peer.refresh().status == "active"


def test_rotating_the_token_invalidates_the_old_one_at_once(agent_client, agent):
    response = agent_client.post(f"/api/v1/agents/{agent.id}/token")
    assert response.status_code == 200
    new_token = response.json()["agent_token"]
    assert new_token != agent.token
    assert_error(get_agents(Client(), f"Bearer {agent.token}"), 401, "UNAUTHORIZED")
    assert get_agents(Client(), f"Bearer {new_token}").status_code == 200


def test_rotating_a_peers_token_is_forbidden(agent_client, peer):
    assert_error(agent_client.post(f"/api/v1/agents/{peer.id}/token"), 403, "FORBIDDEN")


# Other tenants: always "not found", identical to a random id --------------------------------

ROUTES = [
    ("get", "/api/v1/agents/{id}"),
    ("patch", "/api/v1/agents/{id}"),
    ("delete", "/api/v1/agents/{id}"),
    ("post", "/api/v1/agents/{id}/token"),
]


@pytest.mark.parametrize("method, route", ROUTES)
def test_other_tenants_agents_are_not_found_exactly_like_random_ids(
    agent_client, stranger, tenant, method, route
):
    deregistered = factories.agent(tenant, name="old")
    Client(HTTP_AUTHORIZATION=f"Bearer {deregistered.token}").delete(
        f"/api/v1/agents/{deregistered.id}"
    )

    def call(agent_id: str):
        kwargs = (
            {"data": json.dumps({"description": "x"}), "content_type": "application/json"}
            if method == "patch"
            else {}
        )
        response = getattr(agent_client, method)(route.format(id=agent_id), **kwargs)
        return response.status_code, response.json()["error"]["code"]

    random_id = str(uuid.uuid4())
    expected = call(random_id)
    assert expected == (404, "AGENT_NOT_FOUND")
    assert call(stranger.id) == expected
    assert call(deregistered.id) == expected
    assert call("not-a-uuid") == expected
    assert (
        stranger.refresh().status == "active" and stranger.refresh().description == "mallory agent"
    )


def test_unknown_api_route_is_a_json_404(agent_client):
    assert_error(agent_client.get("/api/v1/nope"), 404, "NOT_FOUND")
