"""The suites and cases API: who may do what, error bodies that name fields, and list queries that do not grow."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cases.models import Case, Suite

pytestmark = pytest.mark.django_db


@pytest.fixture
def case(make_case) -> Case:
    return make_case()


def endpoints(suite: Suite, case: Case, case_document) -> list[tuple[str, str, dict | None]]:
    """Every endpoint: (method, url, body)."""
    return [
        ("get", "/api/suites/", None),
        ("post", "/api/suites/", {"name": "New suite", "agent": "support"}),
        ("get", f"/api/suites/{suite.pk}/", None),
        ("patch", f"/api/suites/{suite.pk}/", {"description": "Changed"}),
        ("delete", f"/api/suites/{suite.pk}/", None),
        ("get", "/api/cases/", None),
        ("post", "/api/cases/", {"suite": suite.pk, **case_document(name="Created")}),
        ("get", f"/api/cases/{case.pk}/", None),
        ("put", f"/api/cases/{case.pk}/", case_document(name="Replaced")),
        ("patch", f"/api/cases/{case.pk}/", {"priority": 3}),
        ("post", f"/api/cases/{case.pk}/copy/", None),
        ("post", f"/api/cases/{case.pk}/enable/", None),
        ("post", f"/api/cases/{case.pk}/disable/", None),
        ("delete", f"/api/cases/{case.pk}/", None),
    ]


def call(client, method: str, url: str, body: dict | None):
    return getattr(client, method)(url, body, format="json") if body is not None else getattr(client, method)(url)


ENDPOINT_COUNT = 14
SUCCESS = {"get": 200, "post": (200, 201), "patch": 200, "put": 200, "delete": 204}


@pytest.mark.parametrize("index", range(ENDPOINT_COUNT))
def test_it_refuses_anonymous_requests_everywhere(api_client, suite, case, case_document, index):
    method, url, body = endpoints(suite, case, case_document)[index]

    assert call(api_client, method, url, body).status_code in (401, 403)


@pytest.mark.parametrize("index", range(ENDPOINT_COUNT))
def test_it_lets_members_read_but_not_write(member_client, suite, case, case_document, index):
    method, url, body = endpoints(suite, case, case_document)[index]

    response = call(member_client, method, url, body)

    if method == "get":
        assert response.status_code == 200
    else:
        assert response.status_code == 403
        assert Case.objects.filter(pk=case.pk, name=case.name, priority=0).exists()
        assert Suite.objects.filter(pk=suite.pk, description="").exists()


@pytest.mark.parametrize("index", range(ENDPOINT_COUNT))
def test_it_lets_admins_do_everything(admin_client_api, suite, case, case_document, index):
    method, url, body = endpoints(suite, case, case_document)[index]

    response = call(admin_client_api, method, url, body)

    expected = SUCCESS[method]
    assert response.status_code in (expected if isinstance(expected, tuple) else (expected,)), response.content


def test_it_creates_a_case_and_returns_it_as_a_document(admin_client_api, suite, case_document):
    response = admin_client_api.post("/api/cases/", {"suite": suite.pk, **case_document()}, format="json")

    assert response.status_code == 201
    body = response.json()
    assert (body["suite"], body["suite_name"], body["name"]) == (suite.pk, "Support", "Refund for a late order")
    assert body["turns"][0]["assertions"][1] == {
        "type": "outputRegex", "params": {"pattern": "shipped|on its way"}, "fatal": True,
    }
    assert body["mocks"][0]["state_writes"] == {"order_status": "shipped"}


def test_it_names_the_field_of_each_problem_in_a_400(admin_client_api, suite, case_document):
    document = case_document(unmocked_policy="allow")
    document["turns"][0]["assertions"][1]["params"]["pattern"] = "(unclosed"

    response = admin_client_api.post("/api/cases/", {"suite": suite.pk, **document}, format="json")

    assert response.status_code == 400
    fields = {error["field"]: error["message"] for error in response.json()["errors"]}
    assert set(fields) == {"turns[0].assertions[1].params.pattern", "unmocked_policy"}
    assert "does not compile" in fields["turns[0].assertions[1].params.pattern"]
    assert not Case.objects.exists()


@pytest.mark.parametrize(("params", "field", "message"), [
    ({}, "assertions[0].type", "snapshotMatches compares what a process agent's program says over its protocol"),
    ({"expected": [1]}, "assertions[0].params.expected", "must be a list of JSON objects"),
    ({"expected": {"turn": 0}}, "assertions[0].params.expected", "must be a list of JSON objects"),
    ({"expected": [], "extra": 1}, "assertions[0].params.extra", "is not a parameter of snapshotMatches"),
])
def test_it_refuses_a_snapshot_assertion_it_cannot_compare_naming_the_field(
    admin_client_api, suite, case_document, params, field, message
):
    document = case_document(assertions=[{"type": "snapshotMatches", "params": params}])

    response = admin_client_api.post("/api/cases/", {"suite": suite.pk, **document}, format="json")

    assert response.status_code == 400
    fields = {error["field"]: error["message"] for error in response.json()["errors"]}
    assert field in fields and message in fields[field], fields
    assert not Case.objects.exists()


def test_it_refuses_a_catastrophic_regex_at_save_naming_the_assertion_field(admin_client_api, suite, case_document):
    document = case_document()
    document["turns"][0]["assertions"][1]["params"]["pattern"] = "(a|aa)+$"

    response = admin_client_api.post("/api/cases/", {"suite": suite.pk, **document}, format="json")

    assert response.status_code == 400
    fields = {error["field"]: error["message"] for error in response.json()["errors"]}
    assert list(fields) == ["turns[0].assertions[1].params.pattern"]
    assert "backtracks catastrophically" in fields["turns[0].assertions[1].params.pattern"]
    assert not Case.objects.exists()


def test_it_reports_a_missing_suite_together_with_document_problems(admin_client_api, case_document):
    response = admin_client_api.post("/api/cases/", case_document(name=""), format="json")

    assert response.status_code == 400
    assert {error["field"] for error in response.json()["errors"]} == {"suite", "name"}


def test_it_names_the_field_of_a_bad_list_filter(member_client):
    response = member_client.get("/api/cases/?suite=abc")

    assert response.status_code == 400
    assert [error["field"] for error in response.json()["errors"]] == ["suite"]


@pytest.mark.parametrize(
    ("url", "field"), [("/api/cases/", "suite"), ("/api/cases/", "agent"), ("/api/suites/", "agent")]
)
def test_it_names_an_id_filter_beyond_any_id_instead_of_failing(member_client, url, field):
    # SQLite cannot bind an integer past 64 bits: these were 500s.
    response = member_client.get(url, {field: 2**63})

    assert response.status_code == 400
    assert [error["field"] for error in response.json()["errors"]] == [field]


def test_it_refuses_text_postgresql_cannot_store_naming_the_field(admin_client_api, agent, suite, case_document):
    # A NUL character failed at the database on PostgreSQL: 500s before.
    suite_response = admin_client_api.post("/api/suites/", {"name": "a\x00b", "agent": "support"}, format="json")
    case_response = admin_client_api.post(
        "/api/cases/", {"suite": suite.pk, **case_document(name="a\x00b")}, format="json"
    )

    assert suite_response.status_code == case_response.status_code == 400
    assert [error["field"] for error in suite_response.json()["errors"]] == ["name"]
    assert [error["field"] for error in case_response.json()["errors"]] == ["name"]
    assert list(Suite.objects.values_list("name", flat=True)) == ["Support"]
    assert not Case.objects.exists()


def test_it_replaces_a_case_with_put_sent_back_as_fetched(admin_client_api, case):
    fetched = admin_client_api.get(f"/api/cases/{case.pk}/").json()
    fetched["turns"] = fetched["turns"][:1]

    response = admin_client_api.put(f"/api/cases/{case.pk}/", fetched, format="json")

    assert response.status_code == 200
    assert case.turns.count() == 1


def test_it_changes_only_the_fields_a_patch_sends(admin_client_api, case):
    response = admin_client_api.patch(f"/api/cases/{case.pk}/", {"tags": ["nightly"]}, format="json")

    assert response.status_code == 200
    assert response.json()["tags"] == ["nightly"]
    assert response.json()["turns"][0]["user_message"] == "Where is order 1042?"


def test_it_refuses_to_move_a_case_to_another_suite(admin_client_api, agent, case):
    other = Suite.objects.create(name="Other", agent=agent)

    response = admin_client_api.patch(f"/api/cases/{case.pk}/", {"suite": other.pk}, format="json")

    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "suite"
    case.refresh_from_db()
    assert case.suite_id != other.pk


def test_it_copies_and_enables_through_the_api(admin_client_api, case):
    copy = admin_client_api.post(f"/api/cases/{case.pk}/copy/").json()
    assert (copy["name"], copy["enabled"]) == ("Refund for a late order (copy)", False)

    enabled = admin_client_api.post(f"/api/cases/{copy['id']}/enable/")

    assert enabled.status_code == 200
    assert enabled.json()["enabled"] is True


def test_it_refuses_to_enable_an_invalid_case_and_says_why(admin_client_api, judged_suite, make_case):
    case = make_case(judged_suite, enabled=False, assertions=[{"type": "llmJudge", "params": {"criterion": "Kind"}}])
    Suite.objects.filter(pk=judged_suite.pk).update(judge_model="")

    response = admin_client_api.post(f"/api/cases/{case.pk}/enable/")

    assert response.status_code == 409
    assert "does not pass validation as stored" in response.json()["detail"]
    [error] = response.json()["errors"]
    assert error["field"] == "assertions[0].type"
    assert "suite.judge_model" in error["message"]
    case.refresh_from_db()
    assert not case.enabled


def test_it_answers_404_for_a_missing_case(member_client):
    assert member_client.get("/api/cases/999999/").status_code == 404


def test_it_filters_the_case_list(member_client, suite, make_case):
    make_case(name="tagged", tags=["nightly"])
    make_case(name="draft", tags=[], enabled=False)

    tagged = member_client.get("/api/cases/", {"tag": "nightly"}).json()
    disabled = member_client.get("/api/cases/", {"enabled": "false", "suite": suite.pk}).json()

    assert [item["name"] for item in tagged["results"]] == ["tagged"]
    assert [item["name"] for item in disabled["results"]] == ["draft"]


def count_queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_it_lists_cases_in_a_constant_number_of_queries(
    member_client, make_case, billing_agent, django_assert_num_queries
):
    make_case(name="one")
    make_case(name="two", entry_agent="billing")
    few = count_queries(member_client, "/api/cases/")
    for index in range(6):
        make_case(name=f"more {index}", entry_agent="billing" if index % 2 else None)

    with django_assert_num_queries(few):
        response = member_client.get("/api/cases/")

    assert response.json()["count"] == 8


def test_it_lists_suites_in_a_constant_number_of_queries(member_client, agent, django_assert_num_queries):
    Suite.objects.create(name="First", agent=agent)
    few = count_queries(member_client, "/api/suites/")
    for index in range(5):
        Suite.objects.create(name=f"Suite {index}", agent=agent)

    with django_assert_num_queries(few):
        response = member_client.get("/api/suites/")

    assert response.json()["count"] == 6


def test_it_creates_a_suite_and_names_the_fields_it_refuses(admin_client_api, agent, scripted_model):
    created = admin_client_api.post(
        "/api/suites/", {"name": "Orders", "agent": "support", "judge_model": scripted_model.key}, format="json"
    )
    refused = admin_client_api.post(
        "/api/suites/", {"name": "Orders", "agent": "nobody", "case_timeout_seconds": 0}, format="json"
    )

    assert created.status_code == 201
    assert (created.json()["agent"], created.json()["case_count"]) == ("support", 0)
    assert refused.status_code == 400
    assert {error["field"] for error in refused.json()["errors"]} == {"name", "agent", "case_timeout_seconds"}


def test_it_answers_a_body_that_is_not_json_in_the_same_error_shape(admin_client_api):
    response = admin_client_api.generic("POST", "/api/cases/", "{not json", content_type="application/json")

    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["field"] == "document"
    assert "JSON parse error" in error["message"]
