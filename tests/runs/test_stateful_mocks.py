"""Stateful mocks (issue 24): a case declares tables of records, its mocks read and update them — never anything real —
and `tableEquals` checks the table the case leaves behind, tau-bench style."""

from __future__ import annotations

import json
import re

import pytest

from agenthost.llm.scripted import Answer, Call
from cases.services import case_create
from runs.models import CaseResult, Recording, Run
from runs.services import run_create, run_execute
from tests.runs.test_views import html_of

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPTED = "scripted:scripted"
ORDERS = [
    {"id": "1042", "status": "shipped", "items": ["mug"]},
    {"id": "1043", "status": "shipped", "items": ["kettle"]},
    {"id": "1044", "status": "delivered", "items": ["teapot"]},
]
LOOKUP = {"function_name": "lookup_order", "table": {"name": "orders", "key": {"id": "$args.order_id"}}}
CANCEL = {
    "function_name": "cancel_order",
    "table": {
        "name": "orders",
        "key": {"id": "$args.order_id"},
        "when": {"status": ["pending", "shipped"]},
        "update": {"status": "cancelled", "reason": "$args.reason"},
    },
    "state_writes": {"last_cancelled": True},
}
BOTH_CANCELLED = {
    "type": "tableEquals",
    "params": {
        "table": "orders",
        "rows": [{"id": "1042", "status": "cancelled"}, {"id": "1043", "status": "cancelled"}],
    },
}


def cancel(order_id: str) -> Answer:
    return Answer(tool_calls=[Call("cancel_order", {"order_id": order_id, "reason": "changed my mind"})])


@pytest.fixture
def two_cancellations(make_suite):
    suite = make_suite()
    case = case_create(
        suite=suite,
        document={
            "name": "cancels both orders",
            "tables": {"orders": ORDERS},
            "turns": [{"user_message": "Cancel order 1042, please."}, {"user_message": "And 1043 too."}],
            "assertions": [BOTH_CANCELLED],
            "mocks": [LOOKUP, CANCEL],
        },
    )
    return suite, case


def _run(suite, **options) -> Run:
    return run_execute(run_id=run_create(suite=suite, model_keys=[SCRIPTED], **options).pk)


def test_it_catches_an_order_cancelled_twice_in_the_final_table(two_cancellations, scripted_model, admin_client):
    suite, case = two_cancellations
    # The agent loses track of the order and cancels 1042 again instead of 1043.
    scripted_model.play(cancel("1042"), "Done, 1042 is cancelled.", cancel("1042"), "Done, 1043 is cancelled.")

    run = _run(suite)

    result = CaseResult.objects.get(run=run)
    assert result.status == "failed"
    assert result.reason == (
        'tableEquals (case): table orders differs from the expected rows: orders id "1043": status is "shipped", '
        'expected "cancelled"'
    )
    first, second = result.tool_calls
    # The mock answered the record as the call left it, then refused the second cancellation and changed nothing.
    assert json.loads(first["result"]) == {
        "id": "1042",
        "status": "cancelled",
        "reason": "changed my mind",
        "items": ["mug"],
    }
    assert json.loads(second["result"]) == {
        "error": 'orders record with id "1042": status is "cancelled", it must be "pending" or "shipped"'
    }
    assert [call["outcome"] for call in result.tool_calls] == ["mocked", "mocked"]
    assert result.final_tables == {
        "orders": [
            {"id": "1042", "status": "cancelled", "items": ["mug"], "reason": "changed my mind"},
            ORDERS[1],
            ORDERS[2],
        ]
    }
    # The state write applies when the call succeeds only; the case's own tables are untouched by the run.
    assert result.final_state == {"last_cancelled": True}
    case.refresh_from_db()
    assert case.tables == {"orders": ORDERS}

    page = html_of(admin_client.get(f"/runs/{run.pk}/results/{result.pk}/"))
    assert "Tables at the end" in page
    table = re.search(r'<table class="state-table final-table" data-table="orders">.*?</table>', page, re.S).group(0)
    assert re.findall(r'<th scope="col" class="state-key">([^<]*)<', table) == ["id", "items", "reason", "status"]
    assert re.findall(r'<td class="state-value changed"[^>]*>([^<]*)<', table) == ["changed my mind", "cancelled"]
    admin = html_of(admin_client.get(f"/admin/runs/caseresult/{result.pk}/change/"))
    assert "Tables at the end" in admin and "changed my mind" in admin


def test_it_passes_when_each_order_is_cancelled_once_and_replays_the_same_answers(two_cancellations, scripted_model):
    suite, case = two_cancellations
    scripted_model.play(cancel("1042"), "Done.", cancel("1043"), "Done.")

    recorded = _run(suite, mode=Run.Mode.RECORD)
    # Replayed from the recording, with no model behind it: the mock is the harness's, so it answers the same.
    scripted_model.play()
    replayed = _run(suite, mode=Run.Mode.REPLAY)

    assert Recording.objects.filter(case=case).count() == 1
    first, again = (CaseResult.objects.get(run=run) for run in (recorded, replayed))
    assert (first.status, again.status) == ("passed", "passed"), (first.reason, again.reason)
    assert again.final_tables == first.final_tables
    assert [call["result"] for call in again.tool_calls] == [call["result"] for call in first.tool_calls]
    assert [row["status"] for row in again.final_tables["orders"]] == ["cancelled", "cancelled", "delivered"]
    assert first.assertions[0]["message"] == "table orders holds the 2 expected row(s)"


def test_it_answers_an_unknown_record_and_a_missing_argument_with_an_error_the_agent_reads(make_suite, scripted_model):
    suite = make_suite()
    case_create(
        suite=suite,
        document={
            "name": "an order that does not exist",
            "tables": {"orders": ORDERS},
            "turns": [{"user_message": "Where are 999 and my order?"}],
            "assertions": [{"type": "tableEquals", "params": {"table": "orders", "rows": ORDERS, "exact": True}}],
            "mocks": [{**LOOKUP, "table": {**LOOKUP["table"], "not_found": "No such order."}}, CANCEL],
        },
    )
    scripted_model.play(
        Answer(
            tool_calls=[
                Call("lookup_order", {"order_id": 999}),
                Call("cancel_order", {"reason": "no id"}),
                Call("lookup_order", {"order_id": 1044}),
            ]
        ),
        "I could not find it.",
    )

    result = CaseResult.objects.get(run=_run(suite))

    assert result.status == "passed", result.reason
    assert [call["result"] for call in result.tool_calls] == [
        "No such order.",
        '{"error": "cancel_order needs the argument order_id"}',
        # The model sent the number as a number; the table holds it as text: the same order.
        '{"id": "1044", "items": ["teapot"], "status": "delivered"}',
    ]
    assert result.final_tables == {"orders": ORDERS}
