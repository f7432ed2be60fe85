"""A scripted model configured in the providers file, with its script in a file: a real worker plays it, and the
requests it received are in its requests log for the test to read."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from agenthost.models import Agent
from cases.models import Assertion, Case, Mock, Suite, Turn
from common.provider_config import load_providers
from runs.models import CaseResult, Run
from runs.services import run_trigger
from tests.workers import dispatch_to, runs_worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCRIPT = {
    "answers": [
        {"when": "Where is order", "tool_calls": [{"name": "find_order", "arguments": {"order_id": "1043"}}]},
        {"when": "processing", "text": "Order 1043 is still processing.", "delay": 0.05,
         "usage": {"input_tokens": 40, "output_tokens": 8, "cached_input_tokens": 32, "reasoning_tokens": 0}},
        {"when": "Cancel", "error": {"code": "http_503", "message": "the scripted model is overloaded"}},
    ]
}


def test_it_plays_a_script_file_on_a_real_worker_and_logs_the_requests(tmp_path, settings, admin_user):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    log = tmp_path / "requests.jsonl"
    providers = tmp_path / "providers.toml"
    providers.write_text(
        f'[providers.ci]\nkind = "scripted"\nscript = "{script}"\nrequests_log = "{log}"\nmax_retries = 0\n\n'
        '[[providers.ci.models]]\nname = "desk-model"\ninput_price = 1.0\ncached_input_price = 0.5\n'
        "output_price = 2.0\n"
    )
    settings.AGENTTEST_PROVIDERS = load_providers(str(providers))
    broker_url = f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    settings.CELERY_BROKER_URL = broker_url
    agent = Agent.objects.create(
        name="desk", instruction="Help with orders.", provider="ci", model="desk-model",
        functions=[{"name": "find_order"}],
    )
    suite = Suite.objects.create(name="desk", agent=agent, case_timeout_seconds=30)
    for name, text in [("status", "Where is order 1043?"), ("cancel", "Cancel order 1043")]:
        case = Case.objects.create(suite=suite, name=name)
        Turn.objects.create(case=case, user_message=text)
        Mock.objects.create(case=case, function_name="find_order", result='{"status": "processing"}')
        Assertion.objects.create(case=case, type="outputContains", params={"text": "processing"})

    dispatch = dispatch_to(broker_url)

    worker_log = tmp_path / "worker.log"
    with runs_worker(broker_url, worker_log, AGENTTEST_PROVIDERS_FILE=str(providers)):
        run = run_trigger(suite=suite, model_keys=["ci:desk-model"], triggered_by=admin_user, dispatch=dispatch)
        wait_for(lambda: Run.objects.get(pk=run.pk).is_finished, what="the run", log_path=worker_log)

    results = {r.case_name: r for r in CaseResult.objects.filter(run=run)}
    assert results["status"].status == "passed", results["status"].reason
    assert (results["status"].cached_input_tokens, results["status"].reasoning_tokens) == (32, 0)
    status = results["status"]
    # 32 of the input tokens were cached, at half the input price.
    expected = (Decimal(status.input_tokens - 32) * 1 + Decimal(32) * Decimal("0.5") + status.output_tokens * 2)
    assert status.cost == expected / 1_000_000
    assert results["cancel"].status == "error"
    assert "the model ci:desk-model failed at turn 0 step 0: the scripted model is overloaded" in (
        results["cancel"].reason
    )
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    # Cases run in name order: "cancel" fails at its first call, "status" looks the order up, then answers.
    assert [request["messages"][-1]["role"] for request in logged] == ["user", "user", "tool"]
    assert all(request["model"] == "desk-model" for request in logged)
    assert {request["messages"][1]["content"] for request in logged} == {"Where is order 1043?", "Cancel order 1043"}
