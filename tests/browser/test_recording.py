"""In a real browser (Playwright driving Debian's Chromium, see conftest.py): an admin records a conversation of the
order desk, reviews the draft in the admin, edits an assertion, enables it and sees it count in the suite; a member
gets no record button and a 403 from the API."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from agenthost.models import Conversation
from agenthost.services import conversation_start
from cases.models import Case
from tests.browser.pages import ADMIN, MEMBER
from tests.order_tools import VOID_ORDER

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def members_own(order_desk, member) -> Conversation:
    """A conversation of the member's with the order desk, nothing said yet."""
    return conversation_start(agent=order_desk["order-router"], owner=member, title="Mia's question")


def test_it_records_reviews_and_enables_a_draft(sign_in, save_screenshot, cancel_conversation):
    conversation = cancel_conversation
    context, page = sign_in(*ADMIN)

    page.goto("/conversations/")
    page.get_by_role("link", name="Cancel order 1043").click()
    expect(page.get_by_role("heading", name="Cancel order 1043")).to_be_visible()
    expect(page.locator(".msg-user")).to_have_text(["User Please cancel order 1043, my email is ana@example.com"])
    expect(page.locator(".tool-name", has_text=VOID_ORDER).first).to_be_visible()
    save_screenshot(page, "recording-conversation.png")

    page.get_by_role("button", name="Record as draft").click()

    page.wait_for_url("**/admin/cases/case/*/change/")
    case = Case.objects.get(source_conversation=conversation)
    notice = "Recorded 1 disabled draft in suite 'Recorded: order-router' (a new suite)"
    expect(page.locator(".messagelist")).to_contain_text(notice)
    expect(page.locator("input[name=name]")).to_have_value(f"Recorded from {conversation}")
    expect(page.locator("input[name=enabled]")).not_to_be_checked()
    expect(page.get_by_role("link", name=f"Conversation #{conversation.pk}")).to_be_visible()
    save_screenshot(page, "recording-draft-in-admin.png")

    # The generated assertion of the cancellation already leaves out the reason the model wrote; the reviewer makes it
    # fatal, in the Assertions section folded under the review.
    cancel_assertion = case.assertions.get(type="toolCalled", params__function=VOID_ORDER)
    assert cancel_assertion.params == {"function": VOID_ORDER, "arguments": {"order_id": "1043"}}
    index = list(case.assertions.order_by("position", "id").values_list("id", flat=True)).index(cancel_assertion.pk)
    fatal = page.locator(f"input[name=assertions-{index}-fatal]")
    expect(fatal).to_be_hidden()
    page.locator("#assertions-group summary").click()
    fatal.check()
    page.get_by_role("button", name="Save and continue editing").first.click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    cancel_assertion.refresh_from_db()
    assert cancel_assertion.fatal is True
    assert cancel_assertion.params == {"function": VOID_ORDER, "arguments": {"order_id": "1043"}}

    page.goto(f"/admin/cases/case/?suite__id__exact={case.suite_id}")
    page.locator(f"input[name=_selected_action][value='{case.pk}']").check()
    page.locator("select[name=action]").select_option("enable_selected")
    page.get_by_role("button", name="Go").click()
    expect(page.locator(".messagelist")).to_contain_text("Enabled 1 case(s).")

    suite = page.request.get(f"/api/suites/{case.suite_id}/").json()
    assert (suite["case_count"], suite["enabled_case_count"]) == (1, 1)
    page.goto(f"/admin/cases/case/?suite__id__exact={case.suite_id}&enabled__exact=1")
    expect(page.get_by_role("link", name=f"Recorded from {conversation}")).to_be_visible()
    context.close()


def test_it_gives_a_member_no_record_button_and_a_403(sign_in, members_own):
    context, page = sign_in(*MEMBER)

    page.goto(f"/conversations/{members_own.pk}/")
    expect(page.get_by_role("heading", name="Mia's question")).to_be_visible()
    expect(page.get_by_role("button", name="Record as draft")).to_have_count(0)
    expect(page.get_by_role("button", name="Extract cases")).to_have_count(0)

    csrf = next(cookie["value"] for cookie in context.cookies() if cookie["name"] == "csrftoken")
    for url in ("/api/recordings/", "/api/extractions/"):
        response = page.request.post(
            url, data={"conversation": members_own.pk}, headers={"X-CSRFToken": csrf}
        )
        assert response.status == 403
        assert response.json() == {"detail": "Only staff users may record conversations or extract cases."}
    assert not Case.objects.exists()
    context.close()
