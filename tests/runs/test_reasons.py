"""A failed result's reason names the root cause first, with the remedy that fits it: a blocked call stops its turn,
so the assertions failing after it are symptoms. Cases run for real on the scripted model under the mock seam."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.seams import get_model
from runs.engine.assertions import AssertionOutcome
from runs.engine.case_runner import execute_case, failure_reason
from runs.engine.case_session import MockSpec
from runs.engine.mocking import BLOCKED_PREFIX, FORCE_BLOCKED, FORCE_BLOCKED_PREFIX
from tests.runs.test_runner import called, plan, replies, suite_plan

pytestmark = pytest.mark.django_db(transaction=True)

LOOKUP = {"order_id": "1042"}


@pytest.fixture
def agent(scripted_model):
    return Agent.objects.create(
        name="desk", instruction="Help.", provider="scripted", model="scripted",
        functions=[{"name": "find_order"}, {"name": "util-email-handle_email_sender"}],
    )


def run(agent, scripted_model, *, mocks=(), force_blocked=(), extra_allowed=(), assertions=None):
    scripted_model.play(Answer(tool_calls=[Call("find_order", LOOKUP)]), Answer("Order 1042 has shipped."))
    return execute_case(
        plan=plan(agent, "where is 1042?", mocks=list(mocks),
                  assertions=assertions or [replies("shipped"), called("find_order")]),
        model=get_model(scripted_model.key),
        suite=suite_plan(force_blocked=frozenset(force_blocked), extra_allowed=frozenset(extra_allowed)),
    )


def test_it_names_a_mocked_tool_the_suite_force_blocks_and_says_to_unblock_it(agent, scripted_model):
    execution = run(agent, scripted_model, mocks=[MockSpec("find_order", '{"status": "shipped"}')],
                    force_blocked=["find_order"])
    assert execution.status == "failed"
    assert execution.reason == (
        "find_order is force-blocked by the suite (it has a mock; remove it from the suite's force-blocked "
        "functions to let the mock answer) — so outputContains (case) failed too"
    )
    assert execution.tool_calls[0]["result"] == f"{FORCE_BLOCKED_PREFIX}find_order{FORCE_BLOCKED}"
    assert execution.tool_calls[0]["blocked_because"] == "force-blocked-mocked"


def test_it_names_a_force_blocked_tool_without_a_mock_differently(agent, scripted_model):
    execution = run(agent, scripted_model, force_blocked=["find_order"])
    assert execution.reason.startswith(
        "find_order is force-blocked by the suite (to let the case answer it, remove it from the suite's "
        "force-blocked functions and add a mock)"
    )


def test_it_says_when_a_mock_exists_but_matches_other_arguments(agent, scripted_model):
    execution = run(agent, scripted_model, mocks=[MockSpec("find_order", "{}", arguments={"order_id": "9999"})])
    assert execution.reason.startswith(
        "no mock of find_order matched the call (the mocks expect other arguments or another call index; widen a "
        "mock's arguments or add a mock for this call)"
    )
    assert execution.tool_calls[0]["result"] == f"{BLOCKED_PREFIX}find_order"


def test_it_asks_for_a_mock_when_there_is_none(agent, scripted_model):
    execution = run(agent, scripted_model, assertions=[called("find_order")])
    assert execution.reason == (
        "find_order has no mock, so it was blocked (add a mock for each; only a function free of outside effects "
        "may be allowed on the suite instead)"
    ), "the called assertion held: the blocked call is the only failure"


def test_it_keeps_the_first_assertion_first_when_nothing_was_blocked(agent, scripted_model):
    execution = run(agent, scripted_model, mocks=[MockSpec("find_order", '{"status": "processing"}')],
                    assertions=[replies("delivered"), replies("refund"), called("find_order")])
    assert execution.reason == "outputContains (case): the reply does not contain 'delivered' (+1 more)"
    assert "blocked_because" not in execution.tool_calls[0]


def _outcome(kind: str, message: str) -> AssertionOutcome:
    return AssertionOutcome(kind, "turn 0", "failed", None, None, message)


@given(symptoms=st.lists(st.sampled_from(["outputContains", "toolCalled", "stateEquals"]), max_size=4),
       at=st.integers(min_value=0, max_value=4))
def test_it_always_leads_with_the_blocked_call_wherever_it_failed(symptoms, at):
    failures = [_outcome(kind, f"{kind} failed") for kind in symptoms]
    failures.insert(min(at, len(failures)), _outcome("noBlockedTools", "x has no mock"))
    reason = failure_reason(failures)
    assert reason.startswith("x has no mock")
    if symptoms:
        assert f"so {symptoms[0]} (turn 0) failed too" in reason
        assert ("more)" in reason) == (len(symptoms) > 1)


def test_it_does_not_repeat_a_cause_a_case_asserts_too():
    failures = [_outcome("noBlockedTools", "x has no mock"), _outcome("noBlockedTools", "x has no mock")]
    assert failure_reason(failures) == "x has no mock"

