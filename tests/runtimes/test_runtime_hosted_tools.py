"""Hosted tools of the OpenAI Agents SDK (web search, code interpreter, …) run on OpenAI's side, never through
agenttest's seam: under test an agent with one refuses to run, unless the case mocks it by name — then the mock
answers it, and nothing reaches the hosted service."""

from __future__ import annotations

import pytest

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.seams import get_model
from tests.runtimes.conftest import markers
from tests.runtimes.harness import AssertionPlan, CasePlan, MockSpec, TurnPlan, execute_case, suite_plan
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
SUITE = suite_plan()


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
    assert [tool.get("function", tool)["name"] for tool in offered] == ["find_order", "web_search", "code_interpreter"]
    assert scripted_model.requests[1].chat_messages()[-1] == {
        "role": "tool", "tool_call_id": scripted_model.requests[1].chat_messages()[-2]["tool_calls"][0]["id"],
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


# An MCP server each framework would connect to itself: the server's command writes a marker if it is ever started.
MCP_AGENTS = {
    "openai-agents": SHOP_AGENTS + '''
import sys

from agents.mcp import MCPServerStdio

parcels = MCPServerStdio(name="parcels", params={
    "command": sys.executable, "args": ["-c", f"open({str(MARKERS / 'mcp-started')!r}, 'w')"],
})
tracker = Agent(name="tracker", instructions="Track parcels.", tools=[find_order], mcp_servers=[parcels])
''',
    "pydantic-ai": '''
import os
import sys
from pathlib import Path

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset

MARKER = Path(os.environ["SHOP_MARKERS"]) / "mcp-started"
parcels = MCPToolset(StdioTransport(sys.executable, ["-c", f"open({str(MARKER)!r}, 'w')"]), id="parcels")
tracker = Agent(instructions="Track parcels.", toolsets=[parcels])


@tracker.tool_plain
def find_order(order_id: str) -> dict:
    """Find an order by its number."""
    return {"order_id": order_id, "status": "shipped"}
''',
}


@pytest.mark.parametrize("runtime", ["openai-agents", "pydantic-ai"])
def test_it_refuses_an_mcp_server_the_framework_connects_to_unless_the_case_mocks_its_tools(
    runtime, scripted_model, team_repo, tmp_path
):
    agent = Agent.objects.create(name="shop", runtime=runtime, entry=f"{team_repo(MCP_AGENTS[runtime])}.bot:tracker",
                                 provider="scripted", model="scripted")

    def plan(mocks: list[MockSpec]) -> CasePlan:
        return CasePlan(
            id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={},
            turns=[TurnPlan("Where is parcel P1?")], mocks=mocks,
            assertions=[AssertionPlan("toolCalled", {"function": "track_parcel"}),
                        AssertionPlan("outputContains", {"text": "tomorrow"})],
        )

    # Only the agent's own tool mocked: nothing stands in for the server's tools, and the agent does not run.
    refused = execute_case(plan=plan([MockSpec("find_order", "{}")]), model=get_model(scripted_model.key),
                           suite=SUITE)

    assert refused.status == "error"
    assert "would run itself, outside agenttest's seam" in refused.reason
    assert "MCP server 'parcels'" in refused.reason
    assert scripted_model.requests == []

    # The case mocks the server's tool by name: offered in the server's place, answered by the mock.
    scripted_model.play(Answer(tool_calls=[Call("track_parcel", {"parcel": "P1"})]), "It arrives tomorrow.")
    answered = execute_case(plan=plan([MockSpec("track_parcel", "Out for delivery, arrives tomorrow.")]),
                            model=get_model(scripted_model.key), suite=SUITE)

    assert answered.status == "passed", answered.reason
    assert [(c["name"], c["outcome"]) for c in answered.tool_calls] == [("track_parcel", "mocked")]
    assert sorted(tool.get("function", tool)["name"] for tool in scripted_model.requests[0].tools) == [
        "find_order", "track_parcel",
    ]
    assert scripted_model.requests[1].chat_messages()[-1]["content"] == "Out for delivery, arrives tomorrow."
    assert markers(tmp_path) == [], "the MCP server was never started"
