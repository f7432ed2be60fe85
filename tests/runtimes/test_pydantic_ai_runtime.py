"""The `pydantic-ai` runtime: a team's pydantic-ai agent, written as pydantic-ai's documentation writes it, runs with
pydantic-ai's own loop — its model calls through agenttest's model layer, its tool calls through the seam."""

from __future__ import annotations

import json
import sys

import pytest
from openai import AsyncOpenAI
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from agenthost.models import Agent, Message
from agenthost.runtimes.entry import load_entry
from agenthost.services import conversation_send, conversation_start
from cases.models import Suite
from runs.models import CaseResult
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

SHOP_AGENT = '''
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic_ai import Agent, RunContext


@dataclass
class Shop:
    markers: Path
    signature: str


agent = Agent(
    "openai-chat:gpt-4o-mini",
    defer_model_check=True,
    deps_type=Shop,
    instructions="You are the shop's assistant. Look orders up before answering.",
    model_settings={"temperature": 0.3},
)


@agent.tool_plain
def find_order(order_id: str) -> dict:
    """Find an order by its number."""
    return {"order_id": order_id, "status": "shipped"}


@agent.tool
def send_email(ctx: RunContext[Shop], to: str, body: str) -> str:
    """Email the customer."""
    ctx.deps.markers.mkdir(parents=True, exist_ok=True)
    (ctx.deps.markers / f"email-{len(list(ctx.deps.markers.iterdir()))}").write_text(
        f"{to}: {body} {ctx.deps.signature}"
    )
    return "sent"


def shop_agent():
    return agent


DEPS = Shop(markers=Path(os.environ["SHOP_MARKERS"]), signature="-- the shop")
'''


def _agent(package: str, attribute: str = "agent", **fields) -> Agent:
    return shop_agent("pydantic-ai", f"{package}.bot:{attribute}", **fields)


def _module(package: str):
    # Imported the way agenttest imports the entry point (from the current directory), so the same module object.
    load_entry(f"{package}.bot:agent")
    return sys.modules[f"{package}.bot"]


def test_it_runs_pydantic_ais_loop_with_the_real_tools_and_the_teams_deps_in_chat(scripted_model, team_repo, tmp_path):
    package = team_repo(SHOP_AGENT)
    agent = _agent(package)
    play_find_then_email(scripted_model)
    module = _module(package)

    # The team's own deps, given the way pydantic-ai's testing documentation gives them.
    with module.agent.override(deps=module.DEPS):
        result = conversation_send(conversation=conversation_start(agent=agent), text=QUESTION)

    assert result.output == "Done: I emailed you."
    assert [(call.name, call.outcome) for call in result.tool_calls] == [
        ("find_order", "executed"), ("send_email", "executed"),
    ]
    assert [marker.read_text() for marker in markers(tmp_path)] == [
        "ana@example.com: Your order has shipped. -- the shop"
    ]
    first, second = scripted_model.requests[0], scripted_model.requests[1]
    # pydantic-ai's own request: its instructions, its tool schemas (RunContext left out), its settings.
    assert first.messages[0] == {"role": "system",
                                 "content": "You are the shop's assistant. Look orders up before answering."}
    assert [tool["function"]["name"] for tool in first.tools] == ["find_order", "send_email"]
    assert first.tools[1]["function"]["description"] == "Email the customer."
    assert sorted(first.tools[1]["function"]["parameters"]["properties"]) == ["body", "to"]
    assert first.temperature == 0.3
    assert json.loads(second.messages[-1]["content"]) == {"order_id": "1042", "status": "shipped"}


def test_it_mocks_and_blocks_pydantic_ais_tool_calls_under_test_and_stops_the_turn(
    scripted_model, team_repo, tmp_path
):
    # The entry point a zero-argument factory returning the agent.
    agent = _agent(team_repo(SHOP_AGENT), "shop_agent")
    play_find_then_email(scripted_model)

    execution = execute_on(scripted_model, find_order_mocked(agent))

    assert_mocked_then_blocked(execution, tmp_path)
    assert scripted_model.requests[1].messages[-1]["content"] == '{"status": "lost"}'
    # After the blocked call pydantic-ai's loop did not ask the model again: the turn stopped, as natively.
    assert len(scripted_model.requests) == 2


def test_it_refuses_under_test_an_agent_with_a_tool_pydantic_ai_would_leave_to_the_provider(
    scripted_model, team_repo, tmp_path
):
    package = team_repo(
        SHOP_AGENT
        + "\nfrom pydantic_ai import WebSearchTool\nfrom pydantic_ai.capabilities import NativeTool\n\n"
        "searcher = Agent(capabilities=[NativeTool(WebSearchTool())],"
        " tools=[find_order])\n"
    )
    agent = _agent(package, "searcher")
    play_find_then_email(scripted_model)
    plan = case_plan(
        agent, turns=[TurnPlan(QUESTION)], assertions=[AssertionPlan("toolCalled", {"function": "find_order"})]
    )

    execution = execute_on(scripted_model, plan)

    assert execution.status == "error"
    assert "would run itself, outside agenttest's seam" in execution.reason
    assert "native tool 'web_search'" in execution.reason
    assert scripted_model.requests == []


def _suite(package: str) -> Suite:
    return suite_finding_order(_agent(package, provider="stub", model="gpt-4o-mini"))


def _model_calls(result: CaseResult) -> int:
    """The model calls the team's loop made in the case: each is written as one assistant message."""
    return result.conversation.messages.filter(role=Message.Role.ASSISTANT).count()


def test_it_records_pydantic_ais_loop_replays_it_offline_and_reports_a_changed_instruction_stale(stub, team_repo):
    suite = _suite(team_repo(SHOP_AGENT))

    recorded, replayed = record_then_replay(suite, stub)

    # pydantic-ai's loop re-ran step by step against the recordings: as many model calls, none of them sent.
    assert _model_calls(replayed) == _model_calls(recorded) == 2
    changed = team_repo(SHOP_AGENT.replace("Look orders up before", "Always look orders up before"))
    stale = replayed_after_a_change(suite, f"{changed}.bot:agent")
    assert "First difference: messages[0].content" in stale
    assert "Always look orders up before" in stale


def test_it_sends_the_request_pydantic_ai_sends_when_the_agent_runs_on_its_own(stub, team_repo):
    package = team_repo(SHOP_AGENT)
    agent = _agent(package, provider="stub", model="gpt-4o-mini")
    under_agenttest = conversation_send(conversation=conversation_start(agent=agent), text="Where is order 1042?")
    through_agenttest = stub.requests

    module = _module(package)
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(
        openai_client=AsyncOpenAI(base_url=stub.base_url, api_key="unused")
    ))
    alone = module.agent.run_sync("Where is order 1042?", model=model, deps=module.DEPS)

    assert alone.output == under_agenttest.output
    on_its_own = [dict(theirs) for theirs in stub.requests[len(through_agenttest):]]
    # pydantic-ai spells out a non-streamed answer, the API's default; the model layer leaves it to the API.
    assert [theirs.pop("stream") for theirs in on_its_own] == [False, False]
    # tool_choice as pydantic-ai sets it ("auto" when it offers tools), carried by the model layer.
    assert [mine["tool_choice"] for mine in through_agenttest] == ["auto", "auto"]
    assert_sent_alike(through_agenttest, on_its_own)
