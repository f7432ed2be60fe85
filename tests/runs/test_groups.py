"""Isolation groups across real workers: runs of different groups execute at the same time, runs of one group one at
a time in the order they were triggered — whichever worker gets which message — and a run whose group no live worker
serves says so on its page. Two real Celery workers on Redis, started as `agenttest worker --groups alpha,beta`."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack

import pytest
from django.urls import reverse
from kombu import Connection

from agenthost.models import Agent
from agenttest.cli import worker_command
from cases.models import Assertion, Case, Mock, Suite, Turn
from common.provider_config import load_providers
from common.queues import group_queue
from runs.engine.workers import live_workers
from runs.models import Run, WorkerBeat
from runs.services import run_create, run_trigger
from runs.tasks import execute_run
from tests.workers import REDIS_URL, flush_redis_queue, group_worker, wait_for

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
def slow_model_env(settings, tmp_path) -> dict[str, str]:
    """MODEL, for this process and the workers: a scripted model that looks the order up and then says it has shipped,
    300 ms a call, so a run lasts long enough to overlap another."""
    script, providers = tmp_path / "script.json", tmp_path / "providers.toml"
    script.write_text(json.dumps([
        {"when": "Where is order", "tool_calls": [{"name": "find_order", "arguments": {}}], "delay": 0.3},
        {"when": "shipped", "text": "It has shipped.", "delay": 0.3},
    ]))
    providers.write_text(
        f'[providers.desk]\nkind = "scripted"\nscript = "{script}"\nmax_retries = 0\n\n'
        '[[providers.desk.models]]\nname = "desk-model"\n'
    )
    settings.AGENTTEST_PROVIDERS = load_providers(str(providers))
    return {"AGENTTEST_PROVIDERS_FILE": str(providers), "AGENTTEST_RUN_LEASE_SECONDS": str(LEASE_SECONDS)}


def group_suite(name: str, group: str, cases: int = 4) -> Suite:
    agent = Agent.objects.create(
        name=f"{name}-agent", instruction="Help.", provider="desk", model="desk-model",
        functions=[{"name": "find_order"}],
    )
    suite = Suite.objects.create(name=name, agent=agent, isolation_group=group)
    for index in range(cases):
        case = Case.objects.create(suite=suite, name=f"case {index:02d}")
        turn = Turn.objects.create(case=case, user_message=f"Where is order {1040 + index}?")
        Mock.objects.create(case=case, function_name="find_order", result='{"status": "shipped"}')
        Assertion.objects.create(case=case, turn=turn, type="toolCalled", params={"function": "find_order"})
    return suite


def dispatch(run_id: int) -> None:
    group = Run.objects.get(pk=run_id).isolation_group
    with Connection(REDIS_URL) as connection:
        execute_run.apply_async(args=[run_id], queue=group_queue(group), connection=connection, retry=False)


def overlap(first: Run, second: Run) -> bool:
    return max(first.started_at, second.started_at) < min(first.finished_at, second.finished_at)


def test_it_overlaps_runs_of_two_groups_and_never_two_runs_of_one_group(broker, slow_model_env, tmp_path, admin_client):
    alpha, beta = group_suite("alpha", "alpha"), group_suite("beta", "beta")
    logs = [tmp_path / "worker-1.log", tmp_path / "worker-2.log"]
    with ExitStack() as workers:
        for number, log in enumerate(logs, start=1):
            workers.enter_context(
                group_worker(broker, log, groups="alpha,beta", name=f"w{number}", **slow_model_env)
            )
        wait_for(lambda: len(live_workers(group="beta")) == 2, what="both workers", log_path=logs[0])
        unserved = run_create(suite=group_suite("gamma", "gamma", cases=1), model_keys=[MODEL])
        page = admin_client.get(reverse("runs:detail", args=[unserved.pk])).content.decode()
        assert "No live worker serves isolation group <code>gamma</code>" in page

        first = run_trigger(suite=alpha, model_keys=[MODEL], dispatch=dispatch)
        second = run_trigger(suite=alpha, model_keys=[MODEL], dispatch=dispatch)
        other = run_trigger(suite=beta, model_keys=[MODEL], dispatch=dispatch)
        waiting = admin_client.get(reverse("runs:detail", args=[second.pk])).content.decode()
        assert "No live worker serves" not in waiting
        runs = (first, second, other)
        wait_for(
            lambda: all(Run.objects.get(pk=run.pk).is_finished for run in runs), what="the three runs",
            log_path=logs[1],
        )
        assert Run.objects.get(pk=unserved.pk).status == "pending", "no worker serves gamma: it stays Pending"
    first, second, other = (Run.objects.get(pk=run.pk) for run in runs)

    assert [run.status for run in (first, second, other)] == ["passed"] * 3, [r.reason for r in (first, second, other)]
    assert first.finished_at <= second.started_at, "one group's runs never overlap, and start in trigger order"
    assert overlap(other, first) or overlap(other, second), "runs of different groups execute at the same time"
    assert {first.isolation_group, second.isolation_group, other.isolation_group} == {"alpha", "beta"}


def test_it_says_a_worker_is_gone_once_its_beat_is_older_than_a_lease(broker, slow_model_env, tmp_path):
    log = tmp_path / "worker.log"
    with group_worker(broker, log, groups="gpu", name="gpu", **slow_model_env):
        wait_for(lambda: live_workers(group="gpu"), what="the worker's beat", log_path=log)
        assert live_workers(group="default") == []
        seen = WorkerBeat.objects.get().seen_at
        wait_for(lambda: WorkerBeat.objects.get().seen_at > seen, what="a renewed beat", log_path=log)
    # Killed without a word: its beat stops, and a lease period later it no longer counts.
    time.sleep(LEASE_SECONDS + 0.5)
    assert live_workers(group="gpu") == []


@pytest.mark.parametrize(
    ("arguments", "queues"),
    [
        (["--groups", "alpha,beta"], "runs.alpha,runs.beta"),
        (["--groups=default,gpu-1", "-l", "INFO"], "runs,runs.gpu-1"),
        (["--groups", "a, a ,b"], "runs.a,runs.b"),
    ],
)
def test_it_turns_worker_groups_into_their_queues(arguments, queues):
    command = worker_command(arguments)
    assert command[command.index("-Q") + 1] == queues
    assert "--groups" not in " ".join(command) and command[command.index("--concurrency") + 1] == "1"


@pytest.mark.parametrize(
    "arguments", [["--groups"], ["--groups", ""], ["--groups", "GPU"], ["--groups", "a", "-Q", "x"]]
)
def test_it_refuses_bad_worker_groups(arguments):
    with pytest.raises(SystemExit) as refused:
        worker_command(arguments)
    assert "agenttest worker:" in str(refused.value)
