import logging

from celery import Task, shared_task
from django.db import DatabaseError, connection

from runs.engine.dispatch import EXECUTE_RUN, run_dispatch
from runs.engine.leases import RunLocked, run_retry_after
from runs.services import run_execute, run_wait_for_lock

logger = logging.getLogger(__name__)


@shared_task(bind=True, name=EXECUTE_RUN, acks_late=True, ignore_result=True)
def execute_run(self: Task, run_id: int) -> None:
    try:
        run_execute(run_id=run_id)
        return
    except RunLocked as exc:
        locked = exc
    except DatabaseError as exc:
        # Only before its claim (once claimed, run_execute ends the run itself): the run is still Pending and this
        # message is acknowledged when the task returns, so without another the run would wait forever. The same
        # task goes back on the same queue, which needs no database; should even that fail, the sweep re-queues it.
        logger.warning("run %s: the database failed before the run was claimed (%s); it is queued again", run_id, exc)
        connection.close()
        if self.request.is_eager:
            raise
        raise self.retry(exc=exc, countdown=run_retry_after(), max_retries=None) from None
    logger.info("run %s waits: %s", run_id, locked)
    try:
        run_wait_for_lock(run_id=run_id, holder_id=locked.holder_id, note=locked.waiting_note)
    except DatabaseError:
        # Only a note on the page, and the time it was picked up: the run is sent again below either way.
        logger.warning("run %s: could not say why it waits", run_id, exc_info=True)
        connection.close()
    if self.request.is_eager:
        # Eagerly (tests, no broker) a countdown is ignored and would recurse; the run stays Pending instead.
        return
    # The run stays Pending and asks again after a while, so it executes once the holder lets go.
    run_dispatch(run_id, countdown=locked.retry_after)
