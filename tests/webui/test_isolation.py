"""No page of a tenant is reachable by anyone who is not its member: another tenant's slug,
or another tenant's ids under one's own slug, answer 404 exactly like ids that do not exist.

The URLs come from webui.urls itself, so a page added later is covered automatically (and a
new kind of id in a URL makes `ids` below fail until it is given an other-tenant value).
"""

import base64
import re
import uuid

import pytest

from agents.models import Agent
from messaging.models import Task
from messaging.parties import Sender
from messaging.services import send_message
from tenants.models import ApiKey
from tests import factories
from webui.files import part_digest
from webui.urls import tenant_urls

pytestmark = pytest.mark.django_db


def world(tenant, agent) -> dict[str, str]:
    """One of everything a tenant URL can name, in `tenant`."""
    factories.api_key(tenant)
    attachment = {"raw": base64.b64encode(tenant.slug.encode()).decode(), "filename": "a.txt"}
    task = send_message(
        sender=Sender(tenant=tenant, agent=agent.model),
        message={
            "messageId": "m-1",
            "parts": [{"text": "hi"}, attachment],
            "metadata": {"destination": agent.id},
        },
    )
    return {
        "agent_id": agent.id,
        "key_id": str(ApiKey.objects.get(tenant=tenant).pk),
        "task_id": str(task.pk),
        "digest": part_digest(attachment),
    }


@pytest.fixture
def acme_world(tenant, owner, agent):
    return world(tenant, agent)


@pytest.fixture
def globex_world(other_tenant, outsider, stranger):
    return world(other_tenant, stranger)


def fill(pattern: str, slug: str, ids: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        name = match.group(1)
        assert name in ids, f"give {name!r} an other-tenant value in test_isolation.py"
        return ids[name]

    return "/ui/t/" + slug + "/" + re.sub(r"<(?:\w+:)?(\w+)>", value, pattern)


def tenant_paths(slug: str, ids: dict[str, str]) -> list[str]:
    return [fill(str(p.pattern), slug, ids) for p in tenant_urls]


def assert_all_404(client, paths: list[str]) -> None:
    for path in paths:
        for method in (client.get, client.post):
            response = method(path)
            assert response.status_code in (404, 405), (method.__name__, path)
            if response.status_code == 405:  # POST-only URL: its POST must be 404 too
                assert method == client.get and client.post(path).status_code == 404, path


def test_a_member_of_one_tenant_cannot_reach_any_page_of_another(
    owner_client, acme_world, globex_world
):
    assert_all_404(owner_client, tenant_paths("globex", globex_world))


def test_other_tenants_ids_under_ones_own_slug_are_not_found(
    owner_client, acme_world, globex_world
):
    paths = [p for p in tenant_paths("acme", globex_world) if p != "/ui/t/acme/"]
    paths = [p for p in paths if any(v in p for v in globex_world.values())]
    assert paths, "expected pages with ids"
    assert_all_404(owner_client, paths)


def test_unknown_ids_look_the_same_as_other_tenants_ids(owner_client, acme_world, globex_world):
    unknown = {name: str(uuid.uuid4()) for name in acme_world}
    pairs = zip(tenant_paths("acme", globex_world), tenant_paths("acme", unknown), strict=True)
    for theirs, nothing in pairs:
        if theirs == nothing:
            continue  # no id in this URL
        a, b = owner_client.get(theirs), owner_client.get(nothing)
        assert (a.status_code, without_csrf(a)) == (b.status_code, without_csrf(b))


def without_csrf(response) -> str:
    """The page without its per-render CSRF token (masked differently every time)."""
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "", response.content.decode())


def test_a_user_without_tenants_reaches_nothing(user_client, acme_world, globex_world):
    assert_all_404(user_client, tenant_paths("acme", acme_world))


def test_a_former_member_reaches_nothing(member_client, member, tenant, acme_world):
    member_client.post("/ui/t/acme/leave/")
    assert_all_404(member_client, tenant_paths("acme", acme_world))


def test_nothing_of_another_tenant_was_changed(owner_client, acme_world, globex_world):
    assert_all_404(owner_client, tenant_paths("globex", globex_world))
    assert Agent.objects.get(pk=globex_world["agent_id"]).status == "active"
    assert ApiKey.objects.get(pk=globex_world["key_id"]).revoked_at is None
    assert Task.objects.filter(tenant__slug="globex").count() == 1


def test_sending_cannot_use_or_reach_another_tenants_agents(owner_client, acme_world, globex_world):
    page = owner_client.get("/ui/t/acme/send/").content.decode()
    assert globex_world["agent_id"] not in page
    response = owner_client.post(
        "/ui/t/acme/send/",
        {
            "sender": globex_world["agent_id"],
            "to": acme_world["agent_id"],
            "text": "hi",
            "sensitivity": "internal",
            "once": "x1",
        },
    )
    assert response.status_code == 400
    assert Task.objects.count() == 2


def test_the_tenant_switcher_lists_only_my_tenants(owner_client, acme_world, globex_world):
    html = owner_client.get("/ui/t/acme/agents/").content.decode()
    assert "/ui/t/acme/" in html and "globex" not in html.lower()
