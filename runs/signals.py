"""Worker start-up: warn when the runs worker could run cases concurrently, and sweep interrupted runs."""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import celeryd_after_setup, worker_ready

logger = logging.getLogger("runs.worker")


@celeryd_after_setup.connect
def warn_about_concurrency(sender: Any, instance: Any, **kwargs: Any) -> None:
    concurrency = getattr(instance, "concurrency", 1) or 1
    if concurrency > 1:
        logger.warning(
            "this worker runs with concurrency %s; runs must execute one at a time (cases share external state). "
            "Start the runs worker with: celery -A agenttest worker -Q runs --concurrency 1",
            concurrency,
        )


@worker_ready.connect
def sweep_interrupted_runs(sender: Any = None, **kwargs: Any) -> None:
    from runs.services import run_sweep_interrupted

    swept, redispatched = run_sweep_interrupted()
    if swept or redispatched:
        logger.warning("after restart: runs %s set to Error, pending runs %s dispatched again", swept, redispatched)
