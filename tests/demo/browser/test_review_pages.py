"""In a real browser (Playwright driving Debian's Chromium), on the demo suite with a real worker: the questions a
reviewer comes with are answered on the pages, at 1366 and at 800 px wide.

- the matrix says why a case failed, in the cell, and labels its times (case wall time, model latency);
- a failed result names the root cause first with the remedy that fits it (a mocked tool the suite force-blocks);
- the compare page shows per-model deltas, the reasons beside flipped cases and what differs between the runs
  (an edited case as a diff of what each run ran, its flipped row flagged; an edit after both runs shows nothing),
  against the suite's blessed run by default;
- finished results are links in the matrix while the run is still live, and the "queued" notice goes once it runs;
- one cost format, "unpriced" only for a model without a price, thousands separators, trials in the result count;
- the CSV has reason, model latency, tokens, cost and the result link;
- nothing overflows sideways at 800 px on the runs list, run, result and compare pages.
"""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from agenthost.models import Agent
from cases.models import Case, Suite
from cases.services import case_to_document, case_update
from runs.models import CaseResult, Run
from tests.browser.pages import ADMIN, WIDTHS, assert_fits, wait_until_finished
from tests.demo.browser.conftest import CAREFUL, HASTY

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

UNMOCKED_CASE = "An unmocked email is blocked, never sent"
LOOKUP_CASE = "Order status is looked up"

