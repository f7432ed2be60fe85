"""The case review on the case's admin page (cases/review.py): where each mock is shown, and how JSON is folded."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agenttest_demo.suite import demo_suite_ensure
from cases.review import SHORT_JSON_LENGTH, case_review, shown_json, shown_result

pytestmark = pytest.mark.django_db


def test_it_shows_a_mock_no_turn_asserts_as_one_for_any_turn(demo_agents):
    suite, _ = demo_suite_ensure()
    case = suite.cases.get(name="A delivered order is not cancelled")

    review = case_review(case=case)

    (turn,) = review.turns
    assert turn.mocks == [], "its only tool assertion is toolNotCalled"
    assert [mock.function_name for mock in review.any_turn_mocks] == ["lookup_order", "cancel_order"]
    assert review.case_assertions == []


def test_it_puts_a_mock_with_the_turn_whose_tool_called_matches_its_arguments(demo_agents):
    suite, _ = demo_suite_ensure()
    case = suite.cases.get(name="Two turns: status, then cancel it")

    review = case_review(case=case)

    shown = [[mock.function_name for mock in turn.mocks] for turn in review.turns]
    assert shown == [["lookup_order"], ["cancel_order"]]
    assert [mock.function_name for mock in review.any_turn_mocks] == ["util-email-handle_email_sender"]
    assert [assertion.type for assertion in review.case_assertions] == ["stateEquals", "noBlockedTools"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)


@given(json_values)
def test_it_folds_exactly_the_json_that_is_long_and_keeps_all_of_it(value):
    shown = shown_json(value)

    compact = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    assert shown.folded == (len(compact) > SHORT_JSON_LENGTH)
    assert json.loads(shown.text) == value
    if shown.folded:
        assert shown.preview.endswith("…") and len(shown.preview) <= 91


@given(st.text(max_size=300))
@example("NaN")
@example("1" * 5000)
@example('{"a": "\\ud800"}')
def test_it_shows_any_result_text_whole_and_folds_it_when_long(text):
    shown = shown_result(text)

    try:
        parsed = json.loads(text)
    except ValueError:
        assert shown.text == text, "text that is not JSON is shown as it is"
        assert shown.folded == (len(text) > SHORT_JSON_LENGTH or "\n" in text)
    else:
        assert json.dumps(json.loads(shown.text)) == json.dumps(parsed), "JSON is shown as the same JSON"
