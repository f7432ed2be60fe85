"""Issue 25, items 1 and 2, in a real browser (Playwright driving Debian's Chromium) on a suite of the order desk, at
1366 and 800 px: a reviewer blesses a run, the suite then force-blocks the look-up its case mocks, and the next run's
page says what regressed against the blessed baseline — counted and listed at the top, each flipped cell marked in the
matrix (an arrow and a word, not colour alone), the runs list naming the baseline and its regressions — and a flipped
case opens side by side with its baseline, the first divergence marked and linked from the top. Nothing scrolls
sideways at 800 px.

The runs execute in-process (the scripted models answer at once); only the pages need the browser.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, expect

from agenthost.llm.base import ModelRequest
from agenthost.llm.scripted import Answer, Call, Entry
from cases.models import Suite
from cases.services import case_create
from runs.models import CaseResult, Run
from runs.services import run_create, run_execute
from tests.browser.conftest import SCRIPTED, SCRIPTED_OTHER
from tests.order_tools import TRACK_ORDER

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ADMIN = ("root", "root-password-123")
LOOKUP_CASE = "Order status is looked up"
WHERE_IS_1042 = "Where is my order #1042?"
WIDTHS = (1366, 800)


def assert_fits(page: Page, what: str) -> None:
    """No horizontal overflow, and no model key cut or off-screen."""
    scroll, window = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= window, f"{what} overflows at {window} px: {scroll} px wide"
    cut = page.evaluate("""() => [...document.querySelectorAll('code.model-key, .sbs-step, pre.code')]
        .filter(el => el.getBoundingClientRect().right > innerWidth + 1
                      || (el.matches('code.model-key') && el.scrollWidth > el.clientWidth + 1))
        .map(el => el.textContent.slice(0, 80))""")
    assert not cut, f"{what}: cut or off-screen at {window} px: {cut}"


def answer_by_rule(request: ModelRequest) -> Entry:
    """The order-lookup agent, on either model: it looks order 1042 up when asked where it is and says it has shipped
    once the look-up answered (a blocked look-up ends the turn itself); anything else it greets."""
    last = request.messages[-1]
    if last["role"] == "tool":
        return "Order 1042 has shipped."
    if last["content"] == WHERE_IS_1042:
        return Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1042"})])
    return "Hello! How can I help you today?"


@pytest.fixture
def lookup_suite(order_desk) -> Suite:
    """The look-up agent's suite: a case that mocks the look-up, and small talk that calls nothing (it never flips)."""
    suite = Suite.objects.create(name="Order look-ups", agent=order_desk["order-lookup"])
    case_create(suite=suite, document={
        "name": LOOKUP_CASE,
        "turns": [{"user_message": WHERE_IS_1042, "assertions": [
            {"type": "toolCalled", "params": {"function": TRACK_ORDER, "arguments": {"order_id": "1042"}}},
            {"type": "outputContains", "params": {"text": "shipped"}},
        ]}],
        "mocks": [{"function_name": TRACK_ORDER, "result": json.dumps({"order_id": "1042", "status": "shipped"})}],
    })
    case_create(suite=suite, document={
        "name": "Small talk",
        "turns": [{"user_message": "Hello!", "assertions": [{"type": "outputContains", "params": {"text": "help"}}]}],
    })
    return suite


