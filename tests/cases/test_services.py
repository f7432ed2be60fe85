"""Suite and case writes, and the case selection a run uses."""

from __future__ import annotations

import pytest

from cases.models import Assertion, Case, HistoryMessage, Mock, Suite, Turn
from cases.selectors import case_list, enabled_cases
from cases.services import (
    case_copy,
    case_create,
    case_delete,
    case_disable,
    case_enable,
    case_to_document,
    case_update,
    suite_create,
    suite_delete,
    suite_update,
)
from cases.validation.case_documents import clean_case_document
from cases.validation.problems import CaseValidationError, SuiteValidationError

pytestmark = pytest.mark.django_db


def test_it_stores_a_case_that_reads_back_as_the_same_document(suite, case_document):
    case = case_create(suite=suite, document=case_document())

    assert case_to_document(case=case) == clean_case_document(case_document(), suite=None)
    assert [turn.user_message for turn in case.turns.all()] == ["Where is order 1042?", "Can I get a refund?"]
    turn_assertion = case.assertions.get(type="outputRegex")
    assert turn_assertion.turn == case.turns.first()
    assert turn_assertion.fatal is True
    assert case.assertions.get(type="stateEquals").turn is None


def test_it_stores_nothing_when_the_document_is_invalid(suite, case_document):
    with pytest.raises(CaseValidationError) as raised:
        case_create(suite=suite, document=case_document(turns=[]))

    assert [problem.field for problem in raised.value.problems] == ["turns"]
    assert not Case.objects.exists()


def test_it_replaces_history_turns_mocks_and_assertions_wholesale(make_case, case_document):
    case = make_case()
    replacement = case_document(
        name="Renamed",
        history=[],
        turns=[{"user_message": "Cancel order 7", "assertions": [
            {"type": "toolCalled", "params": {"function": "void_order"}},
        ]}],
        assertions=[],
        mocks=[{"function_name": "void_order", "result": "cancelled"}],
    )

    case_update(case=case, document=replacement)

    case.refresh_from_db()
    assert case.name == "Renamed"
    assert HistoryMessage.objects.filter(case=case).count() == 0
    assert list(Turn.objects.filter(case=case).values_list("user_message", flat=True)) == ["Cancel order 7"]
    assert list(Assertion.objects.filter(case=case).values_list("type", flat=True)) == ["toolCalled"]
    assert list(Mock.objects.filter(case=case).values_list("function_name", flat=True)) == ["void_order"]


def test_it_leaves_a_case_untouched_when_an_update_is_invalid(make_case, case_document):
    case = make_case()

    with pytest.raises(CaseValidationError):
        case_update(case=case, document=case_document(history=[{"role": "robot", "content": "beep"}]))

    assert case.history.count() == 1
    assert case.turns.count() == 2


def test_it_copies_a_case_disabled_with_a_free_name(make_case):
    original = make_case(name="Refund")

    first = case_copy(case=original)
    second = case_copy(case=original)

    assert (first.name, second.name) == ("Refund (copy)", "Refund (copy 2)")
    assert not first.enabled and not second.enabled
    original.refresh_from_db()
    assert original.enabled
    expected = {**case_to_document(case=original), "enabled": False}
    assert {**case_to_document(case=first), "name": original.name} == expected


def test_it_keeps_a_copy_name_within_200_characters(make_case):
    original = make_case(name="n" * 200)

    copy = case_copy(case=original)

    assert len(copy.name) == 200
    assert copy.name.endswith(" (copy)")


def test_it_enables_a_valid_case(make_case):
    case = make_case(enabled=False)

    case_enable(case=case)

    case.refresh_from_db()
    assert case.enabled


def test_it_refuses_to_enable_a_case_that_no_longer_passes(judged_suite, make_case):
    case = make_case(judged_suite, enabled=False, assertions=[{"type": "llmJudge", "params": {"criterion": "Kind"}}])
    Suite.objects.filter(pk=judged_suite.pk).update(judge_model="")
    case.suite.refresh_from_db()

    with pytest.raises(CaseValidationError) as raised:
        case_enable(case=case)

    assert "suite.judge_model" in str(raised.value)
    case.refresh_from_db()
    assert not case.enabled


def test_it_disables_and_deletes_a_case(make_case):
    case = make_case()

    case_disable(case=case)
    assert not Case.objects.get(pk=case.pk).enabled

    case_delete(case=case)
    assert not Case.objects.filter(pk=case.pk).exists()
    assert not Turn.objects.exists()


def test_it_creates_updates_and_deletes_a_suite(agent, make_case):
    suite = suite_create(data={"name": "Orders", "agent": "support", "extra_allowed_functions": ["track_order"]})
    assert (suite.agent, suite.case_timeout_seconds) == (agent, 120)

    suite_update(suite=suite, data={"case_timeout_seconds": 30})
    suite.refresh_from_db()
    assert (suite.name, suite.case_timeout_seconds, suite.extra_allowed_functions) == ("Orders", 30, ["track_order"])

    make_case(suite)
    suite_delete(suite=suite)
    assert not Suite.objects.filter(name="Orders").exists()
    assert not Case.objects.exists()


def test_it_refuses_a_suite_update_that_breaks_a_rule(suite):
    with pytest.raises(SuiteValidationError) as raised:
        suite_update(suite=suite, data={"case_timeout_seconds": 0})

    assert [problem.field for problem in raised.value.problems] == ["case_timeout_seconds"]
    suite.refresh_from_db()
    assert suite.case_timeout_seconds == 120


# --- Selection --------------------------------------------------------------------------------------------------


@pytest.fixture
def selection(make_case):
    return {
        "low": make_case(name="b low", priority=0, tags=["smoke"]),
        "high": make_case(name="z high", priority=5, tags=["Smoke-test"]),
        "also_low": make_case(name="a low", priority=0, tags=["refunds"]),
        "disabled": make_case(name="disabled smoke", enabled=False, tags=["smoke"]),
    }


def names(queryset) -> list[str]:
    return [case.name for case in queryset]


def test_it_selects_every_enabled_case_highest_priority_first(suite, selection):
    assert names(enabled_cases(suite=suite)) == ["z high", "a low", "b low"]


def test_it_selects_cases_by_exact_tag(suite, selection):
    assert names(enabled_cases(suite=suite, case_filter="tag:smoke")) == ["b low"]


def test_it_selects_cases_by_name_substring_ignoring_case(suite, selection):
    assert names(enabled_cases(suite=suite, case_filter="LOW")) == ["a low", "b low"]


def test_it_selects_only_cases_of_the_suite(suite, agent, selection, make_case):
    other = Suite.objects.create(name="Other", agent=agent)
    make_case(other, name="c low")

    assert "c low" not in names(enabled_cases(suite=suite, case_filter="low"))


def test_it_lists_cases_by_tag_enabled_search_and_agent(suite, billing_agent, selection, make_case):
    routed = make_case(name="billing start", entry_agent="billing", tags=[])

    assert names(case_list(filters={"tag": "smoke"})) == ["b low", "disabled smoke"]
    assert names(case_list(filters={"enabled": False})) == ["disabled smoke"]
    assert names(case_list(filters={"search": "HIGH"})) == ["z high"]
    assert names(case_list(filters={"agent": billing_agent.pk})) == [routed.name]
