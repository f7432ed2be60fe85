"""Worker start-up: warn when the runs worker could run cases concurrently, sweep interrupted runs, and keep
sweeping while the worker lives; say which isolation groups this worker serves (its liveness, runs/engine/workers.py)
every time it sweeps, so a run page can tell when no live worker serves a run's group.

Why a timer in every worker and not Celery beat: a SIGKILLed worker renews nothing, so its run must be taken by
someone else within about one lease period — with or without a restart, and without an extra beat process that a
deployment may forget. Each worker's main process re-checks every third of AGENTTEST_RUN_LEASE_SECONDS; the sweep is
one conditional update per expired run, so several workers sweeping at once are harmless. The same timer sends again
a Pending run of the worker's groups that no worker has picked up for a lease period (its message was lost)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.signals import celeryd_after_setup, worker_init, worker_ready, worker_shutdown
from django.conf import settings
from django.db import DatabaseError, connection

logger = logging.getLogger("runs.worker")
_stop_sweeping = threading.Event()


@celeryd_after_setup.connect
def warn_about_concurrency(sender: Any, instance: Any, **kwargs: Any) -> None:
    concurrency = getattr(instance, "concurrency", 1) or 1
    if concurrency > 1:
        logger.warning(
            "this worker runs with concurrency %s; runs must execute one at a time (cases share external state). "
            "Start the runs worker with: celery -A agenttest worker -Q runs --concurrency 1",
            concurrency,
        )


@worker_init.connect
def prepare_model_providers(**kwargs: Any) -> None:
    """Import the model SDKs once, in the main process before the pool forks: a command imports them only when it
    calls a model (issue 40), but a run's first case would pay the import — seconds on a loaded machine — under the
    run's lease, racing its first heartbeat."""
    from agenthost.seams import providers_prepare

    providers_prepare()


@worker_init.connect
def declare_embedded_broker_queues(sender: Any = None, **kwargs: Any) -> None:
    """The embedded broker's tables and this worker's queues, made before its consumer starts (common.broker)."""
    from common.broker import broker_declare

    queues = sender.app.amqp.queues
    broker_declare(sender.app, list((queues.consume_from or queues).keys()))


@worker_ready.connect
def sweep_interrupted_runs(sender: Any = None, **kwargs: Any) -> None:
    from runs.engine.workers import served_groups, worker_beat
    from runs.services import run_sweep_interrupted

    name = getattr(sender, "hostname", "") or "worker"
    groups = served_groups(_consumed_queues(sender))
    try:
        if groups:
            worker_beat(name=name, groups=groups)
        swept, redispatched = run_sweep_interrupted()
    finally:
        # The pool may fork again later; a child must not inherit this thread's connection.
        connection.close()
    if swept:
        logger.warning("at worker start: runs %s set to Error: their executor stopped renewing its lease", swept)
    if redispatched:
        # Routine: a Pending run's message may have been lost with a broker; the copy that comes second does nothing.
        logger.info("at worker start: pending runs %s queued again in case their message was lost", redispatched)
    _stop_sweeping.clear()
    threading.Thread(
        target=_keep_sweeping, args=(name, groups), name="agenttest-lease-sweeper", daemon=True
    ).start()
    _beating.append(name)


@worker_shutdown.connect
def stop_sweeping(sender: Any = None, **kwargs: Any) -> None:
    from runs.engine.workers import worker_gone

    _stop_sweeping.set()
    for name in _beating:
        try:
            worker_gone(name=name)
        except DatabaseError:
            # Its beat simply stops being renewed: the worker counts as gone one lease period later.
            logger.warning("could not say that worker %s stopped", name, exc_info=True)
        finally:
            connection.close()
    _beating.clear()


_beating: list[str] = []


def _consumed_queues(consumer: Any) -> list[str]:
    try:
        return list(consumer.app.amqp.queues.consume_from)
    except AttributeError:
        return []


def _keep_sweeping(name: str, groups: list[str]) -> None:
    from runs.engine.workers import worker_beat
    from runs.services import run_requeue_lost, run_sweep_expired

    while not _stop_sweeping.wait(settings.AGENTTEST_RUN_LEASE_SECONDS / 3):
        swept, requeued = [], []
        try:
            if groups:
                worker_beat(name=name, groups=groups)
            swept = run_sweep_expired()
            # Only the groups this worker serves: it knows their queues are consumed.
            requeued = run_requeue_lost(groups=groups) if groups else []
        except DatabaseError:
            logger.warning("the lease sweep could not reach the database; trying again", exc_info=True)
        finally:
            connection.close()
        if swept:
            logger.warning("runs %s set to Error: their executor stopped renewing its lease", swept)
        if requeued:
            logger.warning("pending runs %s queued again: no worker had picked them up for a lease period", requeued)
