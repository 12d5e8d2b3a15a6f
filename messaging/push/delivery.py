"""Webhook delivery (docs/PROTOCOL.md §7): fan-out, attempts, retries and the delivery log.

The database is the delivery guarantee, the queue only a wake-up (as for streams):
1. The write that stores an event inserts one `WebhookDelivery` row per event and
   destination in the same transaction (messaging/push/fanout.py: the agents' `webhook_url`s
   — the same events their SSE streams carry — and the task's push configs) and, after
   commit, enqueues them. A lost enqueue (Redis down, process killed) only delays a delivery: the beat task
   `retry_due_webhooks` re-enqueues pending rows whose attempt is overdue.
2. `attempt` makes one attempt: it claims the row with a lease (so duplicate queue messages
   never POST twice at once) while its tenant and destination are under their caps
   (messaging/push/fairness.py; otherwise the row waits without holding a worker),
   re-checks that the destination may still see the task (current policy, agent status),
   POSTs, records the outcome and wakes the deliveries its slot was holding back. It returns
   the delay before the next attempt — exponential backoff with jitter, capped — or None
   when there is nothing more to do for now.
3. Celery tasks (messaging/tasks.py) call `attempt` and re-enqueue themselves with that delay.
   In the embedded default (eager Celery, no broker) the same loop runs on a small pool of
   background threads instead (messaging/push/runner.py), so a request never waits for a
   webhook.
"""

from __future__ import annotations

import logging
import random
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from agents.models import Agent
from agents.services import webhook_secret
from hikyaku import metrics

from .. import policy
from ..models import Task, TaskEvent, WebhookDelivery
from . import fairness, http, payloads, runner
from .fairness import UNFINISHED  # noqa: F401  (re-exported: the log's marker of an attempt in flight)

log = logging.getLogger(__name__)
Outcome = WebhookDelivery.Outcome

USER_AGENT = "Hikyaku-Webhooks/1.0"


# 1. Fan-out ----------------------------------------------------------------------------------
# The rows are written by the stores, in the write's own transaction (messaging/push/fanout.py).


def enqueue_after_commit(delivery_ids: list[int]) -> None:
    transaction.on_commit(partial(enqueue, delivery_ids))


# 2. One attempt ------------------------------------------------------------------------------


def backoff(attempts: int) -> float:
    """Seconds before attempt `attempts + 1`: base × 2^(attempts-1), capped, ±10% jitter."""
    base = settings.HIKYAKU_WEBHOOK_BACKOFF_SECONDS
    delay = min(base * (2 ** max(attempts - 1, 0)), settings.HIKYAKU_WEBHOOK_BACKOFF_CAP_SECONDS)
    return delay * random.uniform(0.9, 1.1)


def attempt(*, delivery_id: int) -> float | None:
    """Make the next attempt of a pending delivery if it is due. Returns the delay before the
    following attempt, or None when there is nothing more to do (finished, not due, claimed
    by another worker, or waiting for a free slot: an attempt that finishes wakes it).

    The claim counts the attempt before the POST starts, so an attempt whose worker was
    killed is visible in the row (and counts towards HIKYAKU_WEBHOOK_MAX_ATTEMPTS: a
    delivery that kills every worker that tries it ends as failed instead of looping)."""
    claim = fairness.claim(delivery_id=delivery_id)
    if claim is fairness.Claim.WAITING:
        metrics.webhook_attempt("deferred")
        if settings.CELERY_TASK_ALWAYS_EAGER:
            # The embedded pool has no sweeper: its own timer stands in for a lost wake-up.
            return fairness.waiting_fallback_seconds()
        return None
    if claim is not fairness.Claim.CLAIMED:
        return None
    try:
        return _attempt_claimed(delivery_id)
    finally:
        _wake_after(delivery_id)


def _wake_after(delivery_id: int) -> None:
    """The slot of this attempt is free: start the deliveries it was holding back. Never
    raises: a lost wake-up only delays them (waiting rows fall due by themselves)."""
    try:
        row = WebhookDelivery.objects.filter(pk=delivery_id).values("tenant_id", "url").first()
        woken = fairness.wake(tenant_id=row["tenant_id"], url=row["url"]) if row else []
    except Exception:
        log.exception("webhook delivery %s: waking waiting deliveries failed", delivery_id)
        return
    if woken:
        enqueue(woken)


