"""Credential lifecycle with open streams (a real server process): an expiring key closes its
streams at expiry, and rotating keys closes only the streams of the key that goes."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.services import revoke_api_key
from tenants.selectors import api_key_by_raw
from tests import factories
from tests.live import SSEClient
from tests.messaging.test_streams import assert_closes, send, texts

pytestmark = pytest.mark.django_db(transaction=True)


def open_with_key(broker, key: str, agent) -> SSEClient:
    stream = SSEClient(
        f"{broker.url}/api/v1/subscribe",
        headers={"Authorization": f"Bearer {key}", "X-Agent-Id": agent.id, "A2A-Version": "1.0"},
    )
    assert stream.status == 200, stream.body
    assert stream.next().event == "ready"
    return stream


def test_an_open_stream_closes_when_its_key_expires(broker, tenant):
    bob = factories.agent(tenant, name="bob")
    expiring = factories.api_key(tenant, expires_at=timezone.now() + timedelta(seconds=3))
    factories.api_key(tenant, label="spare")
    stream = open_with_key(broker, expiring, bob)
    token_stream = SSEClient(
        f"{broker.url}/api/v1/subscribe", headers={"Authorization": f"Bearer {bob.token}"}
    )
    try:
        assert token_stream.next().event == "ready"
        assert not stream.closed.is_set()
        # Expiry is checked like revocation (every HIKYAKU_STREAM_CHECK_SECONDS).
        assert_closes(stream, timeout=10)
        assert not token_stream.closed.is_set()  # the agent's own token still holds
    finally:
        stream.close()
        token_stream.close()


def test_rotating_keys_closes_only_the_old_keys_streams(broker, tenant):
    alice, bob = factories.agent(tenant, name="alice"), factories.agent(tenant, name="bob")
    old = factories.api_key(tenant, label="old")
    old_stream = open_with_key(broker, old, bob)
    new = factories.api_key(tenant, label="new")  # rotation: both active for a while
    new_stream = open_with_key(broker, new, bob)
    try:
        send(broker, alice, bob.id, "before rotation")
        assert texts(old_stream.drain(2)) == ["before rotation"]
        assert texts(new_stream.drain(2)) == ["before rotation"]
        assert revoke_api_key(api_key=api_key_by_raw(old)).deregistered == 0  # not the last key
        assert_closes(old_stream)
        send(broker, alice, bob.id, "after rotation")
        deadline = time.monotonic() + 5
        received = []
        while time.monotonic() < deadline and not received:
            received = texts(e for e in new_stream.drain(0.5) if e.event == "message")
        assert received == ["after rotation"]
        assert not new_stream.closed.is_set()
    finally:
        old_stream.close()
        new_stream.close()
