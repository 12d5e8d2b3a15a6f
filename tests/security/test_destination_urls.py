"""One validator for every stored webhook URL (agents.destinations.check_url): an agent's
webhook over REST, in the admin and in a tenant file, and a push config over JSON-RPC accept
and refuse the same URLs for the same reason, at store time."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from agents.models import Agent
from messaging.models import PushConfig
from tests import factories
from tests.messaging.rpc import call, send

pytestmark = pytest.mark.django_db

# Spellings of loopback and "this host" that the system resolver accepts.
LOOPBACK_SPELLINGS = [
    "http://127.1/hook",
    "http://2130706433/hook",
    "http://0x7f000001/hook",
    "http://0/hook",
    "http://017700000001/hook",
    "http://[::1]/hook",
    "http://app.localhost/hook",
]


@pytest.fixture(autouse=True)
def _no_allow_list(settings):
    settings.HIKYAKU_WEBHOOK_ALLOWED_HOSTS = []


def register(api_key: str, url: str):
    return Client().post(
        "/api/v1/agents",
        json.dumps({"name": "hooked", "description": "", "webhook_url": url}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_key}",
    )


def push_config(agent, task_id: str, url: str):
    return call(agent, "CreateTaskPushNotificationConfig", {"taskId": task_id, "url": url})


@pytest.mark.parametrize("url", LOOPBACK_SPELLINGS)
def test_every_spelling_of_loopback_is_refused_when_stored_on_both_surfaces(
    api_key, agent, peer, url
):
    rest = register(api_key, url)
    assert rest.status_code == 400, rest.content
    rest_reason = rest.json()["error"]["details"]["webhook_url"][0]
    assert "private, loopback or link-local" in rest_reason
    task = send(agent, peer.id)
    rpc = push_config(agent, task["id"], url).json()["error"]
    assert rpc["code"] == -32602 and rpc["message"] == f"url: {rest_reason}"
    assert not Agent.objects.filter(name="hooked").exists() and not PushConfig.objects.exists()


def test_a_single_label_host_is_stored_on_both_surfaces_and_judged_at_delivery(
    api_key, agent, peer
):
    """A compose service name: Django's URL validator refused it for webhooks while push
    configs took it. Both take it now; its addresses are checked at delivery."""
    url = "http://receiver:8080/hook"
    assert register(api_key, url).status_code == 201
    patched = factories.AgentClient(agent).patch_json(
        f"/api/v1/agents/{agent.id}", {"webhook_url": "http://hooks-relay/x"}
    )
    assert patched.status_code == 200, patched.content
    task = send(agent, peer.id)
    assert "result" in push_config(agent, task["id"], url).json()


@pytest.mark.parametrize(
    "url, reason",
    [
        ("not a url", "Only http and https URLs are allowed."),
        ("ftp://hooks.example.com/", "Only http and https URLs are allowed."),
        ("https://user:pw@hooks.example.com/", "Credentials in the URL are not allowed"),
        ("https://hooks example.com/", "whitespace or control characters"),
        ("https://hooks..example.com/", "is not a valid host name"),
        ("https://hooks.example.com/" + "x" * 2000, "longer than 2000 characters"),
    ],
)
def test_malformed_urls_get_the_same_reason_everywhere(api_key, agent, peer, url, reason):
    rest = register(api_key, url)
    assert rest.status_code == 400
    assert reason in rest.json()["error"]["details"]["webhook_url"][0]
    task = send(agent, peer.id)
    assert reason in push_config(agent, task["id"], url).json()["error"]["message"]


def test_the_admin_form_uses_the_same_validator(tenant, agent):
    root = factories.user("root@example.com")
    root.is_staff = root.is_superuser = True
    root.save()
    admin = Client()
    admin.force_login(root)
    page = f"/admin/agents/agent/{agent.id}/change/"

    def save(url: str):
        model = agent.refresh()
        form = {
            "name": model.name,
            "description": model.description,
            "skills": "[]",
            "send_to": '["*"]',
            "receive_from": '["*"]',
            "disclosure_ceiling": model.disclosure_ceiling,
            "webhook_url": url,
        }
        return admin.post(page, form)

    refused = save("http://0x7f000001/hook")
    assert refused.status_code == 200
    assert "private, loopback or link-local" in refused.content.decode()
    assert save("http://receiver:8080/hook").status_code == 302
    assert agent.refresh().webhook_url == "http://receiver:8080/hook"


def test_a_tenant_file_uses_the_same_validator(tenant, tmp_path):
    path = tmp_path / "tenant.yaml"
    path.write_text(
        "version: 1\ntenant:\n  slug: acme\nagents:\n"
        "  - name: relay\n    webhook_url: http://receiver:8080/hook\n"
        "  - name: sneaky\n    webhook_url: http://2130706433/hook\n"
    )
    err = StringIO()
    with pytest.raises(SystemExit):
        call_command("tenantfile", "validate", str(path), stdout=StringIO(), stderr=err)
    (problem,) = err.getvalue().splitlines()
    assert "agent 'sneaky': webhook_url: 2130706433 is a private" in problem
