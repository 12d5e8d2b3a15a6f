"""Every agent's own A2A card and the card directory (docs/PROTOCOL.md §8)."""

import pytest
from a2a.types import AgentCard
from django.test import Client
from google.protobuf.json_format import ParseDict

from agents import services
from agents.models import Agent
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def unlimited_anonymous_callers(settings):
    """Anonymous requests of the whole suite share one address; only the rate limit test
    counts them."""
    settings.HIKYAKU_ANONYMOUS_RATE_LIMIT_PER_MINUTE = 0


def card_url(agent) -> str:
    return f"/a2a/agents/{agent.id}/.well-known/agent-card.json"


@pytest.fixture
def published(tenant):
    bob = factories.agent(
        tenant,
        name="bob",
        description="Reviews pull requests.",
        skills=[{"id": "review", "name": "Review", "description": "Code review", "tags": ["git"]}],
    )
    services.set_agent_public(agent=bob.model, public=True)
    return bob


def test_public_card_is_an_a2a_1_0_card_for_anyone(client, published):
    response = client.get(card_url(published))
    assert response.status_code == 200
    card = response.json()
    assert card["name"] == "bob" and card["description"] == "Reviews pull requests."
    assert card["supportedInterfaces"] == [
        {
            "url": f"http://testserver/a2a/agents/{published.id}/",
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }
    ]
    assert [s["id"] for s in card["skills"]] == ["review"]
    assert card["capabilities"] == {"streaming": True, "pushNotifications": True}
    # Anonymous access: an empty requirement among the alternatives.
    assert {} in card["securityRequirements"]
    assert "hkc_" in card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["bearerFormat"]
    assert response["Cache-Control"] == "public, max-age=60"
    ParseDict(card, AgentCard())  # a valid A2A 1.0 card for the SDK


