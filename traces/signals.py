"""The retention sweep, in every worker: once at start, then every hour while the worker lives — a deployment runs
workers anyway, and needs no cron for it. Workers sweeping at once are harmless: each delete takes only expired rows.
Without a worker, `agenttest traces sweep` does the same from cron."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.signals import worker_ready, worker_shutdown
from django.db import DatabaseError, connection

logger = logging.getLogger("traces.retention")
SWEEP_INTERVAL_SECONDS = 3600
_stop = threading.Event()


@worker_ready.connect
def start_sweeping(sender: Any = None, **kwargs: Any) -> None:
    _stop.clear()
    threading.Thread(target=_keep_sweeping, name="agenttest-traces-sweeper", daemon=True).start()


@worker_shutdown.connect
def stop_sweeping(sender: Any = None, **kwargs: Any) -> None:
    _stop.set()


def _keep_sweeping() -> None:
    from traces.services import spans_sweep_expired

    while True:
        try:
            report = spans_sweep_expired()
        except DatabaseError:
            logger.warning("the traces retention sweep could not reach the database; trying again", exc_info=True)
        else:
            if report.spans or report.conversations:
                logger.info("past AGENTTEST_TRACES_RETENTION_DAYS: %s", report)
        finally:
            connection.close()
        if _stop.wait(SWEEP_INTERVAL_SECONDS):
            return
