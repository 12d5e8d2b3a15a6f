"""The web UI's pages, through the Django test client: tenants, members, keys, agents."""

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agents.models import Agent
from messaging.parties import Sender
from messaging.services import send_message
from tenants.credentials import hash_secret
from tenants.models import ApiKey, Membership
from tests import factories

pytestmark = pytest.mark.django_db


def form_token(response) -> str:
    return re.search(r'name="once" value="([^"]+)"', response.content.decode()).group(1)


def create_key(client: Client, slug: str = "acme", **fields):
    token = form_token(client.get(f"/ui/t/{slug}/keys/"))
    data = {"label": "", "expires": "never", "once": token, **fields}
    return client.post(f"/ui/t/{slug}/keys/new/", data)


# Login and security headers ---------------------------------------------------------------


def test_every_ui_page_requires_login(client, tenant):
    for path in ["/ui/tenants/new/", "/ui/t/acme/agents/", "/ui/t/acme/keys/"]:
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/?next=")


def test_pages_carry_csp_and_framing_headers(owner_client):
    response = owner_client.get("/ui/t/acme/agents/")
    csp = response["Content-Security-Policy"]
    assert "script-src 'self';" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"


def test_pages_have_no_inline_script_or_style(owner_client, agent):
    task = send_message(
        sender=Sender(tenant=agent.tenant, agent=agent.model),
        message={"messageId": "m", "parts": [{"text": "x"}], "metadata": {"destination": agent.id}},
    )
    paths = ["/ui/", "/ui/t/acme/agents/", "/ui/t/acme/keys/", "/ui/t/acme/members/"]
    paths += [f"/ui/t/acme/agents/{agent.id}/{p}" for p in ("", "inbox/", "sent/")]
    paths += [f"/ui/t/acme/tasks/{task.pk}/", "/ui/t/acme/send/", "/ui/tenants/new/"]
    for path in paths:
        html = owner_client.get(path).content.decode()
        assert "<script>" not in html and "<script " not in html.replace("<script src=", "")
        assert " style=" not in html and "<style" not in html


def test_forms_are_csrf_protected(owner, tenant):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    response = client.post("/ui/tenants/new/", {"name": "Globex"})
    assert response.status_code == 403
    assert b"This form has expired" in response.content
    assert "csrfmiddlewaretoken" in client.get("/ui/t/acme/keys/").content.decode()


def test_static_files_are_served(client):
    response = client.get("/static/css/hikyaku.css")
    assert response.status_code == 200
    assert b"--accent" in b"".join(response.streaming_content)


def test_api_404s_stay_json_while_ui_404s_are_pages(owner_client):
    assert owner_client.get("/api/v1/nope").json()["error"]["code"] == "NOT_FOUND"
    response = owner_client.get("/ui/t/nope/agents/")
    assert response.status_code == 404
    assert b"<h1>Not found</h1>" in response.content


# Tenants and members ---------------------------------------------------------------------


def test_creating_a_tenant_makes_the_creator_its_owner(user_client, user):
    response = user_client.post("/ui/tenants/new/", {"name": "Initech Labs"})
    assert response.status_code == 302
    slug = re.fullmatch(r"/ui/t/(initech-labs-[a-z0-9]{6})/keys/", response["Location"])[1]
    membership = Membership.objects.get(user=user, tenant__slug=slug)
    assert membership.role == "owner" and membership.tenant.name == "Initech Labs"


def test_creating_a_tenant_tells_nothing_of_other_tenants_slugs(user_client, tenant):
    """`acme` exists (another tenant): asking for it reads exactly like asking for a slug
    nobody has — a new address with a random suffix, never "already exists"."""
    answers = []
    for name, slug in (("Acme", ""), ("Whatever", "acme"), ("Nobody", "nobody-has-this")):
        response = user_client.post("/ui/tenants/new/", {"name": name, "slug": slug})
        assert response.status_code == 302, response.content.decode()[:500]
        answers.append(response["Location"])
    assert re.fullmatch(r"/ui/t/acme-[a-z0-9]{6}/keys/", answers[0])
    assert re.fullmatch(r"/ui/t/acme-[a-z0-9]{6}/keys/", answers[1])
    assert re.fullmatch(r"/ui/t/nobody-has-this-[a-z0-9]{6}/keys/", answers[2])
    assert len(set(answers)) == 3 and tenant.slug == "acme"


