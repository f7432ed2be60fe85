"""From a recording to a green replay in the browser's New run form (issue 37, item 5): a suite's recordings on a
model this machine does not configure (a draft recorded from a production trace is on the trace's model) are offered
by New run, said to be replay only, and replay green with no key and no network."""

from __future__ import annotations

import pytest

from agenthost.models import Agent
from agenthost.testing.openai_stub import echo_reply
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, Run
from runs.services import run_create, run_execute
from tests.runs.test_key_free import OutboundGuard, openai_provider

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCTION = "prod:gpt-4o-mini"


def test_it_offers_the_models_the_recordings_are_on_and_replays_them_from_the_page(
    openai_stub, settings, admin_client, run_queue, monkeypatch
):
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "prod": openai_provider(openai_stub.base_url, "")}
    agent = Agent.objects.create(name="desk", instruction="You run the order desk.", provider="prod",
                                 model="gpt-4o-mini", functions=[{"name": "find_order"}])
    suite = Suite.objects.create(name="desk", agent=agent, case_timeout_seconds=20)
    case = Case.objects.create(suite=suite, name="looks up")
    Turn.objects.create(case=case, user_message="please find_order 1043")
    Mock.objects.create(case=case, function_name="find_order", result='{"order_id": "1043"}')
    Assertion.objects.create(case=case, type="toolCalled", params={"function": "find_order"})
    openai_stub.respond_with(echo_reply)
    recorded = run_execute(run_id=run_create(suite=suite, model_keys=[PRODUCTION], mode=Run.Mode.RECORD).pk)
    assert CaseResult.objects.get(run=recorded).status == "passed"
    openai_stub.stop()
    # This machine has no such provider: only the recording is left.
    settings.AGENTTEST_PROVIDERS = {name: spec for name, spec in settings.AGENTTEST_PROVIDERS.items() if name != "prod"}
    guard = OutboundGuard(monkeypatch)

    page = admin_client.get("/runs/new/").content.decode()
    assert f'value="{PRODUCTION}"' in page
    assert f"{PRODUCTION} — recorded; replay only" in page

    response = admin_client.post("/runs/new/", {"suite": suite.pk, "models": [PRODUCTION], "mode": "replay"})
    assert response.status_code == 302, response.content.decode()[:2000]
    replayed = Run.objects.exclude(pk=recorded.pk).get()
    assert replayed.status == Run.Status.PASSED, replayed.reason
    assert guard.attempts == []
