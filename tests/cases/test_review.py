"""The case review on the case's admin page (cases/review.py): where each mock is shown, and how JSON is folded."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cases.review import SHORT_JSON_LENGTH, case_review, shown_json, shown_result
from cases.services import case_create

pytestmark = pytest.mark.django_db


def test_it_shows_a_mock_no_turn_asserts_as_one_for_any_turn(suite):
    case = case_create(suite=suite, document={
        "name": "A delivered order is not cancelled",
        "turns": [{"user_message": "Can you cancel order 1047?", "assertions": [
            {"type": "toolNotCalled", "params": {"function": "void_order"}},
            {"type": "outputContains", "params": {"text": "delivered"}},
        ]}],
        "mocks": [
            {"function_name": "track_order", "result": '{"order_id": "1047", "status": "delivered"}'},
            {"function_name": "void_order", "result": '{"order_id": "1047", "cancelled": false}'},
        ],
    })

    review = case_review(case=case)

    (turn,) = review.turns
    assert turn.mocks == [], "its only tool assertion is toolNotCalled"
    assert [mock.function_name for mock in review.any_turn_mocks] == ["track_order", "void_order"]
    assert review.case_assertions == []


def test_it_puts_a_mock_with_the_turn_whose_tool_called_matches_its_arguments(suite):
    case = case_create(suite=suite, document={
        "name": "Two turns: status, then cancel it",
        "turns": [
            {"user_message": "Where is order 1041?", "assertions": [
                {"type": "toolCalled", "params": {"function": "track_order", "arguments": {"order_id": "1041"}}},
            ]},
            {"user_message": "Please cancel it", "assertions": [
                {"type": "toolCalled", "params": {"function": "void_order", "arguments": {"order_id": "1041"}}},
                {"type": "outputNotContains", "params": {"text": "could not"}},
            ]},
        ],
        "assertions": [{"type": "stateEquals", "params": {"key": "order_status", "value": "cancelled"}},
                       {"type": "noBlockedTools", "params": {}}],
        "mocks": [
            {"function_name": "track_order", "result": '{"order_id": "1041", "status": "shipped"}'},
            {"function_name": "void_order", "result": '{"order_id": "1041", "cancelled": true}'},
            {"function_name": "util-email-handle_email_sender", "result": '{"sent": true}'},
        ],
    })

    review = case_review(case=case)

    shown = [[mock.function_name for mock in turn.mocks] for turn in review.turns]
    assert shown == [["track_order"], ["void_order"]]
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
