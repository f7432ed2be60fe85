"""The README's own scenario (issue 37, item 1), in a real browser with a real worker: delete "Look the order up
first" from the order-cancellation sub-agent's instruction and run the demo again on sim-hasty. The regression says
on the run page and the result page that the agent changed (not the case, the model or a recording), in the same
words; Compare names the sub-agent with its instruction's diff; side by side shows the skipped look-up as one
skipped row (issue 37, item 2) — at 1366 and at 800 px wide.

A case edit between two runs reads "case changed" on those pages instead: an edited case is not an agent regression
(issue 37, item 2 of the findings)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from agenthost.models import Agent
from cases.models import Case
from cases.services import case_to_document, case_update
from runs.models import CaseResult, Run
from tests.browser.pages import ADMIN, WIDTHS, assert_fits, wait_until_finished
from tests.demo.browser.conftest import HASTY

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CANCELLATION_CASE = "Cancellation checks the order and confirms by email"
LOOK_UP_FIRST = "Look the order up first; "


def start_run(page: Page, suite, *, cases: str) -> Run:
    page.goto("/runs/new/")
    page.get_by_label("Suite").select_option(str(suite.pk))
    page.get_by_label(HASTY).check()
    page.get_by_label("Case filter").fill(cases)
    before = set(Run.objects.values_list("pk", flat=True))
    with page.expect_navigation():
        page.get_by_role("button", name="Start run").click()
    # A refused trigger renders the form again with what went wrong: say it, not only that no run page came.
    assert re.search(r"/runs/\d+/$", page.url), f"no run was started: {page.locator('main').inner_text()[:2000]}"
    return Run.objects.exclude(pk__in=before).get()


def test_it_names_the_sub_agent_whose_instruction_edit_caused_a_regression(
    sign_in, run_queue, demo_suite, admin_user, tmp_path
):
    _, page = sign_in(*ADMIN)
    cancellation = Agent.objects.get(name="order-cancellation")
    assert LOOK_UP_FIRST in cancellation.instruction
    with run_queue():
        before = start_run(page, demo_suite, cases=CANCELLATION_CASE)
        wait_until_finished(page, tmp_path)
        assert CaseResult.objects.get(run=before).status == "passed"

        cancellation.instruction = cancellation.instruction.replace(LOOK_UP_FIRST, "")
        cancellation.save()
        after = start_run(page, demo_suite, cases=CANCELLATION_CASE)
        wait_until_finished(page, tmp_path)
    regressed = CaseResult.objects.get(run=after)
    assert regressed.status in ("failed", "error")
    # Every agent the run reached is kept: the sub-agent's instruction too, not only its name.
    assert LOOK_UP_FIRST not in after.agent_snapshot["agents"]["order-cancellation"]["instruction"]
    assert LOOK_UP_FIRST in before.agent_snapshot["agents"]["order-cancellation"]["instruction"]

    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})

        page.goto(f"/runs/{after.pk}/")
        assert_fits(page, f"the run page at {width}")
        flip = page.locator(f'.flip-item.flip-broke[data-case="{CANCELLATION_CASE}"]')
        expect(flip.locator(".flip-causes")).to_have_attribute("data-causes", "agent changed")
        expect(flip.locator(".flip-causes .badge")).to_have_text(["agent changed"])

        page.goto(f"/runs/{after.pk}/results/{regressed.pk}/")
        assert_fits(page, f"the result page at {width}")
        context = page.locator(".baseline-context")
        expect(context).to_contain_text(f"Regression since baseline #{before.pk}")
        expect(context.locator(".flip-causes .badge")).to_have_text(["agent changed"])

        page.goto(f"/runs/{after.pk}/compare/?baseline={before.pk}")
        assert_fits(page, f"the compare page at {width}")
        expect(page.locator('[data-difference="trials"]')).to_have_count(0)
        agent = page.locator('[data-difference="agents"] .agent-change[data-agent="order-cancellation"]')
        expect(agent).to_have_attribute("data-status", "changed")
        expect(agent.locator('[data-part="instruction"] .diff-del')).to_contain_text("Look the order up first")
        expect(agent.locator('[data-part="instruction"] .diff-add')).not_to_contain_text("Look the order up first")
        # The router and the look-up agent did not change: they are not listed.
        expect(page.locator(".agent-change")).to_have_count(1)
        row = page.locator("tr", has_text=CANCELLATION_CASE).filter(has=page.locator(".flip-causes"))
        expect(row.locator(".flip-causes .badge")).to_have_text(["agent changed"])

        # Side by side, aligned by content: the look-up the edited instruction no longer asks for is one skipped row,
        # named in the first-divergence summary; the calls after it sit beside their like.
        page.goto(f"/runs/{after.pk}/results/{regressed.pk}/side-by-side/")
        assert_fits(page, f"the side by side page at {width}")
        expect(page.locator(".divergence-what")).to_contain_text("skipped what")
        expect(page.locator(".divergence-what")).to_contain_text("lookup_order")
        expect(page.locator('.sbs-difference[data-difference="skipped"]').first).to_be_visible()
        expect(page.get_by_text("the turn ended sooner")).to_have_count(0)


def test_it_says_case_changed_not_agent_when_only_the_case_was_edited(
    sign_in, run_queue, demo_suite, admin_user, tmp_path
):
    _, page = sign_in(*ADMIN)
    with run_queue():
        before = start_run(page, demo_suite, cases=CANCELLATION_CASE)
        wait_until_finished(page, tmp_path)
        assert CaseResult.objects.get(run=before).status == "passed"
        case = Case.objects.get(suite=demo_suite, name=CANCELLATION_CASE)
        document = case_to_document(case=case)
        # An assertion the reply cannot meet: the case, not the agent, changed.
        document["assertions"] = [*document.get("assertions", []),
                                  {"type": "outputRegex", "params": {"pattern": "^never said$"}}]
        case_update(case=case, document=document)
        after = start_run(page, demo_suite, cases=CANCELLATION_CASE)
        wait_until_finished(page, tmp_path)
    regressed = CaseResult.objects.get(run=after)
    assert regressed.status == "failed"

    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"/runs/{after.pk}/")
        flip = page.locator(f'.flip-item.flip-broke[data-case="{CANCELLATION_CASE}"]')
        expect(flip.locator(".flip-causes .badge")).to_have_text(["case changed"])
        expect(flip.locator("a.badge.case-changed")).to_have_attribute("href", re.compile(r"/compare/.*#case-change-"))
        assert_fits(page, f"the run page at {width}")

        page.goto(f"/runs/{after.pk}/results/{regressed.pk}/")
        expect(page.locator(".baseline-context .flip-causes .badge")).to_have_text(["case changed"])
        assert_fits(page, f"the result page at {width}")
