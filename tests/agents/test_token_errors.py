"""A mistyped agent token is reported as an invalid agent token on every surface, never as
an invalid API key (the credential the caller did not send)."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.messaging.rpc import call

pytestmark = pytest.mark.django_db

BOGUS = ["hka_short", "hka_" + "x" * 39 + "!", "hka_" + "A" * 40]


@pytest.mark.parametrize("token", BOGUS)
def test_rest_says_invalid_agent_token(token, agent):
    response = Client().get("/api/v1/agents", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 401
    message = response.json()["error"]["message"]
    assert "agent token" in message and "API key" not in message and token not in message


@pytest.mark.parametrize("token", BOGUS)
def test_json_rpc_says_invalid_agent_token(token, agent):
    class Bogus:
        pass

    bogus = Bogus()
    bogus.token = token
    response = call(bogus, "ListTasks", {})
    assert response.status_code == 401
    message = response.json()["error"]["message"]
    assert "agent token" in message and "API key" not in message


def test_a_bogus_api_key_is_still_an_invalid_api_key(agent):
    response = Client().get("/api/v1/agents", HTTP_AUTHORIZATION="Bearer hky_nope")
    assert response.status_code == 401 and "API key" in response.json()["error"]["message"]
