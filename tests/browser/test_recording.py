"""In a real browser (Playwright driving Debian's Chromium, see conftest.py): an admin records a conversation of the
order desk, reviews the draft in the admin, edits an assertion, enables it and sees it count in the suite; a member
gets no record button and a 403 from the API; the drafts of every demo conversation pass on both simulated models."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from agenthost.models import Conversation
from agenthost.services import conversation_start
from agenttest_demo.agents import demo_conversations_create
from cases.models import Case
from runs.models import Run
from tests.browser.conftest import CANCEL_ORDER
from tests.browser.test_review_pages import assert_fits, wait_until_finished
from tests.browser.test_run_pages import (
    CAREFUL,
    HASTY,
    run_queue,  # noqa: F401 — a fixture
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ADMIN = ("root", "root-password-123")
MEMBER = ("mia", "mia-password-123")


@pytest.fixture
def members_own(order_desk, member) -> Conversation:
    """A conversation of the member's with the order desk, nothing said yet."""
    return conversation_start(agent=order_desk["order-router"], owner=member, title="Mia's question")


@pytest.fixture
def demo(demo_agents, admin_user) -> dict[str, Conversation]:
    """The demo's conversations, played by the admin on the simulated model, by title."""
    return {result.conversation.title: result.conversation for result in demo_conversations_create(owner=admin_user)}


def test_it_records_reviews_and_enables_a_draft(sign_in, save_screenshot, cancel_conversation):
    conversation = cancel_conversation
    context, page = sign_in(*ADMIN)

    page.goto("/conversations/")
    page.get_by_role("link", name="Cancel order 1043").click()
    expect(page.get_by_role("heading", name="Cancel order 1043")).to_be_visible()
    expect(page.locator(".msg-user")).to_have_text(["User Please cancel order 1043, my email is ana@example.com"])
    expect(page.locator(".tool-name", has_text=CANCEL_ORDER).first).to_be_visible()
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
    cancel_assertion = case.assertions.get(type="toolCalled", params__function=CANCEL_ORDER)
    assert cancel_assertion.params == {"function": CANCEL_ORDER, "arguments": {"order_id": "1043"}}
    index = list(case.assertions.order_by("position", "id").values_list("id", flat=True)).index(cancel_assertion.pk)
    fatal = page.locator(f"input[name=assertions-{index}-fatal]")
    expect(fatal).to_be_hidden()
    page.locator("#assertions-group summary").click()
    fatal.check()
    page.get_by_role("button", name="Save and continue editing").first.click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    cancel_assertion.refresh_from_db()
    assert cancel_assertion.fatal is True
    assert cancel_assertion.params == {"function": CANCEL_ORDER, "arguments": {"order_id": "1043"}}

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


@pytest.mark.slow
@pytest.mark.parametrize("width", [1366, 800])
def test_it_records_every_demo_conversation_and_the_drafts_pass_on_both_simulated_models(
    sign_in, run_queue, demo, tmp_path, width  # noqa: F811
):
    """Issue 16's Done-when, as a new user would do it: Record as draft on each demo conversation (played on
    sim-careful), Enable selected, then a run on both simulated models by a real worker — every cell Passed."""
    context, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": 900})
    conversations = demo
    for title in conversations:
        page.goto("/conversations/")
        page.get_by_role("link", name=title, exact=True).click()
        page.get_by_role("button", name="Record as draft").click()
        page.wait_for_url("**/admin/cases/case/*/change/")
    drafts = list(Case.objects.filter(source_conversation__in=conversations.values()))
    assert len(drafts) == len(conversations) and not any(case.enabled for case in drafts)
    suite = drafts[0].suite

    page.goto(f"/admin/cases/case/?suite__id__exact={suite.pk}")
    page.locator("#action-toggle").check()
    page.locator("select[name=action]").select_option("enable_selected")
    page.get_by_role("button", name="Go").click()
    expect(page.locator(".messagelist")).to_contain_text(f"Enabled {len(drafts)} case(s).")

    with run_queue():
        page.goto("/runs/new/")
        page.get_by_label("Suite").select_option(str(suite.pk))
        page.get_by_label(CAREFUL).check()
        page.get_by_label(HASTY).check()
        page.get_by_role("button", name="Start run").click()
        page.wait_for_url(re.compile(r"/runs/\d+/$"))
        wait_until_finished(page, tmp_path)

    cells = page.locator("#matrix-table td[data-cell]")
    expect(cells).to_have_count(2 * len(drafts))
    expect(page.locator("#matrix-table td.cell-passed")).to_have_count(2 * len(drafts))
    assert_fits(page, "the recorded suite's run page")
    run = Run.objects.get(suite=suite)
    assert (run.status, run.total, run.done) == (Run.Status.PASSED, 2 * len(drafts), 2 * len(drafts))
    assert set(run.results.values_list("model", "status")) == {(CAREFUL, "passed"), (HASTY, "passed")}
    context.close()
