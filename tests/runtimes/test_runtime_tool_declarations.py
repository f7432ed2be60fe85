"""A runtime agent's tools are its code's: discovered from the framework object, so a case may mock and assert on
them and a suite may extra-allow only those its agent file declares free of outside effects — without re-declaring a
tool in agenttest."""

from __future__ import annotations

import sys

import pytest

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.runtimes.child import runtime_tool_declarations
from agenthost.runtimes.entry import load_entry
from agenthost.seams import get_model
from agenttest.plugin import effects
from cases.services import case_create, suite_create
from cases.validation.problems import CaseValidationError, SuiteValidationError
from tests.runtimes.conftest import SHOP_BOT
from tests.runtimes.harness import AssertionPlan, CasePlan, TurnPlan, execute_case, suite_plan
from tests.runtimes.test_langgraph_runtime import SHOP_GRAPH
from tests.runtimes.test_openai_agents_runtime import SHOP_AGENTS
from tests.runtimes.test_pydantic_ai_runtime import SHOP_AGENT

pytestmark = pytest.mark.django_db


def _agent(package: str) -> Agent:
    return Agent.objects.create(
        name="shop", runtime="openai-agents", entry=f"{package}.bot:triage", provider="scripted", model="scripted",
        outside_effects={"find_order": False},
    )


def _case(name: str, function: str) -> dict:
    return {
        "name": name,
        "turns": [{"user_message": "Where is order 1042?",
                   "assertions": [{"type": "toolCalled", "params": {"function": function}}]}],
        "mocks": [{"function_name": function, "result": "ok"}],
    }


def test_it_lets_a_case_mock_and_assert_on_the_tools_of_the_agents_code_and_its_handoffs(team_repo):
    suite = suite_create(data={"name": "shop", "agent": _agent(team_repo(SHOP_AGENTS))})

    # find_order is the triage agent's, send_email the billing agent's it hands off to.
    for function in ("find_order", "send_email"):
        case = case_create(suite=suite, document=_case(f"mocks {function}", function))
        assert case.mocks.get().function_name == function

    with pytest.raises(CaseValidationError) as refused:
        case_create(suite=suite, document=_case("typo", "find_ordr"))
    assert "mocks[0].function_name: 'find_ordr' is not a function the agent under test can call" in str(
        refused.value
    )
    assert "did you mean 'find_order'?" in str(refused.value)


def test_it_declares_a_pydantic_ai_agents_tools_as_pydantic_ai_offers_them_to_the_model(team_repo):
    package = team_repo(SHOP_AGENT)
    agent = Agent.objects.create(name="shop", runtime="pydantic-ai", entry=f"{package}.bot:agent", provider="scripted",
                                 model="scripted", outside_effects={"find_order": False})
    suite = suite_create(data={"name": "shop", "agent": agent})
    team_agent = sys.modules[f"{package}.bot"].agent
    offered = {
        tool.tool_def.name: tool.tool_def
        for toolset in team_agent.toolsets for tool in getattr(toolset, "tools", {}).values()
    }

    declared = {item["name"]: item for item in runtime_tool_declarations(agent)}

    assert set(declared) == set(offered) and len(offered) >= 2
    for name, definition in offered.items():
        assert declared[name]["parameters"] == definition.parameters_json_schema
        assert declared[name]["description"] == (definition.description or "")
    # A tool of the code the agent file does not name is still one a case may mock (it has outside effects).
    unnamed = next(name for name in offered if name != "find_order")
    assert case_create(suite=suite, document=_case("mocks it", unnamed)).mocks.get().function_name == unnamed


def test_it_extra_allows_only_a_code_tool_the_agent_file_declares_free_of_outside_effects(team_repo):
    agent = _agent(team_repo(SHOP_AGENTS))

    allowed = suite_create(data={"name": "reads", "agent": agent, "extra_allowed_functions": ["find_order"]})
    assert allowed.extra_allowed_functions == ["find_order"]
    with pytest.raises(SuiteValidationError) as refused:
        suite_create(data={"name": "writes", "agent": agent, "extra_allowed_functions": ["send_email"]})
    assert "extra_allowed_functions[0]" in str(refused.value) and "send_email" in str(refused.value)


@pytest.mark.django_db(transaction=True)
# The runtime, the team's code, its entry point, and whether the runtime discovers the code's tools before it runs.
@pytest.mark.parametrize(("runtime", "source", "entry", "discovers"), [
    ("python", SHOP_BOT, "respond", True), ("openai-agents", SHOP_AGENTS, "triage", True),
    ("pydantic-ai", SHOP_AGENT, "agent", True), ("langgraph", SHOP_GRAPH, "graph", True),
])
def test_it_lets_a_plugin_declare_a_code_tool_free_of_outside_effects_without_touching_the_agent(
    runtime, source, entry, discovers, scripted_model, team_repo
):
    package = team_repo(source)
    agent = Agent.objects.create(name="shop", runtime=runtime, entry=f"{package}.bot:{entry}", provider="scripted",
                                 model="scripted")
    load_entry(agent.entry)
    # What a plugin module does: the tool as the team's code defines it (an SDK FunctionTool, a pydantic-ai tool's
    # function, a plain function), its module left as it is.
    assert effects(sys.modules[f"{package}.bot"].find_order, outside_effects=False) is not None
    scripted_model.play(Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]), "It has shipped.")
    plan = CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={},
        turns=[TurnPlan("Where is order 1042?")], mocks=[],
        assertions=[AssertionPlan("toolCalled", {"function": "find_order"})],
    )
    suite = suite_plan(extra_allowed={"find_order"})

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite)

    # Extra-allowed and declared effect-free, find_order ran for real under test.
    assert outcome.status == "passed", outcome.reason
    assert [(call["name"], call["outcome"]) for call in outcome.tool_calls] == [("find_order", "allowed")]
    assert "shipped" in outcome.tool_calls[0]["result"]
    # Where the runtime discovers the code's tools, the declaration a suite is checked against says so too.
    discovered = {declared["name"]: declared.get("outside_effects") for declared in runtime_tool_declarations(agent)}
    assert (discovered.get("find_order", "not discovered"), discovered.get("send_email", "not discovered")) == (
        (False, None) if discovers else ("not discovered", "not discovered")
    )
