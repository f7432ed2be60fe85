"""The Celery app. Runs go on the `runs` queue, whose worker must run with concurrency 1."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agenttest.settings")

app = Celery("agenttest")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