def test_a_tenant_name_without_letters_is_a_form_error(user_client):
    response = user_client.post("/ui/tenants/new/", {"name": "!!!"})
    assert response.status_code == 200
    assert "needs a name with letters or digits" in response.content.decode()


def test_home_lists_my_tenants_and_the_switcher_offers_them(owner_client, other_tenant):
    html = owner_client.get("/ui/").content.decode()
    assert "/ui/t/acme/" in html
    assert "/ui/t/globex/" not in html


def test_home_offers_to_create_the_first_tenant(user_client):
    html = user_client.get("/ui/").content.decode()
    assert "Create your first tenant" in html


def test_owner_adds_an_existing_user_by_email(owner_client, tenant):
    colleague = factories.user("colleague@example.com")
    response = owner_client.post(
        "/ui/t/acme/members/add/", {"email": "Colleague@Example.com", "role": "member"}
    )
    assert response.status_code == 302
    assert Membership.objects.get(user=colleague, tenant=tenant).role == "member"


def test_adding_an_unknown_email_is_a_clear_form_error(owner_client, tenant):
    response = owner_client.post(
        "/ui/t/acme/members/add/", {"email": "nobody@example.com", "role": "member"}
    )
    assert response.status_code == 400
    assert "No account uses nobody@example.com yet" in response.content.decode()
    assert not Membership.objects.filter(user__email="nobody@example.com").exists()


def test_members_cannot_add_members(member_client, tenant):
    factories.user("colleague@example.com")
    response = member_client.post(
        "/ui/t/acme/members/add/", {"email": "colleague@example.com", "role": "owner"}
    )
    assert response.status_code == 403
    assert tenant.memberships.count() == 2


def test_a_member_can_leave(member_client, member, tenant):
    assert member_client.get("/ui/t/acme/leave/").status_code == 200
    response = member_client.post("/ui/t/acme/leave/")
    assert response.status_code == 302 and response["Location"] == "/ui/"
    assert not Membership.objects.filter(user=member, tenant=tenant).exists()
    assert member_client.get("/ui/t/acme/agents/").status_code == 404


def test_the_last_owner_cannot_leave(owner_client, owner, tenant):
    response = owner_client.post("/ui/t/acme/leave/", follow=True)
    assert "The last owner cannot leave" in response.content.decode()
    assert Membership.objects.filter(user=owner, tenant=tenant).exists()


# API keys --------------------------------------------------------------------------------


def test_a_new_key_is_shown_once_and_stored_only_as_a_hash(owner_client, tenant):
    response = create_key(owner_client, label="CI runners")
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    raw = re.search(r"hky_[0-9a-f]{32}", response.content.decode()).group(0)
    key = ApiKey.objects.get(tenant=tenant, label="CI runners")
    assert key.key_hash == hash_secret(raw)
    assert "will not be shown again" in response.content.decode()
    # Nothing shows it again: not the list, not the session, not a resubmitted form.
    assert raw not in owner_client.get("/ui/t/acme/keys/").content.decode()
    assert raw not in str(dict(owner_client.session))


def test_resubmitting_the_create_form_creates_nothing_and_shows_no_key(owner_client, tenant):
    token = form_token(owner_client.get("/ui/t/acme/keys/"))
    data = {"label": "once", "expires": "never", "once": token}
    first = owner_client.post("/ui/t/acme/keys/new/", data)
    assert re.search(r"hky_[0-9a-f]{32}", first.content.decode())
    again = owner_client.post("/ui/t/acme/keys/new/", data, follow=True)
    assert not re.search(r"hky_[0-9a-f]{32}", again.content.decode())
    assert "already created" in again.content.decode()
    assert ApiKey.objects.filter(tenant=tenant, label="once").count() == 1


