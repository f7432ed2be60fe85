"""In a real browser (Playwright driving Debian's Chromium): an admin triggers a two-model run of a suite, watches its
progress reach the end without the page reloading, reads the summary and the matrix, and opens a failed cell down to
the failing assertion; a member can look but finds no trigger or cancel, and gets 403 when posting."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from cases.models import Suite
from common.provider_config import load_providers
from runs.engine.numbers import format_pass_rate
from runs.models import CaseResult, Run
from runs.selectors import run_summary
from tests.browser.pages import ADMIN, MEMBER, RUN_TIMEOUT_MS, queued_runs, worker_log
from tests.desk import MODELS, desk_providers_file, desk_suite

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CAREFUL, HASTY = MODELS


@pytest.fixture
def desk(settings, tmp_path) -> tuple[Suite, str]:
    """The desk's suite on its two models (tests/desk.py), and the providers file a worker reads them from."""
    providers = desk_providers_file(tmp_path)
    settings.AGENTTEST_PROVIDERS = load_providers(str(providers))
    return desk_suite(), str(providers)


def test_it_triggers_a_two_model_run_and_follows_it_to_the_failing_assertion(sign_in, run_queue, desk, admin_user,
                                                                            tmp_path):
    suite, providers = desk
    context, page = sign_in(*ADMIN)
    page.goto("/runs/")
    page.get_by_role("link", name="New run").click()
    expect(page.get_by_role("heading", name="New run")).to_be_visible()

    page.get_by_label("Suite").select_option(str(suite.pk))
    page.get_by_label(CAREFUL).check()
    page.get_by_label(HASTY).check()
    count = page.locator("#case-count")
    enabled = suite.cases.filter(enabled=True).count()
    expect(count).to_have_text(f"All {enabled} enabled cases × 2 models = {2 * enabled} results")
    page.get_by_label("Case filter").fill("cancel")
    expect(count).to_have_text(re.compile(rf"^Matches [1-9]\d* of {enabled} enabled cases × 2 models = \d+ results$"))
    page.get_by_label("Case filter").fill("no case is called this")
    expect(count).to_have_text(f"Matches none of the {enabled} enabled cases: a run would be refused")
    page.get_by_label("Case filter").fill("")
    expect(count).to_have_text(f"All {enabled} enabled cases × 2 models = {2 * enabled} results")

    page.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run = Run.objects.get()
    assert run.model_keys == [CAREFUL, HASTY] and run.triggered_by == admin_user and run.total == 2 * enabled
    expect(page.locator(".flash")).to_contain_text(f"Run #{run.pk} is queued")
    expect(page.get_by_role("heading", name="Progress")).to_be_visible()
    expect(page.locator('[data-field="current"]')).to_have_text("waiting for the worker to pick the run up…")
    # A full reload would lose this flag and the recorded counts.
    page.evaluate("""() => {
        window.__sameDocument = true;
        window.__seen = [];
        new MutationObserver(() => {
            const done = document.querySelector('[data-field="done"]');
            const status = document.querySelector('[data-field="status"]');
            if (done) window.__seen.push(status.textContent + " " + done.textContent);
        }).observe(document.body, {subtree: true, childList: true, characterData: true});
    }""")

    assert queued_runs(tmp_path / "broker.sqlite3") == [run.pk], "the page's trigger publishes to the test broker"
    # The worker starts only now, so the page has to follow the run from Pending to the end.
    with run_queue(AGENTTEST_PROVIDERS_FILE=providers):
        finished = page.locator('#run-body[data-live="0"]')
        try:
            expect(finished).to_be_attached(timeout=RUN_TIMEOUT_MS)
        except AssertionError as exc:
            raise AssertionError(f"the run page did not reach the end\n{worker_log(tmp_path)}") from exc
    assert page.evaluate("window.__sameDocument") is True, "the page reloaded"
    seen = page.evaluate("window.__seen")
    assert seen and seen[-1] == f"Failed {run.total}", f"the poller's last update shows the end: {seen}"
    # The finished results swapped in come with the skip link to their first failure, as a loaded page would.
    expect(page.locator("a.skip-link")).to_have_attribute("href", "#first-failure")
    expect(page.locator("#first-failure")).to_have_count(1)

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED, run.reason
    expect(page.locator('[data-field="status"]')).to_have_text("Failed")
    expect(page.locator(".run-reason")).to_have_text(run.reason)

    # The summary: one row per model, with the pass rates the database holds.
    summaries = {summary.model: summary for summary in run_summary(run=run)}
    assert summaries[HASTY].pass_rate < summaries[CAREFUL].pass_rate, "the hasty model skips the look-up asked for"
    rows = page.locator(".summary-table tbody tr")
    expect(rows).to_have_count(2)
    for row, model in zip(rows.all(), (CAREFUL, HASTY), strict=True):
        summary = summaries[model]
        expect(row.locator("th")).to_have_text(model)
        expect(row.locator(".rate-text")).to_have_text(format_pass_rate(summary.pass_rate))
        expect(row.locator(".count-failed")).to_have_text(str(summary.failed))
    expect(page.locator("svg.chart")).to_be_visible()

    # The matrix: a row per case, a coloured cell per model; "failures only" hides the rest without a reload.
    matrix_rows = page.locator("#matrix-table tbody tr")
    expect(matrix_rows).to_have_count(enabled)
    passed = summaries[CAREFUL].passed + summaries[HASTY].passed
    expect(page.locator("#matrix-table td.cell-passed")).to_have_count(passed)
    failing_cases = CaseResult.objects.filter(run=run, status__in=["failed", "error"]).values("case_id").distinct()
    page.get_by_role("link", name=re.compile("^Failures only")).click()
    expect(page.locator("#matrix-table tbody tr:visible")).to_have_count(failing_cases.count())
    assert page.url.endswith("?show=failures#matrix") and page.evaluate("window.__sameDocument") is True
    page.get_by_role("link", name=re.compile("^All cases")).click()
    expect(page.locator("#matrix-table tbody tr:visible")).to_have_count(enabled)

    # A failed cell, down to the assertion that failed: its expected and actual values as stored.
    page.locator("#matrix-table td.cell-failed a").first.click()
    page.wait_for_url(re.compile(r"/runs/\d+/results/\d+/$"))
    result = CaseResult.objects.get(pk=int(page.url.rstrip("/").rsplit("/", 1)[1]))
    assert result.status == "failed"
    expect(page.get_by_role("heading", level=1)).to_contain_text(result.case_name)
    failed = [item for item in result.assertions if item["status"] == "failed"]
    assert failed, result.assertions
    first = page.locator("tr.assertion-failed").first
    expect(first).to_contain_text(failed[0]["message"])
    shown = {label: first.locator(f'pre[data-label="{label}"]').inner_text() for label in ("expected", "actual")}
    for label, text in shown.items():
        value = failed[0][label]
        assert (json.loads(text) if not isinstance(value, str) else text) == value, (label, text, value)
    expect(page.locator(".tool-call .tool-head .badge").first).to_have_text(re.compile("^(Mocked|Blocked|Allowed)$"))
    context.close()


