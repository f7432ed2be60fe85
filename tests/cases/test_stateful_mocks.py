"""Stateful mocks at save (issue 24): a case's `tables`, a mock's `table` and `tableEquals` are checked where the case
is saved — every problem a 400 naming its field, nothing stored — and travel through the case files unchanged."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from cases.files import case_file, files_apply, files_render
from cases.models import Case
from cases.schema import schema_for
from cases.services import case_content_hash, case_create, case_to_document
from tests.cases.test_admin import change_form, change_url

pytestmark = pytest.mark.django_db

ORDERS = [{"id": "1042", "status": "shipped"}, {"id": "1043", "status": "pending"}]
CANCEL = {
    "function_name": "void_order",
    "table": {
        "name": "orders",
        "key": {"id": "$args.order_id"},
        "when": {"status": ["pending", "shipped"]},
        "update": {"status": "cancelled"},
        "refused": '{"error": "already cancelled"}',
    },
}
STATEFUL: dict = {
    "name": "Cancel once",
    "tables": {"orders": ORDERS},
    "turns": [{"user_message": "Cancel 1042"}],
    "assertions": [
        {"type": "tableEquals", "params": {"table": "orders", "rows": [{"id": "1042", "status": "cancelled"}]}},
    ],
    "mocks": [CANCEL],
}


def document(**changes) -> dict:
    return {**copy.deepcopy(STATEFUL), **changes}


def _mock(**table) -> list[dict]:
    return [{**CANCEL, "table": {**CANCEL["table"], **table}}]


def test_it_stores_a_stateful_case_and_gives_it_back_as_it_was(admin_client_api, suite):
    response = admin_client_api.post("/api/cases/", {"suite": suite.pk, **document()}, format="json")

    assert response.status_code == 201, response.content
    stored = response.json()
    assert stored["tables"] == {"orders": ORDERS}
    assert stored["mocks"][0]["table"] == CANCEL["table"]
    assert stored["assertions"][0]["type"] == "tableEquals"


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"mocks": _mock(name="order")}, "mocks[0].table.name",
         "the case has no table 'order'; its tables: orders"),
        ({"tables": {}}, "mocks[0].table.name",
         "the case declares no tables, so there is no table 'orders'; declare it under `tables`"),
        ({"mocks": _mock(key={"id": "$args.order_number"})}, "mocks[0].table.key.id",
         "$args.order_number names no parameter of void_order (its parameters: order_id, reason)"),
        ({"mocks": _mock(update={"note": "$args."})}, "mocks[0].table.update.note",
         "'$args.' must name an argument of the call after $args., e.g. $args.order_id"),
        ({"mocks": _mock(when={"status": ["shipped", "$args.state"]})}, "mocks[0].table.when.status",
         "$args.state names no parameter of void_order (its parameters: order_id, reason)"),
        ({"mocks": _mock(key={"order_id": "$args.order_id"})}, "mocks[0].table.key.order_id",
         "no row of table 'orders' has the field 'order_id', so no call could find a record"),
        ({"mocks": _mock(key={})}, "mocks[0].table.key",
         'must name the record: field → value, or "$args.<argument>" for an argument of the call'),
        ({"mocks": _mock(name="two words")}, "mocks[0].table.name",
         "must be a table name: 1 to 64 letters, digits, '_' or '-', starting with a letter or '_' (got 'two words')"),
        ({"mocks": _mock(upsert=True)}, "mocks[0].table.upsert",
         "unknown field 'upsert'; known fields: name, key, when, update, not_found, refused"),
        ({"tables": {"orders": ORDERS, "bad name": []}}, "tables",
         "must be a table name: 1 to 64 letters, digits, '_' or '-', starting with a letter or '_' (got 'bad name')"),
        ({"tables": {"orders": [{"id": str(n)} for n in range(1001)]}}, "tables.orders",
         "must be a list of at most 1,000 rows, each a JSON object"),
        ({"tables": {"orders": ["1042"]}}, "tables.orders[0]", "must be a JSON object, not a string"),
        ({"tables": {f"t{n}": [] for n in range(21)}}, "tables", "must hold at most 20 tables"),
        ({"assertions": [{"type": "tableEquals", "params": {"table": "order", "rows": []}}]},
         "assertions[0].params.table", "the case has no table 'order'; its tables: orders"),
        ({"assertions": [{"type": "tableEquals", "params": {"table": "orders", "rows": [{"status": "cancelled"}]}}]},
         "assertions[0].params.rows[0]", "has no 'id' field, the key that finds its row"),
        ({"assertions": [{"type": "tableEquals", "params": {"table": "orders"}}]}, "assertions[0].params.rows",
         "is required for tableEquals"),
    ],
)
def test_it_refuses_a_bad_stateful_mock_naming_the_field(admin_client_api, suite, changes, field, message):
    response = admin_client_api.post("/api/cases/", {"suite": suite.pk, **document(**changes)}, format="json")

    assert response.status_code == 400
    assert {"field": field, "message": message} in response.json()["errors"], response.json()
    assert not Case.objects.exists()


def test_it_refuses_tables_larger_than_64_kb(admin_client_api, suite):
    # 1,000 rows of about 100 bytes: within the row limit, over the size limit.
    rows = [{"id": str(n), "note": "x" * 90} for n in range(1000)]

    response = admin_client_api.post("/api/cases/", {"suite": suite.pk, **document(tables={"orders": rows})},
                                     format="json")

    assert response.status_code == 400
    size = len(json.dumps({"orders": rows}, separators=(",", ":")))
    assert response.json()["errors"] == [{"field": "tables", "message": (
        f"is {size:,} bytes as JSON, more than the 65,536 (64 KB) the tables may hold in all: a stateful mock's table "
        "is a small fixture of the records the case is about, not a database"
    )}]
    assert not Case.objects.exists()


def test_it_keeps_the_hash_of_a_case_that_uses_no_table():
    # A case stored before tables existed: its document has neither `tables` nor a mock `table`.
    before = {"type": "agent", "turns": [{"user_message": "hi", "assertions": []}],
              "mocks": [{"function_name": "track_order", "result": "{}", "state_writes": {}}]}
    now = {**before, "tables": {}, "mocks": [{**before["mocks"][0], "table": None}]}

    assert case_content_hash(now) == case_content_hash(before)
    assert case_content_hash({**now, "tables": {"orders": ORDERS}}) != case_content_hash(before)


def test_it_round_trips_a_stateful_case_through_its_file(suite, tmp_path):
    case = case_create(suite=suite, document=document())

    data = case_file(case)
    assert data["tables"] == {"orders": ORDERS} and data["mocks"][0]["table"] == CANCEL["table"]
    assert "tables" in schema_for("case")["properties"] and "TableMock" in schema_for("case")["$defs"]
    for path, text in files_render(suites=[suite]).items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    written = next(tmp_path.glob("suites/*/cases/*.yaml"))
    assert yaml.safe_load(written.read_text())["tables"] == {"orders": ORDERS}

    report = files_apply(directory=tmp_path)

    assert report.count("unchanged") >= 2 and report.count("changed") == 0, report
    assert case_to_document(case=Case.objects.get(pk=case.pk))["mocks"][0]["table"] == CANCEL["table"]


def test_it_refuses_a_mock_of_an_unknown_table_in_the_admin(admin_client, suite):
    case = case_create(suite=suite, document=document())
    data = change_form(case, tables=json.dumps({"orders": ORDERS}))
    data["mocks-0-table"] = json.dumps({**CANCEL["table"], "name": "order"})

    response = admin_client.post(change_url(case), data)

    assert response.status_code == 200
    [mocks] = [item for item in response.context["inline_admin_formsets"] if item.opts.model.__name__ == "Mock"]
    assert mocks.formset.errors[0] == {"table": ["table.name: the case has no table 'order'; its tables: orders"]}
    assert case_to_document(case=Case.objects.get(pk=case.pk))["mocks"][0]["table"] == CANCEL["table"]
