"""Retention (docs/PROTOCOL.md §11): what the broker forgets, and when.

- Tasks in a terminal state (completed, rejected, failed, canceled — broadcast summaries
  included) whose last change is older than HIKYAKU_RETENTION_DAYS, with their events and
  push configs.
- Agents deregistered longer ago than HIKYAKU_DEREGISTERED_TTL_DAYS, with every task they sent
  or received (whatever its state) and those tasks' events.
- Webhook delivery log rows older than HIKYAKU_WEBHOOK_LOG_DAYS.

Everything is deleted in batches of HIKYAKU_PURGE_BATCH_SIZE ids, one short transaction per
batch, so a purge never holds locks for long and can be interrupted at any point. Run by beat
(`messaging.purge_expired`) and by `python manage.py purge` (with `--dry-run` for counts).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from agents.models import Agent

from .models import TERMINAL_STATES, Task, TaskEvent, WebhookDelivery


@dataclass
class PurgeCounts:
    tasks: int = 0
    events: int = 0
    agents: int = 0
    webhook_deliveries: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class Cutoffs:
    terminal_tasks: datetime
    deregistered_agents: datetime
    webhook_deliveries: datetime

    @classmethod
    def at(cls, now: datetime) -> Cutoffs:
        return cls(
            terminal_tasks=now - timedelta(days=settings.HIKYAKU_RETENTION_DAYS),
            deregistered_agents=now - timedelta(days=settings.HIKYAKU_DEREGISTERED_TTL_DAYS),
            webhook_deliveries=now - timedelta(days=settings.HIKYAKU_WEBHOOK_LOG_DAYS),
        )


def expired_tasks(cutoffs: Cutoffs) -> QuerySet[Task]:
    return Task.objects.filter(
        state__in=list(TERMINAL_STATES), updated_at__lt=cutoffs.terminal_tasks
    )


def expired_agents(cutoffs: Cutoffs) -> QuerySet[Agent]:
    return Agent.objects.filter(
        status=Agent.Status.DEREGISTERED, deregistered_at__lt=cutoffs.deregistered_agents
    )


def expired_deliveries(cutoffs: Cutoffs) -> QuerySet[WebhookDelivery]:
    return WebhookDelivery.objects.filter(created_at__lt=cutoffs.webhook_deliveries)


def purge(
    *, now: datetime | None = None, dry_run: bool = False, batch_size: int | None = None
) -> PurgeCounts:
    """Delete everything that is due (or, with dry_run, count it). Returns the counts."""
    cutoffs = Cutoffs.at(now or timezone.now())
    batch = batch_size or settings.HIKYAKU_PURGE_BATCH_SIZE
    if dry_run:
        return _count(cutoffs)
    counts = PurgeCounts()
    _purge_tasks(expired_tasks(cutoffs), batch, counts)
    while ids := list(expired_agents(cutoffs).values_list("pk", flat=True)[:batch]):
        _purge_tasks(
            Task.objects.filter(Q(sender_id__in=ids) | Q(recipient_id__in=ids)), batch, counts
        )
        with transaction.atomic():
            counts.agents += Agent.objects.filter(pk__in=ids).delete()[1].get("agents.Agent", 0)
    counts.webhook_deliveries += _delete_in_batches(expired_deliveries(cutoffs), batch)
    return counts


def _purge_tasks(tasks: QuerySet[Task], batch: int, counts: PurgeCounts) -> None:
    while ids := list(tasks.values_list("pk", flat=True)[:batch]):
        with transaction.atomic():
            # Events first: one plain DELETE (nothing depends on them), so the task delete
            # below has little left to cascade through.
            counts.events += TaskEvent.objects.filter(task_id__in=ids).delete()[0]
            deleted = Task.objects.filter(pk__in=ids).delete()[1]
            counts.tasks += deleted.get("messaging.Task", 0)


def _delete_in_batches(queryset: QuerySet, batch: int) -> int:
    total = 0
    while ids := list(queryset.values_list("pk", flat=True)[:batch]):
        with transaction.atomic():
            total += queryset.model.objects.filter(pk__in=ids).delete()[0]
    return total


def _count(cutoffs: Cutoffs) -> PurgeCounts:
    agents = expired_agents(cutoffs)
    tasks = expired_tasks(cutoffs) | Task.objects.filter(
        Q(sender__in=agents) | Q(recipient__in=agents)
    )
    task_ids = tasks.values("pk")
    return PurgeCounts(
        tasks=Task.objects.filter(pk__in=task_ids).count(),
        events=TaskEvent.objects.filter(task_id__in=task_ids).count(),
        agents=agents.count(),
        webhook_deliveries=expired_deliveries(cutoffs).count(),
    )
