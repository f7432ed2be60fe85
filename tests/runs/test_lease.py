"""A run belongs to the executor that claimed it (a lease renewed by a heartbeat), one run executes at a time (a lock
in the database), and no failure of the loop leaves a run Running — all through real Celery workers on Redis."""

from __future__ import annotations

import io
import json
import os
import signal
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from kombu import Connection

from agenthost.models import Agent, Conversation, Message
from cases.models import Assertion, Case, Mock, Suite, Turn
from common.provider_config import load_providers
from runs.models import CaseResult, Run, RunLock
from runs.services import run_trigger
from runs.tasks import execute_run
from tests.workers import REDIS_URL, flush_redis_queue, runs_worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
LEASE_SECONDS = 3
MODEL = "desk:desk-model"


@pytest.fixture
def broker(settings) -> str:
    flush_redis_queue(REDIS_URL)
    settings.CELERY_BROKER_URL = REDIS_URL
    settings.AGENTTEST_RUN_LEASE_SECONDS = LEASE_SECONDS
    return REDIS_URL


@pytest.fixture
def worker_env(settings, tmp_path) -> dict[str, str]:
    """MODEL, for this process and the workers: a scripted model that looks the order up and then says it has shipped,
    400 ms a call, so a run lasts long enough to be disturbed; a short lease."""
    script, providers = tmp_path / "script.json", tmp_path / "providers.toml"
    script.write_text(json.dumps([
        {"when": "Where is order", "tool_calls": [{"name": "find_order", "arguments": {}}], "delay": 0.4},
        {"when": "shipped", "text": "It has shipped.", "delay": 0.4},
    ]))
    providers.write_text(
        f'[providers.desk]\nkind = "scripted"\nscript = "{script}"\nmax_retries = 0\n\n'
        '[[providers.desk.models]]\nname = "desk-model"\n'
    )
    settings.AGENTTEST_PROVIDERS = load_providers(str(providers))
    return {"AGENTTEST_PROVIDERS_FILE": str(providers), "AGENTTEST_RUN_LEASE_SECONDS": str(LEASE_SECONDS)}


def order_suite(cases: int, name: str = "orders") -> Suite:
    agent = Agent.objects.create(
        name=f"{name}-agent", instruction="Help.", provider="desk", model="desk-model",
        functions=[{"name": "find_order"}],
    )
    suite = Suite.objects.create(name=name, agent=agent)
    for index in range(cases):
        case = Case.objects.create(suite=suite, name=f"case {index:02d}")
        turn = Turn.objects.create(case=case, user_message=f"Where is order {1040 + index}?")
        Mock.objects.create(case=case, function_name="find_order", result='{"status": "shipped"}')
        Assertion.objects.create(case=case, turn=turn, type="toolCalled", params={"function": "find_order"})
    return suite


def dispatch(run_id: int) -> None:
    with Connection(REDIS_URL) as broker_connection:
        execute_run.apply_async(args=[run_id], queue="runs", connection=broker_connection, retry=False)


def trigger(suite: Suite) -> Run:
    return run_trigger(suite=suite, model_keys=[MODEL], dispatch=dispatch)


def results(run: Run) -> int:
    return CaseResult.objects.filter(run=run).count()


def wait_ready(log: Path) -> None:
    # Celery logs "ready." right after the worker_ready signal, whose handler sweeps.
    wait_for(lambda: " ready." in log.read_text(errors="replace"), what="the worker to start", log_path=log)


def test_it_leaves_a_run_to_its_worker_when_another_worker_starts_and_refuses_to_resume_it(
    broker, worker_env, tmp_path, admin_client_api
):
    # Far more cases than run before the second worker is up, even on a loaded machine (a fresh-clone CI run saw the
    # 16 of an earlier version finish first); the run is cancelled once the second worker has had its say.
    suite = order_suite(cases=150)
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"

    with runs_worker(broker, log_a, **worker_env):
        run = trigger(suite)
        wait_for(lambda: results(run) >= 1, what="a first result", log_path=log_a)
        with runs_worker(broker, log_b, **worker_env):
            wait_ready(log_b)
            # The second worker swept on start-up: the run it found is still the first worker's, and still going.
            run.refresh_from_db()
            assert run.status == Run.Status.RUNNING, f"the run was {run.status} when the second worker was ready"
            owner = run.lease_owner
            assert owner and run.lease_expires_at is not None
            response = admin_client_api.post(f"/api/runs/{run.pk}/resume/")
            assert response.status_code == 409, response.content
            # Past a whole lease period the first worker still holds it and goes on adding results.
            kept = results(run)
            time.sleep(LEASE_SECONDS + 1)
            run.refresh_from_db()
            assert run.status == Run.Status.RUNNING and run.lease_owner == owner
            assert results(run) > kept
            assert admin_client_api.post(f"/api/runs/{run.pk}/cancel/").status_code == 200
            wait_for(
                lambda: Run.objects.get(pk=run.pk).is_finished, what="the run to stop", log_path=log_a
            )
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED, run.reason
    keys = list(CaseResult.objects.filter(run=run).values_list("case_id", "model", "trial"))
    assert len(keys) == len(set(keys)) and len(keys) > kept
    assert run.lease_owner == "" and run.lease_expires_at is None
    assert "UNIQUE constraint" not in log_a.read_text() + log_b.read_text()


