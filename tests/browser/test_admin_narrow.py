"""Issue 25, item 7, in a real browser: the admin's cases list, runs list and case form at 800 px (and at 1366 px)
cut nothing off — no element's content wider than its box, the page no wider than the window, the Enabled column on
screen — and below 1000 px the navigation sidebar starts closed."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from cases.models import Case, Suite
from runs.models import Run
from tests.browser.conftest import SCRIPTED, SCRIPTED_OTHER
from tests.browser.test_case_review import ADMIN

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SIZES = [(1366, 768), (800, 900)]
SUITE_CASES = (
    "Order status is looked up",
    "Cancellation checks the order and confirms by email",
    "An unmocked email is blocked, never sent",
    "Routing: a cancellation goes to order-cancellation",
)

# Elements whose content is wider than their box and hidden or scrolled: what a reader cannot see. Left out: boxes
# made to hide (screen-reader text of 1 px), text fields (their text scrolls by nature) and a text cut with an
# ellipsis on purpose (a folded JSON preview, which opens on a click).
CLIPPED = """() => [...document.querySelectorAll('body *')].filter(element => {
    const style = getComputedStyle(element);
    if (style.display === 'none' || style.visibility === 'hidden' || element.clientWidth <= 2) return false;
    if (['INPUT', 'TEXTAREA', 'SELECT'].includes(element.tagName) || style.textOverflow === 'ellipsis') return false;
    return style.overflowX !== 'visible' && element.scrollWidth > element.clientWidth + 1;
}).map(element => `${element.tagName}.${element.className} ${element.scrollWidth}/${element.clientWidth}`)"""


def assert_nothing_cut(page: Page, width: int) -> None:
    assert page.evaluate(CLIPPED) == []
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def in_viewport(page: Page, locator) -> bool:
    box = locator.bounding_box()
    return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size["width"]


@pytest.fixture
def admin_pages(order_desk, cancel_draft, two_scripted_models) -> Case:
    """The recorded draft, beside a suite of cases with long names and a run of that suite on two models."""
    suite = Suite.objects.create(name="Order support", agent=order_desk["order-router"])
    for name in SUITE_CASES:
        Case.objects.create(suite=suite, name=name)
    Run.objects.create(suite=suite, model_keys=[SCRIPTED, SCRIPTED_OTHER], total=2 * len(SUITE_CASES))
    return cancel_draft


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_it_fits_the_cases_list_in_the_window(sign_in, save_screenshot, admin_pages, width, height):
    _, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": height})
    page.goto("/admin/cases/case/")
    sidebar = page.locator("#nav-sidebar")
    if width < 1000:
        expect(sidebar).to_be_hidden()
        expect(page.locator("#toggle-nav-sidebar")).to_be_visible()
    else:
        expect(sidebar).to_be_visible()

    draft = page.locator("#result_list tbody tr").filter(has_text=admin_pages.name)
    for cell in (draft.locator("th.field-name"), draft.locator("td.field-enabled")):
        expect(cell).to_be_visible()
        assert in_viewport(page, cell)
    assert in_viewport(page, page.locator("#result_list th.column-updated_at"))
    # The action select sits beside its label, not over the filters.
    select = page.locator("#changelist .actions select").bounding_box()
    filters = page.locator("#changelist-filter").bounding_box()
    assert select["x"] + select["width"] <= filters["x"] or select["y"] >= filters["y"] + filters["height"]
    assert_nothing_cut(page, width)
    if width == 800:
        save_screenshot(page, "admin-cases-800.png")


def test_it_opens_the_closed_sidebar_at_800_px_and_remembers_the_choice(sign_in, admin_pages):
    _, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": 800, "height": 900})
    page.goto("/admin/cases/case/")
    expect(page.locator("#nav-sidebar")).to_be_hidden()
    page.locator("#toggle-nav-sidebar").click()
    expect(page.locator("#nav-sidebar")).to_be_visible()
    page.reload()
    expect(page.locator("#nav-sidebar")).to_be_visible()
    # Open, it leaves the list less room: the table may scroll in its own box, the page never.
    assert page.evaluate("document.documentElement.scrollWidth") <= 800
    draft = page.locator("#result_list tbody tr").filter(has_text=admin_pages.name)
    for cell in (draft.locator("th.field-name"), draft.locator("td.field-enabled")):
        assert in_viewport(page, cell)


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_it_fits_the_runs_list_in_the_window(sign_in, admin_pages, width, height):
    _, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": height})
    page.goto("/admin/runs/run/")
    row = page.locator("#result_list tbody tr").first
    for cell in (row.locator("th.field-id"), row.locator("td.field-status"), row.locator("td.field-created_at")):
        expect(cell).to_be_visible()
        assert in_viewport(page, cell)
    assert_nothing_cut(page, width)


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_it_shows_the_case_form_whole_with_the_reviewers_warnings_wrapped(sign_in, admin_pages, width, height):
    _, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": height})
    page.goto(f"/admin/cases/case/{admin_pages.pk}/change/")
    assert_nothing_cut(page, width)

    page.evaluate("document.querySelectorAll('details:not(.review-json)').forEach(d => { d.open = true; })")
    warnings = page.locator(".field-warnings_display .readonly")
    expect(warnings).to_contain_text("left out: reason (optional)")
    box = warnings.bounding_box()
    assert box["x"] + box["width"] <= width
    assert_nothing_cut(page, width)
