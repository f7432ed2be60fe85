"""The Celery app. Runs go on the `runs` queue, whose worker must run with concurrency 1."""

from __future__ import annotations

import os
import sys

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agenttest.settings")

_path_before = list(sys.path)
app = Celery("agenttest")
# Celery's Django fix-up puts the current directory first on the import path, where a team's own `cases/` or `runs/`
# folder would shadow agenttest's packages: it stays importable, after them.
if sys.path and sys.path[0] == os.getcwd() and os.getcwd() not in _path_before:
    sys.path.append(sys.path.pop(0))
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