def test_it_sweeps_a_killed_workers_run_within_a_lease_period_without_a_restart(broker, settings, tmp_path):
    # The model answers the first two cases and holds the third's first call: the run is still going however long
    # the second worker takes to start (20 cases of 400 ms were not, on a loaded machine).
    script, providers = tmp_path / "script.json", tmp_path / "providers.toml"
    script.write_text(json.dumps([
        *({"when": f"order {1040 + index}?", "tool_calls": [{"name": "find_order", "arguments": {}}]}
          for index in range(2)),
        {"when": "shipped", "text": "It has shipped."},
        {"when": "Where is order", "hang": 3600},
    ]))
    providers.write_text(
        f'[providers.gated]\nkind = "scripted"\nscript = "{script}"\ntimeout = 3600\nmax_retries = 0\n\n'
        '[[providers.gated.models]]\nname = "desk-model"\n'
    )
    settings.AGENTTEST_PROVIDERS = load_providers(str(providers))
    worker_env = {"AGENTTEST_PROVIDERS_FILE": str(providers), "AGENTTEST_RUN_LEASE_SECONDS": str(LEASE_SECONDS)}
    suite = order_suite(cases=20)
    Suite.objects.filter(pk=suite.pk).update(case_timeout_seconds=3600)
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    with runs_worker(broker, log_a, **worker_env) as worker_a:
        run = run_trigger(suite=suite, model_keys=["gated:desk-model"], dispatch=dispatch)
        wait_for(lambda: results(run) >= 2, what="two results", log_path=log_a)
        with runs_worker(broker, log_b, **worker_env):
            wait_ready(log_b)
            os.killpg(worker_a.pid, signal.SIGKILL)
            worker_a.wait(10)
            killed = time.monotonic()
            kept = results(run)
            # The last renewal was at most a third of a lease before the kill; the sweeper looks every third.
            wait_for(
                lambda: Run.objects.get(pk=run.pk).is_finished, timeout=2 * LEASE_SECONDS + 2,
                what="another worker to sweep the run", log_path=log_b,
            )
            swept_after = time.monotonic() - killed
    run.refresh_from_db()
    assert run.status == Run.Status.ERROR, run.reason
    assert run.reason == (
        "the executor of this run stopped (its worker was killed, restarted or hung, so its lease expired); "
        f"{kept} of 20 results were kept"
    )
    assert results(run) == kept == 2
    assert set(CaseResult.objects.filter(run=run).values_list("status", flat=True)) == {"passed"}
    assert swept_after >= 1.0, "a live lease must not be swept"
    assert not RunLock.objects.filter(run__isnull=False).exists()


def test_it_keeps_every_stored_result_with_its_whole_conversation_when_the_worker_is_killed_mid_run(
    broker, worker_env, tmp_path
):
    """A case's conversation is written with its result, in one transaction: after a SIGKILL every stored result's
    transcript is in its conversation, message for message, and the case that was running left no half-written
    turns behind."""
    suite = order_suite(cases=20)
    log = tmp_path / "worker.log"
    with runs_worker(broker, log, **worker_env) as worker:
        run = trigger(suite)
        wait_for(lambda: results(run) >= 3, what="three results", log_path=log)
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)

    stored = list(CaseResult.objects.filter(run=run))
    assert len(stored) >= 3
    for result in stored:
        messages = Message.objects.filter(conversation_id=result.conversation_id).order_by("seq")
        assert [(m["seq"], m["role"], m["content"]) for m in result.transcript] == [
            (m.seq, m.role, m.content) for m in messages
        ]
        assert len(result.transcript) >= 4
    ran = Conversation.objects.filter(sealed_reason=f"this conversation belongs to test run {run.pk}")
    unfinished = ran.exclude(pk__in=[result.conversation_id for result in stored])
    assert unfinished.count() <= 1
    assert not Message.objects.filter(conversation__in=unfinished).exists()


