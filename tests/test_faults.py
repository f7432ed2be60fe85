"""Faults with the real parts: a worker killed mid-run, a broker that goes away. Nothing finished is lost and every
failure says what happened."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import pytest

from agenthost.models import Agent, Message
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, Run
from runs.services import run_trigger
from tests.ports import free_port
from tests.workers import REDIS_URL, WAIT_SECONDS, dispatch_to, flush_redis_queue, runs_worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


ORDER_LOOKUP = {
    "name": "lookup_order",
    "description": "Look up an order by its number.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
}


def slow_providers(tmp_path) -> str:
    """The product's scripted model in a worker process: each order case looks its order up and answers, each answer
    taking 400 ms, so a run of six cases is still going when the test kills the worker."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"when": "Where is order", "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "1040"}}],
         "delay": 0.4},
        {"when": "shipped", "text": "It has shipped.", "delay": 0.4},
    ]))
    path = tmp_path / "providers.toml"
    path.write_text(
        f'[providers.scripted]\nkind = "scripted"\nscript = "{script}"\n\n'
        '[[providers.scripted.models]]\nname = "scripted"\n'
    )
    return str(path)


def order_suite(cases: int) -> Suite:
    agent = Agent.objects.create(
        name="orders",
        instruction="Help.",
        provider="scripted",
        model="scripted",
        functions=[ORDER_LOOKUP],
    )
    suite = Suite.objects.create(name="orders", agent=agent)
    for index in range(cases):
        case = Case.objects.create(suite=suite, name=f"case {index:02d}")
        turn = Turn.objects.create(case=case, user_message=f"Where is order {1040 + index}?")
        Mock.objects.create(case=case, function_name="lookup_order", result='{"status": "shipped"}')
        Assertion.objects.create(case=case, turn=turn, type="toolCalled", params={"function": "lookup_order"})
    return suite


def test_it_keeps_finished_results_and_says_why_when_the_worker_is_killed_mid_run(tmp_path, settings, scripted_model):
    flush_redis_queue(REDIS_URL)
    settings.CELERY_BROKER_URL = REDIS_URL
    suite = order_suite(cases=6)
    # A short lease: the second worker may take the run over only once the killed worker's lease has expired.
    extra = {"AGENTTEST_PROVIDERS_FILE": slow_providers(tmp_path), "AGENTTEST_RUN_LEASE_SECONDS": "3"}
    log = tmp_path / "worker.log"
    with runs_worker(REDIS_URL, log, **extra) as worker:
        run = run_trigger(suite=suite, model_keys=["scripted:scripted"], dispatch=dispatch_to(REDIS_URL))
        wait_for(lambda: CaseResult.objects.filter(run=run).count() >= 2, what="two results", log_path=log)
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
    kept = CaseResult.objects.filter(run=run).count()
    assert Run.objects.get(pk=run.pk).status == Run.Status.RUNNING, "the killed worker could not finish it"
    with runs_worker(REDIS_URL, tmp_path / "worker2.log", **extra):
        wait_for(
            lambda: Run.objects.get(pk=run.pk).is_finished,
            what="the sweep",
            log_path=tmp_path / "worker2.log",
        )
    run.refresh_from_db()
    assert run.status == Run.Status.ERROR
    assert run.reason == (
        "the executor of this run stopped (its worker was killed, restarted or hung, so its lease expired); "
        f"{kept} of 6 results were kept"
    )
    assert CaseResult.objects.filter(run=run).count() == kept >= 2
    assert set(CaseResult.objects.filter(run=run).values_list("status", flat=True)) == {"passed"}


@pytest.fixture
def own_redis(tmp_path):
    """A Redis server of this test's own, so stopping it disturbs nothing else."""
    port = free_port()
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    yield process, f"redis://127.0.0.1:{port}/0"
    if process.poll() is None:
        process.kill()
    process.wait(10)


