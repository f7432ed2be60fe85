"""A simulated case recorded once against a real (local) OpenAI-compatible server replays both sides of the
conversation — the agent's answers and the simulated user's lines — with the server gone and every outbound
connection refused; and a replay whose agent would now answer differently ends Error naming the turn, never with a
line the user model did not write."""

from __future__ import annotations

import json

import pytest

from agenthost.llm.scripted import Answer
from agenthost.models import Agent
from agenthost.testing.openai_stub import echo_reply
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, Recording, Run
from runs.services import run_create, run_execute
from tests.runs.test_key_free import OutboundGuard
from tests.runs.test_replay import stub_provider

pytestmark = pytest.mark.django_db(transaction=True)

STUB = "stub:gpt-4o-mini"


def stub_answer(body: dict) -> Answer:
    """The user asks the agent to cancel the order, then says it is done; the judge finds the goal reached; the
    agent follows the stub's echo rules (it calls a tool the user names)."""
    system = body["messages"][0]["content"] if body["messages"][0]["role"] == "system" else ""
    if system.startswith("You play a user"):
        said = sum(message["role"] == "assistant" for message in body["messages"])
        if said < 2:
            return Answer(json.dumps({"status": "still_going", "message": "please void_order 1043", "reason": ""}))
        return Answer(json.dumps({"status": "done", "message": "", "reason": "it is cancelled"}))
    if '"reached"' in system:
        return Answer('{"reached": true, "reason": "the order was cancelled"}')
    return echo_reply(body)


@pytest.fixture
def stub(openai_stub, settings):
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "stub": stub_provider(openai_stub.base_url)}
    openai_stub.respond_with(stub_answer)
    return openai_stub


@pytest.fixture
def case(stub) -> Case:
    agent = Agent.objects.create(
        name="desk",
        instruction="You cancel orders.",
        provider="stub",
        model="gpt-4o-mini",
        functions=[
            {
                "name": "void_order",
                "description": "Cancel an order.",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
            }
        ],
    )
    suite = Suite.objects.create(name="desk", agent=agent, judge_model=STUB, case_timeout_seconds=20)
    case = Case.objects.create(
        suite=suite,
        name="cancels",
        simulated_user={
            "persona": "A customer in a hurry.",
            "goal": "Get order 1043 cancelled.",
            "facts": {"order number": "1043"},
            "max_turns": 4,
            "model": "",
            "end_when": [],
        },
    )
    Turn.objects.create(case=case, position=0, user_message="hello")
    # A stop-completion: the agent's reply is the mock's result, so editing it changes what the agent answers
    # without changing any request the agent makes.
    Mock.objects.create(
        case=case, position=0, function_name="void_order", result="Order 1043 is cancelled (ref A).", stop=True
    )
    Assertion.objects.create(case=case, position=0, type="goalReached", params={})
    Assertion.objects.create(case=case, position=1, type="toolCalled", params={"function": "void_order"})
    return case


def execute(case: Case, mode: str) -> CaseResult:
    run = run_execute(run_id=run_create(suite=case.suite, model_keys=[STUB], mode=mode).pk)
    return CaseResult.objects.get(run=run)


def test_it_replays_both_sides_identically_with_outbound_connections_refused(case, stub, monkeypatch):
    recorded = execute(case, Run.Mode.RECORD)
    assert recorded.status == "passed", recorded.reason
    purposes = [entry["purpose"] for entry in Recording.objects.get(case=case).entries]
    assert purposes == ["agent", "user", "agent", "user", "judge"]
    stub.stop()
    guard = OutboundGuard(monkeypatch)

    replayed = execute(case, Run.Mode.REPLAY)

    assert guard.attempts == []
    assert (replayed.status, replayed.reason) == (recorded.status, recorded.reason)
    assert [(m["role"], m["content"], m.get("simulated")) for m in replayed.transcript] == [
        (m["role"], m["content"], m.get("simulated")) for m in recorded.transcript
    ]
    assert replayed.assertions == recorded.assertions and replayed.tool_calls == recorded.tool_calls
    assert replayed.simulation["stop"] == recorded.simulation["stop"]
    assert replayed.simulation["turns"] == [1]
    assert recorded.judge_cost > 0 and replayed.judge_cost == 0


def test_it_ends_a_replay_whose_agent_answers_differently_as_error_naming_the_turn(case, stub):
    execute(case, Run.Mode.RECORD)
    Mock.objects.filter(case=case).update(result="Order 1043 is cancelled (ref B).")
    stub.stop()

    replayed = execute(case, Run.Mode.REPLAY)

    assert replayed.status == "error"
    assert replayed.reason.startswith(
        "the agent answered differently at turn 1; record again. First difference: "
        "messages[5].content: recorded 'Order 1043 is cancelled (ref A).'"
    ), replayed.reason
    # No line was invented for the user: the conversation stopped at the stale turn.
    assert [m["content"] for m in replayed.transcript if m["role"] == "user"] == ["hello", "please void_order 1043"]


def test_it_ends_a_replay_after_an_instruction_edit_as_error_naming_the_turn(case, stub):
    execute(case, Run.Mode.RECORD)
    Agent.objects.filter(name="desk").update(instruction="You cancel orders politely.")
    stub.stop()

    replayed = execute(case, Run.Mode.REPLAY)

    assert replayed.status == "error"
    assert replayed.reason.startswith("stale recording: the request at turn 0 step 0 differs from the recording"), (
        replayed.reason
    )
