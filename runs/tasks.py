import logging

from celery import Task, shared_task

from runs.dispatch import EXECUTE_RUN, run_dispatch
from runs.services import RunLocked, run_execute, run_wait_for_lock

logger = logging.getLogger(__name__)


@shared_task(bind=True, name=EXECUTE_RUN, acks_late=True, ignore_result=True)
def execute_run(self: Task, run_id: int) -> None:
    try:
        run_execute(run_id=run_id)
    except RunLocked as locked:
        logger.info("run %s waits: %s", run_id, locked)
        run_wait_for_lock(run_id=run_id, holder_id=locked.holder_id, note=locked.waiting_note)
        if self.request.is_eager:
            # Eagerly (tests, no broker) a countdown is ignored and would recurse; the run stays Pending instead.
            return
        # The run stays Pending and asks again after a while, so it executes once the holder lets go.
        run_dispatch(run_id, countdown=locked.retry_after)
