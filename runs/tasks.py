from celery import shared_task

from runs.services import run_execute


@shared_task(name="runs.tasks.execute_run", acks_late=True, ignore_result=True)
def execute_run(run_id: int) -> None:
    run_execute(run_id=run_id)
