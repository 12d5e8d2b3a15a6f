import time
import uuid

import pytest
from django.test import Client

from tests.messaging.rpc import call, message

pytestmark = pytest.mark.django_db


@pytest.fixture
def tight_limit(settings):
    settings.HIKYAKU_RATE_LIMIT_PER_MINUTE = 3
    settings.REDIS_URL = ""  # count in process memory for this test
    # The window is the clock's minute (docs/PROTOCOL.md §4.6): a test's few requests must
    # not straddle its end, where the count starts again.
    if time.time() % 60 > 55:
        time.sleep(60 - time.time() % 60)


def test_rest_requests_over_the_limit_get_429_with_retry_after(tight_limit, agent):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    statuses = [client.get("/api/v1/agents").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    limited = client.get("/api/v1/agents")
    assert limited.json()["error"]["code"] == "RATE_LIMITED"
    assert 0 < int(limited["Retry-After"]) <= 60


def test_json_rpc_over_the_limit_gets_a_rate_limited_error(tight_limit, agent, peer):
    for _ in range(3):
        call(agent, "SendMessage", {"message": message(to=peer.id)})
    response = call(agent, "SendMessage", {"message": message(to=peer.id)})
    assert response.status_code == 429
    assert response.json()["error"]["data"][0]["reason"] == "RATE_LIMITED"


def test_a_request_read_again_after_the_identity_cache_counts_once(tight_limit, agent, peer):
    """A send that fails on a recalled identity (here: to nobody) is answered after a fresh
    authentication (agents/auth.py), and the request must still count once against the
    limit."""
    nobody = str(uuid.uuid4())
    answers = [call(agent, "SendMessage", {"message": message(to=nobody)}) for _ in range(4)]
    errors = [a.json()["error"] for a in answers]
    assert all("not found" in e["message"] for e in errors[:3]), errors
    assert errors[3]["data"][0]["reason"] == "RATE_LIMITED", errors


def test_limits_are_per_credential(tight_limit, agent, peer):
    for _ in range(4):
        Client(HTTP_AUTHORIZATION=f"Bearer {agent.token}").get("/api/v1/agents")
    assert (
        Client(HTTP_AUTHORIZATION=f"Bearer {peer.token}").get("/api/v1/agents").status_code == 200
    )


def test_redis_backed_counting_is_shared(settings, agent, redis_server, monkeypatch):
    from tenants import ratelimit

    settings.HIKYAKU_RATE_LIMIT_PER_MINUTE = 2
    settings.REDIS_URL = redis_server.url  # a private server: nobody else's counts
    monkeypatch.setattr(ratelimit, "_redis", None)  # a client for that server
    client = Client(HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    assert [client.get("/api/v1/agents").status_code for _ in range(3)] == [200, 200, 429]
