"""In a real browser with a real worker, issue 16's Done-when as a new user would do it: each demo conversation
(played on sim-careful) recorded as a draft, the drafts enabled, and a run on both simulated models — every cell
Passed."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from agenthost.models import Conversation
from agenttest_demo.agents import demo_conversations_create
from cases.models import Case
from runs.models import Run
from tests.browser.pages import ADMIN, assert_fits, wait_until_finished
from tests.demo.browser.conftest import CAREFUL, HASTY

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(demo_agents, admin_user) -> dict[str, Conversation]:
    """The demo's conversations, played by the admin on the simulated model, by title."""
    return {result.conversation.title: result.conversation for result in demo_conversations_create(owner=admin_user)}


@pytest.mark.slow
@pytest.mark.parametrize("width", [1366, 800])
def test_it_records_every_demo_conversation_and_the_drafts_pass_on_both_simulated_models(
    sign_in, run_queue, demo, tmp_path, width
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
