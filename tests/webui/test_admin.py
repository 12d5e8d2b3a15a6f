"""The Django admin: lists render without per-row queries, hashes are never shown or editable,
actions go through the services."""

import re
import uuid

import pytest
from django.contrib.admin import helpers
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Agent
from messaging.models import Task
from messaging.parties import Sender
from messaging.services import send_message
from tenants.models import ApiKey, User
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    user = User.objects.create_superuser("root@example.com", "pw")
    client.force_login(user)
    return client


def test_admin_login_goes_through_allauth(client):
    response = client.get("/admin/login/?next=/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_admin_has_the_site_header(admin_client):
    assert "Hikyaku administration" in admin_client.get("/admin/").content.decode()


@pytest.mark.parametrize(
    "path",
    [
        "/admin/tenants/tenant/",
        "/admin/tenants/apikey/",
        "/admin/agents/agent/",
        "/admin/tenants/membership/",
        "/admin/tenants/user/",
        "/admin/messaging/task/",
        "/admin/messaging/taskevent/",
    ],
)
def test_changelists_run_in_constant_queries(admin_client, tenant, other_tenant, path):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(path).status_code == 200
        return len(captured)

    factories.api_key(tenant)
    one = factories.agent(tenant, name="one")
    send(one, one)
    baseline = queries()
    for n in range(4):
        factories.api_key(other_tenant)
        other = factories.agent(other_tenant, name=f"agent-{n}")
        factories.user(f"user{n}@example.com")
        send(other, other)
    assert queries() == baseline


def test_key_hashes_are_never_shown_or_editable(admin_client, tenant):
    factories.api_key(tenant)
    key = ApiKey.objects.get()
    html = admin_client.get(f"/admin/tenants/apikey/{key.pk}/change/").content.decode()
    assert key.key_hash not in html and 'name="key_hash"' not in html
    assert key.prefix in html  # the display prefix is what identifies a key
    admin_client.post(
        f"/admin/tenants/apikey/{key.pk}/change/",
        {"label": "renamed", "expires_at_0": "", "expires_at_1": "", "key_hash": "0" * 64},
    )
    key.refresh_from_db()
    assert key.label == "renamed" and key.key_hash != "0" * 64


def test_agent_token_hashes_are_never_shown(admin_client, agent):
    html = admin_client.get(f"/admin/agents/agent/{agent.id}/change/").content.decode()
    assert agent.model.token_hash not in html and 'name="token_hash"' not in html


def test_creating_a_key_in_the_admin_shows_it_once(admin_client, tenant):
    response = admin_client.post(
        "/admin/tenants/apikey/add/",
        {"tenant": tenant.pk, "label": "from admin", "expires_at_0": "", "expires_at_1": ""},
    )
    assert response.status_code == 200
    raw = re.search(r"hky_[0-9a-f]{32}", response.content.decode()).group(0)
    assert "will not be shown again" in response.content.decode()
    assert raw not in str(dict(admin_client.session))
    listing = admin_client.get("/admin/tenants/apikey/").content.decode()
    assert raw not in listing and ApiKey.objects.get().label == "from admin"


def test_revoking_keys_asks_for_confirmation_then_uses_the_service(admin_client, tenant, agent):
    factories.api_key(tenant)
    key = ApiKey.objects.get()
    data = {"action": "revoke", helpers.ACTION_CHECKBOX_NAME: [str(key.pk)]}
    response = admin_client.post("/admin/tenants/apikey/", data)
    assert "all of its agents will be deregistered" in response.content.decode()
    assert ApiKey.objects.get().revoked_at is None
    admin_client.post("/admin/tenants/apikey/", {**data, "confirm": "yes"})
    assert ApiKey.objects.get().status == "revoked"
    assert agent.refresh().status == "deregistered"


def test_agent_actions_use_the_services(admin_client, agent, peer):
    data = {"action": "disable", helpers.ACTION_CHECKBOX_NAME: [agent.id]}
    admin_client.post("/admin/agents/agent/", data)
    assert agent.refresh().status == "disabled" and peer.refresh().status == "active"
    admin_client.post("/admin/agents/agent/", {**data, "action": "enable"})
    assert agent.refresh().status == "active"
    admin_client.post("/admin/agents/agent/", {**data, "action": "deregister"})
    assert agent.refresh().status == "deregistered"
    assert Agent.objects.get(pk=agent.id).deregistered_at is not None


def send(sender, to):
    return send_message(
        sender=Sender(tenant=sender.tenant, agent=sender.model),
        message={
            "messageId": uuid.uuid4().hex,
            "parts": [{"text": "hi"}],
            "metadata": {"destination": to.id},
        },
    )


def test_tasks_and_events_are_read_only(admin_client, agent, peer):
    task = send(agent, peer)
    event = task.events.get()
    assert admin_client.get("/admin/messaging/task/add/").status_code == 403
    page = admin_client.get(f"/admin/messaging/task/{task.pk}/change/")
    assert page.status_code == 200 and "Save" not in page.content.decode()
    assert admin_client.get(f"/admin/messaging/taskevent/{event.pk}/delete/").status_code == 403
    data = {"action": "delete_selected", helpers.ACTION_CHECKBOX_NAME: [str(task.pk)]}
    admin_client.post("/admin/messaging/task/", data)
    assert Task.objects.filter(pk=task.pk).exists()


def test_admin_pages_keep_the_strict_csp(admin_client):
    csp = admin_client.get("/admin/").headers["Content-Security-Policy"]
    assert "script-src 'self';" in csp


def test_api_docs_get_their_own_csp(client):
    csp = client.get("/api/docs/").headers["Content-Security-Policy"]
    assert "https://" not in csp and "frame-ancestors 'none'" in csp
    assert "script-src 'self';" in csp  # Swagger UI from our own static files, no inline script
