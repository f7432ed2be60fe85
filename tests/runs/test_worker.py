"""Runs through a real Celery worker: Redis in production, the embedded SQLite broker by default."""

from __future__ import annotations

import os
import subprocess

import pytest

from common.provider_config import load_providers
from runs.models import CaseResult, Run
from runs.services import run_trigger
from tests.desk import MODELS, desk_providers_file, desk_suite
from tests.workers import BASE_DIR, CELERY, REDIS_URL, dispatch_to, flush_redis_queue, runs_worker, wait_for, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def providers_file(tmp_path, settings) -> str:
    """MODELS, scripted in a providers file that this process and the worker both read."""
    providers = desk_providers_file(tmp_path)
    settings.AGENTTEST_PROVIDERS = load_providers(str(providers))
    return str(providers)


@pytest.fixture(params=["redis", "embedded"])
def broker_url(request, tmp_path, settings):
    url = REDIS_URL if request.param == "redis" else f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    if request.param == "redis":
        flush_redis_queue(url)
    settings.CELERY_BROKER_URL = url
    return url


def test_it_runs_a_two_model_run_end_to_end_on_a_real_worker(broker_url, providers_file, tmp_path, admin_user):
    suite = desk_suite()
    log = tmp_path / "worker.log"
    with runs_worker(broker_url, log, AGENTTEST_PROVIDERS_FILE=providers_file):
        run = run_trigger(suite=suite, model_keys=MODELS, triggered_by=admin_user, dispatch=dispatch_to(broker_url))
        wait_for(lambda: Run.objects.get(pk=run.pk).is_finished, what="the run to finish", log_path=log)
    run.refresh_from_db()
    results = list(CaseResult.objects.filter(run=run).order_by("position"))
    assert [(r.case_name, r.model) for r in results] == [
        ("cancel", MODELS[0]),
        ("cancel", MODELS[1]),
        ("where is my order", MODELS[0]),
        ("where is my order", MODELS[1]),
    ]
    assert run.total == 4 and run.done == 4
    by_pair = {(r.case_name, r.model): r for r in results}
    assert by_pair[("where is my order", MODELS[0])].status == "passed"
    assert by_pair[("cancel", MODELS[0])].status == "passed", by_pair[("cancel", MODELS[0])].reason
    assert by_pair[("cancel", MODELS[1])].status == "failed", "the hasty model cancels without looking the order up"
    assert run.status == "failed" and run.reason == "1 of 4 results failed"
    assert all(r.conversation.tags[0] == "agenttest" for r in results)
    assert "runs must execute one at a time" not in log.read_text()


def test_it_sweeps_interrupted_runs_and_redispatches_lost_pending_ones_at_worker_start(
    broker_url, providers_file, tmp_path
):
    suite = desk_suite()
    case_ids = list(suite.cases.values_list("pk", flat=True))
    interrupted = Run.objects.create(
        suite=suite, model_keys=MODELS[:1], case_ids=case_ids, total=2, status=Run.Status.RUNNING, passed=1
    )
    CaseResult.objects.create(run=interrupted, case_id=case_ids[0], case_name="kept", model=MODELS[0], status="passed")
    lost = Run.objects.create(suite=suite, model_keys=MODELS[:1], case_ids=case_ids, total=2)
    log = tmp_path / "worker.log"
    with runs_worker(broker_url, log, AGENTTEST_PROVIDERS_FILE=providers_file):
        wait_for(lambda: Run.objects.get(pk=lost.pk).is_finished, what="the lost run", log_path=log)
    interrupted.refresh_from_db()
    assert interrupted.status == "error"
    assert interrupted.reason == (
        "the executor of this run stopped (its worker was killed, restarted or hung, so its lease expired); "
        "1 of 2 results were kept"
    )
    assert CaseResult.objects.filter(run=interrupted).count() == 1
    assert CaseResult.objects.filter(run=lost).count() == 2


def test_it_warns_when_the_runs_worker_has_more_than_one_process(tmp_path):
    log = tmp_path / "worker.log"
    url = f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    process = subprocess.Popen(
        [
            CELERY,
            "-A",
            "agenttest",
            "worker",
            "-Q",
            "runs",
            "--concurrency",
            "2",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=BASE_DIR,
        env=worker_env(url),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(
            lambda: "concurrency 2" in log.read_text(errors="replace"), what="the warning", log_path=log
        )
    finally:
        os.killpg(process.pid, 9)
        process.wait(10)
    assert "runs must execute one at a time" in log.read_text()