def test_it_runs_two_pending_runs_on_two_workers_one_after_the_other(broker, worker_env, tmp_path):
    first, second = order_suite(cases=3, name="first"), order_suite(cases=3, name="second")
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    with runs_worker(broker, log_a, **worker_env), runs_worker(broker, log_b, **worker_env):
        wait_ready(log_a)
        wait_ready(log_b)
        runs = [trigger(first), trigger(second)]
        wait_for(
            lambda: all(Run.objects.get(pk=run.pk).is_finished for run in runs),
            what="both runs to finish", log_path=log_b,
        )
    one, other = sorted(Run.objects.filter(pk__in=[run.pk for run in runs]), key=lambda run: run.started_at)
    assert one.status == other.status == Run.Status.PASSED, (one.reason, other.reason)
    assert one.finished_at <= other.started_at, "the two runs overlapped"
    assert results(one) == results(other) == 3


def test_it_fails_an_inline_run_fast_while_a_worker_executes_one(broker, worker_env, tmp_path):
    suite = order_suite(cases=5)
    log = tmp_path / "worker.log"
    with runs_worker(broker, log, **worker_env):
        run = trigger(suite)
        wait_for(lambda: results(run) >= 1, what="a first result", log_path=log)
        stdout, stderr = io.StringIO(), io.StringIO()
        started = time.monotonic()
        with pytest.raises(SystemExit) as exited:
            call_command("run_suite", suite.name, "--inline", stdout=stdout, stderr=stderr)
        assert exited.value.code == 2
        assert time.monotonic() - started < 5
        assert f"run #{run.pk} holds the run lock (started " in stderr.getvalue()
        assert stderr.getvalue().rstrip().endswith("; wait for it or cancel it")
        assert list(Run.objects.values_list("pk", flat=True)) == [run.pk], "the refused run leaves nothing"
        wait_for(lambda: Run.objects.get(pk=run.pk).is_finished, what="the worker's run", log_path=log)
    assert Run.objects.get(pk=run.pk).status == Run.Status.PASSED


def _refuse_results() -> None:
    """Make the database itself refuse every stored result, as a full disk or a revoked grant would."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "CREATE FUNCTION refuse_results() RETURNS trigger AS $$ BEGIN "
                "RAISE EXCEPTION 'disk quota exceeded' USING ERRCODE = '53100'; END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                "CREATE TRIGGER refuse_results BEFORE INSERT ON runs_caseresult "
                "FOR EACH ROW EXECUTE FUNCTION refuse_results()"
            )
        else:
            cursor.execute(
                "CREATE TRIGGER refuse_results BEFORE INSERT ON runs_caseresult "
                "BEGIN SELECT RAISE(ABORT, 'disk quota exceeded'); END"
            )


def _allow_results() -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("DROP TRIGGER IF EXISTS refuse_results ON runs_caseresult")
            cursor.execute("DROP FUNCTION IF EXISTS refuse_results()")
        else:
            cursor.execute("DROP TRIGGER IF EXISTS refuse_results")


def test_it_ends_a_run_error_naming_the_failure_when_the_database_keeps_refusing_its_results(
    broker, worker_env, tmp_path
):
    suite = order_suite(cases=2)
    log = tmp_path / "worker.log"
    with runs_worker(broker, log, **worker_env):
        _refuse_results()
        try:
            run = trigger(suite)
            wait_for(lambda: Run.objects.get(pk=run.pk).is_finished, what="the run to end", log_path=log)
        finally:
            _allow_results()
        after = trigger(order_suite(cases=1, name="after"))
        wait_for(lambda: Run.objects.get(pk=after.pk).is_finished, what="the next run", log_path=log)
    run.refresh_from_db()
    assert run.status == Run.Status.ERROR
    assert run.reason.startswith("the run stopped on a failure: ")
    assert "disk quota exceeded" in run.reason and "0 of 2 results were kept" in run.reason
    assert run.finished_at is not None and run.lease_owner == "" and run.lease_expires_at is None
    assert Run.objects.get(pk=after.pk).status == Run.Status.PASSED, "the failed run let go of the run lock"
