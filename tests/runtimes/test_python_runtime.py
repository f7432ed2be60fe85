"""The `python` runtime: a team's plain function runs as the agent, with its model calls through agenttest's model
layer and its tool calls through the seam."""

from __future__ import annotations

import json

import pytest

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Message
from agenthost.seams import get_model
from agenthost.services import conversation_send, conversation_start
from tests.runtimes.conftest import markers
from tests.runtimes.harness import AssertionPlan, CasePlan, MockSpec, SuitePlan, TurnPlan, execute_case, suite_plan

pytestmark = pytest.mark.django_db(transaction=True)

EMAIL = {"to": "ana@example.com", "body": "Your order has shipped."}


def _agent(package: str) -> Agent:
    return Agent.objects.create(
        name="shop", runtime="python", entry=f"{package}.bot:respond", provider="scripted", model="scripted"
    )


def _plan(agent: Agent, *turns: str, mocks=(), assertions=()) -> CasePlan:
    return CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={},
        turns=[TurnPlan(text) for text in turns], assertions=list(assertions), mocks=list(mocks),
    )


def _suite() -> SuitePlan:
    return suite_plan()


def test_it_runs_the_teams_real_tools_in_chat(scripted_model, team_repo, tmp_path):
    agent = _agent(team_repo())
    scripted_model.play(
        Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]),
        Answer(tool_calls=[Call("send_email", EMAIL)]),
        "Done: I emailed you.",
    )
    conversation = conversation_start(agent=agent)

    result = conversation_send(conversation=conversation, text="Where is order 1042? Email me.")

    assert result.output == "Done: I emailed you."
    assert [(call.name, call.outcome) for call in result.tool_calls] == [
        ("find_order", "executed"), ("send_email", "executed")
    ]
    assert json.loads(result.tool_calls[0].result) == {"order_id": "1042", "status": "shipped"}
    assert len(markers(tmp_path)) == 1
    # The model was sent the team's own instruction, tools and temperature, not a re-declaration.
    first = scripted_model.requests[0]
    assert first.messages[0] == {"role": "system", "content": "You are the shop's assistant. Look orders up before "
                                                             "answering."}
    assert [tool["function"]["name"] for tool in first.tools] == ["find_order", "send_email"]
    assert first.temperature == 0.2
    roles = list(conversation.messages.order_by("seq").values_list("role", "function_name"))
    assert roles == [
        (Message.Role.USER, ""), (Message.Role.ASSISTANT, ""), (Message.Role.TOOL_CALL, "find_order"),
        (Message.Role.TOOL_RESULT, "find_order"), (Message.Role.ASSISTANT, ""), (Message.Role.TOOL_CALL, "send_email"),
        (Message.Role.TOOL_RESULT, "send_email"), (Message.Role.ASSISTANT, ""),
    ]
    assert conversation.messages.order_by("seq").last().content == "Done: I emailed you."


def test_it_answers_with_mocks_and_blocks_an_unmocked_tool_under_test(scripted_model, team_repo, tmp_path):
    agent = _agent(team_repo())
    scripted_model.play(
        Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]),
        Answer(tool_calls=[Call("send_email", EMAIL)]),
        "This answer must never be asked for: the blocked call stops the turn.",
    )
    plan = _plan(
        agent, "Where is order 1042? Email me.",
        mocks=[MockSpec("find_order", '{"order_id": "1042", "status": "lost"}')],
        assertions=[AssertionPlan("toolCalled", {"function": "find_order"})],
    )

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=_suite())

    assert markers(tmp_path) == []
    assert outcome.status == "failed", outcome.reason
    calls = [(call["name"], call["outcome"]) for call in outcome.tool_calls]
    assert calls == [("find_order", "mocked"), ("send_email", "blocked")]
    # The turn stopped at the blocked call, as agenttest's own loop stops: the model was not asked again.
    assert len(scripted_model.requests) == 2
    assert scripted_model.requests[1].messages[-1] == {
        "role": "tool", "tool_call_id": scripted_model.requests[1].messages[-2]["tool_calls"][0]["id"],
        "content": '{"order_id": "1042", "status": "lost"}',
    }
    assert "send_email" in outcome.reason


def test_it_lets_an_extra_allowed_tool_run_only_when_the_agent_file_declares_it_free_of_outside_effects(
    scripted_model, team_repo, tmp_path
):
    agent = _agent(team_repo())
    agent.outside_effects = {"find_order": False}
    agent.save()
    scripted_model.play(
        Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]),
        Answer(tool_calls=[Call("send_email", EMAIL)]),
        "never asked",
    )
    plan = _plan(agent, "Where is order 1042? Email me.",
                 assertions=[AssertionPlan("toolCalled", {"function": "find_order"})])
    suite = suite_plan(extra_allowed={"find_order", "send_email"})

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite)

    # find_order ran for real (declared effect-free); send_email, extra-allowed but undeclared, stayed blocked.
    assert [(c["name"], c["outcome"]) for c in outcome.tool_calls] == [
        ("find_order", "allowed"), ("send_email", "blocked")
    ]
    assert json.loads(outcome.tool_calls[0]["result"]) == {"order_id": "1042", "status": "shipped"}
    assert outcome.tool_calls[1]["blocked_because"] == "outside-effects"
    assert markers(tmp_path) == []
