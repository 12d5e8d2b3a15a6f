"""Fair webhook delivery (docs/WEBHOOKS.md, Fairness): per-tenant and per-destination caps on
the attempts in flight, against real receivers on 127.0.0.1.

The scenario of the hardening issue runs on the embedded default here (background threads in
this process, after commit) and with a real Celery worker in test_webhooks_celery.py."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import close_old_connections, connection
from django.utils import timezone

from messaging.models import WebhookDelivery
from messaging.push import delivery, fairness
from tests import factories
from tests.messaging.receiver import Receiver
from tests.messaging.rpc import send

Outcome = WebhookDelivery.Outcome
Claim = fairness.Claim


@pytest.fixture(autouse=True)
def _embedded(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True  # this process's threads deliver


def wait_all_finished(timeout: float = 20.0) -> list[WebhookDelivery]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = list(WebhookDelivery.objects.order_by("pk"))
        if all(r.outcome != Outcome.PENDING for r in rows):
            return rows
        time.sleep(0.1)
    raise AssertionError(f"still pending: {list(WebhookDelivery.objects.values())}")


# The scenario: one tenant's slow receiver, another tenant's webhook -------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_tenants_slow_receiver_does_not_delay_another_tenants_webhooks(
    settings, tenant, other_tenant
):
    """12 messages to a receiver that answers after 10 s (each attempt times out after the
    default 5 s) must not hold up another tenant's webhook by more than a second."""
    settings.HIKYAKU_WEBHOOK_MAX_ATTEMPTS = 1  # nothing left retrying after the test
    slow, fast = Receiver(hang_seconds=10).start(), Receiver().start()
    try:
        alice = factories.agent(tenant, name="alice")
        bob = factories.agent(tenant, name="bob", webhook_url=slow.url)
        carol = factories.agent(other_tenant, name="carol")
        dave = factories.agent(other_tenant, name="dave", webhook_url=fast.url)
        for n in range(12):
            send(alice, bob.id, f"slow {n}")
        slow.wait_for(2)
        time.sleep(0.5)  # every thread that will ever take one of the 12 has taken it
        sent_at = time.monotonic()
        send(carol, dave.id, "fast")
        (arrived,) = fast.wait_for(1, timeout=10)
        assert arrived.at - sent_at <= 1.0
        # The slow tenant holds no more than its cap of attempts in flight.
        assert len(slow.requests) == settings.HIKYAKU_WEBHOOK_TENANT_CONCURRENCY == 2
        waiting = WebhookDelivery.objects.filter(last_error=fairness.WAITING)
        assert waiting.count() == 10 and {r.attempts for r in waiting} == {0}
    finally:
        slow.stop()  # the rest are refused at once: the test need not wait 30 s
        fast.stop()
    rows = wait_all_finished()
    assert {r.outcome for r in rows} == {Outcome.DELIVERED, Outcome.FAILED}
    assert len(slow.requests) == 2


@pytest.mark.django_db(transaction=True)
def test_deliveries_held_back_by_a_cap_go_out_as_slots_free(settings, tenant, agent):
    settings.HIKYAKU_WEBHOOK_TENANT_CONCURRENCY = 1
    receiver = Receiver(hang_seconds=0.3).start()
    try:
        bob = factories.agent(tenant, name="bob", webhook_url=receiver.url)
        for n in range(4):
            send(agent, bob.id, f"n{n}")
        rows = wait_all_finished()
    finally:
        receiver.stop()
    assert [r.outcome for r in rows] == [Outcome.DELIVERED] * 4
    assert [r.attempts for r in rows] == [1] * 4  # waiting is not an attempt
    starts = sorted(r.at for r in receiver.requests)
    # One at a time: each POST began after the previous one was answered.
    assert all(b - a >= 0.25 for a, b in zip(starts, starts[1:], strict=False))


# The caps themselves, claim by claim ---------------------------------------------------------


