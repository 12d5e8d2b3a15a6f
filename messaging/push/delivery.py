"""Webhook delivery (docs/PROTOCOL.md §7): fan-out, attempts, retries and the delivery log.

The database is the delivery guarantee, the queue only a wake-up (as for streams):
1. The write that stores an event inserts one `WebhookDelivery` row per event and
   destination in the same transaction (messaging/push/fanout.py: the agents' `webhook_url`s
   — the same events their SSE streams carry — and the task's push configs) and, after
   commit, enqueues them. A lost enqueue (Redis down, process killed) only delays a delivery: the beat task
   `retry_due_webhooks` re-enqueues pending rows whose attempt is overdue.
2. `attempt` makes one attempt: it claims the row with a lease (so duplicate queue messages
   never POST twice at once), re-checks that the destination may still see the task (current
   policy, agent status), POSTs, and records the outcome. It returns the delay before the next
   attempt — exponential backoff with jitter, capped — or None when the delivery is finished.
3. Celery tasks (messaging/tasks.py) call `attempt` and re-enqueue themselves with that delay.
   In the embedded default (eager Celery, no broker) the same loop runs on a small pool of
   background threads instead, so a request never waits for a webhook.
"""

from __future__ import annotations

import logging
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.models import Agent
from agents.services import webhook_secret
from hikyaku import metrics

from .. import policy
from ..models import Task, TaskEvent, WebhookDelivery
from . import http, payloads

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


# What a claimed row says until its attempt records an outcome: if the worker dies mid-POST,
# it stays there, and the row's `attempts` already counts the interrupted attempt.
UNFINISHED = (
    "No outcome recorded yet: in progress, or the worker was lost (retried after the lease)."
)


def attempt(*, delivery_id: int) -> float | None:
    """Make the next attempt of a pending delivery if it is due. Returns the delay before the
    following attempt, or None when there is nothing more to do (finished, not due, or
    claimed by another worker).

    The claim counts the attempt before the POST starts, so an attempt whose worker was
    killed is visible in the row (and counts towards HIKYAKU_WEBHOOK_MAX_ATTEMPTS: a
    delivery that kills every worker that tries it ends as failed instead of looping)."""
    now = timezone.now()
    timeout = settings.HIKYAKU_WEBHOOK_TIMEOUT_SECONDS
    lease_until = now + timedelta(seconds=timeout * 3 + 30)
    claimed = (
        WebhookDelivery.objects.filter(pk=delivery_id, outcome=Outcome.PENDING)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .update(
            next_attempt_at=lease_until,
            attempts=F("attempts") + 1,
            last_status=None,
            last_error=UNFINISHED,
            updated_at=now,
        )
    )
    if not claimed:
        return None
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
        for delivery_id in delivery_ids:
            _local_submit(delivery_id)
        return
    from ..tasks import deliver_webhook

    for delivery_id in delivery_ids:
        try:
            deliver_webhook.apply_async((delivery_id,), retry=False)
        except Exception as exc:  # the broker is down: the sweeper will retry
            log.warning("webhook delivery %s not enqueued (%s); will retry", delivery_id, exc)


def enqueue_due(*, limit: int = 1000) -> int:
    """Re-enqueue pending deliveries whose attempt is overdue (lost queue messages, crashed
    workers). Run every minute by beat. Returns how many were enqueued."""
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


# The embedded default: a few background threads stand in for the Celery worker.
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _local_submit(delivery_id: int) -> None:
    global _executor
    if _executor is None:
        with _executor_lock:
            if _executor is None:
                _executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook")
    _executor.submit(_local_run, delivery_id)


def _local_run(delivery_id: int) -> None:
    close_old_connections()
    try:
        delay = attempt(delivery_id=delivery_id)
    except Exception:
        log.exception("webhook delivery %s failed unexpectedly", delivery_id)
        delay = None
    finally:
        close_old_connections()
        from django.db import connection

        connection.close()
    if delay is not None:
        timer = threading.Timer(delay, _local_submit, args=(delivery_id,))
        timer.daemon = True
        timer.start()
