"""Small explicit fixtures. Factories live in tests/factories.py."""

import logging
import os
import sys

import pytest
from django.test import Client

from tests import factories
from tests.live import broker, broker_factory, redis_server  # noqa: F401  (fixtures)
from tests.messaging.receiver import receiver  # noqa: F401  (fixture)
from tests.tiers import tier, wsgi_broker  # noqa: F401  (fixtures)

# Webhook receivers started by the tests listen on 127.0.0.1, which the SSRF guard refuses
# by default. Server processes started by the tests inherit this.
os.environ.setdefault("HIKYAKU_WEBHOOK_ALLOWED_HOSTS", "127.0.0.1")
# Every test client is 127.0.0.1, and the suite fails authentication on purpose thousands of
# times a minute: the per-address budget for failures would soon refuse every test. The tests
# of that budget (tests/security/test_limits.py) turn it on.
os.environ.setdefault("HIKYAKU_AUTH_FAILURES_PER_MINUTE", "0")


@pytest.fixture(autouse=True)
def _webhooks_to_localhost(settings):
    settings.HIKYAKU_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.HIKYAKU_AUTH_FAILURES_PER_MINUTE = 0


@pytest.fixture(autouse=True)
def _console_log_on_the_real_stderr():
    """Whatever runs django.setup() during a test (building a WSGI application, Celery's Django
    fixup importing the task modules) configures logging again, which binds the console
    handler to that test's captured stderr; put it back on the process's stderr, for later
    tests that read the log from file descriptor 2 (which test ran last must not matter)."""
    yield
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler and handler.stream is not sys.__stderr__:
            # Not setStream(), which flushes the old stream: a capture may have closed it.
            with handler.lock:
                handler.stream = sys.__stderr__


@pytest.fixture
def tenant(db):
    return factories.tenant("acme")


@pytest.fixture
def other_tenant(db):
    return factories.tenant("globex")


@pytest.fixture
def api_key(tenant):
    """The raw key of an active key of `tenant`."""
    return factories.api_key(tenant)


@pytest.fixture
def other_api_key(other_tenant):
    return factories.api_key(other_tenant)


@pytest.fixture
def agent(tenant):
    return factories.agent(tenant, name="alice")


@pytest.fixture
def peer(tenant):
    return factories.agent(tenant, name="bob")


@pytest.fixture
def stranger(other_tenant):
    """An agent of another tenant."""
    return factories.agent(other_tenant, name="mallory")


@pytest.fixture
def client():
    return Client()


@pytest.fixture
def agent_client(agent):
    """A client that authenticates as `agent` with its agent token."""
    return factories.AgentClient(agent)
