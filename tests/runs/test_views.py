"""The run pages: who sees and may do what, the list, the trigger form and its errors, live progress, the summary and
matrix, one result, exports, and the number of queries each page runs at two sizes."""

from __future__ import annotations

import csv
import importlib
import io
import json
import re
from datetime import timedelta
from decimal import Decimal
from xml.etree import ElementTree

import pytest
from django.apps import apps as django_apps
from django.contrib.staticfiles import finders

from agenthost.llm.scripted import Answer, Call
from agenthost.services import conversation_start
from cases.models import Case
from runs.management.commands.run import _summary
from runs.management.commands.run_suite import Command as RunSuite
from runs.models import CaseResult, Run
from runs.selectors import run_summary
from tests.runs.conftest import CAREFUL, HASTY

# The order desk answers every run of these pages on the careful and the hasty model, as tests/runs/conftest.py
# says; a page shows those models as configured.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("order_desk")]

PASSED, FAILED, ERROR, CANCELLED = "passed", "failed", "error", "cancelled"


@pytest.fixture
def member_web(client, member):
    client.force_login(member)
    return client


@pytest.fixture
def finished_run(order_suite, make_run, admin_user):
    return make_run(
        order_suite, models=(CAREFUL, HASTY), status=Run.Status.FAILED, reason="1 of 4 results failed",
        results=((CAREFUL, PASSED), (HASTY, FAILED), (CAREFUL, PASSED), (HASTY, PASSED)), triggered_by=admin_user,
    )


@pytest.fixture
def running_run(order_suite, make_run):
    run = make_run(order_suite, models=(CAREFUL, HASTY), status=Run.Status.RUNNING, results=((CAREFUL, PASSED),))
    Run.objects.filter(pk=run.pk).update(current=f"looks the order up first on {HASTY}")
    run.refresh_from_db()
    return run


def html_of(response) -> str:
    return response.content.decode()


