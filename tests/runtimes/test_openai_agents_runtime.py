"""The `openai-agents` runtime: a team's OpenAI Agents SDK agent, written as the SDK's documentation writes it, runs
with the SDK's own loop — its model calls through agenttest's model layer, its function tools through the seam."""

from __future__ import annotations

import re

import pytest
from agents import AsyncOpenAI, OpenAIResponsesModel, RunConfig, Runner
from django.urls import reverse

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.services import conversation_send, conversation_start
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult
from runs.services import run_create, run_execute
from tests.runtimes.conftest import markers, suite_finding_order
from tests.runtimes.harness import AssertionPlan, TurnPlan
from tests.runtimes.shop import (
    QUESTION,
    assert_mocked_then_blocked,
    assert_sent_alike,
    case_plan,
    execute_on,
    find_order_mocked,
    play_find_then_email,
    record_then_replay,
    replayed_after_a_change,
    shop_agent,
)

pytestmark = pytest.mark.django_db(transaction=True)

SHOP_AGENTS = '''
import os
from pathlib import Path

from agents import Agent, ModelSettings, function_tool

MARKERS = Path(os.environ["SHOP_MARKERS"])


@function_tool
def find_order(order_id: str) -> dict:
    """Find an order by its number."""
    return {"order_id": order_id, "status": "shipped"}


@function_tool
def send_email(to: str, body: str) -> str:
    """Email the customer."""
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / f"email-{len(list(MARKERS.iterdir()))}").write_text(f"{to}: {body}")
    return "sent"


billing = Agent(name="billing", instructions="You email customers about their orders.", tools=[send_email])
triage = Agent(
    name="triage",
    instructions="You are the shop's triage agent. Look orders up; hand emails to billing.",
    tools=[find_order],
    handoffs=[billing],
    model_settings=ModelSettings(temperature=0.3),
)
'''


def _agent(package: str, attribute: str = "triage", **fields) -> Agent:
    return shop_agent("openai-agents", f"{package}.bot:{attribute}", **fields)


def _script(scripted_model) -> None:
    play_find_then_email(scripted_model, Answer(tool_calls=[Call("transfer_to_billing", {})]))


def test_it_runs_the_sdks_loop_with_the_real_tools_in_chat_and_names_the_agent_of_each_call(
    scripted_model, team_repo, tmp_path
):
    agent = _agent(team_repo(SHOP_AGENTS))
    _script(scripted_model)

    result = conversation_send(conversation=conversation_start(agent=agent), text=QUESTION)

    assert result.output == "Done: I emailed you."
    assert [(call.name, call.agent, call.outcome) for call in result.tool_calls] == [
        ("find_order", "triage", "executed"), ("transfer_to_billing", "triage", "routed"),
        ("send_email", "billing", "executed"),
    ]
    # The hand-off is routing, as agenttest's own loop records a route.
    assert result.agent_chain == ["shop", "billing"]
    assert len(markers(tmp_path)) == 1
    first, after_handoff = scripted_model.requests[0], scripted_model.requests[2]
    # The SDK's own request, for the Responses API it uses by default: its instructions, its tool and hand-off
    # schemas, its settings.
    assert first.api == "responses"
    assert first.settings["instructions"] == "You are the shop's triage agent. Look orders up; hand emails to billing."
    assert [tool["name"] for tool in first.tools] == ["find_order", "transfer_to_billing"]
    assert first.temperature == 0.3
    assert first.metadata["agent"] == "triage" and after_handoff.metadata["agent"] == "billing"
    assert after_handoff.settings["instructions"] == "You email customers about their orders."


# Who wrote each message of the turn: the user message is the agenttest agent's; the SDK's agents make the rest, by
# their own names, the hand-off's routing call being triage's and everything after it billing's.
HANDED_OFF = [
    ("user", "", "shop"),
    ("assistant", "", "triage"), ("tool_call", "find_order", "triage"), ("tool_result", "find_order", "triage"),
    ("assistant", "", "triage"), ("tool_call", "transfer_to_billing", "triage"),
    ("tool_result", "transfer_to_billing", "triage"),
    ("assistant", "", "billing"), ("tool_call", "send_email", "billing"), ("tool_result", "send_email", "billing"),
    ("assistant", "Done: I emailed you.", "billing"),
]