def test_it_lets_a_member_look_but_not_trigger_or_cancel(sign_in, order_desk, scripted_model, member, live_server):
    suite = Suite.objects.create(name="Order support", agent=order_desk["order-router"])
    pending = Run.objects.create(suite=suite, model_keys=[scripted_model.key], total=8)
    context, page = sign_in(*MEMBER)

    page.goto("/runs/")
    expect(page.get_by_role("link", name=f"#{pending.pk}")).to_be_visible()
    expect(page.get_by_role("link", name="New run")).to_have_count(0)
    page.get_by_role("link", name=f"#{pending.pk}").click()
    expect(page.get_by_role("heading", name="Progress")).to_be_visible()
    expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)

    assert page.goto("/runs/new/").status == 403
    expect(page.get_by_role("alert")).to_have_text("Only admins can trigger runs: every run spends model token quota.")

    csrf = next(cookie["value"] for cookie in context.cookies() if cookie["name"] == "csrftoken")
    trigger = page.request.post("/runs/new/", form={
        "csrfmiddlewaretoken": csrf, "suite": str(suite.pk), "models": scripted_model.key,
    })
    assert trigger.status == 403 and "Only admins can trigger runs" in trigger.text()
    cancel = page.request.post(f"/runs/{pending.pk}/cancel/", form={"csrfmiddlewaretoken": csrf})
    assert cancel.status == 403 and "Only admins can cancel runs" in cancel.text()
    pending.refresh_from_db()
    assert Run.objects.count() == 1 and pending.status == Run.Status.PENDING and not pending.cancel_requested
    context.close()