def text_of(response) -> str:
    """The page as a person reads it: tags dropped, whitespace collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html_of(response).replace("<wbr>", "")))


# --- Who may see and do what --------------------------------------------------------------------------------------


def test_it_sends_anonymous_visitors_to_the_login_page(client, finished_run):
    result = finished_run.results.first()
    for url in [
        "/runs/", "/runs/new/", f"/runs/{finished_run.pk}/", f"/runs/{finished_run.pk}/progress.json",
        f"/runs/{finished_run.pk}/results/{result.pk}/", f"/runs/{finished_run.pk}/compare/",
        f"/runs/{finished_run.pk}/matrix.csv", f"/runs/{finished_run.pk}/junit.xml", "/runs/cases-count.json?suite=1",
    ]:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/?next="), url


def test_it_shows_members_no_trigger_or_cancel_and_refuses_their_posts(member_web, running_run, order_suite):
    listing = html_of(member_web.get("/runs/"))
    assert "/runs/new/" not in listing and "New run" not in listing
    page = html_of(member_web.get(f"/runs/{running_run.pk}/"))
    assert "Cancel run" not in page and f"/runs/{running_run.pk}/cancel/" not in page

    assert member_web.get("/runs/new/").status_code == 403
    refused = member_web.post("/runs/new/", {"suite": order_suite.pk, "models": [CAREFUL]})
    assert refused.status_code == 403 and "Only admins can trigger runs" in html_of(refused)
    assert member_web.post(f"/runs/{running_run.pk}/cancel/").status_code == 403

    assert Run.objects.count() == 1
    running_run.refresh_from_db()
    assert running_run.status == Run.Status.RUNNING and not running_run.cancel_requested


def test_it_shows_admins_the_trigger_and_cancel_buttons(admin_client, running_run):
    assert 'href="/runs/new/"' in html_of(admin_client.get("/runs/"))
    page = html_of(admin_client.get(f"/runs/{running_run.pk}/"))
    assert f'action="/runs/{running_run.pk}/cancel/"' in page and "csrfmiddlewaretoken" in page


# --- Runs list ----------------------------------------------------------------------------------------------------


def test_it_lists_runs_with_pass_rate_per_model_counts_who_and_duration(admin_client, finished_run):
    started = finished_run.created_at
    Run.objects.filter(pk=finished_run.pk).update(started_at=started, finished_at=started + timedelta(seconds=75))
    page = text_of(admin_client.get("/runs/"))
    assert f"#{finished_run.pk} orders Failed" in page
    assert f"{CAREFUL} 100%" in page and f"{HASTY} 50%" in page
    assert "3 · 1 · 0 · 0 / 4" in page
    assert "root" in page and "1 min 15 s" in page


def test_it_filters_runs_by_suite_and_status(admin_client, order_suite, make_suite, make_run):
    other = make_suite("billing")
    passed = make_run(order_suite, status=Run.Status.PASSED)
    failed = make_run(order_suite, status=Run.Status.FAILED)
    elsewhere = make_run(other, status=Run.Status.FAILED)

    def listed(query: str) -> set[int]:
        return {int(pk) for pk in re.findall(r'<a href="/runs/(\d+)/">#', html_of(admin_client.get(f"/runs/{query}")))}

    assert listed("") == {passed.pk, failed.pk, elsewhere.pk}
    assert listed(f"?suite={order_suite.pk}") == {passed.pk, failed.pk}
    assert listed("?status=failed") == {failed.pk, elsewhere.pk}
    assert listed(f"?suite={other.pk}&status=passed") == set()
    chosen = html_of(admin_client.get(f"/runs/?suite={other.pk}&status=passed"))
    assert "No run matches these filters." in chosen
    # The form shows the filters chosen, each as its select's one selected option.
    assert re.findall(r'<option value="([^"]*)" selected>', chosen) == [str(other.pk), "passed"]


def test_it_pages_the_runs_list_keeping_the_filters(admin_client, order_suite):
    Run.objects.bulk_create([Run(suite=order_suite, model_keys=[CAREFUL], status=Run.Status.PASSED) for _ in range(27)])
    first = html_of(admin_client.get("/runs/?status=passed"))
    assert len(re.findall(r'<a href="/runs/\d+/">#', first)) == 25
    assert "Page 1 of 2" in first and 'href="?status=passed&amp;page=2"' in first
    second = html_of(admin_client.get("/runs/?status=passed&page=2"))
    assert len(re.findall(r'<a href="/runs/\d+/">#', second)) == 2


# --- Trigger ------------------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_it_triggers_a_run_from_the_form_and_opens_its_page(admin_client, order_suite, run_queue, admin_user):
    page = html_of(admin_client.get("/runs/new/"))
    assert f'value="{CAREFUL}"' in page and f'value="{HASTY}"' in page
    assert "orders (order-desk, 2 enabled cases)" in page

    response = admin_client.post(
        "/runs/new/", {"suite": order_suite.pk, "models": [CAREFUL, HASTY], "case_filter": "looks"}
    )
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert run.model_keys == [CAREFUL, HASTY] and run.case_filter == "looks" and run.triggered_by == admin_user
    assert len(run.case_ids) == 1
    followed = text_of(admin_client.get(response["Location"]))
    assert f"Run #{run.pk} is queued: 2 case × model results to go." in followed


THE_SUITE = "the order suite"
UNKNOWN = "scripted:reckless"


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"models": [CAREFUL]}, "suite", "This field is required."),
        ({"suite": 9999, "models": [CAREFUL]}, "suite", "That suite does not exist (any more); choose another."),
        ({"suite": THE_SUITE}, "models", "Choose at least one model."),
        ({"suite": THE_SUITE, "models": [UNKNOWN]}, "models", f"model &#x27;{UNKNOWN}&#x27; is not configured"),
        ({"suite": THE_SUITE, "models": [CAREFUL, CAREFUL]}, "models", "is listed twice"),
        ({"suite": THE_SUITE, "models": [CAREFUL], "case_filter": "refund"}, "case_filter", "selects no enabled case"),
        ({"suite": THE_SUITE, "models": [CAREFUL], "case_filter": "x" * 201}, "case_filter", "at most 200 characters"),
    ],
)
def test_it_shows_what_is_wrong_on_the_form_field_it_concerns(admin_client, order_suite, run_queue, data, field,
                                                               message):
    data = {key: order_suite.pk if value == THE_SUITE else value for key, value in data.items()}
    response = admin_client.post("/runs/new/", data)
    assert response.status_code == 400
    html = html_of(response)
    errors = re.search(rf'<div class="field-errors" id="id_{field}_error" role="alert">(.*?)</div>', html, re.S)
    assert errors and message in errors.group(1), html
    assert "Traceback" not in html and Run.objects.count() == 0


def test_it_says_a_disabled_suite_must_be_enabled_first(admin_client, make_suite, make_case, run_queue):
    suite = make_suite("archived", enabled=False)
    make_case(suite, "anything")
    response = admin_client.post("/runs/new/", {"suite": suite.pk, "models": [CAREFUL]})
    assert response.status_code == 400
    assert "suite &#x27;archived&#x27; is disabled; enable it before running" in html_of(response)


def test_it_reports_a_dead_run_queue_on_the_form_and_leaves_no_run(admin_client, order_suite, dead_run_queue):
    response = admin_client.post("/runs/new/", {"suite": order_suite.pk, "models": [CAREFUL]})
    assert response.status_code == 503
    assert "the run queue is unavailable" in html_of(response) and "Nothing was queued" in html_of(response)
    assert Run.objects.count() == 0


def test_it_prefills_the_form_from_a_run_again_link(admin_client, finished_run):
    Run.objects.filter(pk=finished_run.pk).update(mode=Run.Mode.REPLAY, trials=2)
    page = html_of(admin_client.get(f"/runs/{finished_run.pk}/"))
    again = re.search(r'href="(/runs/new/\?[^"]+)">Run again', page).group(1).replace("&amp;", "&")
    form = html_of(admin_client.get(again))
    assert re.search(rf'<option value="{finished_run.suite_id}" selected>', form)
    assert re.search(rf'value="{CAREFUL}"[^>]*checked', form) and re.search(rf'value="{HASTY}"[^>]*checked', form)
    # What the run was, not the form's defaults: a replay run again replays, with its trials.
    assert '<option value="replay" selected>' in form and re.search(r'name="trials" value="2"', form)
    for wrong in ("mode=bogus&trials=0", "mode=&trials=21", "trials=%D9%A3"):
        refilled = html_of(admin_client.get(f"/runs/new/?suite={finished_run.suite_id}&{wrong}"))
        assert '<option value="live" selected>' in refilled and re.search(r'name="trials" value="1"', refilled)


def test_it_counts_the_enabled_cases_a_filter_selects(admin_client, order_suite, make_case):
    make_case(order_suite, "cancels twice", tags=("smoke",))
    make_case(order_suite, "disabled cancel", enabled=False, tags=("smoke",))
    url = f"/runs/cases-count.json?suite={order_suite.pk}"
    assert admin_client.get(url).json() == {
        "suite": order_suite.pk, "case_filter": "", "matching": 3, "enabled": 3, "message": "All 3 enabled cases",
    }
    assert admin_client.get(url + "&case_filter=CANCEL").json()["message"] == "Matches 2 of 3 enabled cases"
    assert admin_client.get(url + "&case_filter=tag:smoke").json()["matching"] == 1
    none = admin_client.get(url + "&case_filter=refund").json()
    assert none["matching"] == 0 and none["message"] == "Matches none of the 3 enabled cases: a run would be refused"
    assert admin_client.get("/runs/cases-count.json?suite=abc").status_code == 400
    assert admin_client.get("/runs/cases-count.json?suite=9999").status_code == 404


def test_it_shows_the_case_count_on_a_form_sent_back_with_errors(admin_client, order_suite, run_queue):
    response = admin_client.post("/runs/new/", {"suite": order_suite.pk, "case_filter": "looks"})
    assert "Matches 1 of 2 enabled cases" in html_of(response)


# --- The run page while it runs -----------------------------------------------------------------------------------


def test_it_shows_progress_per_model_and_the_case_in_progress(admin_client, running_run):
    Run.objects.filter(pk=running_run.pk).update(started_at=running_run.created_at)
    page = html_of(admin_client.get(f"/runs/{running_run.pk}/"))
    assert 'data-live="1"' in page and f'data-progress-url="/runs/{running_run.pk}/progress.json"' in page
    text = text_of(admin_client.get(f"/runs/{running_run.pk}/"))
    assert "1 of 4 results" in text and f"Now: looks the order up first on {HASTY}" in text
    assert f"{CAREFUL} 1 / 2" in text and f"{HASTY} 0 / 2" in text
    # The matrix is there while the run is live: the finished result is linked, the rest waits.
    finished = running_run.results.get()
    html = html_of(admin_client.get(f"/runs/{running_run.pk}/"))
    assert f'href="/runs/{running_run.pk}/results/{finished.pk}/"' in html and f'data-since="{finished.pk}"' in html
    assert "cancels the order Passed case 100 ms · model 10 ms Not run yet looks the order up first Not run yet" in (
        text
    )

    progress = admin_client.get(f"/runs/{running_run.pk}/progress.json")
    assert progress["Cache-Control"] == "no-store"
    data = progress.json()
    assert data["status"] == "running" and not data["finished"]
    assert (data["done"], data["total"], data["passed"]) == (1, 4, 1)
    assert data["models"] == [
        {"model": CAREFUL, "done": 1, "total": 2, "percent": 50},
        {"model": HASTY, "done": 0, "total": 2, "percent": 0},
    ]
    assert data["current"] == f"looks the order up first on {HASTY}" and data["elapsed_seconds"] >= 0
    assert "cells" not in data, "cells only for a poller that says what it has"


def test_it_streams_the_cells_of_results_written_since_the_page_last_asked(admin_client, running_run):
    first = running_run.results.get()
    nothing_new = admin_client.get(f"/runs/{running_run.pk}/progress.json?since={first.pk}").json()
    assert nothing_new["cells"] == [] and nothing_new["last_result"] == first.pk
    case = Case.objects.get(name="looks the order up first")
    second = CaseResult.objects.create(
        run=running_run, case=case, case_name=case.name, model=HASTY, position=1, status=FAILED,
        reason="toolCalled (turn 0): lookup_order was not called; no tool was called", duration_ms=18,
        model_latency_ms=9,
    )
    data = admin_client.get(f"/runs/{running_run.pk}/progress.json?since={first.pk}").json()
    assert data["last_result"] == second.pk
    assert [cell["key"] for cell in data["cells"]] == [f"{case.pk}|{HASTY}"]
    html = data["cells"][0]["html"]
    assert f'href="/runs/{running_run.pk}/results/{second.pk}/"' in html and "cell-failed" in html
    assert "case 18 ms · model 9.0 ms" in html and "lookup_order was not called" in html
    assert data["rows"] == [{"key": str(case.pk), "classes": "has-failure"}]
    everything = admin_client.get(f"/runs/{running_run.pk}/progress.json?since=0").json()
    assert len(everything["cells"]) == 2
    refused = admin_client.get(f"/runs/{running_run.pk}/progress.json?since=-1")
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "since"


def test_it_serves_the_run_body_alone_for_the_poller_to_swap_in(admin_client, finished_run):
    partial = html_of(admin_client.get(f"/runs/{finished_run.pk}/?partial=1"))
    assert partial.lstrip().startswith('<div id="run-body"') and 'data-live="0"' in partial
    assert "<html" not in partial and 'id="matrix-table"' in partial


def test_it_loads_only_assets_served_by_the_app(admin_client, finished_run, running_run):
    for url in [f"/runs/{finished_run.pk}/", f"/runs/{running_run.pk}/", "/runs/new/", "/runs/"]:
        html = html_of(admin_client.get(url))
        assert not re.search(r'(src|href)="(https?:)?//', html), url
    page = html_of(admin_client.get(f"/runs/{running_run.pk}/"))
    assert 'src="/static/runs/runs.js"' in page and 'href="/static/runs/runs.css"' in page
    assert finders.find("runs/runs.js") and finders.find("runs/runs.css")


# --- Cancel -------------------------------------------------------------------------------------------------------


def test_it_cancels_a_run_for_an_admin(admin_client, order_suite):
    pending = Run.objects.create(suite=order_suite, model_keys=[CAREFUL], total=2)
    response = admin_client.post(f"/runs/{pending.pk}/cancel/", follow=True)
    pending.refresh_from_db()
    assert pending.status == Run.Status.CANCELLED
    assert f"Run #{pending.pk} is cancelled; it had not started." in text_of(response)


def test_it_asks_a_running_run_to_stop_and_says_so(admin_client, running_run):
    response = admin_client.post(f"/runs/{running_run.pk}/cancel/", follow=True)
    running_run.refresh_from_db()
    assert running_run.cancel_requested and running_run.status == Run.Status.RUNNING
    text = text_of(response)
    assert "stops after the case in progress" in text and "Cancel run" not in text


def test_it_explains_why_a_finished_run_cannot_be_cancelled(admin_client, finished_run):
    response = admin_client.post(f"/runs/{finished_run.pk}/cancel/", follow=True)
    assert "has already finished (Failed); nothing to cancel" in text_of(response)
    assert admin_client.get(f"/runs/{finished_run.pk}/cancel/").status_code == 405


# --- The finished run: summary, chart, matrix ---------------------------------------------------------------------


def test_it_summarises_each_model_with_a_chart(admin_client, finished_run):
    response = admin_client.get(f"/runs/{finished_run.pk}/")
    text = text_of(response)
    assert "1 of 4 results failed" in text
    # The careful model: results 1 and 3 (latency 10 and 30 ms); the hasty one: 2 and 4 (20 and 40 ms).
    assert f"{CAREFUL} 100% 2 · 0 · 0 · 0 10 ms · 30 ms 20 / 10 $0.002" in text
    assert f"{HASTY} 50% 1 · 1 · 0 · 0 20 ms · 40 ms 20 / 10 $0.002" in text
    html = html_of(response)
    chart = re.search(r"<svg class=\"chart\".*?</svg>", html, re.S).group(0)
    assert f"{CAREFUL}: pass rate 100%" in chart and f"{HASTY}: pass rate 50%" in chart
    assert 'class="chart-bar rate-good"' in chart and 'class="chart-bar rate-mixed"' in chart


def test_it_writes_pass_rates_and_costs_as_the_cli_and_the_markdown_summary_do(admin_client, order_suite, make_run):
    run = make_run(order_suite, status=Run.Status.FAILED, results=((CAREFUL, PASSED),) + ((CAREFUL, FAILED),) * 7)
    CaseResult.objects.filter(run=run).update(cost=0)

    page = text_of(admin_client.get(f"/runs/{run.pk}/"))
    listing = text_of(admin_client.get("/runs/"))
    cli_row = RunSuite._row(run_summary(run=run)[0])
    markdown = _summary([run], {"results": []}, None)

    # 1 of 8 is 12.5% everywhere (the page rounded it half-to-even to "12%"); nothing spent is "$0" everywhere.
    assert f"{CAREFUL} 12.5% 1 · 7 · 0 · 0" in page and f"{CAREFUL} 12.5%" in listing
    assert cli_row[1] == "12.5%" and cli_row[-1] == "$0"
    assert f"| {CAREFUL} | 12.5% | 1 | 7 | 0 |" in markdown and markdown.splitlines()[4].endswith("| $0 |")
    assert " $0 " in page and "$0.00" not in page


def test_it_shows_the_case_by_model_matrix_with_links_and_filters(admin_client, finished_run):
    html = html_of(admin_client.get(f"/runs/{finished_run.pk}/"))
    matrix = re.search(r'<table class="matrix".*?</table>', html, re.S).group(0)
    results = {(r.case_name, r.model): r for r in finished_run.results.all()}
    failed = results[("cancels the order", HASTY)]
    assert (
        f'<td class="cell cell-failed" data-cell="{failed.case_id}|{HASTY}"><a href="/runs/{finished_run.pk}/results/'
        f'{failed.pk}/"'
    ) in matrix
    assert matrix.count('class="cell cell-passed"') == 3
    rows = re.findall(r'<tr class="([^"]*)" data-row="[^"]*"><th scope="row">([^<]+?)(?: <a class="row-models"|</th>)',
                      matrix)
    assert rows == [("has-failure disagree", "cancels the order"), ("", "looks the order up first")]
    assert 'data-show="all"' in matrix
    text = text_of(admin_client.get(f"/runs/{finished_run.pk}/"))
    assert "All cases 2 Failures only 1 Where models disagree 1" in text
    assert 'data-show="failures"' in html_of(admin_client.get(f"/runs/{finished_run.pk}/?show=failures"))


def test_it_escapes_case_names_and_reasons_in_the_matrix(admin_client, finished_run):
    CaseResult.objects.filter(run=finished_run, case_name="cancels the order").update(
        case_name='<script>alert("case")</script>', reason='"><img src=x onerror=alert(1)>'
    )
    html = html_of(admin_client.get(f"/runs/{finished_run.pk}/"))
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&quot;case&quot;)&lt;/script&gt;" in html
    assert 'title="&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"' in html


def test_it_marks_pairs_the_run_never_reached(admin_client, order_suite, make_run):
    stopped = make_run(order_suite, models=(CAREFUL, HASTY), status=Run.Status.ERROR, reason="the worker restarted",
                       results=((CAREFUL, PASSED), (HASTY, ERROR), (CAREFUL, PASSED)))
    html = html_of(admin_client.get(f"/runs/{stopped.pk}/"))
    assert 'class="cell cell-missing"' in html and "1 selected case × model pair has no result" in html


def test_it_shows_how_each_case_held_up_over_several_trials(admin_client, order_suite, make_run):
    run = make_run(order_suite, models=(CAREFUL,), status=Run.Status.FAILED, trials=2,
                   results=((CAREFUL, PASSED), (CAREFUL, PASSED)))
    first, second = order_suite.cases.order_by("pk")
    CaseResult.objects.create(run=run, case=first, case_name=first.name, model=CAREFUL, trial=1, position=2,
                              status=FAILED)
    CaseResult.objects.create(run=run, case=second, case_name=second.name, model=CAREFUL, trial=1, position=3,
                              status=PASSED)
    response = admin_client.get(f"/runs/{run.pk}/")
    text = text_of(response)
    assert "Trials 2 per case and model" in text
    assert "cancels the order Flaky 1/2 passed" in text and "looks the order up first Stable pass 2/2 passed" in text
    assert "pass^2" in text and f"{CAREFUL} 75%" in text
    failed_trial = run.results.get(case=first, trial=1)
    page = text_of(admin_client.get(f"/runs/{run.pk}/results/{failed_trial.pk}/"))
    assert "trial 2 of 2" in page and f"This case on: {CAREFUL} · trial 1 {CAREFUL} · trial 2" in page


# --- One result ---------------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_it_shows_a_failed_result_with_its_assertions_transcript_and_state(admin_client, order_suite, run_queue):
    admin_client.post("/runs/new/", {"suite": order_suite.pk, "models": [CAREFUL, HASTY]})
    run = Run.objects.get()
    assert run.status == Run.Status.FAILED, run.reason
    failed = run.results.get(status=FAILED)
    assert (failed.case_name, failed.model) == ("looks the order up first", HASTY)
    run_page = html_of(admin_client.get(f"/runs/{run.pk}/"))
    assert f'href="/runs/{run.pk}/results/{failed.pk}/"' in run_page

    response = admin_client.get(f"/runs/{run.pk}/results/{failed.pk}/")
    html, text = html_of(response), text_of(response)
    row = re.search(r'<tr class="assertion-failed">.*?</tr>', html, re.S).group(0)
    assert "toolCalled" in row and "lookup_order was not called; calls made: cancel_order" in row
    # Each JSON token kept whole in its own span (runs_text.token_wrapped): read without the spans.
    values = re.sub(r'</?span[^>]*>', "", row)
    assert re.search(r'data-label="expected">\{\s*&quot;function&quot;: &quot;lookup_order&quot;\s*\}', values)
    assert re.search(r'data-label="actual">.*&quot;name&quot;: &quot;cancel_order&quot;', values, re.S)
    assert "User Please cancel order 1043 because I changed my mind" in text
    # The model as the run names it, not the harness's provider that carried the call.
    assert f"order-desk · {HASTY} ·" in text and "agenttest-live" not in html
    assert re.search(r"cancel_order\s*</span>\s*<span class=\"badge outcome-mocked\">Mocked</span>", html)
    assert "&quot;order_id&quot;: &quot;1043&quot;" in html  # the call's arguments
    assert "This case on:" in text and f"/runs/{run.pk}/results/" in html


def test_it_shows_the_error_reason_and_blocked_tool_calls(admin_client, finished_run):
    result = finished_run.results.first()
    CaseResult.objects.filter(pk=result.pk).update(
        status=ERROR, reason="the canary answered something else: the mock layer is not in place",
        transcript=[
            {"seq": 0, "turn": 0, "role": "user", "content": "Email me the refund"},
            {"seq": 1, "turn": 0, "role": "tool_call", "function_name": "util-email-handle_email_sender",
             "arguments": {"to": "ana@example.com"}, "tool_call_id": "c1", "trigger": "model"},
            {"seq": 2, "turn": 0, "role": "tool_result", "function_name": "util-email-handle_email_sender",
             "content": "blocked: util-email-handle_email_sender", "tool_call_id": "c1", "outcome": "blocked"},
        ],
        final_state={"order_status": "cancelled"},
    )
    response = admin_client.get(f"/runs/{finished_run.pk}/results/{result.pk}/")
    text = text_of(response)
    assert "Error: the canary answered something else: the mock layer is not in place" in text
    assert "util-email-handle_email_sender Blocked" in text and "blocked: util-email-handle_email_sender" in text
    state = re.search(r'<table class="state-table">.*?</table>', html_of(response), re.S).group(0)
    assert re.search(r'order_status</th>\s*<td class="state-value"><pre class="plain">cancelled</pre>', state)


OLD_SHAPED_TRANSCRIPT = [
    {"seq": 0, "turn": 0, "role": "user", "content": "Where is order 1042?"},
    {"seq": 1, "turn": 0, "role": "tool_call", "function": "lookup_order", "arguments": {"order_id": "1042"},
     "tool_call_id": "c1", "agent": "order-desk", "trigger": "model"},
    {"seq": 2, "turn": 0, "role": "tool_result", "function": "lookup_order", "content": '{"status": "shipped"}',
     "tool_call_id": "c1", "agent": "order-desk", "outcome": "mocked"},
    {"seq": 3, "turn": 0, "role": "assistant", "content": "Order 1042 has shipped.", "agent": "order-desk",
     "model": CAREFUL, "latency_ms": 12.0},
]


def test_it_still_shows_a_result_stored_before_calls_were_named_function_name(admin_client, finished_run):
    # Results stored before decision 0045 name a call's function `function`; runs 0012 rewrites them, and the page
    # then shows them as it shows a new one.
    result = finished_run.results.first()
    CaseResult.objects.filter(pk=result.pk).update(transcript=OLD_SHAPED_TRANSCRIPT)
    renaming = importlib.import_module("runs.migrations.0012_i34_transcript_function_name")

    renaming.forwards(django_apps, None)

    stored = CaseResult.objects.get(pk=result.pk).transcript
    assert [row.get("function_name") for row in stored] == [None, "lookup_order", "lookup_order", None]
    assert not any("function" in row for row in stored)
    response = admin_client.get(f"/runs/{finished_run.pk}/results/{result.pk}/")
    html, text = html_of(response), text_of(response)
    assert re.search(r"lookup_order\s*</span>\s*<span class=\"badge outcome-mocked\">Mocked</span>", html)
    assert "&quot;order_id&quot;: &quot;1042&quot;" in html and "&quot;status&quot;: &quot;shipped&quot;" in html
    assert "Order 1042 has shipped." in text and f"order-desk · {CAREFUL} · 12 ms" in text

    renaming.backwards(django_apps, None)
    assert CaseResult.objects.get(pk=result.pk).transcript == OLD_SHAPED_TRANSCRIPT


def test_it_links_a_test_conversations_page_back_to_its_result(admin_client, finished_run):
    result = finished_run.results.first()
    tested = conversation_start(agent=finished_run.suite.agent)
    chatted = conversation_start(agent=finished_run.suite.agent)
    CaseResult.objects.filter(pk=result.pk).update(conversation=tested)

    html = html_of(admin_client.get(f"/conversations/{tested.pk}/"))
    assert f"Test conversation of result #{result.pk}" in html
    assert f'href="/runs/{finished_run.pk}/results/{result.pk}/" data-field="result"' in html
    assert "Test conversation of result" not in html_of(admin_client.get(f"/conversations/{chatted.pk}/"))


def test_it_answers_404_for_a_result_of_another_run(admin_client, finished_run, order_suite, make_run):
    other = make_run(order_suite, results=((CAREFUL, PASSED),))
    assert admin_client.get(f"/runs/{finished_run.pk}/results/{other.results.get().pk}/").status_code == 404
    assert admin_client.get("/runs/9999/").status_code == 404


# --- Exports ------------------------------------------------------------------------------------------------------


def test_it_exports_the_matrix_as_csv(admin_client, finished_run):
    CaseResult.objects.filter(run=finished_run, model=HASTY, status=FAILED).update(
        reason="=toolCalled (turn 0): lookup_order was not called"
    )
    response = admin_client.get(f"/runs/{finished_run.pk}/matrix.csv")
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="run-{finished_run.pk}-matrix.csv"'
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    cases = {case.name: case.pk for case in Case.objects.all()}
    ids = {(r.case_name, r.model): r.pk for r in finished_run.results.all()}
    parts = ["status", "duration_ms", "model_latency_ms", "input_tokens", "output_tokens", "cached_input_tokens",
             "reasoning_tokens", "cost_usd", "reason", "result_url"]
    url = f"http://testserver/runs/{finished_run.pk}/results/"
    assert rows == [
        ["case_id", "case", "trial", *(f"{model} {part}" for model in (CAREFUL, HASTY) for part in parts)],
        [str(cases["cancels the order"]), "cancels the order", "1",
         "passed", "100", "10", "10", "5", "0", "0", "0.001", "", f"{url}{ids[('cancels the order', CAREFUL)]}/",
         "failed", "200", "20", "10", "5", "0", "0", "0.001", "'=toolCalled (turn 0): lookup_order was not called",
         f"{url}{ids[('cancels the order', HASTY)]}/"],
        [str(cases["looks the order up first"]), "looks the order up first", "1",
         "passed", "300", "30", "10", "5", "0", "0", "0.001", "", f"{url}{ids[('looks the order up first', CAREFUL)]}/",
         "passed", "400", "40", "10", "5", "0", "0", "0.001", "", f"{url}{ids[('looks the order up first', HASTY)]}/"],
    ]


def test_it_leaves_the_cost_of_an_unpriced_model_empty_in_the_csv_and_says_unpriced_on_the_pages(
    admin_client, order_suite, make_run, settings
):
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS,
        "local": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "", "timeout": 5.0,
                  "max_retries": 0, "models": [{"name": "llama", "input_price": 0.0, "output_price": 0.0,
                                                "label": ""}]},
    }
    run = make_run(order_suite, models=("local:llama",), status=Run.Status.PASSED,
                   results=(("local:llama", PASSED), ("local:llama", PASSED)))
    CaseResult.objects.filter(run=run).update(cost=0, input_tokens=12345)
    rows = list(csv.reader(io.StringIO(admin_client.get(f"/runs/{run.pk}/matrix.csv").content.decode())))
    assert rows[0][10] == "local:llama cost_usd" and rows[1][10] == "" and rows[1][6] == "12345"
    text = text_of(admin_client.get(f"/runs/{run.pk}/"))
    assert "local:llama 100% 2 · 0 · 0 · 0" in text and "24,690 / 10 unpriced" in text
    result = run.results.first()
    page = text_of(admin_client.get(f"/runs/{run.pk}/results/{result.pk}/"))
    assert "Tokens in / out 12,345 / 5 Cost unpriced" in page


def test_it_keeps_spreadsheets_from_running_case_names_as_formulas(admin_client, finished_run):
    CaseResult.objects.filter(run=finished_run, case_name="cancels the order").update(case_name="=HYPERLINK(1)")
    rows = list(csv.reader(io.StringIO(admin_client.get(f"/runs/{finished_run.pk}/matrix.csv").content.decode())))
    assert rows[1][1] == "'=HYPERLINK(1)"


def test_it_exports_the_run_as_junit_xml(admin_client, finished_run):
    response = admin_client.get(f"/runs/{finished_run.pk}/junit.xml")
    assert response["Content-Type"] == "application/xml; charset=utf-8"
    root = ElementTree.fromstring(response.content)
    assert root.tag == "testsuites" and root.get("tests") == "4" and root.get("failures") == "1"
    page = html_of(admin_client.get(f"/runs/{finished_run.pk}/"))
    assert f'href="/runs/{finished_run.pk}/matrix.csv"' in page and f'href="/runs/{finished_run.pk}/junit.xml"' in page


# --- Run vs baseline ----------------------------------------------------------------------------------------------


def test_it_compares_with_the_previous_run_by_default_and_lists_flips(admin_client, order_suite, make_run):
    baseline = make_run(order_suite, models=(CAREFUL, HASTY), status=Run.Status.PASSED,
                        results=((CAREFUL, PASSED), (HASTY, PASSED), (CAREFUL, FAILED), (HASTY, PASSED)))
    current = make_run(order_suite, models=(CAREFUL, HASTY), status=Run.Status.FAILED,
                       results=((CAREFUL, PASSED), (HASTY, FAILED), (CAREFUL, PASSED), (HASTY, PASSED)))
    run_page = html_of(admin_client.get(f"/runs/{current.pk}/"))
    assert f'action="/runs/{current.pk}/compare/"' in run_page
    assert f'<option value="{baseline.pk}" selected>' in run_page

    text = text_of(admin_client.get(f"/runs/{current.pk}/compare/"))
    assert f"Run #{current.pk} vs run #{baseline.pk}" in text
    assert f"{CAREFUL} 0 pass → fail · 1 fail → pass · 0 new · 0 gone · 1 unchanged" in text
    assert f"{HASTY} 1 pass → fail · 0 fail → pass · 0 new · 0 gone · 1 unchanged" in text
    assert "pass → fail cancels the order Passed Failed" in text
    assert "fail → pass looks the order up first Failed Passed" in text
    assert f"Baseline: the previous run, #{baseline.pk} — no earlier run of orders is blessed" in text


def test_it_refuses_a_baseline_that_is_later_or_of_another_suite(admin_client, order_suite, make_suite, make_run):
    first = make_run(order_suite)
    second = make_run(order_suite)
    foreign = make_run(make_suite("billing"))
    later = admin_client.get(f"/runs/{first.pk}/compare/?baseline={second.pk}")
    assert later.status_code == 400 and "There is no earlier run of orders to compare with." in text_of(later)
    other = admin_client.get(f"/runs/{second.pk}/compare/?baseline={foreign.pk}")
    assert other.status_code == 400 and "is of another suite (billing)" in text_of(other)
    assert admin_client.get(f"/runs/{second.pk}/compare/?baseline=abc").status_code == 400


def test_it_blesses_a_run_from_its_page_and_compares_with_it_by_default(
    admin_client, member_web, order_suite, make_run
):
    known_good = make_run(order_suite, models=(CAREFUL,), status=Run.Status.PASSED,
                          results=((CAREFUL, PASSED), (CAREFUL, PASSED)))
    make_run(order_suite, models=(CAREFUL,), status=Run.Status.FAILED, results=((CAREFUL, FAILED), (CAREFUL, PASSED)))
    errored = make_run(order_suite, models=(CAREFUL,), status=Run.Status.ERROR, results=((CAREFUL, ERROR),))
    current = make_run(order_suite, models=(CAREFUL,), status=Run.Status.FAILED,
                       results=((CAREFUL, FAILED), (CAREFUL, PASSED)))

    assert f'action="/runs/{known_good.pk}/bless/"' in html_of(admin_client.get(f"/runs/{known_good.pk}/"))
    assert "Bless as baseline" not in html_of(member_web.get(f"/runs/{known_good.pk}/"))
    assert "Bless as baseline" not in html_of(admin_client.get(f"/runs/{errored.pk}/")), "no verdict, no blessing"
    refused = member_web.post(f"/runs/{known_good.pk}/bless/")
    assert refused.status_code == 403 and "Only admins can choose a suite" in html_of(refused)
    assert admin_client.post(f"/runs/{known_good.pk}/bless/", {"extra": "1"}).status_code == 400
    assert not Run.objects.filter(blessed_at__isnull=False).exists()

    response = admin_client.post(f"/runs/{known_good.pk}/bless/", follow=True)
    assert f"Run #{known_good.pk} is now the blessed baseline of orders" in text_of(response)
    assert "Blessed baseline" in text_of(response) and "Unbless" in text_of(response)
    no = admin_client.post(f"/runs/{errored.pk}/bless/", follow=True)
    assert "only a run that finished Passed or Failed can be the blessed baseline" in text_of(no)

    run_page = html_of(admin_client.get(f"/runs/{current.pk}/"))
    assert f'<option value="{known_good.pk}" selected>#{known_good.pk} · blessed baseline' in run_page
    text = text_of(admin_client.get(f"/runs/{current.pk}/compare/"))
    assert f"Run #{current.pk} vs run #{known_good.pk}" in text
    assert f"Baseline: run #{known_good.pk}, the blessed baseline of orders." in text
    assert "100% → 50% −50 pts" in text
    assert "pass → fail cancels the order Passed Failed" in text

    admin_client.post(f"/runs/{known_good.pk}/unbless/")
    assert f"Run #{current.pk} vs run #{errored.pk - 1}" in text_of(admin_client.get(f"/runs/{current.pk}/compare/"))


def test_it_shows_what_differs_between_the_two_runs(admin_client, order_suite, make_run):
    from runs.services import run_create

    baseline = run_create(suite=order_suite, model_keys=[CAREFUL])
    Run.objects.filter(pk=baseline.pk).update(status=Run.Status.PASSED)
    agent = order_suite.agent
    agent.instruction += "\nNever cancel without a look-up."
    agent.functions = [*agent.functions, {"name": "util-email-handle_email_sender"}]
    agent.save()
    current = run_create(suite=order_suite, model_keys=[CAREFUL, HASTY])
    Run.objects.filter(pk=current.pk).update(status=Run.Status.PASSED)

    html = html_of(admin_client.get(f"/runs/{current.pk}/compare/"))
    text = text_of(admin_client.get(f"/runs/{current.pk}/compare/"))
    assert f"Models: added {HASTY}" in text
    assert "Instruction changed" in text and '<span class="diff-add">+Never cancel without a look-up.</span>' in html
    assert "Tool schemas: added util-email-handle_email_sender" in text

    same = run_create(suite=order_suite, model_keys=[CAREFUL, HASTY])
    assert "Nothing: the same agent" in text_of(admin_client.get(f"/runs/{same.pk}/compare/?baseline={current.pk}"))


@pytest.mark.django_db(transaction=True)
def test_it_shows_how_each_case_changed_between_the_runs_from_what_each_ran(
    admin_client, admin_client_api, make_suite, order_desk, django_assert_num_queries
):
    from cases.services import case_create
    from runs.models import CaseSnapshot
    from runs.services import run_create, run_execute

    suite = make_suite()
    edited, later = "A delivered order is not cancelled", "Two turns: status, then cancel it"
    case_create(suite=suite, document={
        "name": edited, "tags": ["cancel"], "enabled": True,
        "turns": [{"user_message": "Can you cancel order 1047?", "assertions": [
            {"type": "toolNotCalled", "params": {"function": "cancel_order"}},
            {"type": "outputContains", "params": {"text": "delivered"}},
        ]}],
        "mocks": [
            {"function_name": "lookup_order", "result": json.dumps({"order_id": "1047", "status": "delivered"})},
            {"function_name": "cancel_order", "result": json.dumps(
                {"order_id": "1047", "cancelled": False, "error": "the order was already delivered"}
            )},
        ],
    })
    case_create(suite=suite, document={
        "name": later, "tags": ["cancel"], "enabled": True,
        "turns": [
            {"user_message": "Where is order 1041?", "assertions": [
                {"type": "toolCalled", "params": {"function": "lookup_order", "arguments": {"order_id": "1041"}},
                 "fatal": True},
            ]},
            {"user_message": "Please cancel it", "assertions": [
                {"type": "toolCalled", "params": {"function": "cancel_order", "arguments": {"order_id": "1041"}}},
                {"type": "outputNotContains", "params": {"text": "could not"}},
            ]},
        ],
        "assertions": [{"type": "stateEquals", "params": {"key": "order_status", "value": "cancelled"}}],
        "mocks": [
            {"function_name": "lookup_order", "result": json.dumps({"order_id": "1041", "status": "shipped"})},
            {"function_name": "cancel_order", "result": json.dumps({"order_id": "1041", "cancelled": True}),
             "state_writes": {"order_status": "cancelled"}},
        ],
    })
    cases = {case.name: case for case in suite.cases.all()}
    # The order desk looks an order up, or cancels the one the conversation is about, and then says what the tool
    # answered: the verdicts follow the mocks and the assertions, which is what the cases' edits change.
    calls = {
        "Can you cancel order 1047?": Call("lookup_order", {"order_id": "1047"}),
        "Where is order 1041?": Call("lookup_order", {"order_id": "1041"}),
        "Please cancel it": Call("cancel_order", {"order_id": "1041"}),
    }
    order_desk.respond_with(
        lambda request: f"Done: {request.messages[-1]['content']}" if request.messages[-1]["role"] == "tool"
        else Answer(tool_calls=[calls[request.messages[-1]["content"]]])
    )

    def execute() -> Run:
        return run_execute(run_id=run_create(suite=suite, model_keys=[CAREFUL], case_filter="tag:cancel").pk)

    def patch(name: str, change) -> None:
        document = admin_client_api.get(f"/api/cases/{cases[name].pk}/").json()
        response = admin_client_api.patch(f"/api/cases/{cases[name].pk}/", change(document), format="json")
        assert response.status_code == 200, response.content

    def stricter(document):
        turn = document["turns"][0]
        for check in turn["assertions"]:
            if check["type"] == "outputContains":
                check["params"]["text"] = "refunded"
        mocks = [{**mock, "result": '{"order_id": "1047", "cancelled": false}'} if mock["function_name"] ==
                 "cancel_order" else mock for mock in document["mocks"]]
        return {"turns": document["turns"], "mocks": mocks}

    baseline = execute()
    patch(edited, stricter)
    current = execute()
    # Edited after both runs: neither ran it, so the comparison of the two says nothing of it.
    patch(later, lambda document: {"turns": [{**document["turns"][0], "user_message": "Where is 1041?"},
                                             *document["turns"][1:]]})
    statuses = dict(current.results.values_list("case_name", "status"))
    assert dict(baseline.results.values_list("case_name", "status"))[edited] == "passed"
    assert statuses[edited] == "failed" and statuses[later] == "passed"

    page = f"/runs/{current.pk}/compare/?baseline={baseline.pk}"
    # session, user; run, earlier runs, the baseline, both runs' results, both summaries, the two contents
    with django_assert_num_queries(9):
        response = admin_client.get(page)
    html, text = html_of(response), text_of(response)
    changes = re.findall(r'<li id="(case-change-[^"]+)" class="case-change" data-case="([^"]+)"', html)
    assert [name for _, name in changes] == [edited]
    assert f"{edited} , run #{baseline.pk} → run #{current.pk}: Turns and their assertions" in text
    assert '<span class="diff-del">-          &quot;text&quot;: &quot;delivered&quot;</span>' in html
    assert '<span class="diff-add">+          &quot;text&quot;: &quot;refunded&quot;</span>' in html
    mocks = re.search(r'data-part="Mocks">.*?</pre>', html, re.S).group(0)
    # The mock's result shown as the JSON it holds: the one field that went is the one line marked.
    assert [line for line in mocks.splitlines() if "diff-del" in line or "diff-add" in line] == [
        '<span class="diff-del">-      &quot;error&quot;: &quot;the order was already delivered&quot;,</span>',
    ]
    assert 'data-part="Case assertions"' not in html and "Where is 1041?" not in html
    flipped = re.search(r'<tr class="flip-row flip-broke">.*?</tr>', html, re.S).group(0)
    assert edited in flipped and f'class="badge case-changed" href="#{changes[0][0]}"' in flipped

    # A run planned before contents were kept: the change is known by its hash, its content is not.
    CaseSnapshot.objects.filter(content_hash=baseline.results.get(case_name=edited).case_hash).delete()
    text = text_of(admin_client.get(page))
    assert f"{edited} : what it ran is not recorded for run #{baseline.pk} (planned before" in text


# --- Query discipline ---------------------------------------------------------------------------------------------


def _sized_run(suite, cases: list[Case], models: int, version: str = "", *, flipped: bool = False) -> Run:
    """A finished run of `cases` × `models` results, written in bulk; the last model fails every case. With a
    `version`, each case ran a content of that version, stored as a run stores it. `flipped`: the first model's
    verdict on every case is the other one (with one model, every case passes), so each case flips once."""
    from runs.models import CaseSnapshot

    keys = [f"scripted:model-{index}" for index in range(models)]
    hashes = {case.pk: f"{version}{case.pk:063d}" if version else "" for case in cases}
    if version:
        CaseSnapshot.objects.bulk_create(
            CaseSnapshot(content_hash=hashes[case.pk], content={"turns": [{"user_message": version}]})
            for case in cases
        )
    run = Run.objects.create(
        suite=suite, model_keys=keys, case_ids=[case.pk for case in cases], total=len(cases) * models,
        status=Run.Status.FAILED, passed=len(cases) * (models - 1), failed=len(cases),
    )
    CaseResult.objects.bulk_create(
        CaseResult(
            run=run, case=case, case_name=case.name, case_hash=hashes[case.pk], model=key, position=position,
            duration_ms=10.0 * position,
            status=FAILED if (key == keys[-1]) != (flipped and key == keys[0]) else PASSED, model_latency_ms=5.0,
            input_tokens=10, output_tokens=5,
            cost=Decimal("0.001"), transcript=[{"role": "user", "content": "x" * 100}],
        )
        for position, (case, key) in enumerate((case, key) for case in cases for key in keys)
    )
    return run


# What a page shows of the two sized runs, counted: every case flipped on one model (the run page marks each in the
# matrix; the list says how many flipped for the run that has a baseline; the result page says so) and changed (the
# compare page); the two runs' transcripts are the same (side by side, no divergence).
SIZED_SHOWS = {
    "/runs/": ('class="since-counts"', lambda cases: 1),
    "/runs/{run}/": ('class="flip-mark', lambda cases: cases),
    "/runs/{run}/?partial=1": ('class="flip-mark', lambda cases: cases),
    "/runs/{run}/compare/": ('class="case-change"', lambda cases: cases),
    "/runs/{run}/results/{result}/": ('class="baseline-context flip-', lambda cases: 1),
    "/runs/{run}/results/{result}/side-by-side/": ('data-divergence="none"', lambda cases: 1),
}


@pytest.mark.parametrize(("cases", "models"), [(2, 1), (6, 3)])
@pytest.mark.parametrize(
    ("page", "queries"),
    [
        # session, user; suites for the filter, count, page of runs (each with its default baseline), the verdicts
        # of the runs and their baselines (their pass rates and what flipped)
        ("/runs/", 6),
        # session, user; run (with its default baseline), summary, both runs' results (what flipped), both runs'
        # snapshots (why each flipped), matrix, what its cases are for (said beside a failure), earlier runs for the
        # compare form
        ("/runs/{run}/", 9),
        ("/runs/{run}/?partial=1", 9),
        ("/runs/{run}/?model=scripted:model-0&sort=duration&show=failures", 9),
        # session, user; run, done per model
        ("/runs/{run}/progress.json", 4),
        # session, user; run, matrix
        ("/runs/{run}/matrix.csv", 4),
        ("/runs/{run}/matrix.csv?model=scripted:model-0&sort=status", 4),
        # session, user; run, done per model, results since, their cells
        ("/runs/{run}/progress.json?since=0", 6),
        # session, user; run, earlier runs, the default baseline, both runs' results, both summaries, what every
        # case ran in each run (each case changed between them)
        ("/runs/{run}/compare/", 9),
        # session, user; the result (with its run's default baseline and its case), its case on every model, the
        # run's failures (previous / next), the same case on its model in the baseline, both runs' snapshots (why
        # it flipped), its mocks' verifications
        ("/runs/{run}/results/{result}/", 8),
        # session, user; the result (with its run's default baseline), its case on its model in the baseline
        ("/runs/{run}/results/{result}/side-by-side/", 4),
        # session, user; the result, its case on every model
        ("/runs/{run}/results/{result}/models/", 4),
    ],
)
def test_it_runs_the_same_number_of_queries_whatever_the_size(
    admin_client, make_suite, django_assert_num_queries, cases, models, page, queries
):
    suite = make_suite()
    made = Case.objects.bulk_create([Case(suite=suite, name=f"case {index:03d}") for index in range(cases)])
    _sized_run(suite, made, models, version="a")
    run = _sized_run(suite, made, models, version="b", flipped=True)
    result = run.results.order_by("position").first()
    with django_assert_num_queries(queries):
        response = admin_client.get(page.format(run=run.pk, result=result.pk))
    assert response.status_code == 200
    if page in SIZED_SHOWS:
        snippet, count = SIZED_SHOWS[page]
        assert html_of(response).count(snippet) == count(cases)


@pytest.mark.parametrize(("cases", "models"), [(2, 1), (6, 3)])
def test_it_shows_a_live_run_in_the_same_number_of_queries_whatever_the_size(
    admin_client, make_suite, django_assert_num_queries, cases, models
):
    suite = make_suite()
    made = Case.objects.bulk_create([Case(suite=suite, name=f"case {index:03d}") for index in range(cases)])
    run = _sized_run(suite, made, models)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
    # session, user; run, done per model, the cases' names, the results so far
    with django_assert_num_queries(6):
        response = admin_client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200 and html_of(response).count('class="cell cell-') == cases * models