def _attempt_claimed(delivery_id: int) -> float | None:
    timeout = settings.HIKYAKU_WEBHOOK_TIMEOUT_SECONDS
    delivery = WebhookDelivery.objects.select_related(
        "agent", "push_config", "push_config__created_by"
    ).get(pk=delivery_id)
    attempts = delivery.attempts  # this one included
    if attempts > settings.HIKYAKU_WEBHOOK_MAX_ATTEMPTS:
        _finish(
            delivery,
            Outcome.FAILED,
            attempts=attempts - 1,
            error="Gave up: the last attempt never recorded an outcome (its worker was lost).",
        )
        metrics.webhook_attempt("gave_up")
        return None
    task = Task.objects.select_related("sender", "recipient").filter(pk=delivery.task_id).first()
    event = TaskEvent.objects.filter(pk=delivery.event_id).first()
    destination = _destination(delivery, task) if task and event else None
    if destination is None:
        _finish(
            delivery,
            Outcome.DROPPED,
            attempts=attempts - 1,  # nothing was posted
            error="The destination may no longer see this task.",
        )
        metrics.webhook_attempt("dropped")
        return None
    url, secret, extra_headers, dialect = destination
    body = payloads.encode(payloads.stream_response(task, event, dialect))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Hikyaku-Event-Id": str(event.id),
        "X-Hikyaku-Delivery-Id": str(delivery.id),
        **extra_headers,
    }
    if secret:
        headers[payloads.SIGNATURE_HEADER] = payloads.signature(secret, body)
    result = http.post(url, body=body, headers=headers, timeout=timeout)
    metrics.webhook_attempt(result.outcome)
    if result.ok:
        _finish(delivery, Outcome.DELIVERED, attempts=attempts, status=result.status, url=url)
        return None
    if result.outcome == "refused":
        _finish(delivery, Outcome.REFUSED, attempts=attempts, error=result.error, url=url)
        return None
    if attempts >= settings.HIKYAKU_WEBHOOK_MAX_ATTEMPTS:
        _finish(
            delivery,
            Outcome.FAILED,
            attempts=attempts,
            status=result.status,
            error=result.error,
            url=url,
        )
        metrics.webhook_attempt("gave_up")
        return None
    delay = backoff(attempts)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        attempts=attempts,
        last_status=result.status,
        last_error=result.error[:500],
        next_attempt_at=timezone.now() + timedelta(seconds=delay),
        updated_at=timezone.now(),
        url=url,
    )
    return delay


def _destination(
    delivery: WebhookDelivery, task: Task
) -> tuple[str, str, dict[str, str], str] | None:
    """(url, signing secret, headers, payload dialect) if the destination may still see the
    task under the current policy; None otherwise."""
    if delivery.target == WebhookDelivery.Target.AGENT:
        agent = delivery.agent
        if (
            agent is None
            or agent.status != Agent.Status.ACTIVE
            or not agent.webhook_url
            or agent.pk not in (task.sender_id, task.recipient_id)
            or not policy.may_read(agent, task)
        ):
            return None
        return agent.webhook_url, webhook_secret(agent=agent), {}, "1.0"
    config = delivery.push_config
    if config is None:
        return None
    creator = config.created_by
    if creator is not None:
        if (
            creator.status != Agent.Status.ACTIVE
            or creator.pk not in (task.sender_id, task.recipient_id)
            or not policy.may_read(creator, task)
        ):
            return None
        secret = webhook_secret(agent=creator)
    else:
        if task.sender_id is not None or task.caller_id != config.created_by_caller:
            return None
        secret = config.token
    headers: dict[str, str] = {}
    if config.token:
        headers["X-A2A-Notification-Token"] = config.token
    if config.auth_scheme and config.auth_credentials:
        headers["Authorization"] = f"{config.auth_scheme} {config.auth_credentials}"
    return config.url, secret, headers, config.dialect


def _finish(
    delivery: WebhookDelivery,
    outcome: str,
    *,
    attempts: int | None = None,
    status: int | None = None,
    error: str = "",
    url: str | None = None,
) -> None:
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        outcome=outcome,
        attempts=delivery.attempts if attempts is None else attempts,
        last_status=status,
        last_error=error[:500],
        next_attempt_at=None,
        updated_at=timezone.now(),
        url=url or delivery.url,
    )


# 3. Running attempts -------------------------------------------------------------------------


def enqueue(delivery_ids: list[int]) -> None:
    """Start delivering (after commit). Never raises: a delivery that could not be enqueued
    stays pending and `enqueue_due` picks it up."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        runner.local_pool(_local_run).submit(delivery_ids)
        return
    runner.send_to_workers(delivery_ids)


def enqueue_due(*, limit: int = 1000) -> int:
    """Re-enqueue pending deliveries whose attempt is overdue (lost queue messages, crashed
    workers, lost wake-ups). Run every minute by beat. Returns how many were enqueued."""
    grace = timedelta(seconds=settings.HIKYAKU_WEBHOOK_SWEEP_GRACE_SECONDS)
    due = list(
        WebhookDelivery.objects.filter(
            outcome=Outcome.PENDING, next_attempt_at__lte=timezone.now() - grace
        )
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
    if due:
        enqueue(due)
    return len(due)


def _local_run(delivery_id: int) -> float | None:
    """One attempt on an embedded pool thread, with the connection handling of a request."""
    close_old_connections()
    try:
        return attempt(delivery_id=delivery_id)
    finally:
        connection.close()