def test_it_marks_regressions_against_the_blessed_baseline_and_shows_a_flipped_case_side_by_side(
    sign_in, lookup_suite, two_scripted_models, admin_user, save_screenshot
):
    suite = lookup_suite
    two_scripted_models.respond_with(answer_by_rule)

    def execute() -> Run:
        return run_execute(
            run_id=run_create(suite=suite, model_keys=[SCRIPTED, SCRIPTED_OTHER], triggered_by=admin_user).pk
        )

    blessed = execute()
    context, page = sign_in(*ADMIN)
    page.goto(f"/runs/{blessed.pk}/")
    expect(page.locator("#flipped")).to_have_count(0)  # the suite's first run has nothing to compare with
    page.get_by_role("button", name="Bless as baseline").click()
    expect(page.locator(".run-header .badge.blessed")).to_have_text("Blessed baseline")

    # An unblessed run in between: the next run still compares with the blessed one, not with the previous run.
    execute()
    Suite.objects.filter(pk=suite.pk).update(force_blocked_functions=[TRACK_ORDER])
    current = execute()
    regressed = CaseResult.objects.get(run=current, case_name=LOOKUP_CASE, model=SCRIPTED)
    before = CaseResult.objects.get(run=blessed, case_name=LOOKUP_CASE, model=SCRIPTED)
    assert (before.status, regressed.status) == ("passed", "failed"), regressed.reason
    was = {(result.case_name, result.model): result.status == "passed" for result in blessed.results.all()}
    now = {(result.case_name, result.model): result.status == "passed" for result in current.results.all()}
    regressions = {pair for pair, passed in now.items() if was[pair] and not passed}
    flipped = {pair for pair, passed in now.items() if was[pair] != passed}
    assert (LOOKUP_CASE, SCRIPTED) in regressions

    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})

        # The run page: counted and listed at the top, against the blessed baseline.
        page.goto(f"/runs/{current.pk}/")
        top = page.locator("#flipped")
        expect(top.get_by_role("heading")).to_have_text(f"{len(flipped)} flipped since baseline #{blessed.pk}")
        expect(top.locator(".baseline-why")).to_contain_text(f"Run #{blessed.pk} is the blessed baseline")
        expect(top.locator('[data-count="regressions"]')).to_have_text(f"{len(regressions)} regressions")
        item = top.locator(f'.flip-item.flip-broke[data-case="{LOOKUP_CASE}"][data-model="{SCRIPTED}"]')
        expect(item).to_contain_text("Passed → Failed")
        expect(item.get_by_role("link", name=LOOKUP_CASE)).to_have_attribute(
            "href", f"/runs/{current.pk}/results/{regressed.pk}/"
        )

        # The matrix: the flipped cell carries a marker in words, and its full label for a screen reader.
        cell = page.locator(f'#matrix-table td[data-cell="{regressed.case_id}|{SCRIPTED}"]')
        expect(cell.locator(".flip-mark")).to_be_visible()
        expect(cell.locator(".flip-mark")).to_have_text(
            f"▼ Regressed since baseline #{blessed.pk}: it passed there", use_inner_text=False
        )
        expect(cell.get_by_role("link")).to_have_accessible_name(re.compile(r"Regressed since baseline #\d+"))
        expect(page.locator("#matrix-table .flip-mark")).to_have_count(len(flipped))
        page.locator('[data-matrix-filter="flipped"]').click()
        expect(page.locator("#matrix-table tbody tr:visible")).to_have_count(len({case for case, _ in flipped}))
        assert_fits(page, "the run page")
        if width == 1366:
            save_screenshot(page, "run-page-regressions.png")

        # The runs list: the baseline each run compares with, and how many regressed.
        page.goto("/runs/")
        row = page.locator("tr", has=page.get_by_role("link", name=f"#{current.pk}", exact=True))
        since = row.locator("td.since-baseline")
        expect(since.get_by_role("link")).to_have_text(f"#{blessed.pk}")
        expect(since.locator(".badge.blessed")).to_have_text("blessed")
        expect(since.locator('[data-count="regressions"]')).to_have_text(f"▼ {len(regressions)} regressions")
        assert_fits(page, "the runs list")

        # The result page of the flipped case: the baseline's verdict, linked, and the way to the side by side.
        page.goto(f"/runs/{current.pk}/results/{regressed.pk}/")
        context_box = page.locator(".baseline-context")
        expect(context_box).to_contain_text(f"Regression since baseline #{blessed.pk}")
        expect(context_box.locator("[data-baseline-status]")).to_have_attribute(
            "href", f"/runs/{blessed.pk}/results/{before.pk}/"
        )
        assert_fits(page, "the result page")
        context_box.get_by_role("link", name="See the two side by side").click()

        # Side by side: the baseline on the left, the first divergence marked and linked from the top.
        page.wait_for_url(f"**/runs/{current.pk}/results/{regressed.pk}/side-by-side/?with={before.pk}")
        heads = page.locator(".sbs-head")
        expect(heads).to_have_count(2)
        expect(heads.nth(0)).to_contain_text(f"Run #{blessed.pk}")
        expect(heads.nth(0)).to_contain_text("the blessed baseline")
        expect(heads.nth(1)).to_contain_text(f"Run #{current.pk}")
        summary = page.locator(".divergence-summary")
        expect(summary).to_contain_text("First divergence: Turn 0, messages and tool calls")
        expect(summary).to_contain_text(f"called {TRACK_ORDER}")
        expect(summary).to_contain_text("(mocked)")
        expect(summary).to_contain_text("(blocked)")
        summary.get_by_role("link", name="First divergence").click()
        expect(page.locator("#divergence")).to_be_in_viewport()
        diverging = page.locator(".sbs-step.sbs-diverges")
        expect(diverging).to_have_count(2)
        expect(diverging.nth(0).locator(".badge")).to_have_text("Mocked")
        expect(diverging.nth(1).locator(".badge.outcome-blocked")).to_have_text("Blocked")
        expect(diverging.nth(1).locator(".sbs-difference")).to_have_text("different outcome")
        assert_fits(page, "the side-by-side page")
        if width == 1366:
            save_screenshot(page, "side-by-side.png")

        # The case on every model of the run, from the matrix row.
        page.goto(f"/runs/{current.pk}/")
        page.locator(f'#matrix-table tr[data-row="{regressed.case_id}"] .row-models').click()
        expect(page.locator(".sbs-head")).to_have_count(2)
        expect(page.locator(".sbs-head").nth(0)).to_contain_text(SCRIPTED)
        expect(page.locator(".sbs-head").nth(1)).to_contain_text(SCRIPTED_OTHER)
        assert_fits(page, "the models side by side")

    # Long JSON wraps in its column at 800 px: an argument of one unbroken 2,000-character token.
    transcript = [
        {**row, "arguments": {"note": "x" * 2000}} if row.get("function_name") == TRACK_ORDER else row
        for row in regressed.transcript
    ]
    CaseResult.objects.filter(pk=regressed.pk).update(transcript=transcript)
    page.goto(f"/runs/{current.pk}/results/{regressed.pk}/side-by-side/")
    long_json = page.locator(".sbs-step.sbs-diverges").nth(1).locator("pre.code").first
    expect(long_json).to_contain_text("x" * 2000)
    assert long_json.evaluate("el => el.scrollWidth <= el.clientWidth + 1"), "the long JSON scrolls instead of wrapping"
    assert_fits(page, "the side-by-side page with long JSON")
    context.close()
