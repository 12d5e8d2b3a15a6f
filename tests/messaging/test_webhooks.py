"""Webhooks and A2A push notifications against a real HTTP receiver on 127.0.0.1.

The logic (retries, backoff, give-up, refusals, policy re-checks) is driven attempt by attempt
through `delivery.attempt`; the end-to-end tests let the embedded default (background
threads) deliver after commit; tests/messaging/test_webhooks_celery.py does the same with a
real Celery worker process."""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import timedelta

import pytest
from a2a.types import StreamResponse
from django.utils import timezone
from google.protobuf.json_format import ParseDict

from agents import services as agent_services
from agents.destinations import DestinationRefused, resolve
from messaging.models import PushConfig, TaskEvent, WebhookDelivery
from messaging.push import delivery, payloads
from tests import factories
from tests.messaging.rpc import act, error, message, result, send

Outcome = WebhookDelivery.Outcome


@pytest.fixture(autouse=True)
def _fast_webhooks(settings):
    settings.HIKYAKU_WEBHOOK_TIMEOUT_SECONDS = 2.0
    settings.HIKYAKU_WEBHOOK_BACKOFF_SECONDS = 0.05
    settings.HIKYAKU_WEBHOOK_BACKOFF_CAP_SECONDS = 0.2
    settings.HIKYAKU_WEBHOOK_MAX_ATTEMPTS = 4
    # Deliveries run on background threads in the embedded default, whatever the
    # environment of this test run says about a Celery broker.
    settings.CELERY_TASK_ALWAYS_EAGER = True


def secret_of(agent: factories.TestAgent) -> str:
    return agent_services.webhook_secret(agent=agent.refresh())


def with_webhook(tenant, name: str, url: str) -> factories.TestAgent:
    return factories.agent(tenant, name=name, webhook_url=url)


def only_delivery() -> WebhookDelivery:
    (row,) = WebhookDelivery.objects.all()
    return row


def wait_finished(pk: int, timeout: float = 10.0) -> WebhookDelivery:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = WebhookDelivery.objects.get(pk=pk)
        if row.outcome != Outcome.PENDING:
            return row
        time.sleep(0.02)
    raise AssertionError(f"delivery {pk} still pending")


def run_until_finished(pk: int) -> WebhookDelivery:
    """Drive a delivery attempt by attempt, as the worker would, without waiting out delays."""
    for _ in range(20):
        delay = delivery.attempt(delivery_id=pk)
        if delay is None:
            return WebhookDelivery.objects.get(pk=pk)
        WebhookDelivery.objects.filter(pk=pk).update(next_attempt_at=None)
    raise AssertionError("delivery never finished")


# Payload, headers and signature --------------------------------------------------------------


