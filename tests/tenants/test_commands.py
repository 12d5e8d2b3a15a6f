import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from tenants.models import ApiKey, Tenant

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip()


@pytest.fixture(autouse=True)
def demo(db):
    return Tenant.objects.create(name="Demo", slug="demo")


def test_createapikey_refuses_an_unknown_tenant_unless_asked_to_create_it():
    with pytest.raises(CommandError, match="No tenant has the slug 'dmeo' .existing: demo."):
        run("createapikey", "--tenant", "dmeo")
    assert not Tenant.objects.filter(slug="dmeo").exists()
    raw = run("createapikey", "--tenant", "fresh", "--create")
    assert ApiKey.objects.get(prefix=raw[4:12]).tenant.slug == "fresh"


def test_createapikey_prints_only_the_key():
    raw = run("createapikey", "--tenant", "demo", "--label", "ci")
    assert raw.startswith("hky_") and len(raw) == 36 and "\n" not in raw
    key = ApiKey.objects.get(prefix=raw[4:12])
    assert key.tenant.slug == "demo" and key.label == "ci"
    assert raw not in key.key_hash


def test_createapikey_key_registers_an_agent():
    raw = run("createapikey", "--tenant", "demo")
    response = Client().post(
        "/api/v1/agents",
        json.dumps({"name": "first", "description": ""}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )
    assert response.status_code == 201


def test_createapikey_json_and_expiry():
    body = json.loads(
        run("createapikey", "--tenant", "demo", "--json", "--expires", "2999-01-01T00:00:00Z")
    )
    assert body["api_key"].startswith("hky_") and body["tenant"] == "demo"
    assert body["expires_at"].startswith("2999-01-01")
    assert Tenant.objects.filter(slug="demo").count() == 1
    run("createapikey", "--tenant", "demo")
    assert Tenant.objects.filter(slug="demo").count() == 1


@pytest.mark.parametrize("expires", ["tomorrow", "2000-01-01T00:00:00Z", "2999-01-01T00:00:00"])
def test_createapikey_rejects_bad_expiry(expires):
    with pytest.raises(CommandError):
        run("createapikey", "--tenant", "demo", "--expires", expires)


def test_revokeapikey_by_prefix_and_by_raw_key():
    first = run("createapikey", "--tenant", "demo")
    second = run("createapikey", "--tenant", "demo")
    assert "revoked" in run("revokeapikey", first[:12])
    assert "revoked" in run("revokeapikey", second)
    assert ApiKey.objects.filter(revoked_at__isnull=True).count() == 0
    with pytest.raises(CommandError):
        run("revokeapikey", "hky_ffffffff")


def test_bootstrap_prints_the_login_once_and_how_to_recover_a_lost_password():
    first = run("bootstrap", "--tenant", "lab")
    assert "admin login:  admin@example.com / " in first
    assert "manage.py changepassword admin@example.com" in first
    again = run("bootstrap", "--tenant", "lab")
    assert "admin login" not in again
    assert (
        "Lost the admin password? .venv/bin/python manage.py changepassword admin@example.com"
        in (again)
    )