def test_card_answers_if_none_match_with_304(client, published):
    etag = client.get(card_url(published))["ETag"]
    again = client.get(card_url(published), HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304 and again["ETag"] == etag


def test_private_card_needs_a_credential_of_its_tenant(client, agent, api_key, other_api_key):
    anonymous = client.get(card_url(agent))
    assert anonymous.status_code == 401 and "Bearer" in anonymous["WWW-Authenticate"]
    by_key = client.get(card_url(agent), HTTP_AUTHORIZATION=f"Bearer {api_key}")
    assert by_key.status_code == 200
    card = by_key.json()
    assert {} not in card["securityRequirements"]
    assert card["skills"] == []  # present even when empty: A2A requires the field
    assert by_key["Cache-Control"] == "private, max-age=60"
    by_token = client.get(card_url(agent), HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    assert by_token.status_code == 200
    other = client.get(card_url(agent), HTTP_AUTHORIZATION=f"Bearer {other_api_key}")
    assert other.status_code == 404 and other.json()["error"]["code"] == "AGENT_NOT_FOUND"


def test_other_tenants_may_read_a_public_card(client, published, other_api_key):
    response = client.get(card_url(published), HTTP_AUTHORIZATION=f"Bearer {other_api_key}")
    assert response.status_code == 200


@pytest.mark.parametrize("status", ["deregistered", "disabled"])
def test_inactive_agents_have_no_card(client, published, api_key, status):
    Agent.objects.filter(pk=published.model.pk).update(
        status=status,
        deregistered_at=published.model.registered_at if status == "deregistered" else None,
    )
    assert client.get(card_url(published)).status_code == 401
    assert (
        client.get(card_url(published), HTTP_AUTHORIZATION=f"Bearer {api_key}").status_code == 404
    )


def test_unknown_agents_look_like_private_ones(client, api_key):
    for agent_id in ("00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        url = f"/a2a/agents/{agent_id}/.well-known/agent-card.json"
        assert client.get(url).status_code == 401
        assert client.get(url, HTTP_AUTHORIZATION=f"Bearer {api_key}").status_code == 404


def test_bad_credentials_are_401_even_for_public_cards(client, published):
    response = client.get(card_url(published), HTTP_AUTHORIZATION="Bearer hky_" + "0" * 32)
    assert response.status_code == 401


def test_card_uses_the_configured_base_url(client, published, settings):
    settings.HIKYAKU_BASE_URL = "https://broker.example.com"
    card = client.get(card_url(published)).json()
    url = card["supportedInterfaces"][0]["url"]
    assert url == f"https://broker.example.com/a2a/agents/{published.id}/"


def test_card_lists_the_input_modes_of_its_skills(client, tenant, api_key, settings):
    settings.HIKYAKU_PEER_INPUT_MODES = ["text/plain"]
    eve = factories.agent(
        tenant,
        name="eve",
        skills=[{"id": "s", "name": "Shots", "description": "x", "inputModes": ["image/png"]}],
    )
    card = client.get(card_url(eve), HTTP_AUTHORIZATION=f"Bearer {api_key}").json()
    assert card["defaultInputModes"] == ["text/plain", "image/png"]


def test_directory_shows_anonymous_callers_the_public_agents_of_every_tenant(
    client, published, agent, other_tenant, django_assert_max_num_queries
):
    theirs = factories.agent(other_tenant, name="carol")
    services.set_agent_public(agent=theirs.model, public=True)
    with django_assert_max_num_queries(1):
        body = client.get("/a2a/agents/").json()
    assert [a["card"]["name"] for a in body["agents"]] == ["bob", "carol"]
    first = body["agents"][0]
    assert first["agentId"] == published.id and first["public"] is True
    assert first["url"] == f"http://testserver/a2a/agents/{published.id}/"
    assert body["nextCursor"] == ""


def test_directory_shows_a_tenant_its_active_agents(
    client, published, agent, stranger, api_key, django_assert_max_num_queries
):
    gone = factories.agent(published.tenant, name="zed")
    services.deregister_agent(agent=gone.model)
    with django_assert_max_num_queries(4):  # key lookup, touch, page
        body = client.get("/a2a/agents/", HTTP_AUTHORIZATION=f"Bearer {api_key}").json()
    assert [(a["card"]["name"], a["public"]) for a in body["agents"]] == [
        ("alice", False),
        ("bob", True),
    ]


def test_directory_pages_with_a_cursor(client, tenant, agent_client):
    for i in range(5):
        factories.agent(tenant, name=f"worker-{i}")
    seen, cursor = [], ""
    while True:
        body = agent_client.get(f"/a2a/agents/?limit=2&cursor={cursor}").json()
        seen += [a["card"]["name"] for a in body["agents"]]
        cursor = body["nextCursor"]
        if not cursor:
            break
    assert seen == ["alice"] + [f"worker-{i}" for i in range(5)]
    assert agent_client.get("/a2a/agents/?limit=0").status_code == 400


def test_set_agent_public_reports_changes(published):
    assert services.set_agent_public(agent=published.model, public=True) is False
    assert services.set_agent_public(agent=published.model, public=False) is True
    assert Agent.objects.get(pk=published.model.pk).public is False


def test_admin_actions_publish_and_unpublish(tenant, agent):
    from django.contrib.admin.sites import site
    from django.test import RequestFactory

    from tenants.models import User

    admin = site._registry[Agent]
    request = RequestFactory().post("/admin/agents/agent/")
    request.user = User.objects.create_superuser("root@example.com", "pw-1234567890")
    request._messages = type("M", (), {"add": lambda *a, **k: None})()
    admin.publish(request, Agent.objects.filter(pk=agent.model.pk))
    assert Agent.objects.get(pk=agent.model.pk).public is True
    admin.unpublish(request, Agent.objects.filter(pk=agent.model.pk))
    assert Agent.objects.get(pk=agent.model.pk).public is False


def test_anonymous_card_reads_are_rate_limited_per_address(published, settings):
    settings.HIKYAKU_ANONYMOUS_RATE_LIMIT_PER_MINUTE = 2
    settings.REDIS_URL = ""
    client = Client(REMOTE_ADDR="203.0.113.9")
    assert [client.get(card_url(published)).status_code for _ in range(3)] == [200, 200, 429]
    assert Client(REMOTE_ADDR="203.0.113.10").get(card_url(published)).status_code == 200


def test_publishagent_command(agent):
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command("publishagent", agent.id, stdout=out)
    assert "is public" in out.getvalue() and agent.refresh().public is True
    call_command("publishagent", agent.id, "--off", stdout=StringIO())
    assert agent.refresh().public is False
    with pytest.raises(CommandError):
        call_command("publishagent", "00000000-0000-0000-0000-000000000000")


def test_a_kept_card_follows_every_change_to_what_it_is_built_from(tenant, settings):
    """Cards are kept by what they are built from (agents.cards.agent_card): after each change
    below — the agent's name, description, skills, publishing, the host it is asked on, the
    broker's input modes — the card is the one built afresh, never the one kept before."""
    from django.test import RequestFactory

    from agents import cards

    settings.ALLOWED_HOSTS = ["one.example", "two.example"]
    agent = factories.agent(tenant, name="carded").model
    request = RequestFactory().get("/", HTTP_HOST="one.example")

    def fresh() -> dict:
        cards._card.cache_clear()
        built = cards.agent_card(agent, request)
        cards._card.cache_clear()
        return built

    seen = [cards.agent_card(agent, request)]
    changes = [
        lambda: setattr(agent, "name", "renamed"),
        lambda: setattr(agent, "description", "now described"),
        lambda: setattr(agent, "skills", [{"id": "s", "name": "S", "inputModes": ["image/png"]}]),
        lambda: setattr(agent, "public", True),
        lambda: request.META.update(HTTP_HOST="two.example"),
        lambda: setattr(settings, "HIKYAKU_PEER_INPUT_MODES", ["text/plain"]),
    ]
    for change in changes:
        cards.agent_card(agent, request)  # kept as it was
        change()
        card = cards.agent_card(agent, request)
        assert card == fresh() and card not in seen
        seen.append(card)
    card["name"] = "mutated by a caller"
    assert cards.agent_card(agent, request)["name"] == "renamed"