@pytest.mark.django_db
def test_new_task_is_posted_as_a_signed_stream_response(tenant, agent, receiver):
    bob = with_webhook(tenant, "bob", receiver.url)
    task = send(agent, bob.id, "review PR 12")
    row = run_until_finished(only_delivery().pk)
    assert (row.outcome, row.attempts, row.last_status) == (Outcome.DELIVERED, 1, 200)
    (request,) = receiver.requests
    body = request.json
    ParseDict(body, StreamResponse())  # a valid A2A 1.0 StreamResponse
    assert body["task"]["id"] == task["id"]
    assert body["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert body["task"]["artifacts"][0]["parts"] == [{"text": "review PR 12"}]
    event = TaskEvent.objects.get(task_id=task["id"])
    assert body["task"]["metadata"]["eventId"] == event.id
    assert request.headers["X-Hikyaku-Event-Id"] == str(event.id)
    assert request.headers["X-Hikyaku-Delivery-Id"] == str(row.pk)
    assert request.headers["Content-Type"] == "application/json"
    signature = request.headers["X-Hikyaku-Signature"]
    assert payloads.verify(secret_of(bob), request.body, signature)
    assert not payloads.verify(secret_of(agent), request.body, signature)
    assert not payloads.verify(secret_of(bob), request.body + b" ", signature)


@pytest.mark.django_db
def test_signature_format_is_timestamp_and_hex_hmac():
    header = payloads.signature("whsec_x", b'{"a":1}', timestamp=1700000000)
    expected = hmac.new(b"whsec_x", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"
    assert not payloads.verify("whsec_x", b'{"a":1}', header)  # too old


@pytest.mark.django_db
def test_the_sender_gets_status_updates_not_its_own_new_task(tenant, peer, receiver):
    alice = with_webhook(tenant, "alice", receiver.url)
    task = send(alice, peer.id)
    assert WebhookDelivery.objects.count() == 0  # the created event is the recipient's news
    act(peer, task["id"], "complete", "done: see artifact")
    row = run_until_finished(only_delivery().pk)
    assert row.outcome == Outcome.DELIVERED
    update = receiver.requests[0].json["statusUpdate"]
    ParseDict({"statusUpdate": update}, StreamResponse())
    assert update["taskId"] == task["id"]
    assert update["status"]["state"] == "TASK_STATE_COMPLETED"
    assert update["status"]["message"]["parts"] == [{"text": "done: see artifact"}]
    assert update["status"]["message"]["role"] == "ROLE_AGENT"
    assert update["metadata"]["kind"] == "complete"
    assert update["metadata"]["fromState"] == "TASK_STATE_INPUT_REQUIRED"
    assert update["metadata"]["actorAgentId"] == peer.id


@pytest.mark.django_db
def test_broadcast_notifies_each_recipient_with_a_webhook(tenant, agent, receiver):
    hooked = [with_webhook(tenant, f"hooked{i}", receiver.url) for i in range(3)]
    factories.agent(tenant, name="plain")
    result(agent, "SendMessage", {"message": message("all hands", to="*")})
    rows = list(WebhookDelivery.objects.order_by("pk"))
    assert sorted(str(r.agent_id) for r in rows) == sorted(a.id for a in hooked)
    for row in rows:
        assert run_until_finished(row.pk).outcome == Outcome.DELIVERED
    assert len(receiver.requests) == 3


# Retries, backoff, timeouts ------------------------------------------------------------------


@pytest.mark.django_db
def test_retries_on_500_with_growing_delays_and_stops_on_success(tenant, agent, receiver):
    receiver.statuses = [500, 503, 200]
    bob = with_webhook(tenant, "bob", receiver.url)
    send(agent, bob.id)
    row = only_delivery()
    delays = []
    for expected_attempts in (1, 2):
        delays.append(delivery.attempt(delivery_id=row.pk))
        row.refresh_from_db()
        assert (row.outcome, row.attempts) == (Outcome.PENDING, expected_attempts)
        assert row.last_status in (500, 503) and "receiver says no" in row.last_error
        # Not due yet: a duplicate queue message does nothing.
        assert delivery.attempt(delivery_id=row.pk) is None
        assert len(receiver.requests) == expected_attempts
        WebhookDelivery.objects.filter(pk=row.pk).update(next_attempt_at=None)
    assert 0 < delays[0] < delays[1]
    assert delivery.attempt(delivery_id=row.pk) is None
    row.refresh_from_db()
    assert (row.outcome, row.attempts, row.last_status, row.last_error) == (
        Outcome.DELIVERED,
        3,
        200,
        "",
    )
    assert row.next_attempt_at is None
    assert delivery.attempt(delivery_id=row.pk) is None  # finished: never again
    assert len(receiver.requests) == 3
    bodies = {r.body for r in receiver.requests}
    assert len(bodies) == 1  # every attempt carries the same event


def test_backoff_is_exponential_and_capped(settings):
    settings.HIKYAKU_WEBHOOK_BACKOFF_SECONDS = 2
    settings.HIKYAKU_WEBHOOK_BACKOFF_CAP_SECONDS = 60
    delays = [delivery.backoff(n) for n in range(1, 9)]
    for delay, nominal in zip(delays, [2, 4, 8, 16, 32, 60, 60, 60], strict=True):
        assert nominal * 0.9 <= delay <= nominal * 1.1


@pytest.mark.django_db(transaction=True)
def test_an_attempt_is_counted_and_leased_before_its_post(tenant, agent, receiver):
    # If the worker dies mid-POST, the row already shows the attempt and why it is pending.
    receiver.hang_seconds = 1.0
    bob = with_webhook(tenant, "bob", receiver.url)
    send(agent, bob.id)  # the embedded default's background thread attempts it after commit
    receiver.wait_for(1)
    row = only_delivery()
    assert (row.outcome, row.attempts, row.last_error) == (
        Outcome.PENDING,
        1,
        delivery.UNFINISHED,
    )
    assert row.next_attempt_at > timezone.now() + timedelta(seconds=30)  # the lease
    assert delivery.attempt(delivery_id=row.pk) is None  # leased: no second POST meanwhile
    row = wait_finished(row.pk)
    assert (row.outcome, row.attempts, row.last_status, row.last_error) == (
        Outcome.DELIVERED,
        1,
        200,
        "",
    )
    assert len(receiver.requests) == 1


@pytest.mark.django_db
def test_a_delivery_whose_last_attempt_never_finished_gives_up(tenant, agent, receiver):
    bob = with_webhook(tenant, "bob", receiver.url)
    send(agent, bob.id)
    row = only_delivery()
    # As a worker killed during the last allowed attempt leaves it, once the lease ran out.
    WebhookDelivery.objects.filter(pk=row.pk).update(attempts=4, last_error=delivery.UNFINISHED)
    assert delivery.attempt(delivery_id=row.pk) is None
    row.refresh_from_db()
    assert (row.outcome, row.attempts) == (Outcome.FAILED, 4)
    assert "never recorded an outcome" in row.last_error
    assert receiver.requests == []


@pytest.mark.django_db
def test_gives_up_after_the_last_attempt(tenant, agent, receiver):
    receiver.statuses = [500]
    bob = with_webhook(tenant, "bob", receiver.url)
    send(agent, bob.id)
    row = run_until_finished(only_delivery().pk)
    assert (row.outcome, row.attempts, row.last_status) == (Outcome.FAILED, 4, 500)
    assert len(receiver.requests) == 4


@pytest.mark.django_db
def test_a_hanging_receiver_times_out(settings, tenant, agent, receiver):
    settings.HIKYAKU_WEBHOOK_TIMEOUT_SECONDS = 0.5
    receiver.hang_seconds = 3
    bob = with_webhook(tenant, "bob", receiver.url)
    send(agent, bob.id)
    row = only_delivery()
    started = time.monotonic()
    delay = delivery.attempt(delivery_id=row.pk)
    elapsed = time.monotonic() - started
    assert delay is not None and 0.4 < elapsed < 1.5
    row.refresh_from_db()
    assert row.outcome == Outcome.PENDING and row.last_status is None
    assert "timed out" in row.last_error


@pytest.mark.django_db
def test_an_unreachable_receiver_is_a_connection_error(tenant, agent, receiver):
    url = receiver.url
    receiver.stop()
    bob = with_webhook(tenant, "bob", url)
    send(agent, bob.id)
    row = only_delivery()
    assert delivery.attempt(delivery_id=row.pk) is not None
    row.refresh_from_db()
    assert row.attempts == 1 and row.last_error.startswith("Connect")


# The SSRF guard --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
     "0.0.0.0", "::1", "fe80::1", "fc00::1", "::ffff:127.0.0.1", "224.0.0.1"],
)  # fmt: skip
def test_private_loopback_and_link_local_addresses_are_refused(settings, address):
    settings.HIKYAKU_WEBHOOK_ALLOWED_HOSTS = []
    with pytest.raises(DestinationRefused):
        resolve(address, 80)


