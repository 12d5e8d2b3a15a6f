"""The Celery app. Tasks are thin interfaces over services; the schedule lives in settings."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")

app = Celery("hikyaku")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