def test_it_answers_503_and_leaves_nothing_when_redis_is_down_while_pages_keep_working(
    own_redis, settings, admin_client_api, client, admin_user, scripted_model
):
    process, url = own_redis
    settings.CELERY_BROKER_URL = url
    suite = order_suite(cases=1)
    process.kill()
    process.wait(10)
    started = time.monotonic()
    response = admin_client_api.post(
        "/api/runs/", {"suite": suite.pk, "models": [scripted_model.key]}, format="json"
    )
    assert response.status_code == 503
    assert response.json()["detail"].startswith("the run queue is unavailable: ")
    assert "127.0.0.1" in response.json()["detail"]
    # Refused, not left hanging on the broker's retries, whatever the machine's load.
    assert time.monotonic() - started < WAIT_SECONDS / 4
    assert not Run.objects.exists() and not CaseResult.objects.exists()
    client.force_login(admin_user)
    for page in ["/chat/", "/runs/", "/api/runs/", f"/api/suites/{suite.pk}/", "/admin/"]:
        assert client.get(page).status_code == 200, page


def _drop_this_threads_connection() -> None:
    """What a database restart does to a connection: gone under the code using it."""
    from django.db import connection

    if connection.vendor == "postgresql":
        import psycopg

        pid = connection.connection.info.backend_pid
        params = connection.get_connection_params()
        with psycopg.connect(**params, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    else:
        connection.connection.close()


def _three_cases(agent: Agent) -> Suite:
    suite = Suite.objects.create(name="plain", agent=agent, case_timeout_seconds=30)
    for name in ["a", "b", "c"]:
        case = Case.objects.create(suite=suite, name=name)
        turn = Turn.objects.create(case=case, user_message=f"case {name}")
        Assertion.objects.create(case=case, turn=turn, type="outputContains", params={"text": "fine"})
    return suite


def test_it_loses_nothing_when_a_cases_connection_dies_after_its_last_use_and_the_next_case_reconnects(
    scripted_model,
):
    """A case writes its conversation with its result, on the run loop's connection: a case thread's connection
    lost mid-case, when the case needs it no more, costs no result, and the next case starts on a fresh one."""
    from agenthost.llm.scripted import Answer
    from runs.services import run_create, run_execute

    agent = Agent.objects.create(name="plain", instruction="Answer.", provider="scripted", model="scripted")
    suite = _three_cases(agent)

    def answer(request):
        if "case b" in request.messages[-1]["content"]:
            _drop_this_threads_connection()
        return Answer("all fine")

    scripted_model.respond_with(answer)
    run = run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key]).pk)
    results = {r.case_name: r for r in CaseResult.objects.filter(run=run)}
    assert [(results[name].status, results[name].reason) for name in "abc"] == [("passed", "")] * 3
    assert [m["content"] for m in results["b"].transcript] == ["case b", "all fine"]
    assert Message.objects.filter(conversation_id=results["b"].conversation_id).count() == 2
    assert run.status == Run.Status.PASSED


def test_it_turns_a_connection_lost_mid_case_into_that_cases_error_and_finishes_the_run(scripted_model):
    """A case that needs its connection after it died (routing reads the sub-agents) is that case's Error; the
    run goes on with a fresh connection."""
    from agenthost.llm.scripted import Answer, Call
    from runs.services import run_create, run_execute

    helper = Agent.objects.create(name="helper", instruction="Help.", provider="scripted", model="scripted")
    router = Agent.objects.create(name="router", instruction="Route.", provider="scripted", model="scripted")
    router.sub_agents.set([helper])
    suite = _three_cases(router)

    def answer(request):
        last = request.messages[-1]
        if last["role"] == "user" and last["content"] == "case b":
            _drop_this_threads_connection()
            return Answer(tool_calls=[Call("route_to_agent", {"agent_name": "helper"})])
        return Answer("all fine")

    scripted_model.respond_with(answer)
    run = run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key]).pk)
    results = {r.case_name: r for r in CaseResult.objects.filter(run=run)}
    assert [results[name].status for name in "abc"] == ["passed", "error", "passed"]
    assert results["b"].reason.startswith("the case lost its database connection: ")
    assert (
        run.status == Run.Status.ERROR and run.reason == "1 of 3 results are Error (the harness could not judge them)"
    )
