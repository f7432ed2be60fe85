"""Hosted tools of the OpenAI Agents SDK (web search, code interpreter, …) run on OpenAI's side, never through
agenttest's seam: under test an agent with one refuses to run, unless the case mocks it by name — then the mock
answers it, and nothing reaches the hosted service."""

from __future__ import annotations

import pytest

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.seams import get_model
from tests.runtimes.conftest import markers
from tests.runtimes.harness import AssertionPlan, CasePlan, MockSpec, SuitePlan, TurnPlan, execute_case
from tests.runtimes.test_openai_agents_runtime import SHOP_AGENTS

pytestmark = pytest.mark.django_db(transaction=True)

SEARCHER = SHOP_AGENTS + '''
from agents import CodeInterpreterTool, WebSearchTool

searcher = Agent(
    name="searcher", instructions="Search the web for delivery news.",
    tools=[find_order, WebSearchTool(), CodeInterpreterTool(tool_config={"type": "code_interpreter",
                                                                        "container": {"type": "auto"}})],
)
'''
SUITE = SuitePlan(extra_allowed=frozenset(), force_blocked=frozenset(), judge_model="", timeout_seconds=20.0)


def _plan(package: str, mocks: list[MockSpec]) -> CasePlan:
    agent = Agent.objects.create(name="shop", runtime="openai-agents", entry=f"{package}.bot:searcher",
                                 provider="scripted", model="scripted")
    return CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={},
        turns=[TurnPlan("Is there a carrier strike?")], mocks=mocks,
        assertions=[AssertionPlan("toolCalled", {"function": "web_search"}),
                    AssertionPlan("outputContains", {"text": "no strike"})],
    )


def test_it_answers_a_hosted_tool_the_case_mocks_by_name_through_the_seam(scripted_model, team_repo, tmp_path):
    scripted_model.play(Answer(tool_calls=[Call("web_search", {"query": "carrier strike"})]),
                        Answer(tool_calls=[Call("code_interpreter", {"code": "print(1)"})]),
                        "There is no strike.")
    plan = _plan(team_repo(SEARCHER), [MockSpec("web_search", "No strike reported today."),
                                       MockSpec("code_interpreter", "1")])

    execution = execute_case(plan=plan, model=get_model(scripted_model.key), suite=SUITE)

    assert execution.status == "passed", execution.reason
    assert [(c["name"], c["outcome"], c["result"]) for c in execution.tool_calls] == [
        ("web_search", "mocked", "No strike reported today."), ("code_interpreter", "mocked", "1")
    ]
    # The model is offered the hosted tools by their names, as functions; the mock's answer is what it reads.
    offered = scripted_model.requests[0].tools
    assert [tool["function"]["name"] for tool in offered] == ["find_order", "web_search", "code_interpreter"]
    assert scripted_model.requests[1].messages[-1] == {
        "role": "tool", "tool_call_id": scripted_model.requests[1].messages[-2]["tool_calls"][0]["id"],
        "content": "No strike reported today.",
    }
    assert markers(tmp_path) == []


def test_it_still_refuses_a_hosted_tool_the_case_does_not_mock_naming_it(scripted_model, team_repo):
    scripted_model.play("unused")
    # web_search is mocked, code_interpreter is not: the agent does not run, and the refusal names what is missing.
    plan = _plan(team_repo(SEARCHER), [MockSpec("web_search", "No strike reported today.")])

    execution = execute_case(plan=plan, model=get_model(scripted_model.key), suite=SUITE)

    assert execution.status == "error"
    assert "searcher: CodeInterpreterTool 'code_interpreter'" in execution.reason
    assert "web_search" not in execution.reason.split("run under test:")[1].split("(")[0]
    assert scripted_model.requests == []


def test_it_blocks_a_mocked_hosted_tools_call_no_mock_matches(scripted_model, team_repo):
    scripted_model.play(Answer(tool_calls=[Call("web_search", {"query": "weather"})]), "unused")
    plan = _plan(team_repo(SEARCHER), [MockSpec("web_search", "No strike.", arguments={"query": "carrier strike"}),
                                       MockSpec("code_interpreter", "1")])

    execution = execute_case(plan=plan, model=get_model(scripted_model.key), suite=SUITE)

    assert execution.status == "failed"
    assert [(c["name"], c["outcome"]) for c in execution.tool_calls] == [("web_search", "blocked")]
    assert len(scripted_model.requests) == 1
