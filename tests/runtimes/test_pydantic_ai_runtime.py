"""The `pydantic-ai` runtime: a team's pydantic-ai agent, written as pydantic-ai's documentation writes it, runs with
pydantic-ai's own loop — its model calls through agenttest's model layer, its tool calls through the seam."""

from __future__ import annotations

import json
import re
import sys

import pytest
from openai import AsyncOpenAI
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Message
from agenthost.runtimes.entry import load_entry
from agenthost.seams import get_model
from agenthost.services import conversation_send, conversation_start
from cases.models import Suite
from runs.engine.case_runner import execute_case
from runs.engine.case_session import MockSpec
from runs.engine.plans import AssertionPlan, CasePlan, SuitePlan, TurnPlan
from runs.models import CaseResult, Run
from tests.runtimes.conftest import execute_suite, markers, suite_finding_order
from tests.workers import WAIT_SECONDS

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
EMAIL = {"to": "ana@example.com", "body": "Your order has shipped."}
QUESTION = "Where is order 1042? Email me."


def _agent(package: str, attribute: str = "agent", **fields) -> Agent:
    return Agent.objects.create(
        name="shop", runtime="pydantic-ai", entry=f"{package}.bot:{attribute}",
        **{"provider": "scripted", "model": "scripted", **fields},
    )


def _script(scripted_model) -> None:
    scripted_model.play(
        Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]),
        Answer(tool_calls=[Call("send_email", EMAIL)]),
        "Done: I emailed you.",
    )


def _module(package: str):
    # Imported the way agenttest imports the entry point (from the current directory), so the same module object.
    load_entry(f"{package}.bot:agent")
    return sys.modules[f"{package}.bot"]


def test_it_runs_pydantic_ais_loop_with_the_real_tools_and_the_teams_deps_in_chat(scripted_model, team_repo, tmp_path):
    package = team_repo(SHOP_AGENT)
    agent = _agent(package)
    _script(scripted_model)
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
    _script(scripted_model)
    plan = CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={},
        turns=[TurnPlan(QUESTION)], mocks=[MockSpec("find_order", '{"status": "lost"}')],
        assertions=[AssertionPlan("toolCalled", {"function": "find_order"})],
    )

    execution = execute_case(
        plan=plan, model=get_model(scripted_model.key),
        suite=SuitePlan(
            extra_allowed=frozenset(), force_blocked=frozenset(), judge_model="", timeout_seconds=WAIT_SECONDS,
        ),
    )

    assert markers(tmp_path) == []
    assert execution.status == "failed", execution.reason
    assert [(c["name"], c["outcome"]) for c in execution.tool_calls] == [
        ("find_order", "mocked"), ("send_email", "blocked")
    ]
    assert "send_email" in execution.reason
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
    agent = Agent.objects.create(name="shop", runtime="pydantic-ai", entry=f"{package}.bot:searcher",
                                 provider="scripted", model="scripted")
    _script(scripted_model)
    plan = CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={}, turns=[TurnPlan(QUESTION)],
        mocks=[], assertions=[AssertionPlan("toolCalled", {"function": "find_order"})],
    )

    execution = execute_case(
        plan=plan, model=get_model(scripted_model.key),
        suite=SuitePlan(
            extra_allowed=frozenset(), force_blocked=frozenset(), judge_model="", timeout_seconds=WAIT_SECONDS,
        ),
    )

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
    recorded = execute_suite(suite, Run.Mode.RECORD)
    assert recorded.status == "passed", recorded.reason
    sent = len(stub.requests)
    stub.stop()

    replayed = execute_suite(suite, Run.Mode.REPLAY)

    assert replayed.status == "passed", replayed.reason
    # pydantic-ai's loop re-ran step by step against the recordings: as many model calls, none of them sent.
    assert len(stub.requests) == sent == 2
    assert _model_calls(replayed) == _model_calls(recorded) == 2
    changed = team_repo(SHOP_AGENT.replace("Look orders up before", "Always look orders up before"))
    Agent.objects.filter(pk=suite.agent_id).update(entry=f"{changed}.bot:agent")
    stale = execute_suite(suite, Run.Mode.REPLAY)
    assert stale.status == "error"
    assert stale.reason.startswith("stale recording: the request at turn 0 step 0 differs from the recording")
    assert "First difference: messages[0].content" in stale.reason
    assert "Always look orders up before" in stale.reason


def _without_call_ids(requests: list[dict]) -> list[dict]:
    text = json.dumps(requests)
    for position, call_id in enumerate(dict.fromkeys(re.findall(r'"(call_\d+)"', text))):
        text = text.replace(f'"{call_id}"', f'"call-{position}"')
    return json.loads(text)


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
    on_its_own = stub.requests[len(through_agenttest):]
    assert len(through_agenttest) == len(on_its_own) == 2
    for mine, theirs in zip(_without_call_ids(through_agenttest), _without_call_ids(on_its_own), strict=True):
        # pydantic-ai spells out a non-streamed answer, the API's default; the model layer leaves it to the API.
        assert theirs.pop("stream") is False
        # tool_choice as pydantic-ai sets it ("auto" when it offers tools), carried by the model layer.
        assert mine["tool_choice"] == "auto"
        assert sorted(mine) == sorted(theirs)
        for field in theirs:
            assert mine[field] == theirs[field], field
