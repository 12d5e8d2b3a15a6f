import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.django_db


def test_broker_card_is_an_a2a_1_0_card_with_bearer_security(client):
    response = client.get("/.well-known/agent-card.json")
    assert response.status_code == 200
    card = response.json()
    assert card["name"] == "Hikyaku"
    assert card["supportedInterfaces"] == [
        {"url": "http://testserver/a2a/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "bearer"
    assert {"send-message", "ack-message"} <= {s["id"] for s in card["skills"]}
    assert "max-age" in response["Cache-Control"]


def test_broker_card_answers_if_none_match_with_304(client):
    etag = client.get("/.well-known/agent-card.json")["ETag"]
    again = client.get("/.well-known/agent-card.json", HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304 and again["ETag"] == etag


def test_broker_card_uses_the_configured_base_url(client, settings):
    settings.HIKYAKU_BASE_URL = "https://broker.example.com"
    card = client.get("/.well-known/agent-card.json").json()
    assert card["supportedInterfaces"][0]["url"] == "https://broker.example.com/a2a/"


def test_broker_card_parses_with_the_a2a_sdk(client):
    from a2a.types import AgentCard
    from google.protobuf.json_format import ParseDict

    card = ParseDict(client.get("/.well-known/agent-card.json").json(), AgentCard())
    assert card.supported_interfaces[0].protocol_version == "1.0"


def test_healthz_and_readyz(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"]["database"] == "ok"


def test_openapi_schema_and_docs_are_served(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200
    assert "/api/v1/agents" in schema.json()["paths"]
    assert client.get("/api/docs/").status_code == 200


def test_settings_refuse_debug_off_with_the_old_dev_secret_key():
    env = {**os.environ, "DJANGO_SECRET_KEY": "dev-insecure-hikyaku-secret-key-change-me"}
    env["DJANGO_DEBUG"] = "false"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='hikyaku.settings'; django.setup()",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr
