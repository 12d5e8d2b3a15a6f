"""Fixtures of the end-to-end peer tests (test_peer_live.py, test_peer_streaming.py): a broker
process and a public agent `bob` worked by a real responder process (conformance/responder.py).
Modules with a `bob` of their own (a plain agent, no process) override it."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from agents import services as agent_services
from testbed import Process
from tests import factories
from tests.live import ROOT, BrokerProcess


@pytest.fixture(scope="module")
def peer_broker(django_db_setup, django_db_blocker) -> Iterator[BrokerProcess]:
    """A broker whose anonymous callers (most tests here) are not rate limited, and which
    may deliver push notifications to receivers on this machine."""
    env = {
        "HIKYAKU_ANONYMOUS_RATE_LIMIT_PER_MINUTE": "0",
        "HIKYAKU_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
    }
    server = BrokerProcess(env=env).start()
    yield server
    server.stop()


@pytest.fixture
def bob(tenant, peer_broker) -> Iterator[factories.TestAgent]:
    """A public agent, worked by a responder process holding only its token (the TCK
    responder: our client package following the agent's inbox stream)."""
    bob = factories.agent(tenant, name="bob", description="Answers A2A callers.")
    agent_services.set_agent_public(agent=bob.model, public=True)
    responder = Process(
        [sys.executable, "-m", "conformance.responder", "--url", peer_broker.url,
         "--token", bob.token, "--agent-id", bob.id],
        log=ROOT / "test-artifacts" / f"responder-{bob.id}.log",
    ).spawn()  # fmt: skip
    yield bob
    responder.stop()
