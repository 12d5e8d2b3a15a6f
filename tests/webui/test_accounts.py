"""Accounts through django-allauth: styled pages, sign-up, password reset, and the OpenID
Connect button that appears only when a provider is configured."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core import mail

from tenants.models import User
from tests import factories

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "path",
    ["/accounts/login/", "/accounts/signup/", "/accounts/password/reset/"],
)
def test_account_pages_use_the_site_layout(client, path):
    response = client.get(path)
    html = response.content.decode()
    assert response.status_code == 200
    assert "/static/css/hikyaku.css" in html and 'class="auth-wrap"' in html
    assert 'name="csrfmiddlewaretoken"' in html
    assert "<script>" not in html


def test_sign_up_logs_in_and_lands_on_the_ui(client):
    password = "a long and quite unusual passphrase 42"
    response = client.post(
        "/accounts/signup/",
        {"email": "Ada@Example.com", "password1": password, "password2": password},
    )
    assert response.status_code == 302 and response["Location"] == "/ui/"
    assert User.objects.filter(email__iexact="ada@example.com").exists()
    assert client.get("/ui/").status_code == 200


def test_password_reset_mails_a_link(client):
    factories.user("grace@example.com")
    response = client.post("/accounts/password/reset/", {"email": "grace@example.com"})
    assert response.status_code == 302
    assert len(mail.outbox) == 1
    assert re.search(r"/accounts/password/reset/key/\S+", mail.outbox[0].body)


def test_mails_are_named_after_the_deployment_not_example_com(client):
    password = "a long and quite unusual passphrase 42"
    client.post(
        "/accounts/signup/",
        {"email": "ada@example.org", "password1": password, "password2": password},
    )
    (confirmation,) = mail.outbox
    assert confirmation.subject.startswith("[Hikyaku] ")
    assert "example.com" not in confirmation.subject + confirmation.body
    assert "Hikyaku" in confirmation.body


def test_logging_out_needs_a_post(client):
    user = factories.user("lin@example.com")
    client.force_login(user)
    assert client.get("/accounts/logout/").status_code == 200  # a confirmation page
    assert client.get("/ui/").status_code == 200
    response = client.post("/accounts/logout/")
    assert response["Location"] == "/accounts/login/"
    assert "Sign up" in client.get("/ui/").content.decode()  # the landing page, signed out
    assert client.get("/ui/tenants/new/").status_code == 302


def test_no_oidc_button_without_a_configured_provider(client):
    assert "Log in with" not in client.get("/accounts/login/").content.decode()


def test_the_oidc_button_appears_when_the_environment_configures_a_provider(tmp_path):
    """Settings read the provider from the environment at start-up, so this runs
    oidc_configured.py (not collected otherwise) in a fresh process with it set."""
    env = {
        **os.environ,
        "HIKYAKU_OIDC_CLIENT_ID": "client-123",
        "HIKYAKU_OIDC_CLIENT_SECRET": "secret",
        "HIKYAKU_OIDC_PROVIDER_ID": "example",
        "HIKYAKU_OIDC_NAME": "Example SSO",
        "HIKYAKU_OIDC_SERVER_URL": "https://sso.example.com",
    }
    # Its own SQLite test database, not the one this process is using.
    env.pop("DATABASE_URL", None)
    env["SQLITE_TEST_NAME"] = str(tmp_path / "oidc.sqlite3")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(Path(__file__).with_name("oidc_configured.py")),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
