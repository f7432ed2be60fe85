"""A run whose queue message is lost does not stay Pending forever: the database, not the broker, says what is still to
run. A real Celery worker on Redis loses a message for real — deleted from Redis while it waited, or acknowledged by a
task the database failed before it could claim the run — and the run is queued again, and its isolation group's next
run then runs; a duplicate message never executes a run twice. The run page says why a Pending run has not started."""

from __future__ import annotations

import math
import re
import time
from datetime import timedelta

import pytest
import redis
from django.db import connection
from django.db.models.functions import Now
from django.urls import reverse

from agenthost.models import Conversation
from runs.models import CaseResult, Run, RunLock, WorkerBeat
from runs.services import run_create, run_requeue_lost, run_wait_for_lock
from tests.runs import test_lease as real_worker
from tests.runs.conftest import SCRIPTED
from tests.runs.test_lease import LEASE_SECONDS, broker, dispatch, trigger, wait_ready, worker_env
from tests.workers import runs_worker, wait_for

__all__ = ["broker", "worker_env"]

pytestmark = [pytest.mark.django_db(transaction=True)]


def finished(*runs: Run) -> bool:
    return all(Run.objects.get(pk=run.pk).is_finished for run in runs)


def executions(run: Run) -> int:
    """How many case executions the run made: every case starts a sealed test conversation of its own."""
    return Conversation.objects.filter(sealed_reason=f"this conversation belongs to test run {run.pk}").count()


@pytest.mark.slow
def test_it_queues_again_a_run_whose_message_was_deleted_from_redis_and_the_groups_next_run_then_runs(
    broker, worker_env, tmp_path
):
    queue = redis.Redis.from_url(broker)
    log = tmp_path / "worker.log"
    with runs_worker(broker, log, **worker_env):
        wait_ready(log)
        busy = trigger(real_worker.order_suite(cases=6, name="busy"))
        wait_for(
            lambda: Run.objects.get(pk=busy.pk).status == Run.Status.RUNNING, what="the first run",
            log_path=log,
        )
        lost = trigger(real_worker.order_suite(cases=2, name="lost"))
        # The worker takes one task at a time and prefetches none beside it: the message waits in Redis, and is lost.
        assert queue.llen("runs") == 1
        queue.delete("runs")
        following = trigger(real_worker.order_suite(cases=2, name="following"))
        wait_for(lambda: finished(busy, lost, following), what="the three runs", log_path=log)

        # A duplicate of a finished run's message changes nothing; the run triggered after it shows it was taken.
        dispatch(lost.pk)
        after = trigger(real_worker.order_suite(cases=1, name="after"))
        wait_for(lambda: finished(after), what="the run after the duplicate", log_path=log)

    busy, lost, following, after = (Run.objects.get(pk=run.pk) for run in (busy, lost, following, after))
    assert [run.status for run in (busy, lost, following, after)] == ["passed"] * 4, lost.reason
    assert busy.finished_at <= lost.started_at and lost.finished_at <= following.started_at, "trigger order holds"
    assert (CaseResult.objects.filter(run=lost).count(), executions(lost)) == (2, 2), "each case ran once"
    assert (CaseResult.objects.filter(run=following).count(), executions(following)) == (2, 2)
    assert lost.requeued_at is not None and lost.reason == "all 2 results passed"


