"""Run only by test_accounts.py, in a process whose environment configures an OIDC provider
(the file name keeps pytest from collecting it in the normal run)."""

import os

import pytest

pytestmark = pytest.mark.django_db


def test_oidc_button_when_configured(client):
    assert os.environ["HIKYAKU_OIDC_CLIENT_ID"]
    html = client.get("/accounts/login/").content.decode()
    assert "Log in with Example SSO" in html
    assert 'href="/accounts/oidc/example/login/' in html
