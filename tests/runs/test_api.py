"""The runs API: who may do what, the shape of lists and details, triggering (400 / 503 / 201), cancel and delete."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.urls import reverse

from runs.models import CaseResult, Run
from tests.runs.conftest import CAREFUL, HASTY

PASSED, FAILED, ERROR, CANCELLED = "passed", "failed", "error", "cancelled"


@pytest.fixture
def finished_run(order_suite, make_run):
    return make_run(order_suite, models=(CAREFUL, HASTY), status=Run.Status.FAILED,
                    results=((CAREFUL, PASSED), (HASTY, FAILED), (CAREFUL, PASSED), (HASTY, CANCELLED)))


def routes(run_id: int, result_id: int) -> list[tuple[str, str, dict]]:
    """Every route as (method, url, body)."""
    return [
        ("get", reverse("runs-api:models"), {}),
        ("get", reverse("runs-api:runs"), {}),
        ("get", reverse("runs-api:run", args=[run_id]), {}),
        ("get", reverse("runs-api:result", args=[run_id, result_id]), {}),
        ("post", reverse("runs-api:runs"), {"suite": 1, "models": [CAREFUL]}),
        ("post", reverse("runs-api:run-cancel", args=[run_id]), {}),
        ("delete", reverse("runs-api:run", args=[run_id]), {}),
        ("post", reverse("runs-api:runs-delete"), {"ids": [run_id]}),
    ]


# --- Permissions --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_refuses_anonymous_requests_on_every_route(api_client, finished_run):
    for method, url, body in routes(finished_run.pk, finished_run.results.first().pk):
        response = getattr(api_client, method)(url, body, format="json")
        assert response.status_code in (401, 403), (method, url)
    assert Run.objects.filter(pk=finished_run.pk).exists()


@pytest.mark.django_db
def test_it_lets_members_read_but_not_trigger_cancel_or_delete(member_client, finished_run, order_suite):
    pending = Run.objects.create(suite=order_suite, model_keys=[CAREFUL], total=2)
    for method, url, body in routes(finished_run.pk, finished_run.results.first().pk):
        response = getattr(member_client, method)(url, body, format="json")
        expected = 200 if method == "get" else 403
        assert response.status_code == expected, (method, url, response.content)
    for method, url, body in routes(pending.pk, 0)[5:]:
        assert getattr(member_client, method)(url, body, format="json").status_code == 403
    pending.refresh_from_db()
    assert pending.status == Run.Status.PENDING and not pending.cancel_requested
    assert Run.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_it_lets_staff_trigger_cancel_and_delete(admin_client_api, order_suite, make_run, run_queue, order_desk):
    triggered = admin_client_api.post(
        reverse("runs-api:runs"), {"suite": order_suite.pk, "models": [CAREFUL]}, format="json"
    )
    assert triggered.status_code == 201, triggered.content
    pending = make_run(order_suite, status=Run.Status.PENDING)
    assert admin_client_api.post(reverse("runs-api:run-cancel", args=[pending.pk])).status_code == 200
    assert admin_client_api.delete(reverse("runs-api:run", args=[pending.pk])).status_code == 204
    bulk = admin_client_api.post(reverse("runs-api:runs-delete"), {"ids": [triggered.data["id"]]}, format="json")
    assert bulk.status_code == 200 and bulk.data["deleted"] == [triggered.data["id"]]
    assert not Run.objects.exists()


# --- Models -------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_lists_the_configured_models_with_labels_and_prices(member_client, scripted_model, careful_and_hasty):
    response = member_client.get(reverse("runs-api:models"))

    assert response.status_code == 200
    by_key = {item["key"]: item for item in response.data}
    assert {CAREFUL, HASTY, scripted_model.key} <= set(by_key)
    assert by_key[scripted_model.key] == {
        "key": "scripted:scripted", "provider": "scripted", "model": "scripted", "label": "Scripted (tests)",
        "input_price": 1.0, "output_price": 2.0,
    }
    assert by_key[CAREFUL]["label"] == "Scripted, careful"


# --- Lists and details --------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_lists_runs_with_counts_and_per_model_pass_rates(member_client, finished_run, member):
    Run.objects.filter(pk=finished_run.pk).update(triggered_by=member, reason="1 of 4 results failed")

    response = member_client.get(reverse("runs-api:runs"))

    assert response.status_code == 200 and response.data["count"] == 1
    item = response.data["results"][0]
    assert item["suite"] == {"id": finished_run.suite_id, "name": "orders"}
    assert item["models"] == [CAREFUL, HASTY]
    assert (item["status"], item["reason"], item["triggered_by"]) == ("failed", "1 of 4 results failed", "mia")
    assert (item["passed"], item["failed"], item["errored"], item["cancelled"]) == (2, 1, 0, 1)
    assert (item["done"], item["total"]) == (4, 4)
    assert item["pass_rates"] == [
        {"model": CAREFUL, "pass_rate": 1.0, "passed": 2, "ran": 2},
        {"model": HASTY, "pass_rate": 0.0, "passed": 0, "ran": 1},
    ]


@pytest.mark.django_db
def test_it_filters_runs_by_suite_status_and_agent(member_client, order_suite, make_suite, make_run):
    from agenthost.models import Agent

    other_agent = Agent.objects.create(name="other", instruction="x", provider="scripted", model="hasty")
    other_suite = make_suite("other", agent=other_agent)
    failed = make_run(order_suite, status=Run.Status.FAILED)
    passed = make_run(order_suite, status=Run.Status.PASSED)
    elsewhere = make_run(other_suite, status=Run.Status.PASSED)

    def ids(**params):
        response = member_client.get(reverse("runs-api:runs"), params)
        assert response.status_code == 200, response.content
        return {item["id"] for item in response.data["results"]}

    assert ids() == {failed.pk, passed.pk, elsewhere.pk}
    assert ids(suite=order_suite.pk) == {failed.pk, passed.pk}
    assert ids(status="passed") == {passed.pk, elsewhere.pk}
    assert ids(agent=other_agent.pk) == {elsewhere.pk}
    assert ids(suite=order_suite.pk, status="failed") == {failed.pk}
    bad = member_client.get(reverse("runs-api:runs"), {"status": "green"})
    assert bad.status_code == 400 and bad.data["errors"][0]["field"] == "status"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "url", "body", "field"),
    [
        ("get", "/api/runs/", {"suite": 2**63}, "suite"),
        ("get", "/api/runs/", {"agent": 2**63}, "agent"),
        ("post", "/api/runs/delete/", {"ids": [1, 2**63]}, "ids[1]"),
    ],
)
def test_it_names_an_id_beyond_any_id_instead_of_failing(admin_client_api, method, url, body, field):
    # SQLite cannot bind an integer past 64 bits: these were 500s.
    response = getattr(admin_client_api, method)(url, body, **({"format": "json"} if method == "post" else {}))

    assert response.status_code == 400
    assert [error["field"] for error in response.data["errors"]] == [field]


@pytest.mark.django_db
def test_it_answers_404_for_a_result_of_a_run_id_beyond_any_id(member_client, finished_run):
    result = finished_run.results.first()

    response = member_client.get(reverse("runs-api:result", args=[2**63, result.pk]))

    assert response.status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize("runs", [1, 6])
def test_it_lists_runs_in_constant_queries(member_client, order_suite, make_run, django_assert_num_queries, runs):
    for _ in range(runs):
        make_run(order_suite, models=(CAREFUL, HASTY), results=((CAREFUL, PASSED), (HASTY, FAILED)))

    # session, user, count, the page, the pass rates of the page
    with django_assert_num_queries(5):
        response = member_client.get(reverse("runs-api:runs"))

    assert len(response.data["results"]) == runs
    assert all(item["pass_rates"][1]["pass_rate"] == 0.0 for item in response.data["results"])


@pytest.mark.django_db
def test_it_shows_a_run_with_its_summary_and_results_but_not_transcripts(member_client, finished_run):
    response = member_client.get(reverse("runs-api:run", args=[finished_run.pk]))

    assert response.status_code == 200
    data = response.data
    summary = {item["model"]: item for item in data["summary"]}
    assert list(summary) == [CAREFUL, HASTY]
    assert (summary[CAREFUL]["pass_rate"], summary[HASTY]["pass_rate"]) == (1.0, 0.0)
    assert summary[HASTY]["cancelled"] == 1 and summary[CAREFUL]["total_tokens"] == 30
    assert [(r["model"], r["status"]) for r in data["results"]] == [
        (CAREFUL, PASSED), (HASTY, FAILED), (CAREFUL, PASSED), (HASTY, CANCELLED)
    ]
    first = data["results"][0]
    assert first["case_name"] == "cancels the order" and first["case_id"] == finished_run.case_ids[0]
    assert (first["duration_ms"], first["total_tokens"], first["cost"]) == (100.0, 15, 0.001)
    assert "transcript" not in first
    assert data["case_ids"] == finished_run.case_ids


@pytest.mark.django_db
@pytest.mark.parametrize("results", [1, 8])
def test_it_shows_a_run_in_constant_queries(
    member_client, order_suite, make_run, django_assert_num_queries, results
):
    run = make_run(order_suite, results=tuple((CAREFUL, PASSED) for _ in range(results)))

    # session, user, the run, its summary, its results
    with django_assert_num_queries(5):
        response = member_client.get(reverse("runs-api:run", args=[run.pk]))

    assert len(response.data["results"]) == results


@pytest.mark.django_db
def test_it_serves_one_result_with_its_transcript(member_client, finished_run, order_suite, make_run):
    result = finished_run.results.get(position=1)
    other_run = make_run(order_suite)

    response = member_client.get(reverse("runs-api:result", args=[finished_run.pk, result.pk]))

    assert response.status_code == 200
    assert response.data["transcript"] == [{"role": "user", "content": "hello"}]
    assert (response.data["status"], response.data["model"]) == (FAILED, HASTY)
    assert member_client.get(reverse("runs-api:result", args=[other_run.pk, result.pk])).status_code == 404
    assert member_client.get(reverse("runs-api:run", args=[999_999])).status_code == 404


# --- Triggering ---------------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_it_triggers_a_run_that_the_queue_executes(admin_client_api, order_suite, run_queue, order_desk):
    response = admin_client_api.post(
        reverse("runs-api:runs"), {"suite": order_suite.pk, "models": [CAREFUL, HASTY], "case_filter": ""},
        format="json",
    )

    assert response.status_code == 201, response.content
    assert (response.data["models"], response.data["total"], response.data["triggered_by"]) == (
        [CAREFUL, HASTY], 4, "root"
    )
    run = Run.objects.get(pk=response.data["id"])
    assert run.status == Run.Status.FAILED and (run.passed, run.failed) == (3, 1)
    failed = CaseResult.objects.get(run=run, status=FAILED)
    assert (failed.case_name, failed.model) == ("looks the order up first", HASTY)


@pytest.mark.django_db(transaction=True)
def test_it_triggers_repeated_trials_within_a_budget(admin_client_api, order_suite, run_queue, order_desk):
    response = admin_client_api.post(
        reverse("runs-api:runs"),
        {"suite": order_suite.pk, "models": [HASTY], "case_filter": "up first", "trials": 3, "budget_cost": "5.00"},
        format="json",
    )

    assert response.status_code == 201, response.content
    assert (response.data["trials"], response.data["total"], response.data["budget_cost"]) == (3, 3, 5.0)
    detail = admin_client_api.get(reverse("runs-api:run", args=[response.data["id"]])).data
    assert [(r["trial"], r["status"]) for r in detail["results"]] == [(0, FAILED), (1, FAILED), (2, FAILED)]
    assert detail["pass_rates"] == [{"model": HASTY, "pass_rate": 0.0, "passed": 0, "ran": 3}]
    summary = detail["summary"][0]
    assert (summary["trials"], summary["cases"], summary["pass_k"], summary["stable_fail"]) == (3, 1, 0.0, 1)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"suite": "SUITE", "models": [CAREFUL, CAREFUL]}, "models", "is listed twice"),
        ({"suite": "SUITE", "models": ["scripted:nope"]}, "models", "is not configured"),
        ({"suite": "SUITE", "models": ["no-colon"]}, "models", "must look like 'provider:model'"),
        ({"suite": "SUITE", "models": []}, "models", "choose at least one model"),
        ({"suite": "SUITE"}, "models", "required"),
        ({"suite": "SUITE", "models": [CAREFUL], "case_filter": "refund"}, "case_filter", "selects no enabled case"),
        ({"suite": "SUITE", "models": [CAREFUL], "trials": 0}, "trials", "trials must be a whole number from 1"),
        ({"suite": "SUITE", "models": [CAREFUL], "mode": "rehearse"}, "mode", "mode must be one of live, record"),
        ({"suite": "SUITE", "models": ["openai:gpt-x"], "mode": "replay"}, "models", "has no recording of it"),
        ({"suite": "SUITE", "models": [CAREFUL], "budget_tokens": 0}, "budget_tokens", "must be greater than 0"),
        # Beyond what the column holds: a 500 before.
        ({"suite": "SUITE", "models": [CAREFUL], "budget_tokens": 2**63}, "budget_tokens", "must be at most"),
        ({"suite": "SUITE", "models": [CAREFUL], "budget_cost": "x"}, "budget_cost", "valid number"),
        ({"suite": 999_999, "models": [CAREFUL]}, "suite", "no suite with id 999999"),
        ({"models": [CAREFUL]}, "suite", "required"),
        ([CAREFUL], "document", "Expected a dictionary"),
    ],
)
def test_it_names_the_field_of_a_bad_trigger_and_creates_nothing(
    admin_client_api, order_suite, dead_run_queue, careful_and_hasty, body, field, message
):
    if isinstance(body, dict):
        body = {key: order_suite.pk if value == "SUITE" else value for key, value in body.items()}

    response = admin_client_api.post(reverse("runs-api:runs"), body, format="json")

    assert response.status_code == 400
    assert response.data["errors"][0]["field"] == field
    assert message in response.data["errors"][0]["message"]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_it_refuses_a_disabled_suite_and_one_whose_cases_are_all_disabled(
    admin_client_api, make_suite, make_case, order_suite, careful_and_hasty
):
    order_suite.enabled = False
    order_suite.save()
    drafts = make_suite("drafts")
    make_case(drafts, "a draft", enabled=False)

    disabled = admin_client_api.post(reverse("runs-api:runs"), {"suite": order_suite.pk, "models": [CAREFUL]})
    empty = admin_client_api.post(reverse("runs-api:runs"), {"suite": drafts.pk, "models": [CAREFUL]})

    assert disabled.status_code == 400 and disabled.data["errors"][0]["field"] == "suite"
    assert "disabled" in disabled.data["errors"][0]["message"]
    assert empty.status_code == 400 and empty.data["errors"][0]["field"] == "case_filter"
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_it_answers_503_and_leaves_no_run_when_the_queue_is_unreachable(
    admin_client_api, order_suite, settings, careful_and_hasty
):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"

    response = admin_client_api.post(
        reverse("runs-api:runs"), {"suite": order_suite.pk, "models": [CAREFUL]}, format="json"
    )

    assert response.status_code == 503
    assert response.data["detail"].startswith("the run queue is unavailable: ")
    assert "redis://127.0.0.1:1/0" in response.data["detail"]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_it_throttles_triggering_but_not_reading(admin_client_api, order_suite, dead_run_queue):
    rate = django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["run_trigger"]
    allowed = int(rate.split("/")[0])
    body = {"suite": order_suite.pk, "models": ["scripted:nope"]}
    for _ in range(allowed):
        assert admin_client_api.post(reverse("runs-api:runs"), body, format="json").status_code == 400

    throttled = admin_client_api.post(reverse("runs-api:runs"), body, format="json")

    assert throttled.status_code == 429
    assert admin_client_api.get(reverse("runs-api:runs")).status_code == 200


# --- Cancel and delete --------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_cancels_a_pending_run_at_once_and_asks_a_running_one_to_stop(admin_client_api, order_suite, make_run):
    pending = make_run(order_suite, status=Run.Status.PENDING)
    running = make_run(order_suite, status=Run.Status.RUNNING, results=((CAREFUL, PASSED),))

    cancelled = admin_client_api.post(reverse("runs-api:run-cancel", args=[pending.pk]))
    stopping = admin_client_api.post(reverse("runs-api:run-cancel", args=[running.pk]))

    assert cancelled.status_code == 200
    assert (cancelled.data["status"], cancelled.data["cancelled"]) == ("cancelled", 2)
    assert stopping.status_code == 200
    assert (stopping.data["status"], stopping.data["cancel_requested"]) == ("running", True)


@pytest.mark.django_db
def test_it_answers_409_on_cancelling_a_finished_run(admin_client_api, finished_run):
    response = admin_client_api.post(reverse("runs-api:run-cancel", args=[finished_run.pk]))

    assert response.status_code == 409
    assert "already finished" in response.data["detail"]
    finished_run.refresh_from_db()
    assert finished_run.status == Run.Status.FAILED and not finished_run.cancel_requested


@pytest.mark.django_db
def test_it_deletes_a_finished_run_but_not_a_running_one(admin_client_api, finished_run, order_suite, make_run):
    running = make_run(order_suite, status=Run.Status.RUNNING)

    refused = admin_client_api.delete(reverse("runs-api:run", args=[running.pk]))
    deleted = admin_client_api.delete(reverse("runs-api:run", args=[finished_run.pk]))

    assert refused.status_code == 409 and "is running" in refused.data["detail"]
    assert deleted.status_code == 204
    assert list(Run.objects.values_list("pk", flat=True)) == [running.pk]
    assert not CaseResult.objects.filter(run_id=finished_run.pk).exists()
    assert admin_client_api.delete(reverse("runs-api:run", args=[finished_run.pk])).status_code == 404


@pytest.mark.django_db
def test_it_deletes_many_runs_skipping_running_ones(admin_client_api, finished_run, order_suite, make_run):
    running = make_run(order_suite, status=Run.Status.RUNNING)
    pending = make_run(order_suite, status=Run.Status.PENDING)

    response = admin_client_api.post(
        reverse("runs-api:runs-delete"), {"ids": [finished_run.pk, running.pk, pending.pk, 999_999]}, format="json"
    )

    assert response.status_code == 200
    assert sorted(response.data["deleted"]) == sorted([finished_run.pk, pending.pk])
    assert response.data["skipped"] == [running.pk] and response.data["not_found"] == [999_999]
    assert f"#{running.pk}" in response.data["detail"]
    assert list(Run.objects.values_list("pk", flat=True)) == [running.pk]
    empty = admin_client_api.post(reverse("runs-api:runs-delete"), {"ids": []}, format="json")
    assert empty.status_code == 400 and empty.data["errors"][0]["field"] == "ids"


def test_it_blesses_one_run_per_suite_for_staff_and_refuses_runs_without_a_verdict(
    admin_client_api, member_client, order_suite, make_run, admin_user
):
    first = make_run(order_suite, status=Run.Status.PASSED)
    second = make_run(order_suite, status=Run.Status.FAILED)
    errored = make_run(order_suite, status=Run.Status.ERROR)
    running = make_run(order_suite, status=Run.Status.RUNNING)

    assert member_client.post(f"/api/runs/{first.pk}/bless/", {}, format="json").status_code == 403
    blessed = admin_client_api.post(f"/api/runs/{first.pk}/bless/", {}, format="json")
    assert blessed.status_code == 200 and blessed.json()["blessed_at"]
    first.refresh_from_db()
    assert first.blessed_by == admin_user

    assert admin_client_api.post(f"/api/runs/{second.pk}/bless/", {}, format="json").status_code == 200
    assert list(Run.objects.filter(blessed_at__isnull=False).values_list("pk", flat=True)) == [second.pk]
    for refused in (errored, running):
        response = admin_client_api.post(f"/api/runs/{refused.pk}/bless/", {}, format="json")
        assert response.status_code == 409 and "only a run that finished Passed or Failed" in response.json()["detail"]
    bad = admin_client_api.post(f"/api/runs/{first.pk}/bless/", {"why": "x"}, format="json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "why"
    assert Run.objects.get(blessed_at__isnull=False) == second

    listed = {row["id"]: row["blessed_at"] for row in member_client.get("/api/runs/").json()["results"]}
    assert listed[second.pk] and listed[first.pk] is None
    assert member_client.post(f"/api/runs/{second.pk}/unbless/", {}, format="json").status_code == 403
    for _ in range(2):  # unblessing is idempotent
        response = admin_client_api.post(f"/api/runs/{second.pk}/unbless/", {}, format="json")
        assert response.status_code == 200 and response.json()["blessed_at"] is None
    assert not Run.objects.filter(blessed_at__isnull=False).exists()
