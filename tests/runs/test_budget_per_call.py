"""The run's budget is held before every model call of a case — the agent's, the judge's, the simulated user's — not
only between results (issue 37, item 7): a simulated conversation cannot spend far past it."""

from __future__ import annotations

import dataclasses

import pytest

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.seams import Usage
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, Run
from runs.services import run_create, run_execute
from tests.runs.test_simulated_users import SCRIPTED, Conversation, make_case, move

pytestmark = pytest.mark.django_db(transaction=True)

# Each call of the conversation below uses 2,000 tokens: 20 turns of a user's move and an agent's answer would be
# 80,000 tokens.
CALL = Usage(input_tokens=1500, output_tokens=500)
TURNS = 20


def costly(answer: Answer) -> Answer:
    return dataclasses.replace(answer, usage=CALL)


@pytest.fixture
def suite(scripted_model) -> Suite:
    agent = Agent.objects.create(
        name="desk", instruction="You cancel orders.", provider="scripted", model="scripted",
        functions=[{"name": "void_order"}],
    )
    return Suite.objects.create(name="desk", agent=agent, judge_model=SCRIPTED, case_timeout_seconds=20)


def test_it_stops_a_simulated_conversation_at_the_first_model_call_over_the_budget(suite, scripted_model):
    make_case(suite, turns=(), max_turns=TURNS)
    talk = Conversation(
        user=[costly(move("still_going", f"Cancel order 1043, please ({index}).")) for index in range(TURNS)],
        agent=[costly(Answer("Which order?")) for _ in range(TURNS)],
        judge=[costly(Answer('{"reached": false, "reason": "not yet"}'))],
    )
    scripted_model.respond_with(talk)

    run = run_execute(run_id=run_create(suite=suite, model_keys=[SCRIPTED], budget_tokens=1000).pk)

    result = CaseResult.objects.get(run=run)
    # The user's first move spent 2,000 of the 1,000: the agent's answer to it was never asked for, nor anything after.
    assert [len(talk.requests[purpose]) for purpose in ("user", "agent", "judge")] == [1, 0, 0]
    assert result.total_tokens == 2000  # the simulated user's move, counted with the judge's
    assert result.status == "error"
    assert "the run's budget was spent before this model call" in result.reason
    assert "2000 tokens used of a budget of 1000" in result.reason
    assert run.status == Run.Status.ERROR


def test_it_stops_a_scripted_turn_before_the_agents_next_call(suite, scripted_model):
    """The native loop's calls inside one turn: a tool call answered by its mock, the agent's next call refused."""
    case = Case.objects.create(suite=suite, name="scripted")
    for position, text in enumerate(("Cancel order 1043.", "Thanks.")):
        Turn.objects.create(case=case, position=position, user_message=text)
    Mock.objects.create(case=case, position=0, function_name="void_order", result='{"cancelled": true}')
    Assertion.objects.create(case=case, position=0, type="toolCalled", params={"function": "void_order"})
    talk = Conversation(
        user=[],
        agent=[costly(Answer(tool_calls=[Call("void_order", {"order_id": "1043"})])), costly(Answer("Done."))],
    )
    scripted_model.respond_with(talk)

    run = run_execute(run_id=run_create(suite=suite, model_keys=[SCRIPTED], budget_tokens=1000).pk)

    result = CaseResult.objects.get(run=run)
    assert len(talk.requests["agent"]) == 1
    assert result.status == "error" and "2000 tokens used of a budget of 1000" in result.reason


def test_it_leaves_a_conversation_within_its_budget_alone(suite, scripted_model):
    make_case(suite, turns=(), max_turns=TURNS)
    talk = Conversation(
        user=[move("still_going", "Cancel order 1043."), move("done", reason="it is cancelled")],
        agent=[Answer("Cancelled.")],
        judge=[Answer('{"reached": true, "reason": "cancelled"}')],
    )
    scripted_model.respond_with(talk)

    run = run_execute(run_id=run_create(suite=suite, model_keys=[SCRIPTED], budget_tokens=1_000_000).pk)

    result = CaseResult.objects.get(run=run)
    assert result.status == "passed", result.reason
    assert [len(talk.requests[purpose]) for purpose in ("user", "agent", "judge")] == [2, 1, 1]
