"""Celery tasks: thin interfaces over the services (STYLE.md). Beat runs the periodic ones
(CELERY_BEAT_SCHEDULE in settings)."""

from __future__ import annotations

from celery import shared_task

from . import retention
from .push import delivery, runner


@shared_task(name="messaging.deliver_webhook", ignore_result=True)
def deliver_webhook(delivery_id: int) -> None:
    """One attempt of a webhook delivery; schedules the next one when it must retry."""
    delay = delivery.attempt(delivery_id=delivery_id)
    if delay is not None:
        runner.send_to_workers([delivery_id], countdown=delay)


@shared_task(name="messaging.retry_due_webhooks", ignore_result=True)
def retry_due_webhooks() -> int:
    return delivery.enqueue_due()


@shared_task(name="messaging.purge_expired", ignore_result=True)
def purge_expired() -> dict[str, int]:
    return retention.purge().as_dict()
