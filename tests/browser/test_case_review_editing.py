"""Issue 25, item 6, in a real browser at 1366 and 800 px: a recorded draft is enabled (and disabled again) with one
click from the review panel, a case that cannot be enabled says why, and an assertion is edited through the typed
fields of its type — the JSON saved is what the fields say, and a bad value is the field's error with nothing saved."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from cases.models import Assertion, Case, Turn
from tests.browser.test_case_review import ADMIN

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SIZES = [(1366, 768), (800, 900)]


def open_case(sign_in, case: Case, width: int, height: int) -> Page:
    _, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": height})
    page.goto(f"/admin/cases/case/{case.pk}/change/")
    return page


def assertion_row(page: Page, assertion: Assertion):
    page.locator("#assertions-group summary").click()
    row = page.locator("#assertions-group tr.form-row").filter(
        has=page.locator(f"input[name$='-id'][value='{assertion.pk}']")
    )
    expect(row).to_have_count(1)
    return row


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_it_enables_a_recorded_draft_from_the_review_panel_and_disables_it_again(
    sign_in, cancel_draft, width, height
) -> None:
    page = open_case(sign_in, cancel_draft, width, height)
    review = page.locator(".case-review")
    enable = review.get_by_role("button", name="Enable", exact=True)
    # On the first screen, not 1,176 px down.
    box = enable.bounding_box()
    assert box is not None and box["y"] + box["height"] <= height
    enable.click()

    expect(page.locator(".messagelist .success")).to_contain_text(f"Enabled {cancel_draft.name!r}")
    expect(review.locator(".review-summary strong")).to_have_text("Enabled")
    cancel_draft.refresh_from_db()
    assert cancel_draft.enabled

    review.get_by_role("button", name="Disable", exact=True).click()
    expect(page.locator(".messagelist .success")).to_contain_text(f"Disabled {cancel_draft.name!r}")
    expect(review.get_by_role("button", name="Enable", exact=True)).to_be_visible()
    cancel_draft.refresh_from_db()
    assert not cancel_draft.enabled
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_it_says_why_a_case_cannot_be_enabled(sign_in, cancel_draft, width, height):
    Turn.objects.filter(case=cancel_draft).delete()
    page = open_case(sign_in, cancel_draft, width, height)
    page.locator(".case-review").get_by_role("button", name="Enable", exact=True).click()

    error = page.locator(".messagelist .error")
    expect(error).to_contain_text(f"{cancel_draft.name!r} is still disabled")
    expect(error).to_contain_text("at least one turn with a user message is required")
    expect(page.locator(".case-review .review-summary strong")).to_have_text("Disabled draft")
    cancel_draft.refresh_from_db()
    assert not cancel_draft.enabled
    # The message wraps inside the window.
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_it_saves_an_assertion_edited_through_its_typed_fields(sign_in, cancel_draft, width, height):
    assertion = cancel_draft.assertions.get(type="stateEquals", params__key="order_status")
    page = open_case(sign_in, cancel_draft, width, height)
    row = assertion_row(page, assertion)
    # The type's own fields, filled from the stored params; no JSON box until asked for.
    expect(row.locator("[name$='-param_key']")).to_have_value("order_status")
    expect(row.locator("[name$='-param_value']")).to_have_value('"cancelled"')
    expect(row.locator("[name$='-param_text']")).to_be_hidden()
    expect(row.locator("textarea[name$='-params']")).to_be_hidden()

    row.locator("select[name$='-type']").select_option("outputContains")
    expect(row.locator("[name$='-param_key']")).to_be_hidden()
    row.locator("[name$='-param_text']").fill("cancelled")
    row.get_by_label("case sensitive").check()
    row.locator("input[name$='-fatal']").check()
    # Edit as JSON shows what the fields say.
    row.get_by_label("Edit as JSON").check()
    json_box = row.locator("textarea[name$='-params']")
    expect(json_box).to_be_visible()
    assert page.evaluate("text => JSON.parse(text)", json_box.input_value()) == {
        "text": "cancelled",
        "case_sensitive": True,
    }
    row.get_by_label("Edit as JSON").uncheck()
    expect(json_box).to_be_hidden()
    page.get_by_role("button", name="Save and continue editing").first.click()

    expect(page.locator(".messagelist .success")).to_be_visible()
    assertion.refresh_from_db()
    assert (assertion.type, assertion.params, assertion.fatal) == (
        "outputContains",
        {"text": "cancelled", "case_sensitive": True},
        True,
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_it_shows_a_bad_typed_value_on_its_field_and_saves_nothing(sign_in, cancel_draft, width, height):
    assertion = cancel_draft.assertions.get(type="stateEquals", params__key="order_status")
    page = open_case(sign_in, cancel_draft, width, height)
    row = assertion_row(page, assertion)
    row.locator("[name$='-param_value']").fill("cancelled")  # not JSON: text goes in quotes
    row.locator("[name$='-param_key']").fill("")
    page.get_by_role("button", name="Save and continue editing").first.click()

    expect(page.locator(".errornote")).to_be_visible()
    row = page.locator("#assertions-group tr.form-row").filter(
        has=page.locator(f"input[name$='-id'][value='{assertion.pk}']")
    )
    value = row.locator(".param-field[data-name='value']")
    expect(value).to_be_visible()
    expect(value.locator(".errorlist")).to_contain_text("Not valid JSON")
    expect(row.locator(".param-field[data-name='key'] .errorlist")).to_contain_text("is required for stateEquals")
    assertion.refresh_from_db()
    assert assertion.params == {"key": "order_status", "value": "cancelled"}
    assert page.evaluate("document.documentElement.scrollWidth") <= width
