"""Nexum's Celery app. Tasks take ids and digests, never content, and are enqueued on commit."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("nexum")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(
    ["nexum.eventstore", "tasks_app", "context_app", "verification_app", "nexum_web.webhooks"]
)