def test_a_key_can_expire(owner_client, tenant):
    create_key(owner_client, label="week", expires="7")
    create_key(owner_client, label="dated", expires="custom", expires_on="2099-01-31")
    week, dated = ApiKey.objects.get(label="week"), ApiKey.objects.get(label="dated")
    assert week.expires_at is not None and week.status == "active"
    assert dated.expires_at.isoformat() == "2099-01-31T00:00:00+00:00"


def test_a_past_or_missing_expiry_date_is_a_form_error(owner_client, tenant):
    response = create_key(owner_client, expires="custom", expires_on="2001-01-01")
    assert response.status_code == 400 and "must be in the future" in response.content.decode()
    response = create_key(owner_client, expires="custom")
    assert response.status_code == 400 and "Pick the expiry date" in response.content.decode()
    assert not tenant.api_keys.exists()


def test_members_see_keys_but_cannot_create_or_revoke(member_client, tenant):
    raw = factories.api_key(tenant)
    key = ApiKey.objects.get(tenant=tenant)
    html = member_client.get("/ui/t/acme/keys/").content.decode()
    assert f"hky_{key.prefix}" in html and raw not in html
    assert 'name="once"' not in html
    response = member_client.post(
        "/ui/t/acme/keys/new/", {"label": "x", "expires": "never", "once": "t"}
    )
    assert response.status_code == 403
    assert member_client.post(f"/ui/t/acme/keys/{key.pk}/revoke/").status_code == 403
    assert ApiKey.objects.get(pk=key.pk).revoked_at is None


def test_key_list_shows_status_and_agent_counts_in_constant_queries(owner_client, tenant):
    def page_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert owner_client.get("/ui/t/acme/keys/").status_code == 200
        return len(queries)

    key = ApiKey.objects.get(pk=factories_key(tenant, label="first"))
    baseline = page_queries()
    for n in range(3):
        factories_key(tenant, label=f"more-{n}")
        agent = factories.agent(tenant, name=f"agent-{n}").model
        Agent.objects.filter(pk=agent.pk).update(registered_with=key)
    assert page_queries() == baseline
    # session, user, membership, keys with counts, switcher memberships
    assert baseline == 5
    html = owner_client.get("/ui/t/acme/keys/").content.decode()
    row = re.search(rf'data-key-prefix="{key.prefix}".*?</tr>', html, re.S).group(0)
    assert 'data-label="Agents">3<' in row


def factories_key(tenant, **kwargs) -> str:
    raw = factories.api_key(tenant, **kwargs)
    return ApiKey.objects.get(key_hash=hash_secret(raw)).pk


def test_agents_registered_over_the_api_count_against_their_key(owner_client, tenant, client):
    raw = factories.api_key(tenant, label="reg")
    for name in ("alpha", "beta"):
        response = client.post(
            "/api/v1/agents",
            {"name": name, "description": ""},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {raw}",
        )
        assert response.status_code == 201
    key = ApiKey.objects.get(label="reg")
    assert key.registered_agents.count() == 2


def test_revoking_asks_for_confirmation_first(owner_client, tenant, agent):
    key_id = factories_key(tenant, label="only")
    response = owner_client.get(f"/ui/t/acme/keys/{key_id}/revoke/")
    html = response.content.decode()
    assert "last active key" in html and "deregisters all 1 agent" in html
    assert ApiKey.objects.get(pk=key_id).revoked_at is None


def test_revoking_the_last_key_deregisters_the_agents(owner_client, tenant, agent, peer):
    key_id = factories_key(tenant)
    response = owner_client.post(f"/ui/t/acme/keys/{key_id}/revoke/", follow=True)
    assert "2 agent(s) were deregistered" in response.content.decode()
    assert ApiKey.objects.get(pk=key_id).status == "revoked"
    assert set(Agent.objects.values_list("status", flat=True)) == {"deregistered"}