def test_public_addresses_and_the_allow_list_pass(settings):
    settings.HIKYAKU_WEBHOOK_ALLOWED_HOSTS = []
    assert resolve("93.184.215.14", 443) == [(2, "93.184.215.14")]
    settings.HIKYAKU_WEBHOOK_ALLOWED_HOSTS = ["10.0.0.0/8", "hooks.internal"]
    assert resolve("10.9.8.7", 80) == [(2, "10.9.8.7")]
    with pytest.raises(DestinationRefused):
        resolve("192.168.0.1", 80)
    settings.HIKYAKU_WEBHOOK_ALLOWED_HOSTS = ["localhost"]
    assert all(addr in ("127.0.0.1", "::1") for _, addr in resolve("localhost", 80))


@pytest.mark.django_db
def test_private_urls_are_refused_when_stored_without_the_allow_list(
    settings, client, api_key, tenant, agent, peer, receiver
):
    settings.HIKYAKU_WEBHOOK_ALLOWED_HOSTS = []
    for url in (receiver.url, "http://localhost:8080/", "http://[::1]/", "http://10.0.0.1/"):
        response = client.post(
            "/api/v1/agents",
            {"name": "x", "description": "", "webhook_url": url},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {api_key}",
        )
        assert response.status_code == 400, url
        assert "webhook_url" in response.json()["error"]["details"]
    response = factories.AgentClient(agent).patch_json(
        f"/api/v1/agents/{agent.id}", {"webhook_url": receiver.url}
    )
    assert response.status_code == 400
    task = send(agent, peer.id)
    err = error(
        agent, "CreateTaskPushNotificationConfig", {"taskId": task["id"], "url": receiver.url}
    )
    assert err["code"] == -32602 and "private" in err["message"]


