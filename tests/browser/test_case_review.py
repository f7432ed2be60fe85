"""Issue 16, item 6, in a real browser: a recorded draft's admin page is readable on one screen — each turn with its
assertions and the mocks of its calls, the case-level assertions labelled as such, long JSON folded — and the page is
never wider than the window, at 1366 and at 800 px, even with every editing section open."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from agenthost.llm.scripted import Answer, Call, Entry
from recording.services import recording_create
from tests.browser.conftest import EMAIL, cancellation_of_1043
from tests.order_tools import TRACK_ORDER, VOID_ORDER
from tests.recording.conftest import THREE_TOPICS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ADMIN = ("root", "root-password-123")


def page_width(page: Page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


def open_every_section(page: Page) -> None:
    page.evaluate("document.querySelectorAll('details').forEach(details => { details.open = true; })")


@pytest.mark.parametrize(("width", "height"), [(1366, 768), (800, 900)])
def test_it_shows_a_recorded_draft_for_review_on_one_screen(sign_in, save_screenshot, cancel_draft, width, height):
    context, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": height})
    failed = []
    page.on("response", lambda response: failed.append(response.url) if response.status >= 400 else None)
    # goto waits for the load event: every file the page names has answered by then. (Waiting for the network to be
    # idle timed out at 120 s on a loaded machine; the page fetches nothing after it loads.)
    page.goto(f"/admin/cases/case/{cancel_draft.pk}/change/")
    assert failed == [], "nothing the page asks for is missing"
    # Browsers ask every page that names no icon, the admin's, for /favicon.ico.
    favicon = page.request.get("/favicon.ico")
    assert (favicon.status, favicon.headers["content-type"]) == (200, "image/svg+xml")

    review = page.locator(".case-review")
    expect(review.get_by_role("heading", name="Review", exact=True)).to_be_visible()
    expect(review.locator(".review-summary")).to_contain_text("Disabled draft · Recorded from conversation #")
    expect(review.locator(".review-warnings")).to_contain_text("left out: reason (optional)")
    turn = review.get_by_role("region", name="Turn 0")
    expect(turn.locator("h3")).to_contain_text("Please cancel order 1043, my email is ana@example.com")
    expect(turn.locator(".review-assertion .review-kind")).to_have_text([TRACK_ORDER, VOID_ORDER, EMAIL])
    expect(turn.locator(".review-mock > .review-kind")).to_have_text([TRACK_ORDER, VOID_ORDER, EMAIL])
    cancel_mock = turn.locator(".review-mock").nth(1)
    expect(cancel_mock).to_contain_text('writes state {"order_id": "1043", "order_status": "cancelled"}')
    expect(turn.locator(".review-mock").nth(2)).not_to_contain_text("writes state")

    case_level = review.get_by_role("region", name="Case-level assertions")
    expect(case_level.locator("h3")).to_contain_text("checked over the whole conversation, after the last turn")
    expect(case_level.locator(".review-assertion")).to_have_text(
        ['State equals order_id = "1043"', 'State equals order_status = "cancelled"']
    )

    # The look-up's result is long: folded under its first characters until opened.
    folded = turn.locator(".review-mock").first.locator("details.review-json")
    full = folded.locator("pre")
    expect(full).to_be_hidden()
    expect(folded.locator("summary")).to_contain_text('{"order_id": "1043", "status": "processing"')
    folded.locator("summary").click()
    expect(full).to_be_visible()
    expect(full).to_contain_text('"customer_email": "customer1043@example.com"')
    folded.locator("summary").click()

    if width == 1366:
        bottom = review.bounding_box()["y"] + review.bounding_box()["height"]
        assert bottom <= height, f"the review ends at {bottom} px, below a {height} px screen"
        save_screenshot(page, "case-review-admin.png")
    assert page_width(page) <= width

    # Editing is one click away, and no section widens the page when open.
    expect(page.locator("textarea[name=initial_state]")).to_be_hidden()
    open_every_section(page)
    assert page_width(page) <= width
    turn_choices = page.locator("select[name$='-turn']:not([name*='__prefix__'])")
    case_level_choices = [
        turn_choices.nth(index).locator("option:checked").inner_text() for index in range(turn_choices.count())
    ]
    assert case_level_choices.count("Case-level (after the last turn)") == 2
    assert "---------" not in case_level_choices
    context.close()


def looked_up(order_id: str, reply: str) -> list[Entry]:
    """A turn that looks one order up and answers about it."""
    return [Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": order_id})]), reply]


def test_it_groups_each_turns_mocks_with_that_turn_in_a_long_conversation(
    sign_in, order_desk, scripted_model, admin_user, talk
):
    # Three goals in four turns: the status and the items of order 1042, cancelling 1043 (look-up, cancellation,
    # confirmation email), then cancelling 1047, which the look-up finds delivered.
    scripted_model.play(
        *looked_up("1042", "Order 1042 is delivered."),
        *looked_up("1042", "Order 1042 holds item-42."),
        *cancellation_of_1043(),
        *looked_up("1047", "I checked: order 1047 is already delivered, so I did not change it."),
    )
    conversation = talk(
        order_desk["order-cancellation"], *THREE_TOPICS, initial_state={"customer_email": "bo@example.com"}
    )
    case = recording_create(conversation=conversation).cases[0]
    context, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": 800, "height": 900})
    page.goto(f"/admin/cases/case/{case.pk}/change/")

    mocks_per_turn = [
        page.get_by_role("region", name=f"Turn {number}").locator(".review-mock > .review-kind").all_inner_texts()
        for number in range(4)
    ]
    assert mocks_per_turn == [[TRACK_ORDER], [TRACK_ORDER], [TRACK_ORDER, VOID_ORDER, EMAIL], [TRACK_ORDER]]
    # The look-up is called four times: each mock keeps the order it looked up, and shows which call it answers.
    expect(page.get_by_role("region", name="Turn 3").locator(".review-mock")).to_contain_text(
        '{"order_id": "1047"} call #3'
    )
    assert page_width(page) <= 800
    context.close()