# Records whether the page reloaded, and whether the "queued" notice was still up while the run was Running.
WATCH = """() => {
    window.__sameDocument = true;
    window.__queuedWhileRunning = false;
    new MutationObserver(() => {
        const status = document.querySelector('#run-body [data-field="status"]');
        if (status && status.textContent.trim() === 'Running' && document.querySelector('.flash .run-queued')) {
            window.__queuedWhileRunning = true;
        }
    }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def at_width(page: Page, width: int, url: str, what: str, check=None) -> None:
    page.goto(url)
    assert_fits(page, what)
    if check is not None:
        check(page, width)


def start_run(page: Page, suite: Suite, *, trials: int) -> Run:
    page.goto("/runs/new/")
    page.get_by_label("Suite").select_option(str(suite.pk))
    page.get_by_label(CAREFUL).check()
    page.get_by_label(HASTY).check()
    page.get_by_label("Trials").fill(str(trials))
    before = set(Run.objects.values_list("pk", flat=True))
    page.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    return Run.objects.exclude(pk__in=before).get()


@pytest.mark.parametrize("width", WIDTHS)
def test_it_answers_a_reviewers_questions_on_the_demo(
    sign_in, run_queue, demo_suite, admin_user, save_screenshot, tmp_path, width
):
    context, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": 900})

    def screenshot(name: str) -> None:
        if width == 1366:
            save_screenshot(page, name)

    enabled = demo_suite.cases.filter(enabled=True).count()

    # The trigger page counts every trial, with a thousands separator once there are that many.
    page.goto("/runs/new/")
    page.get_by_label("Suite").select_option(str(demo_suite.pk))
    page.get_by_label(CAREFUL).check()
    page.get_by_label(HASTY).check()
    count = page.locator("#case-count")
    expect(count).to_have_text(f"All {enabled} enabled cases × 2 models = {2 * enabled} results")
    page.get_by_label("Trials").fill("10")
    expect(count).to_have_text(f"All {enabled} enabled cases × 2 models × 10 trials = {20 * enabled} results")
    page.get_by_label("Trials").fill("100")
    expect(count).to_have_text(f"All {enabled} enabled cases × 2 models × 100 trials = {200 * enabled:,} results")
    page.get_by_label("Trials").fill("3")
    expect(count).to_have_text(f"All {enabled} enabled cases × 2 models × 3 trials = {6 * enabled} results")
    screenshot("trigger-page.png")
    page.get_by_label("Trials").fill("1")
    expect(count).to_have_text(f"All {enabled} enabled cases × 2 models = {2 * enabled} results")

    # Live: finished results open while the run is still going, and the queued notice goes once it has started.
    # The simulated models finish a run within one poll, so this run's progress is written here, step by step,
    # as the executor writes it; the page only polls.
    run = start_run(page, demo_suite, trials=3)
    expect(page.locator(".flash .run-queued")).to_contain_text(f"Run #{run.pk} is queued")
    expect(page.locator("#matrix-table td.cell-pending")).to_have_count(2 * enabled)
    page.evaluate(WATCH)
    case = Case.objects.get(pk=run.case_ids[0])
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING, started_at=timezone.now(), current=f"{case.name} on {CAREFUL}"
    )
    expect(page.locator('[data-field="status"]')).to_have_text("Running")
    expect(page.locator(".flash .run-queued")).to_have_count(0)
    landed = CaseResult.objects.create(
        run=run, case=case, case_name=case.name, model=CAREFUL, position=0, status="failed", duration_ms=18,
        model_latency_ms=9, reason="toolCalled (turn 0): lookup_order was not called; no tool was called",
    )
    Run.objects.filter(pk=run.pk).update(failed=1)
    cell = page.locator(f'#run-body[data-live="1"] td[data-cell="{case.pk}|{CAREFUL}"]')
    expect(cell.locator("a")).to_have_attribute("href", f"/runs/{run.pk}/results/{landed.pk}/")
    expect(cell.locator(".cell-reason")).to_have_text(landed.reason)
    expect(page.locator('#run-body[data-live="1"] td.cell-pending')).to_have_count(2 * enabled - 1)
    assert page.evaluate("window.__sameDocument") is True and page.evaluate("window.__queuedWhileRunning") is False
    cell.locator("a").click()
    page.wait_for_url(f"**/runs/{run.pk}/results/{landed.pk}/")
    Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED, finished_at=timezone.now(), current="")

    with run_queue():
        # A single-trial run: its cells say why, and what the milliseconds are.
        first = start_run(page, demo_suite, trials=1)
        wait_until_finished(page, tmp_path)
        first.refresh_from_db()
        assert first.status == Run.Status.FAILED, first.reason
        unmocked = CaseResult.objects.get(run=first, case_name=UNMOCKED_CASE, model=CAREFUL)
        assert unmocked.status == "failed"
        assert unmocked.reason.startswith("util-email-handle_email_sender has no mock, so it was blocked (add a mock")
        cell = page.locator(f'#matrix-table td[data-cell="{unmocked.case_id}|{CAREFUL}"]')
        expect(cell.locator(".cell-reason")).to_be_visible()
        expect(cell.locator(".cell-reason")).to_contain_text("util-email-handle_email_sender has no mock")
        expect(cell.locator(".cell-times")).to_have_text(re.compile(r"^case [\d.]+ (ms|s) · model [\d.]+ (ms|s)$"))
        expect(page.locator(".matrix-legend")).to_contain_text("the case's wall time")
        passed_cells = page.locator("#matrix-table td.cell-passed")
        expect(passed_cells.locator(".cell-reason")).to_have_count(0)

        # Numbers: simulated models are free ($0, never "unpriced"); tokens carry thousands separators.
        for row in page.locator(".summary-table tbody tr").all():
            expect(row.locator("td.cost")).to_have_text("$0")
            expect(row.locator("td.tokens")).to_have_text(
                re.compile(r"^\d{1,3}(,\d{3})* / \d{1,3}(,\d{3})*(\+ \d{1,3}(,\d{3})* judge)?$")
            )
        expect(page.locator(".summary-table td.tokens").first).to_contain_text(re.compile(r"\d,\d{3}"))

        # CSV: reason, model latency, tokens, cost and the result's link per model.
        rows = list(csv.reader(io.StringIO(page.request.get(f"/runs/{first.pk}/matrix.csv").text())))
        header = rows[0]
        for part in ("status", "duration_ms", "model_latency_ms", "input_tokens", "output_tokens", "cost_usd",
                     "reason", "result_url"):
            assert f"{CAREFUL} {part}" in header and f"{HASTY} {part}" in header
        line = next(row for row in rows if row[1] == UNMOCKED_CASE)
        assert line[header.index(f"{CAREFUL} reason")] == unmocked.reason
        assert line[header.index(f"{CAREFUL} result_url")].endswith(f"/runs/{first.pk}/results/{unmocked.pk}/")
        assert line[header.index(f"{CAREFUL} cost_usd")] == "0"

        # Bless it: the known-good run later runs compare with.
        page.get_by_role("button", name="Bless as baseline").click()
        expect(page.locator(".run-header .badge.blessed")).to_have_text("Blessed baseline")
        first.refresh_from_db()
        assert first.is_blessed
        assert_fits(page, "the run page")
        screenshot("run-page.png")

        # What changes next: the suite force-blocks the look-up its cases mock, the router's instruction gains a
        # line, and one case's assertion is edited.
        Suite.objects.filter(pk=demo_suite.pk).update(force_blocked_functions=["lookup_order"])
        router = Agent.objects.get(name="order-router")
        router.instruction += "\nAlways greet the customer by name."
        router.save()
        edited = Case.objects.get(suite=demo_suite, name=LOOKUP_CASE)
        document = case_to_document(case=edited)
        for check in document["turns"][0]["assertions"]:
            if check["type"] == "outputRegex":
                check["params"]["pattern"] = r"\b(shipped|on its way|in transit)\b"
        case_update(case=edited, document=document)
        second = start_run(page, demo_suite, trials=1)
        wait_until_finished(page, tmp_path)

    # The result names the root cause first, with the remedy that fits a mocked, force-blocked tool.
    broken = CaseResult.objects.get(run=second, case_name=LOOKUP_CASE, model=CAREFUL)
    assert broken.status == "failed"
    cause = (
        "lookup_order is force-blocked by the suite (it has a mock; remove it from the suite's force-blocked "
        "functions to let the mock answer)"
    )
    assert broken.reason.startswith(cause), broken.reason
    assert "unmocked" not in broken.reason and "add a mock" not in broken.reason

    def result_check(page: Page, width: int) -> None:
        expect(page.locator(".run-reason")).to_contain_text(cause)
        expect(page.locator("dl.run-meta")).to_contain_text("Case time")

    at_width(page, width, f"/runs/{second.pk}/results/{broken.pk}/", "the result page", result_check)

    # The compare page, against the blessed run by default.
    def compare_check(page: Page, width: int) -> None:
        expect(page.locator(".baseline-why")).to_contain_text(f"Baseline: run #{first.pk}, the blessed baseline")
        deltas = page.locator(".deltas-table tbody tr")
        expect(deltas).to_have_count(2)
        careful = page.locator(f'.deltas-table tr[data-model="{CAREFUL}"]')
        expect(careful.locator(".delta-rate")).to_contain_text(re.compile(r"[\d.]+% → [\d.]+%\s*−[\d.]+ pts"))
        expect(careful.locator(".delta-latency")).to_contain_text("→")
        expect(careful.locator(".delta-tokens")).to_contain_text("→")
        expect(careful.locator(".delta-cost")).to_have_text(re.compile(r"^\$0 → \$0"))
        instruction = page.locator('[data-difference="instruction"]')
        expect(instruction).to_contain_text("Instruction changed")
        expect(instruction.locator(".diff-add")).to_have_text("+Always greet the customer by name.")
        change = page.locator(f'[data-difference="cases-changed"] .case-change[data-case="{LOOKUP_CASE}"]')
        expect(change.locator(".diff-add")).to_contain_text("in transit")
        flip = page.locator(".flip-row.flip-broke", has_text=LOOKUP_CASE).first
        expect(flip.locator(".flip-reason")).to_contain_text("lookup_order is force-blocked by the suite")
        expect(flip.locator(".badge.case-changed")).to_have_attribute("href", f"#{change.get_attribute('id')}")
        screenshot("compare-page.png")

    at_width(page, width, f"/runs/{second.pk}/compare/", "the compare page", compare_check)

    # An edit made after both runs is in neither: the comparison, built from what each run ran, does not show it.
    late = Case.objects.get(suite=demo_suite, name=UNMOCKED_CASE)
    document = case_to_document(case=late)
    document["turns"][0]["user_message"] += " Thanks."
    case_update(case=late, document=document)
    page.goto(f"/runs/{second.pk}/compare/")
    changed = page.locator('[data-difference="cases-changed"] .case-change')
    expect(changed.and_(page.locator(f'[data-case="{LOOKUP_CASE}"]'))).to_have_count(1)
    expect(changed.and_(page.locator(f'[data-case="{UNMOCKED_CASE}"]'))).to_have_count(0)

    # The run page and the runs list fit too, model names whole, every summary column on screen.
    def run_check(page: Page, width: int) -> None:
        for cell in page.locator(".summary-table tbody tr td.cost").all():
            box = cell.bounding_box()
            assert box and box["x"] + box["width"] <= width, f"the cost column is off-screen at {width} px"
        expect(page.locator("#matrix-table .cell-reason").first).to_be_visible()

    at_width(page, width, f"/runs/{first.pk}/", "the run page", run_check)
    at_width(page, width, "/runs/", "the runs list")
    context.close()