def _refuse_run_locks() -> None:
    """Make the database refuse to take a run lock, as a database restarting under a worker does."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "CREATE FUNCTION refuse_run_locks() RETURNS trigger AS $$ BEGIN "
                "RAISE EXCEPTION 'the database is restarting' USING ERRCODE = '57P03'; END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                "CREATE TRIGGER refuse_run_locks BEFORE UPDATE ON runs_runlock "
                "FOR EACH ROW EXECUTE FUNCTION refuse_run_locks()"
            )
        else:
            cursor.execute(
                "CREATE TRIGGER refuse_run_locks BEFORE UPDATE ON runs_runlock "
                "BEGIN SELECT RAISE(ABORT, 'the database is restarting'); END"
            )


def _allow_run_locks() -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("DROP TRIGGER IF EXISTS refuse_run_locks ON runs_runlock")
            cursor.execute("DROP FUNCTION IF EXISTS refuse_run_locks()")
        else:
            cursor.execute("DROP TRIGGER IF EXISTS refuse_run_locks")


@pytest.mark.slow
def test_it_keeps_a_run_whose_first_delivery_met_a_database_error_and_the_groups_next_run_then_runs(
    broker, worker_env, tmp_path
):
    log = tmp_path / "worker.log"
    with runs_worker(broker, log, **worker_env):
        wait_ready(log)
        _refuse_run_locks()
        try:
            blipped = trigger(real_worker.order_suite(cases=2, name="blipped"))
            wait_for(lambda: "the database is restarting" in log.read_text(errors="replace"),
                     what="the worker to meet the database error", log_path=log)
        finally:
            _allow_run_locks()
        following = trigger(real_worker.order_suite(cases=2, name="following"))
        wait_for(lambda: finished(blipped, following), what="both runs", log_path=log)
    blipped, following = Run.objects.get(pk=blipped.pk), Run.objects.get(pk=following.pk)
    assert (blipped.status, following.status) == ("passed", "passed"), (blipped.reason, following.reason)
    assert blipped.finished_at <= following.started_at
    assert (CaseResult.objects.filter(run=blipped).count(), executions(blipped)) == (2, 2)
    # The task itself sent the run again; it did not wait for the sweep.
    assert f"run {blipped.pk}: the database failed before the run was claimed" in log.read_text()


def _pending(suite, *, queued_ago: float | None, requeued_ago: float | None = None) -> Run:
    run = run_create(suite=suite, model_keys=[SCRIPTED])
    Run.objects.filter(pk=run.pk).update(
        queued_at=None if queued_ago is None else Now() - timedelta(seconds=queued_ago),
        requeued_at=None if requeued_ago is None else Now() - timedelta(seconds=requeued_ago),
    )
    return Run.objects.get(pk=run.pk)


def test_it_says_on_the_run_page_that_no_worker_picked_a_pending_run_up_and_when_it_was_queued_again(
    admin_client, order_suite, settings, scripted_model
):
    settings.AGENTTEST_RUN_LEASE_SECONDS = LEASE_SECONDS
    WorkerBeat.objects.create(name="runs-1@box", groups=["default"], seen_at=Now() + timedelta(hours=1))
    started = time.monotonic()
    stalled = _pending(order_suite, queued_ago=125, requeued_ago=5)
    page = admin_client.get(reverse("runs:detail", args=[stalled.pk])).content.decode()
    took = time.monotonic() - started
    requeued = stalled.requeued_at.strftime("%H:%M:%S")
    shown = re.search(
        rf"No worker has picked this run up for (\d+) min (\d+) s; it was queued again at <time datetime=\"[^\"]+\">"
        rf"{requeued}</time> in case its message was lost\. Is a worker running for queue <code>runs</code>\?",
        page,
    )
    assert shown, page
    # The wait is the database's time since the run was queued, read when the page was drawn: 125 s plus however
    # long this machine took between the write and the page (a loaded one took more than the 4 s once allowed).
    assert 125 <= int(shown[1]) * 60 + int(shown[2]) <= 125 + math.ceil(took), (shown[0], took)
    assert "Live workers serving it: <code>runs-1@box</code>" in page

    # Not yet a lease period (an hour, so no machine is slow enough to reach it), or never queued (an inline run):
    # nothing to say.
    settings.AGENTTEST_RUN_LEASE_SECONDS = 3600
    for quiet in (_pending(order_suite, queued_ago=1), _pending(order_suite, queued_ago=None)):
        page = admin_client.get(reverse("runs:detail", args=[quiet.pk])).content.decode()
        assert 'data-field="pickup-stall"' not in page


def test_it_says_nothing_of_a_pending_run_queued_behind_a_live_holder_of_its_run_lock(
    admin_client, order_suite, settings, scripted_model
):
    settings.AGENTTEST_RUN_LEASE_SECONDS = LEASE_SECONDS
    # Live however long the test takes: a beat of now was stale by the second page on one core shared by the suite.
    WorkerBeat.objects.create(name="runs-1@box", groups=["default"], seen_at=Now() + timedelta(hours=1))
    holder = _pending(order_suite, queued_ago=None)
    Run.objects.filter(pk=holder.pk).update(
        status=Run.Status.RUNNING, lease_owner="elsewhere", lease_expires_at=Now() + timedelta(seconds=60)
    )
    RunLock.objects.create(group="default", run=holder, expires_at=Now() + timedelta(seconds=60))
    waiting = _pending(order_suite, queued_ago=600)
    page = admin_client.get(reverse("runs:detail", args=[waiting.pk])).content.decode()
    assert 'data-field="pickup-stall"' not in page
    RunLock.objects.filter(group="default").update(expires_at=Now() - timedelta(seconds=1))
    page = admin_client.get(reverse("runs:detail", args=[waiting.pk])).content.decode()
    assert re.search(r"No worker has picked this run up for 10 min [0-5]?[0-9] s\. Is a worker running", page), page


def _times(run: Run, *, queued_ago: float, requeued_ago: float | None) -> None:
    Run.objects.filter(pk=run.pk).update(
        queued_at=Now() - timedelta(seconds=queued_ago),
        requeued_at=None if requeued_ago is None else Now() - timedelta(seconds=requeued_ago),
    )


def test_it_sends_a_lost_run_again_after_a_lease_period_then_after_twice_as_long_each_time(
    order_suite, settings, scripted_model
):
    # A minute's lease, so each "not yet" below is 20 s or more away from due: time the machine takes between a
    # write and the sweep's read only makes a due run more due (a 3 s lease left margins of half a second).
    settings.AGENTTEST_RUN_LEASE_SECONDS = 60
    sent: list[int] = []
    run = _pending(order_suite, queued_ago=40)
    assert run_requeue_lost(dispatch=sent.append) == [], "picked up within a lease period: nothing is lost yet"
    _times(run, queued_ago=70, requeued_ago=None)
    assert run_requeue_lost(dispatch=sent.append) == [run.pk]
    assert run_requeue_lost(dispatch=sent.append) == [], "sent once, by one of the sweeps"
    # Sent 70 s after it was queued, it is sent again 70 s later (140 s after), then 140 s later (280 s after) ...
    _times(run, queued_ago=120, requeued_ago=50)
    assert run_requeue_lost(dispatch=sent.append) == []
    _times(run, queued_ago=150, requeued_ago=80)
    assert run_requeue_lost(dispatch=sent.append) == [run.pk]
    _times(run, queued_ago=240, requeued_ago=90)
    assert run_requeue_lost(dispatch=sent.append) == []
    # ... and never less often than every 10 minutes.
    _times(run, queued_ago=7200, requeued_ago=620)
    assert run_requeue_lost(dispatch=sent.append) == [run.pk]
    assert sent == [run.pk] * 3

    # Only the groups the sweeping worker serves; a worker that had it in hand (it waits its turn) picked it up.
    _times(run, queued_ago=90, requeued_ago=None)
    assert run_requeue_lost(groups=["gpu"], dispatch=sent.append) == []
    run_wait_for_lock(run_id=run.pk, holder_id=None, note="waiting for run #1")
    assert run_requeue_lost(groups=["default"], dispatch=sent.append) == []
    assert len(sent) == 3
