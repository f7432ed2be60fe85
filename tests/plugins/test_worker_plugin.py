"""The run worker loads plugins at start-up too: a real Celery worker started with AGENTTEST_PLUGINS and a providers
file naming the plugin's kind runs a suite whose agent calls the plugin's tools, on the plugin's model."""

from __future__ import annotations

import pytest

from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, Run
from runs.services import run_trigger
from tests.plugins.conftest import LOOK_AND_NOTE, LOOKUP, OUTBOX_ENV, PLUGIN, PROVIDERS_FILE, RULES_MODEL, SEND
from tests.workers import dispatch_to, runs_worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_it_runs_plugin_tools_on_the_plugins_model_in_a_real_worker(ticket_agent, outbox, tmp_path, admin_user):
    suite = Suite.objects.create(name="Tickets", agent=ticket_agent)
    case = Case.objects.create(suite=suite, name="note unmocked")
    turn = Turn.objects.create(case=case, user_message=LOOK_AND_NOTE)
    Mock.objects.create(case=case, function_name=LOOKUP, result='{"ticket_id": "T-7", "status": "closed"}')
    Assertion.objects.create(case=case, turn=turn, type="toolCalled", params={"function": LOOKUP})
    providers = tmp_path / "providers.toml"
    providers.write_text(PROVIDERS_FILE)
    broker_url = f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    log = tmp_path / "worker.log"

    dispatch = dispatch_to(broker_url)

    with runs_worker(
        broker_url, log, AGENTTEST_PLUGINS=PLUGIN, AGENTTEST_PROVIDERS_FILE=str(providers), **{OUTBOX_ENV: str(outbox)}
    ):
        run = run_trigger(suite=suite, model_keys=[RULES_MODEL], triggered_by=admin_user, dispatch=dispatch)
        wait_for(lambda: Run.objects.get(pk=run.pk).is_finished, what="the run to finish", log_path=log)

    [result] = CaseResult.objects.filter(run=run)
    assert result.model == RULES_MODEL
    assert [(call["name"], call["outcome"]) for call in result.tool_calls] == [(LOOKUP, "mocked"), (SEND, "blocked")]
    assert result.status == CaseResult.Status.FAILED, result.reason
    assert not outbox.exists(), "the blocked note was not sent"
