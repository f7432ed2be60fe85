"""The demo's simulated users (issue 24), as the issue's "done when" asks: the demo's two cases whose user is played by
a model — one who gives the order number only when asked, one who changes their mind — pass on sim-careful and fail on
sim-hasty for the reason shown; recorded, they replay identically with outbound connections refused; an instruction
edit makes them stale naming the turn; frozen, they pass as scripted cases. The same again with the simulated models'
rules served over HTTP by a local OpenAI-compatible server."""

from __future__ import annotations

import pytest

from agenthost.llm.base import ModelRequest
from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenttest_demo.simulated import SimulatedProvider
from agenttest_demo.suite import simulated_users_suite_ensure
from cases.models import Case
from cases.services import case_enable
from runs.models import CaseResult, Run
from runs.services import result_freeze, run_create, run_execute
from tests.runs.test_key_free import OutboundGuard
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

CAREFUL, HASTY = "simulated:sim-careful", "simulated:sim-hasty"
ASKED = "The order number is given only when asked"
CHANGED = "The user changes their mind"


def execute(suite, models: list[str], mode: str = Run.Mode.LIVE) -> dict[tuple[str, str], CaseResult]:
    run = run_execute(run_id=run_create(suite=suite, model_keys=models, mode=mode).pk)
    return {(result.case_name, result.model): result for result in CaseResult.objects.filter(run=run)}


def users(result: CaseResult) -> list[tuple[str, bool]]:
    return [(m["content"], bool(m.get("simulated"))) for m in result.transcript if m["role"] == "user"]


def assert_stale_after_an_instruction_edit(suite, model: str) -> None:
    """The router's instruction edited: each recorded simulated case replays Error, stale at its first request."""
    router = Agent.objects.get(name="order-router")
    router.instruction += "\nBe brief."
    router.save()
    stale = execute(suite, [model], Run.Mode.REPLAY)
    for name in (ASKED, CHANGED):
        result = stale[(name, model)]
        assert result.status == "error"
        assert result.reason.startswith("stale recording: the request at turn 0 step 0 differs"), result.reason



def test_it_passes_on_the_careful_model_and_fails_on_the_hasty_one_for_the_reason_shown(demo_agents):
    suite, _ = simulated_users_suite_ensure()

    results = execute(suite, [CAREFUL, HASTY])

    asked, changed = results[(ASKED, CAREFUL)], results[(CHANGED, CAREFUL)]
    assert (asked.status, changed.status) == ("passed", "passed"), (asked.reason, changed.reason)
    assert users(asked) == [("I'd like to cancel my order, please.", True), ("It's 1043.", True)]
    assert users(changed) == [
        ("Where is my order 1043?", False),
        ("Actually, I have changed my mind: please cancel it.", True),
    ]
    assert asked.simulation["stop"]["text"].startswith("the simulated user said it was done after turn 1")

    for name in (ASKED, CHANGED):
        hasty = results[(name, HASTY)]
        assert hasty.status == "failed"
        # The reason shown: the hasty model cancelled without the order number the user meant.
        assert hasty.reason.startswith(
            "goalReached (case): the judge found the goal not reached: simulated "
            "verdict: no call did 'cancel with 1043'"
        ), hasty.reason
        assert hasty.simulation["stop"]["by"] == "user" and hasty.simulation["stop"]["status"] == "gave_up"
        called = next(item for item in hasty.assertions if item["type"] == "toolCalled")
        assert called["message"] == 'cancel_order was called, but never with arguments containing {"order_id": "1043"}'


def test_it_replays_the_recorded_demo_with_no_network_goes_stale_on_an_edit_and_freezes(demo_agents, monkeypatch):
    suite, _ = simulated_users_suite_ensure()
    recorded = execute(suite, [CAREFUL, HASTY], Run.Mode.RECORD)
    guard = OutboundGuard(monkeypatch)

    replayed = execute(suite, [CAREFUL, HASTY], Run.Mode.REPLAY)

    assert guard.attempts == []
    for key, before in recorded.items():
        after = replayed[key]
        assert (after.status, after.reason, users(after)) == (before.status, before.reason, users(before))
        assert after.simulation["stop"] == before.simulation["stop"]

    # Frozen, each careful result is a scripted case that passes.
    frozen = [result_freeze(result=recorded[(name, CAREFUL)]) for name in (ASKED, CHANGED)]
    Case.objects.filter(suite=suite).update(enabled=False)
    for case in frozen:
        case_enable(case=case)
    scripted = execute(suite, [CAREFUL])
    assert {(name, result.status) for (name, _), result in scripted.items()} == {
        (case.name, "passed") for case in frozen
    }
    assert all(result.simulation == {} for result in scripted.values())

    # An instruction edit makes the recorded simulated cases stale, naming the turn.
    Case.objects.filter(suite=suite).update(enabled=True)
    Case.objects.filter(pk__in=[case.pk for case in frozen]).update(enabled=False)
    assert_stale_after_an_instruction_edit(suite, CAREFUL)


