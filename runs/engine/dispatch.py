"""Queueing a run for a worker. The queue is asked first, and a run it does not take leaves nothing behind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import current_app
from django.conf import settings
from django.db.models.functions import Now

from common.queues import group_queue
from runs.engine.errors import QueueUnavailable
from runs.models import Run

EXECUTE_RUN = "runs.tasks.execute_run"


def run_dispatch(run_id: int, countdown: float | None = None) -> None:
    """Queue the run on its isolation group's queue, which only workers serving that group consume."""
    group = Run.objects.filter(pk=run_id).values_list("isolation_group", flat=True).first() or "default"
    # By name, not by importing the task (whose module imports the services, which dispatch through here) nor the
    # project's Celery app (the composition root, which no app imports): the current app is the one it built.
    # Celery takes no countdown as None; celery-types declares a float.
    from common.broker import broker_publish

    task = current_app.tasks[EXECUTE_RUN]
    # `connection` is send_task's (apply_async passes it on), which celery-types does not declare.
    broker_publish(lambda connection: task.apply_async(  # type: ignore[call-arg]
        args=(run_id,), queue=group_queue(group), countdown=countdown, retry=False,  # type: ignore[arg-type]
        connection=connection,
    ))


def queue_ping() -> None:
    from common.broker import BrokerUnavailable, broker_ping

    try:
        # The publish's own bound (AGENTTEST_BROKER_TIMEOUT): the embedded broker's file may be locked that long by
        # the workers polling it, which is no outage.
        broker_ping(timeout=settings.CELERY_BROKER_CONNECTION_TIMEOUT)
    except BrokerUnavailable as exc:
        raise QueueUnavailable(f"the run queue is unavailable: {exc}") from None


def queue_or_undo(*, run: Run, dispatch: Callable[[int], None] | None, undo: Callable[[], Any]) -> None:
    # From here a worker should pick the run up within a lease period, or the sweep sends it again.
    Run.objects.filter(pk=run.pk).update(queued_at=Now(), requeued_at=None)
    try:
        (dispatch or run_dispatch)(run.pk)
    except Exception as exc:
        undo()
        raise QueueUnavailable(f"the run queue is unavailable: {exc}") from None
