"""What the Agents SDK's loop decides beyond text is on the transcript: a guardrail's tripwire is the agent's answer
(named, judged by assertions — not an Error), a structured `output_type` is the assistant's message as its JSON, and
the run context (the conversation's state as a dict) is state."""

from __future__ import annotations

import json

import pytest

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Message
from agenthost.seams import get_model
from agenthost.services import conversation_send, conversation_start
from cases.models import Assertion, Case, Suite, Turn
from runs.models import Run
from tests.runtimes.conftest import execute_suite, stub_provider
from tests.runtimes.harness import AssertionPlan, CasePlan, MockSpec, TurnPlan, execute_case, suite_plan
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

SHOP = '''
from agents import (
    Agent, GuardrailFunctionOutput, RunContextWrapper, function_tool, input_guardrail, output_guardrail,
)
from pydantic import BaseModel


class Reply(BaseModel):
    order_id: str
    status: str


@function_tool
def find_order(ctx: RunContextWrapper[dict], order_id: str) -> dict:
    """Find an order by its number."""
    ctx.context["last_order"] = order_id
    return {"order_id": order_id, "status": "shipped"}


@input_guardrail
async def no_refunds(ctx, agent, user_input):
    asked = "refund" in str(user_input).lower()
    return GuardrailFunctionOutput(output_info={"reason": "refunds go to a person"} if asked else None,
                                   tripwire_triggered=asked)


@output_guardrail
async def no_lost_orders(ctx, agent, output):
    return GuardrailFunctionOutput(output_info="never say an order is lost", tripwire_triggered=output.status == "lost")


def remember(ctx, agent):
    ctx.context["greeted"] = True
    return "You report an order's status."


status = Agent(name="status", instructions=remember, tools=[find_order], output_type=Reply,
               input_guardrails=[no_refunds], output_guardrails=[no_lost_orders])
'''
SUITE = suite_plan()


def _agent(package: str) -> Agent:
    return Agent.objects.create(name="shop", runtime="openai-agents", entry=f"{package}.bot:status",
                                provider="scripted", model="scripted")


def _case(agent: Agent, text: str, assertions: list[AssertionPlan], mocks: list[MockSpec] | None = None) -> CasePlan:
    return CasePlan(id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={},
                    turns=[TurnPlan(text)], mocks=mocks or [], assertions=assertions)


def test_it_records_a_tripped_input_guardrail_as_the_agents_answer_which_assertions_judge(scripted_model, team_repo):
    scripted_model.play('{"order_id": "1", "status": "shipped"}')
    agent = _agent(team_repo(SHOP))

    execution = execute_case(plan=_case(agent, "I want a refund for order 1042.", [
        AssertionPlan("outputContains", {"text": "input guardrail 'no_refunds'"}),
        AssertionPlan("outputContains", {"text": "refunds go to a person"}),
        AssertionPlan("toolNotCalled", {"function": "find_order"}),
    ]), model=get_model(scripted_model.key), suite=SUITE)

    assert execution.status == "passed", execution.reason
    conversation = conversation_start(agent=agent)
    result = conversation_send(conversation=conversation, text="A refund, please.")
    assert result.output == (
        "[guardrail] the input guardrail 'no_refunds' of agent 'status' tripped: "
        '{"reason":"refunds go to a person"}'
    )
    assert result.finish == "answer"
    last = conversation.messages.filter(role=Message.Role.ASSISTANT).order_by("seq").last()
    assert last.content == result.output


def test_it_fails_a_case_on_a_tripped_output_guardrail_naming_it_not_an_error(scripted_model, team_repo):
    scripted_model.play(Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]),
                        '{"order_id": "1042", "status": "lost"}')
    agent = _agent(team_repo(SHOP))

    execution = execute_case(plan=_case(agent, "Where is order 1042?", [
        AssertionPlan("outputRegex", {"pattern": r'"status":\s*"lost"'}),
    ], [MockSpec("find_order", '{"status": "lost"}')]), model=get_model(scripted_model.key), suite=SUITE)

    assert execution.status == "failed", execution.reason
    assert "[guardrail] the output guardrail 'no_lost_orders' of agent 'status' tripped: never say an order is lost" \
        in json.dumps(execution.assertions)


def test_it_records_a_structured_output_as_the_assistants_json_and_the_run_context_as_state(
    scripted_model, team_repo
):
    scripted_model.play(Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]),
                        '{"order_id": "1042", "status": "in transit"}')
    agent = _agent(team_repo(SHOP))

    execution = execute_case(plan=_case(agent, "Where is order 1042?", [
        AssertionPlan("outputContains", {"text": '"status": "in transit"'}),
        AssertionPlan("outputRegex", {"pattern": r'^\{"order_id": "1042"'}),
        AssertionPlan("stateEquals", {"key": "greeted", "value": True}),
    ], [MockSpec("find_order", '{"status": "in transit"}')]), model=get_model(scripted_model.key), suite=SUITE)

    assert execution.status == "passed", execution.reason
    # The SDK asked for its output type's schema (its Responses request's text format): it is part of the request.
    assert scripted_model.requests[0].settings["text"]["format"]["name"] == "final_output"

    scripted_model.play(Answer(tool_calls=[Call("find_order", {"order_id": "7"})]), '{"order_id":"7","status":"x"}')
    conversation = conversation_start(agent=agent)
    result = conversation_send(conversation=conversation, text="Where is order 7?")
    assert json.loads(result.output) == {"order_id": "7", "status": "x"}
    # One assistant message with the answer, not the model's JSON and a dump of it besides; the real tool wrote to
    # the run context in chat, which is state.
    answers = [m.content for m in conversation.messages.filter(role=Message.Role.ASSISTANT) if m.content]
    assert answers == ['{"order_id":"7","status":"x"}']
    conversation.refresh_from_db()
    assert {state.key: state.value for state in conversation.state_changes.all()} == {"greeted": True,
                                                                                      "last_order": "7"}


def test_it_replays_a_structured_output_keyed_on_its_type_and_names_a_changed_type_stale(
    openai_stub, settings, team_repo
):
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "stub": stub_provider(openai_stub.base_url)}
    openai_stub.respond_with(lambda body: '{"order_id": "1042", "status": "shipped"}')
    agent = Agent.objects.create(name="shop", runtime="openai-agents", entry=f"{team_repo(SHOP)}.bot:status",
                                 provider="stub", model="gpt-4o-mini")
    suite = Suite.objects.create(name="shop", agent=agent, case_timeout_seconds=int(WAIT_SECONDS))
    case = Case.objects.create(suite=suite, name="status")
    Turn.objects.create(case=case, position=0, user_message="Where is order 1042?")
    Assertion.objects.create(case=case, position=0, type="outputContains", params={"text": '"status": "shipped"'})
    assert execute_suite(suite, Run.Mode.RECORD).status == "passed"
    openai_stub.stop()
    assert execute_suite(suite, Run.Mode.REPLAY).status == "passed"

    changed = team_repo(SHOP.replace("    status: str\n", "    status: str\n    eta: str = ''\n"))
    Agent.objects.filter(pk=agent.pk).update(entry=f"{changed}.bot:status")
    stale = execute_suite(suite, Run.Mode.REPLAY)

    assert stale.status == "error"
    assert "First difference: settings.text.format.schema" in stale.reason