def deliveries(sender, recipient, count: int) -> list[int]:
    for n in range(count):
        send(sender, recipient.id, f"m{n}")
    return list(
        WebhookDelivery.objects.filter(agent_id=recipient.id)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


@pytest.mark.django_db
def test_a_tenant_over_its_cap_waits_and_others_do_not(settings, tenant, other_tenant):
    settings.HIKYAKU_WEBHOOK_TENANT_CONCURRENCY = 2
    settings.HIKYAKU_WEBHOOK_DESTINATION_CONCURRENCY = 0
    alice, carol = factories.agent(tenant, name="alice"), factories.agent(other_tenant, name="c")
    bob = factories.agent(tenant, name="bob", webhook_url="https://hooks.example.com/a")
    dave = factories.agent(other_tenant, name="d", webhook_url="https://hooks.example.com/a")
    mine = deliveries(alice, bob, 3)
    theirs = deliveries(carol, dave, 1)
    now = timezone.now()
    claims = [fairness.claim(delivery_id=pk, now=now) for pk in [*mine, *theirs]]
    assert claims == [Claim.CLAIMED, Claim.CLAIMED, Claim.WAITING, Claim.CLAIMED]
    held = WebhookDelivery.objects.get(pk=mine[2])
    assert (held.outcome, held.attempts, held.last_error) == (Outcome.PENDING, 0, fairness.WAITING)
    # It falls due by itself only after any lease holding its slot could have run out.
    assert held.next_attempt_at > now + timedelta(seconds=fairness.lease_seconds())
    # A duplicate queue message meanwhile does nothing.
    assert fairness.claim(delivery_id=mine[2], now=now) is Claim.SKIPPED
    # One of the tenant's attempts finishes: the waiting delivery is woken and claims a slot.
    WebhookDelivery.objects.filter(pk=mine[0]).update(
        outcome=Outcome.DELIVERED, last_error="", next_attempt_at=None
    )
    assert fairness.wake(tenant_id=tenant.pk, url="https://hooks.example.com/a") == [mine[2]]
    assert fairness.claim(delivery_id=mine[2], now=timezone.now()) is Claim.CLAIMED


@pytest.mark.django_db
def test_a_destination_over_its_cap_waits_whoever_sends(settings, tenant, other_tenant):
    settings.HIKYAKU_WEBHOOK_TENANT_CONCURRENCY = 0
    settings.HIKYAKU_WEBHOOK_DESTINATION_CONCURRENCY = 1
    alice, carol = factories.agent(tenant, name="alice"), factories.agent(other_tenant, name="c")
    bob = factories.agent(tenant, name="bob", webhook_url="https://Hooks.Example.com/a")
    # The same receiver spelled another way (default port, another path) is one destination.
    dave = factories.agent(other_tenant, name="d", webhook_url="https://hooks.example.com:443/b")
    erin = factories.agent(other_tenant, name="e", webhook_url="https://other.example.com/")
    (first,) = deliveries(alice, bob, 1)
    (second,) = deliveries(carol, dave, 1)
    (elsewhere,) = deliveries(carol, erin, 1)
    now = timezone.now()
    assert fairness.claim(delivery_id=first, now=now) is Claim.CLAIMED
    assert fairness.claim(delivery_id=second, now=now) is Claim.WAITING
    assert fairness.claim(delivery_id=elsewhere, now=now) is Claim.CLAIMED


@pytest.mark.django_db
def test_a_lost_attempt_holds_its_slot_only_until_its_lease_runs_out(settings, tenant, agent):
    settings.HIKYAKU_WEBHOOK_TENANT_CONCURRENCY = 1
    bob = factories.agent(tenant, name="bob", webhook_url="https://hooks.example.com/a")
    lost, next_one = deliveries(agent, bob, 2)
    now = timezone.now()
    assert fairness.claim(delivery_id=lost, now=now) is Claim.CLAIMED  # its worker dies
    assert fairness.claim(delivery_id=next_one, now=now) is Claim.WAITING
    later = now + timedelta(seconds=fairness.lease_seconds() + 1)
    WebhookDelivery.objects.filter(pk=next_one).update(next_attempt_at=later)  # the fallback
    assert fairness.claim(delivery_id=next_one, now=later) is Claim.CLAIMED


@pytest.mark.django_db(transaction=True)
def test_racing_claims_never_exceed_the_cap(settings, tenant, agent, monkeypatch):
    """Workers in several threads (as in several processes) claim one tenant's deliveries at
    the same moment: exactly the cap's worth get through."""
    from hikyaku import celery_app

    settings.HIKYAKU_WEBHOOK_TENANT_CONCURRENCY = 2
    settings.CELERY_TASK_ALWAYS_EAGER = False  # no thread of this process claims them...
    monkeypatch.setattr(celery_app, "send_task", lambda *a, **k: None)  # ...nor any worker
    bob = factories.agent(tenant, name="bob", webhook_url="https://hooks.example.com/a")
    ids = deliveries(agent, bob, 8)
    start = threading.Barrier(len(ids))
    results: list[Claim] = []

    def claim(pk: int) -> None:
        close_old_connections()
        try:
            start.wait()
            results.append(fairness.claim(delivery_id=pk, now=timezone.now()))
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(pk,)) for pk in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.value for r in results) == ["claimed"] * 2 + ["waiting"] * 6


@pytest.mark.django_db
def test_waiting_is_no_attempt_and_the_admin_says_why(settings, tenant, agent):
    settings.HIKYAKU_WEBHOOK_TENANT_CONCURRENCY = 1
    bob = factories.agent(tenant, name="bob", webhook_url="https://hooks.example.com/a")
    first, second = deliveries(agent, bob, 2)
    assert fairness.claim(delivery_id=first, now=timezone.now()) is Claim.CLAIMED
    # An attempt over the cap returns at once, with no POST and no attempt counted; the
    # embedded pool re-runs it after the fallback unless a finishing attempt wakes it first.
    started = time.monotonic()
    delay = delivery.attempt(delivery_id=second)
    assert time.monotonic() - started < 1.0
    assert delay is not None and delay > fairness.lease_seconds()
    row = WebhookDelivery.objects.get(pk=second)
    assert (row.attempts, row.last_error) == (0, fairness.WAITING)
    assert "Waiting for a free slot" in row.last_error