@pytest.mark.django_db
def test_a_destination_that_turned_private_is_refused_at_delivery(
    settings, tenant, agent, receiver
):
    bob = with_webhook(tenant, "bob", receiver.url)
    send(agent, bob.id)
    settings.HIKYAKU_WEBHOOK_ALLOWED_HOSTS = []  # e.g. DNS now answers 127.0.0.1
    row = run_until_finished(only_delivery().pk)
    assert row.outcome == Outcome.REFUSED and "private" in row.last_error
    assert receiver.requests == []


@pytest.mark.django_db
def test_a_name_that_does_not_resolve_is_retried_then_failed_not_refused(tenant, agent):
    bob = with_webhook(tenant, "bob", "http://no-such-host.invalid/hook")
    send(agent, bob.id)
    row = only_delivery()
    assert delivery.attempt(delivery_id=row.pk) is not None  # a retry is scheduled
    row.refresh_from_db()
    assert (row.outcome, row.attempts) == (Outcome.PENDING, 1)
    assert "no-such-host.invalid does not resolve" in row.last_error
    WebhookDelivery.objects.filter(pk=row.pk).update(next_attempt_at=None)
    row = run_until_finished(row.pk)
    assert (row.outcome, row.attempts) == (Outcome.FAILED, 4)


@pytest.mark.django_db
def test_a_transient_dns_failure_is_retried_and_delivered(tenant, agent, receiver, monkeypatch):
    """EAI_AGAIN (the resolver timed out, say) is a failed attempt like a refused connection,
    never a refusal of the destination. The resolver is the operating system's: it is
    replaced here by one that fails once, then answers with the receiver's address."""
    import socket

    real = socket.getaddrinfo
    calls = []

    def flaky_resolver(host, port, *args, **kwargs):
        if host != "hooks.test":
            return real(host, port, *args, **kwargs)
        calls.append(host)
        if len(calls) == 1:
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real("127.0.0.1", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", flaky_resolver)
    port = receiver.server.server_address[1]
    bob = with_webhook(tenant, "bob", f"http://hooks.test:{port}/hook")
    send(agent, bob.id)
    row = only_delivery()
    assert delivery.attempt(delivery_id=row.pk) is not None
    row.refresh_from_db()
    assert row.outcome == Outcome.PENDING
    assert row.last_error == "hooks.test does not resolve (Temporary failure in name resolution)."
    WebhookDelivery.objects.filter(pk=row.pk).update(next_attempt_at=None)
    row = run_until_finished(row.pk)
    assert (row.outcome, row.attempts, row.last_status) == (Outcome.DELIVERED, 2, 200)
    assert len(receiver.requests) == 1 and calls == ["hooks.test", "hooks.test"]


# Policy and status are re-checked at delivery time -------------------------------------------


@pytest.mark.django_db
def test_a_closed_relationship_drops_pending_deliveries(tenant, agent, receiver):
    bob = with_webhook(tenant, "bob", receiver.url)
    send(agent, bob.id)
    agent_services.set_agent_policy(agent=bob.refresh(), receive_from=[])
    row = run_until_finished(only_delivery().pk)
    assert row.outcome == Outcome.DROPPED and receiver.requests == []


@pytest.mark.django_db
def test_a_disabled_agent_gets_no_webhooks(tenant, agent, receiver):
    bob = with_webhook(tenant, "bob", receiver.url)
    send(agent, bob.id)
    agent_services.set_agent_enabled(agent=bob.refresh(), enabled=False)
    assert run_until_finished(only_delivery().pk).outcome == Outcome.DROPPED
    assert receiver.requests == []


@pytest.mark.django_db
def test_changing_the_webhook_url_applies_to_pending_deliveries(tenant, agent, receiver):
    bob = with_webhook(tenant, "bob", "https://hooks.example.com/old")
    send(agent, bob.id)
    agent_services.update_agent(agent=bob.refresh(), webhook_url=receiver.url)
    row = run_until_finished(only_delivery().pk)
    assert row.outcome == Outcome.DELIVERED and row.url == receiver.url


# Task push configs (A2A) deliver too ----------------------------------------------------------


@pytest.mark.django_db
def test_push_config_gets_status_updates_with_token_and_authorization(agent, peer, receiver):
    task = send(agent, peer.id)
    result(
        agent,
        "CreateTaskPushNotificationConfig",
        {
            "taskId": task["id"],
            "id": "ci",
            "url": receiver.url,
            "token": "tok-123",
            "authentication": {"scheme": "Bearer", "credentials": "s3cret"},
        },
    )
    act(peer, task["id"], "accept")
    row = run_until_finished(only_delivery().pk)
    assert row.target == WebhookDelivery.Target.PUSH_CONFIG and row.outcome == Outcome.DELIVERED
    (request,) = receiver.requests
    assert request.headers["X-A2A-Notification-Token"] == "tok-123"
    assert request.headers["Authorization"] == "Bearer s3cret"
    assert payloads.verify(secret_of(agent), request.body, request.headers["X-Hikyaku-Signature"])
    update = request.json["statusUpdate"]
    assert update["status"]["state"] == "TASK_STATE_WORKING"


@pytest.mark.django_db
def test_push_config_from_the_03_dialect_gets_the_03_task(agent, peer, receiver):
    task = send(agent, peer.id)
    result(
        agent,
        "tasks/pushNotificationConfig/set",
        {"taskId": task["id"], "pushNotificationConfig": {"url": receiver.url}},
        version=None,
    )
    act(peer, task["id"], "ack")
    run_until_finished(only_delivery().pk)
    body = receiver.requests[0].json
    assert body["kind"] == "task" and body["id"] == task["id"]
    assert body["status"]["state"] == "completed"


@pytest.mark.django_db
def test_deleted_push_config_stops_deliveries(agent, peer, receiver):
    task = send(agent, peer.id)
    params = {"taskId": task["id"], "id": "c1", "url": receiver.url}
    result(agent, "CreateTaskPushNotificationConfig", params)
    act(peer, task["id"], "accept")
    result(agent, "DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "c1"})
    assert PushConfig.objects.count() == 0
    assert run_until_finished(only_delivery().pk).outcome == Outcome.DROPPED
    act(peer, task["id"], "complete")
    assert WebhookDelivery.objects.count() == 1


# End to end in the embedded default: background threads, after commit -------------------------


@pytest.mark.django_db(transaction=True)
def test_embedded_default_delivers_after_commit_without_blocking_the_request(
    settings, tenant, agent, receiver
):
    settings.HIKYAKU_WEBHOOK_TIMEOUT_SECONDS = 3.0
    receiver.statuses = [500, 200]
    receiver.hang_seconds = 1.5
    bob = with_webhook(tenant, "bob", receiver.url)
    started = time.monotonic()
    send(agent, bob.id)
    assert time.monotonic() - started < 1.0  # the POST happens on a background thread
    receiver.wait_for(2, timeout=15)
    row = wait_finished(only_delivery().pk, timeout=15)
    assert (row.outcome, row.attempts) == (Outcome.DELIVERED, 2)
    time.sleep(0.5)
    assert len(receiver.requests) == 2


@pytest.mark.django_db(transaction=True)
def test_embedded_default_times_out_a_hanging_receiver(settings, tenant, agent, receiver):
    settings.HIKYAKU_WEBHOOK_TIMEOUT_SECONDS = 1.0
    settings.HIKYAKU_WEBHOOK_MAX_ATTEMPTS = 2
    receiver.hang_seconds = 3
    bob = with_webhook(tenant, "bob", receiver.url)
    started = time.monotonic()
    send(agent, bob.id)
    # A send that waited for even the first attempt would take the whole timeout; the margin
    # is wide so that a loaded machine's slow send is not mistaken for one.
    assert time.monotonic() - started < 1.0
    row = wait_finished(only_delivery().pk)
    assert (row.outcome, row.attempts) == (Outcome.FAILED, 2)
    assert "timed out" in row.last_error


@pytest.mark.django_db(transaction=True)
def test_the_sweeper_picks_up_deliveries_whose_enqueue_was_lost(
    settings, tenant, agent, receiver, monkeypatch
):
    settings.HIKYAKU_WEBHOOK_SWEEP_GRACE_SECONDS = 0
    bob = with_webhook(tenant, "bob", receiver.url)
    monkeypatch.setattr(delivery, "enqueue", lambda ids: None)  # e.g. Redis was down
    send(agent, bob.id)
    time.sleep(0.2)
    assert receiver.requests == [] and only_delivery().outcome == Outcome.PENDING
    monkeypatch.undo()
    assert delivery.enqueue_due() == 1
    assert wait_finished(only_delivery().pk).outcome == Outcome.DELIVERED
    assert len(receiver.wait_for(1)) == 1


@pytest.mark.django_db
def test_a_failed_enqueue_never_fails_the_send(settings, tenant, agent, monkeypatch):
    settings.CELERY_TASK_ALWAYS_EAGER = False

    def broken(*args, **kwargs):
        raise ConnectionError("redis is down")

    from hikyaku import celery_app

    monkeypatch.setattr(celery_app, "send_task", broken)
    bob = with_webhook(tenant, "bob", "https://hooks.example.com/x")
    delivery.enqueue([1, 2, 3])  # logs, never raises
    send(agent, bob.id)
    assert only_delivery().outcome == Outcome.PENDING


@pytest.mark.django_db
def test_the_admin_shows_the_delivery_log_read_only(client, tenant, agent, receiver):
    receiver.statuses = [502]
    bob = with_webhook(tenant, "bob", receiver.url)
    send(agent, bob.id)
    row = only_delivery()
    delivery.attempt(delivery_id=row.pk)
    user = factories.user("root@example.com")
    user.is_staff = user.is_superuser = True
    user.save()
    client.force_login(user)
    page = client.get("/admin/messaging/webhookdelivery/").content.decode()
    assert receiver.url in page and "HTTP 502" in page and "Pending" in page
    detail = client.get(f"/admin/messaging/webhookdelivery/{row.pk}/change/")
    assert detail.status_code == 200 and b'name="_save"' not in detail.content
    assert client.post(f"/admin/messaging/webhookdelivery/{row.pk}/delete/").status_code == 403
    assert client.get("/admin/messaging/pushconfig/").status_code == 200


@pytest.mark.django_db
def test_sends_and_transitions_without_webhooks_cost_no_queries(agent, peer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        task = send(agent, peer.id)
        act(peer, task["id"], "accept")
        act(peer, task["id"], "complete")
        result(agent, "SendMessage", {"message": message("all", to="*")})
    # (On Postgres every send and transition is one statement whose CTE also inserts the
    # webhook deliveries when there are webhooks: not a separate query.)
    separate = [q["sql"] for q in ctx.captured_queries if not q["sql"].startswith("WITH ")]
    touched = [sql for sql in separate if "pushconfig" in sql or "webhookdelivery" in sql]
    # The parties' webhook_url comes with the rows the services lock anyway (no deferred load).
    touched += [q["sql"] for q in ctx.captured_queries if '"webhook_url" FROM' in q["sql"]]
    assert touched == []


@pytest.mark.django_db
def test_a_transition_notifies_agent_webhooks_and_push_configs_together(tenant, receiver):
    alice = with_webhook(tenant, "alice", receiver.url)
    bob = with_webhook(tenant, "bob", receiver.url)
    task = send(alice, bob.id)
    result(alice, "CreateTaskPushNotificationConfig", {"taskId": task["id"], "url": receiver.url})
    result(bob, "CreateTaskPushNotificationConfig", {"taskId": task["id"], "url": receiver.url})
    WebhookDelivery.objects.all().delete()  # bob's delivery of the new task
    act(bob, task["id"], "accept")
    rows = list(WebhookDelivery.objects.order_by("pk"))
    assert sorted((r.target, str(r.agent_id or "")) for r in rows) == sorted(
        [("agent", alice.id), ("agent", bob.id), ("push_config", ""), ("push_config", "")]
    )
    assert {r.event_id for r in rows} == {TaskEvent.objects.get(kind="accept").id}
    for row in rows:
        assert run_until_finished(row.pk).outcome == Outcome.DELIVERED
    assert len(receiver.requests) == 4


@pytest.mark.django_db
def test_a_push_config_attached_during_a_transition_is_not_missed(agent, peer, monkeypatch):
    """A transition decided from an unlocked read (any comment; every action on SQLite): a
    config attached between the read and the compare-and-set makes the compare-and-set fail
    and read again."""
    from messaging import services

    task = send(agent, peer.id)
    real_read = services._read_party_task
    calls = []

    def read_then_attach(sender, task_id):
        read = real_read(sender, task_id)
        if not calls:
            result(
                agent,
                "CreateTaskPushNotificationConfig",
                {"taskId": task["id"], "url": "https://hooks.example.com/late"},
            )
        calls.append(1)
        return read

    monkeypatch.setattr(services, "_read_party_task", read_then_attach)
    act(peer, task["id"], "comment")
    assert len(calls) == 2
    (row,) = WebhookDelivery.objects.all()
    assert row.target == "push_config" and row.url == "https://hooks.example.com/late"