def test_it_names_the_sdk_agent_of_each_message_through_a_handoff_in_chat_and_under_test(
    scripted_model, team_repo, tmp_path, admin_client
):
    agent = _agent(team_repo(SHOP_AGENTS))
    _script(scripted_model)
    conversation = conversation_start(agent=agent)
    conversation_send(conversation=conversation, text=QUESTION)

    assert [(m.role, m.function_name or (m.content if m.role == "assistant" else ""), m.author)
            for m in conversation.messages.order_by("seq")] == HANDED_OFF
    api = admin_client.get(f"/api/conversations/{conversation.pk}/messages/").json()
    assert [m["agent"] for m in api["results"]] == [who for *_, who in HANDED_OFF]
    page = admin_client.get(reverse("agents:conversation", args=[conversation.pk])).content.decode()
    assert re.search(r"send_email</span>.*?by billing</span>", page, re.S)
    assert re.search(r'<div class="msg-who">billing .*?Done: I emailed you.', page, re.S)

    suite = Suite.objects.create(name="shop", agent=agent)
    case = Case.objects.create(suite=suite, name="emails", enabled=True)
    Turn.objects.create(case=case, position=0, user_message=QUESTION)
    Mock.objects.create(case=case, position=0, function_name="find_order", result='{"status": "shipped"}')
    Mock.objects.create(case=case, position=1, function_name="send_email", result="sent")
    Assertion.objects.create(case=case, position=0, type="toolCalled", params={"function": "send_email"})
    _script(scripted_model)
    run = run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key]).pk)
    result = CaseResult.objects.get(run=run)

    assert result.status == "passed", result.reason
    assert [(row["role"], row["function_name"] or (row["content"] if row["role"] == "assistant" else ""), row["agent"])
            for row in result.transcript] == HANDED_OFF
    page = admin_client.get(reverse("runs:result", args=[run.pk, result.pk])).content.decode()
    assert re.search(r"send_email</span>.*?<span class=\"muted small\">by billing</span>", page, re.S)
    assert re.search(r'<div class="msg-who">billing .*?Done: I emailed you.', page, re.S)
    assert len(markers(tmp_path)) == 1, "only the chat's real send_email wrote a marker"


def test_it_mocks_and_blocks_the_sdks_tool_calls_under_test_and_stops_the_turn(scripted_model, team_repo, tmp_path):
    agent = _agent(team_repo(SHOP_AGENTS))
    _script(scripted_model)

    execution = execute_on(scripted_model, find_order_mocked(agent))

    assert_mocked_then_blocked(execution, tmp_path)
    assert [c["agent"] for c in execution.tool_calls] == ["triage", "billing"]
    # After the blocked call the SDK's loop did not ask the model again: the turn stopped, as natively.
    assert len(scripted_model.requests) == 3


def test_it_refuses_under_test_an_agent_with_a_tool_the_sdk_would_run_itself(scripted_model, team_repo, tmp_path):
    package = team_repo(
        SHOP_AGENTS
        + "\nfrom agents import WebSearchTool\n\nsearcher = triage.clone(tools=[find_order, WebSearchTool()])\n"
    )
    agent = _agent(package, "searcher")
    _script(scripted_model)
    plan = case_plan(
        agent, turns=[TurnPlan(QUESTION)], assertions=[AssertionPlan("toolCalled", {"function": "find_order"})]
    )

    execution = execute_on(scripted_model, plan)

    assert execution.status == "error"
    assert "would run itself, outside agenttest's seam" in execution.reason
    assert "triage: WebSearchTool 'web_search'" in execution.reason
    assert scripted_model.requests == []


def _suite(package: str) -> Suite:
    return suite_finding_order(_agent(package, provider="stub", model="gpt-4o-mini"))


def test_it_records_the_sdks_loop_replays_it_offline_and_reports_a_changed_instruction_stale(stub, team_repo):
    suite = _suite(team_repo(SHOP_AGENTS))

    record_then_replay(suite, stub)

    changed = team_repo(SHOP_AGENTS.replace("Look orders up;", "Always look orders up first;"))
    stale = replayed_after_a_change(suite, f"{changed}.bot:triage")
    assert "First difference: settings.instructions" in stale
    assert "Always look orders up first" in stale


def test_it_sends_the_request_the_sdk_sends_when_the_agent_runs_on_its_own(stub, team_repo):
    package = team_repo(SHOP_AGENTS)
    agent = _agent(package, provider="stub", model="gpt-4o-mini")
    under_agenttest = conversation_send(conversation=conversation_start(agent=agent), text="Where is order 1042?")
    through_agenttest = stub.requests

    module = __import__(f"{package}.bot", fromlist=["triage"])
    # The SDK's default model for an OpenAI model name: its Responses model (issue 33, reproduction 5).
    model = OpenAIResponsesModel(model="gpt-4o-mini",
                                 openai_client=AsyncOpenAI(base_url=stub.base_url, api_key="unused"))
    alone = Runner.run_sync(module.triage, "Where is order 1042?",
                            run_config=RunConfig(model=model, tracing_disabled=True))

    assert alone.final_output == under_agenttest.output
    assert stub.paths == ["/v1/responses"] * 4
    assert_sent_alike(through_agenttest, stub.requests[len(through_agenttest):])
