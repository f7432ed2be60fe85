"""A runtime agent's tools are its code's: discovered from the framework object, so a case may mock and assert on
them and a suite may extra-allow only those its agent file declares free of outside effects — without re-declaring a
tool in agenttest."""

from __future__ import annotations

import pytest

from agenthost.models import Agent
from cases.services import case_create, suite_create
from cases.validation import CaseValidationError, SuiteValidationError
from tests.runtimes.test_openai_agents_runtime import SHOP_AGENTS

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


def test_it_extra_allows_only_a_code_tool_the_agent_file_declares_free_of_outside_effects(team_repo):
    agent = _agent(team_repo(SHOP_AGENTS))

    allowed = suite_create(data={"name": "reads", "agent": agent, "extra_allowed_functions": ["find_order"]})
    assert allowed.extra_allowed_functions == ["find_order"]
    with pytest.raises(SuiteValidationError) as refused:
        suite_create(data={"name": "writes", "agent": agent, "extra_allowed_functions": ["send_email"]})
    assert "extra_allowed_functions[0]" in str(refused.value) and "send_email" in str(refused.value)
