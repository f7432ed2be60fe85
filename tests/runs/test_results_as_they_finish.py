"""A run executing cases side by side stores each result as it finishes: a fast case beside a slow one is stored at
once (the live page counts it while the slow one still runs) and a SIGKILL of the worker after it finished keeps it.
Through a real Celery worker on Redis, playing a scripted model from a file."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from kombu import Connection

from agenthost.models import Agent, Message
from cases.models import Assertion, Case, Suite, Turn
from common.provider_config import load_providers
from runs.models import CaseResult, Run
from runs.services import run_trigger
from runs.tasks import execute_run
from tests.workers import REDIS_URL, flush_redis_queue, runs_worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# The slow case's model answers long after the test has looked and killed the worker.
SLOW_SECONDS = 300
SCRIPT = {
    "answers": [
        {"when": "slow", "text": "the slow answer", "delay": SLOW_SECONDS},
        {"when": "fast", "text": "the fast answer"},
    ]
}


def dispatch(run_id: int) -> None:
    with Connection(REDIS_URL) as broker_connection:
        execute_run.apply_async(args=[run_id], queue="runs", connection=broker_connection, retry=False)


def test_it_stores_a_fast_result_beside_a_slow_case_at_once_and_keeps_it_through_a_kill(tmp_path, settings):
    flush_redis_queue(REDIS_URL)
    settings.CELERY_BROKER_URL = REDIS_URL
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    providers = tmp_path / "providers.toml"
    providers.write_text(
        f'[providers.ci]\nkind = "scripted"\nscript = "{script}"\nmax_retries = 0\ntimeout = {SLOW_SECONDS * 2}\n\n'
        '[[providers.ci.models]]\nname = "desk-model"\n'
    )
    settings.AGENTTEST_PROVIDERS = load_providers(str(providers))
    agent = Agent.objects.create(name="desk", instruction="Answer.", provider="ci", model="desk-model")
    suite = Suite.objects.create(name="desk", agent=agent, case_timeout_seconds=SLOW_SECONDS * 2, case_concurrency=2)
    # In run order the slow case starts first, the fast one beside it.
    for order, name in enumerate(("slow", "fast"), start=1):
        case = Case.objects.create(suite=suite, name=f"{order} {name} case")
        Turn.objects.create(case=case, user_message=f"answer {name}")
        Assertion.objects.create(case=case, type="outputContains", params={"text": f"the {name} answer"})
    log = tmp_path / "worker.log"

    with runs_worker(REDIS_URL, log, AGENTTEST_PROVIDERS_FILE=str(providers)) as worker:
        run = run_trigger(suite=suite, model_keys=["ci:desk-model"], dispatch=dispatch)
        wait_for(
            lambda: CaseResult.objects.filter(run=run).exists(), what="the fast case's result",
            log_path=log,
        )
        stored_at = time.monotonic()
        run.refresh_from_db()
        assert run.status == Run.Status.RUNNING and run.passed == 1, (run.status, run.reason)
        stored = list(CaseResult.objects.filter(run=run).values_list("case_name", "status"))
        assert stored == [("2 fast case", "passed")]
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
    assert time.monotonic() - stored_at < SLOW_SECONDS, "the slow case finished; it must still be running"

    result = CaseResult.objects.get(run=run)
    assert (result.case_name, result.status, result.position) == ("2 fast case", "passed", 1)
    messages = Message.objects.filter(conversation_id=result.conversation_id).order_by("seq")
    assert [(m.role, m.content) for m in messages] == [("user", "answer fast"), ("assistant", "the fast answer")]
    assert [(m["role"], m["content"]) for m in result.transcript] == [(m.role, m.content) for m in messages]
