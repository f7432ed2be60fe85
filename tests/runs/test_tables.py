"""The table operations of stateful mocks (runs/engine/tables.py): pure functions of the tables and the call."""

from __future__ import annotations

import json

from runs.engine.tables import same_value, table_call, table_differences, tables_copy

ORDERS = {"orders": [{"id": "1042", "status": "shipped"}, {"id": 7, "status": "pending", "flags": {"gift": True}}]}
CANCEL = {"name": "orders", "key": {"id": "$args.order.id"}, "when": {"status": ["pending", "shipped"]},
          "update": {"status": "cancelled", "by": "$args.agent"}}


def test_it_updates_the_record_the_arguments_name_and_answers_it_with_sorted_keys():
    tables = tables_copy(ORDERS)

    answer = table_call(tables, CANCEL, {"order": {"id": "7"}, "agent": "bot"}, function="cancel_order")

    assert answer.succeeded
    assert answer.content == '{"by": "bot", "flags": {"gift": true}, "id": 7, "status": "cancelled"}'
    assert tables["orders"][1]["status"] == "cancelled" and ORDERS["orders"][1]["status"] == "pending"


def test_it_refuses_a_record_that_fails_when_and_changes_nothing():
    tables = tables_copy(ORDERS)
    tables["orders"][0]["status"] = "cancelled"

    answer = table_call(tables, CANCEL, {"order": {"id": "1042"}, "agent": "bot"}, function="cancel_order")

    assert not answer.succeeded
    assert json.loads(answer.content) == {
        "error": 'orders record with id "1042": status is "cancelled", it must be "pending" or "shipped"'
    }
    assert tables["orders"][0] == {"id": "1042", "status": "cancelled"}


def test_it_names_the_argument_a_call_left_out_before_it_changes_anything():
    tables = tables_copy(ORDERS)

    answer = table_call(tables, CANCEL, {"order": {"id": "1042"}}, function="cancel_order")

    assert (answer.succeeded, answer.content) == (False, '{"error": "cancel_order needs the argument agent"}')
    assert tables == ORDERS


def test_it_matches_a_number_and_its_text_but_never_true_and_1():
    assert same_value("1042", 1042) and same_value(7, "7") and same_value(1.5, "1.5")
    assert not same_value(True, 1) and not same_value(1, True) and not same_value("true", True)
    assert same_value({"a": [1, 2]}, {"a": [1, 2]}) and not same_value([1, 2], [2, 1])


def test_it_lists_every_difference_from_the_expected_rows():
    actual = [{"id": "1042", "status": "cancelled", "note": "x"}, {"id": "1043", "status": "shipped"}, {"sku": 1}]
    expected = [{"id": 1042, "status": "cancelled"}, {"id": "1043", "status": "cancelled", "reason": "late"},
                {"id": "1044", "status": "pending"}]

    assert table_differences(actual, name="orders", key="id", rows=expected, exact=False) == [
        'orders id "1043": status is "shipped", expected "cancelled"',
        'orders id "1043": reason is not set, expected "late"',
        'orders id "1044": no such row',
    ]
    assert table_differences(actual, name="orders", key="id", rows=expected[:2], exact=True) == [
        'orders id 1042: note is "x", which is not expected',
        'orders id "1043": status is "shipped", expected "cancelled"',
        'orders id "1043": reason is not set, expected "late"',
        'orders: an unexpected row without id: {"sku": 1}',
    ]
    assert table_differences(actual[:1], name="orders", key="id", rows=[{"id": "1042"}], exact=False) == []