def test_revoking_one_of_two_keys_warns_of_nothing_and_keeps_agents(owner_client, tenant, agent):
    key_id = factories_key(tenant, label="old")
    factories_key(tenant, label="new")
    html = owner_client.get(f"/ui/t/acme/keys/{key_id}/revoke/").content.decode()
    assert "last active key" not in html
    owner_client.post(f"/ui/t/acme/keys/{key_id}/revoke/")
    assert agent.refresh().status == "active"


# Agents ----------------------------------------------------------------------------------


def test_agents_page_lists_active_agents_with_details(owner_client, tenant):
    factories.agent(
        tenant,
        name="reviewer",
        description="Reviews <b>pull</b> requests",
        skills=[{"id": "review", "name": "Code review"}],
    )
    html = owner_client.get("/ui/t/acme/agents/").content.decode()
    assert "reviewer" in html and "Code review" in html
    assert "Reviews &lt;b&gt;pull&lt;/b&gt; requests" in html


def test_agents_page_filters_by_status_and_search(owner_client, tenant, agent, peer):
    owner_client.post(f"/ui/t/acme/agents/{agent.id}/deregister/")
    active = owner_client.get("/ui/t/acme/agents/").content.decode()
    gone = owner_client.get("/ui/t/acme/agents/?status=deregistered").content.decode()
    assert agent.id not in active and peer.id in active
    assert agent.id in gone and peer.id not in gone
    searched = owner_client.get("/ui/t/acme/agents/?q=bo").content.decode()
    assert peer.id in searched
    assert agent.id not in owner_client.get("/ui/t/acme/agents/?q=zzz").content.decode()


def test_agents_page_runs_in_constant_queries(owner_client, tenant):
    def page_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert owner_client.get("/ui/t/acme/agents/").status_code == 200
        return len(queries)

    factories.agent(tenant, name="one")
    baseline = page_queries()
    for n in range(5):
        factories.agent(tenant, name=f"agent-{n}")
    assert page_queries() == baseline
    # session, user, membership, status counts, the page, switcher memberships
    assert baseline == 6


def test_agents_page_pages(owner_client, tenant):
    for n in range(55):
        factories.agent(tenant, name=f"agent-{n:02d}")
    first = owner_client.get("/ui/t/acme/agents/").content.decode()
    second = owner_client.get("/ui/t/acme/agents/?page=2").content.decode()
    assert "agent-00" in first and "agent-54" not in first
    assert "agent-54" in second and "Page 2 of 2" in second


def test_owner_disables_enables_and_deregisters_an_agent(owner_client, agent):
    base = f"/ui/t/acme/agents/{agent.id}"
    assert owner_client.post(f"{base}/disable/").status_code == 302
    assert agent.refresh().status == "disabled"
    owner_client.post(f"{base}/enable/")
    assert agent.refresh().status == "active"
    assert "Deregister alice?" in owner_client.get(f"{base}/deregister/").content.decode()
    assert agent.refresh().status == "active"
    owner_client.post(f"{base}/deregister/")
    assert agent.refresh().status == "deregistered"
    assert owner_client.get(f"{base}/").status_code == 200  # still readable


def test_members_cannot_change_agents(member_client, agent):
    base = f"/ui/t/acme/agents/{agent.id}"
    assert member_client.get(f"{base}/").status_code == 200
    for action in ("disable", "deregister"):
        assert member_client.post(f"{base}/{action}/").status_code == 403
    assert agent.refresh().status == "active"
    assert "Deregister</a>" not in member_client.get(f"{base}/").content.decode()


def test_enable_and_disable_refuse_get(owner_client, agent):
    assert owner_client.get(f"/ui/t/acme/agents/{agent.id}/disable/").status_code == 405
    assert agent.refresh().status == "active"