# The same demo over HTTP: a local OpenAI-compatible server answers with the simulated models' rules, so the agent
# under test, the simulated user and the judge are all reached through the openai SDK, as a real endpoint would be.
LOCAL_CAREFUL, LOCAL_HASTY = "local:sim-careful", "local:sim-hasty"


def simulated_rules(body: dict) -> Answer:
    request = ModelRequest(model=body["model"], messages=body["messages"], tools=body.get("tools") or [])
    response = SimulatedProvider("local", {}).complete(request)
    return Answer(response.text or "", [Call(call.name, call.arguments) for call in response.tool_calls])


@pytest.fixture
def local_suite(openai_stub, settings, demo_agents):
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS,
        "local": {
            "kind": "openai", "base_url": openai_stub.base_url, "api_key_env": "", "timeout": WAIT_SECONDS,
            "max_retries": 0,
            "models": [{"name": "sim-careful"}, {"name": "sim-hasty"}],
        },
    }
    openai_stub.respond_with(simulated_rules)
    suite, _ = simulated_users_suite_ensure()
    suite.judge_model = LOCAL_CAREFUL
    suite.save()
    return suite


def test_it_records_the_demo_against_a_local_server_and_replays_it_with_the_server_gone(
    local_suite, openai_stub, monkeypatch
):
    recorded = execute(local_suite, [LOCAL_CAREFUL, LOCAL_HASTY], Run.Mode.RECORD)
    assert {key: result.status for key, result in recorded.items()} == {
        (ASKED, LOCAL_CAREFUL): "passed", (CHANGED, LOCAL_CAREFUL): "passed",
        (ASKED, LOCAL_HASTY): "failed", (CHANGED, LOCAL_HASTY): "failed",
    }, {key: result.reason for key, result in recorded.items()}
    assert users(recorded[(ASKED, LOCAL_CAREFUL)]) == [
        ("I'd like to cancel my order, please.", True), ("It's 1043.", True)
    ]
    # Every side went over HTTP: the agents, the simulated user and the judge.
    systems = [body["messages"][0]["content"] for body in openai_stub.requests]
    assert any(text.startswith("You play a user") for text in systems)
    assert any('"reached"' in text for text in systems)

    # Frozen while the server is up: the careful conversations, as scripted cases, pass live.
    frozen = [result_freeze(result=recorded[(name, LOCAL_CAREFUL)]) for name in (ASKED, CHANGED)]
    simulated = list(Case.objects.filter(suite=local_suite).exclude(pk__in=[case.pk for case in frozen]))
    Case.objects.filter(pk__in=[case.pk for case in simulated]).update(enabled=False)
    for case in frozen:
        case_enable(case=case)
    scripted = execute(local_suite, [LOCAL_CAREFUL])
    assert {(name, result.status) for (name, _), result in scripted.items()} == {
        (case.name, "passed") for case in frozen
    }, {name: result.reason for (name, _), result in scripted.items()}
    Case.objects.filter(pk__in=[case.pk for case in frozen]).update(enabled=False)
    Case.objects.filter(pk__in=[case.pk for case in simulated]).update(enabled=True)

    # The server gone and every connection off this machine refused: both sides replay, identically.
    openai_stub.stop()
    served = len(openai_stub.requests)
    guard = OutboundGuard(monkeypatch)
    replayed = execute(local_suite, [LOCAL_CAREFUL, LOCAL_HASTY], Run.Mode.REPLAY)
    assert guard.attempts == [] and len(openai_stub.requests) == served
    for key, before in recorded.items():
        after = replayed[key]
        assert (after.status, after.reason, users(after)) == (before.status, before.reason, users(before)), key
        assert after.simulation["stop"] == before.simulation["stop"]
        assert [m.get("content") for m in after.transcript] == [m.get("content") for m in before.transcript]

    # An edit of the router's instruction: each simulated case is stale, naming the turn, never a new user line.
    assert_stale_after_an_instruction_edit(local_suite, LOCAL_CAREFUL)
