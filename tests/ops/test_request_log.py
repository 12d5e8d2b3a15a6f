"""The access line: one per request, with ids and timings, never with secrets."""

import json
import logging
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from unittest import mock

import pytest
from asgiref.sync import async_to_sync
from django.db import OperationalError
from django.test import AsyncClient

from hikyaku.logging import JsonFormatter

pytestmark = pytest.mark.django_db


@pytest.fixture
def access_log(caplog):
    caplog.set_level(logging.DEBUG, logger="hikyaku.request")

    def lines() -> list[dict]:
        formatter = JsonFormatter()
        return [
            json.loads(formatter.format(record))
            for record in caplog.records
            if record.name == "hikyaku.request"
        ]

    return lines


def test_one_json_line_per_request_with_route_status_and_duration(client, access_log):
    response = client.get("/.well-known/agent-card.json")
    [line] = access_log()
    assert line["level"] == "INFO"
    assert line["method"] == "GET"
    assert line["route"] == "agent-card"
    assert line["path"] == "/.well-known/agent-card.json"
    assert line["status"] == 200
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
    assert line["request_id"] == response["X-Request-Id"]
    assert len(line["request_id"]) == 32


def test_a_sane_incoming_request_id_is_kept_and_echoed(client, access_log):
    response = client.get("/healthz", HTTP_X_REQUEST_ID="lb-7f3a.42:1")
    assert response["X-Request-Id"] == "lb-7f3a.42:1"
    assert access_log()[0]["request_id"] == "lb-7f3a.42:1"


@pytest.mark.parametrize("bad", ["has space", "x" * 129, "new\nline", "<script>", ""])
def test_an_unsafe_incoming_request_id_is_replaced(client, access_log, bad):
    response = client.get("/healthz", HTTP_X_REQUEST_ID=bad)
    assert response["X-Request-Id"] != bad
    assert len(response["X-Request-Id"]) == 32


def test_the_line_names_the_tenant_and_agent_once_known(agent_client, agent, access_log):
    agent_client.get("/api/v1/agents")
    [line] = access_log()
    assert line["tenant_id"] == str(agent.tenant.id)
    assert line["agent_id"] == agent.id
    assert line["route"] == "api-agents"


def test_json_rpc_calls_name_the_method_and_long_values_are_cut(agent_client, agent, access_log):
    agent_client.post_json(
        "/a2a/",
        {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}},
        HTTP_A2A_VERSION="1.0",
    )
    agent_client.post_json(
        "/a2a/",
        {"jsonrpc": "2.0", "id": 2, "method": "X" * 5000, "params": {}},
        HTTP_A2A_VERSION="1.0",
    )
    first, second = access_log()
    assert first["rpc_method"] == "GetTask" and first["agent_id"] == agent.id
    assert len(second["rpc_method"]) == 201


def test_registration_names_the_tenant(client, api_key, tenant, access_log):
    client.post(
        "/api/v1/agents",
        json.dumps({"name": "carol", "description": "d"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_key}",
    )
    [line] = access_log()
    assert line["status"] == 201
    assert line["tenant_id"] == str(tenant.id)


def test_no_credential_ever_reaches_the_line(client, api_key, agent, access_log, caplog):
    client.post(
        f"/api/v1/agents?token={agent.token}",
        json.dumps({"name": "dave", "description": "d"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_key}",
    )
    client.get("/api/v1/agents", HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    client.get("/api/v1/agents", HTTP_AUTHORIZATION="Bearer hky_wrong_key_for_a_401")
    text = "\n".join(json.dumps(line) for line in access_log()) + caplog.text
    assert len(access_log()) == 3
    for secret in (api_key, agent.token, "hky_wrong_key_for_a_401", "Bearer"):
        assert secret not in text


def test_health_checks_are_logged_at_debug_only(client, access_log):
    client.get("/healthz")
    client.get("/readyz")
    assert [line["level"] for line in access_log()] == ["DEBUG", "DEBUG"]


def test_the_line_can_be_switched_off(client, settings, access_log):
    settings.HIKYAKU_REQUEST_LOG = False
    response = client.get("/.well-known/agent-card.json")
    assert access_log() == []
    assert "X-Request-Id" in response


class FormattingHandler(logging.Handler):
    """Formats at emit time, inside the request, as the production handler does."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


def test_other_lines_logged_during_a_request_carry_its_id(client):
    broken = mock.Mock()
    broken.cursor.side_effect = OperationalError("connection refused")
    handler = FormattingHandler()
    logging.getLogger("hikyaku.health").addHandler(handler)
    try:
        with mock.patch("hikyaku.health.connection", broken):
            response = client.get("/readyz")
    finally:
        logging.getLogger("hikyaku.health").removeHandler(handler)
    assert response.status_code == 503
    [line] = handler.lines
    assert line["msg"] == "readiness: database unavailable: OperationalError"
    assert line["request_id"] == response["X-Request-Id"]
    outside = logging.makeLogRecord({"name": "x", "msg": "after the request"})
    assert "request_id" not in json.loads(JsonFormatter().format(outside))


def test_the_async_path_logs_and_counts_too(access_log):
    response = async_to_sync(AsyncClient().get)("/healthz", headers={"X-Request-Id": "async-1"})
    assert response.status_code == 200
    assert response["X-Request-Id"] == "async-1"
    assert access_log()[0]["request_id"] == "async-1"


def test_a_line_is_one_json_object_whatever_its_fields_hold():
    fields = {
        "text": "ünïcode\nand a second line",
        "at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "id": uuid.UUID(int=1),
        "counts": {1: "one"},
        "huge": 2**70,
        "other": Decimal("1.5"),
    }
    record = logging.makeLogRecord({"name": "x", "msg": "line %s", "args": (1,), **fields})
    text = JsonFormatter().format(record)
    assert "\n" not in text
    line = json.loads(text)
    assert line["msg"] == "line 1"
    assert line["text"] == fields["text"] and line["huge"] == 2**70
    assert line["id"] == "00000000-0000-0000-0000-000000000001"
    assert line["counts"] == {"1": "one"} and line["other"] == "1.5"
    assert datetime.fromisoformat(line["at"]) == fields["at"]

    del record.huge  # the common case, encoded by orjson: the same values
    line = json.loads(JsonFormatter().format(record))
    assert line["text"] == fields["text"] and line["counts"] == {"1": "one"}
    assert datetime.fromisoformat(line["at"]) == fields["at"] and line["other"] == "1.5"
