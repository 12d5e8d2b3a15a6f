"""The Celery app. Tasks are thin interfaces over services; the schedule lives in settings."""

import logging
import os

from celery import Celery
from celery.signals import beat_init, worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")

app = Celery("hikyaku")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _worker_started(**kwargs) -> None:
    from django.conf import settings

    from hikyaku import metrics
    from hikyaku.sqlite_backup import hold_server_lock

    hold_server_lock(settings.DATABASES["default"])
    concurrency = getattr(kwargs.get("sender"), "concurrency", None)
    cap = settings.HIKYAKU_WEBHOOK_TENANT_CONCURRENCY
    if concurrency and (cap <= 0 or concurrency <= cap):
        logging.getLogger(__name__).warning(
            "worker concurrency %s is not above HIKYAKU_WEBHOOK_TENANT_CONCURRENCY (%s): one "
            "tenant's slow webhook receiver can hold every slot of this worker "
            "(docs/WEBHOOKS.md, Fairness)",
            concurrency,
            cap,
        )
    if settings.HIKYAKU_WORKER_METRICS_PORT:
        metrics.start_worker_exporter(
            host=settings.HIKYAKU_WORKER_METRICS_HOST, port=settings.HIKYAKU_WORKER_METRICS_PORT
        )


@beat_init.connect
def _beat_started(**kwargs) -> None:
    from django.conf import settings

    from hikyaku.sqlite_backup import hold_server_lock

    hold_server_lock(settings.DATABASES["default"])
