"""Smaller findings of issue 37 (item 11 of the findings), each where a person sees it, at 1366 and at 800 px: a
skip-to-content link on the app's own pages, a member's 404 sentence ending once, the conversations list fitting an
imported conversation's unbroken trace id, and a focused regressed cell that can be seen."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from agenthost.models import Agent, Conversation
from cases.models import Case, Suite
from runs.models import CaseResult, Run
from tests.browser.pages import ADMIN, MEMBER, WIDTHS, assert_fits

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736" * 2


@pytest.mark.parametrize("width", WIDTHS)
def test_it_lets_a_keyboard_skip_to_the_content_of_every_page(sign_in, admin_user, width):
    _, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": 900})
    for url in ("/runs/", "/conversations/", "/chat/", "/runs/new/"):
        page.goto(url)
        page.keyboard.press("Tab")
        skip = page.locator(":focus")
        expect(skip).to_have_text("Skip to content")
        expect(skip).to_be_in_viewport()
        page.keyboard.press("Enter")
        expect(page.locator("main#main-content")).to_be_focused()


@pytest.mark.parametrize("width", WIDTHS)
def test_it_ends_a_members_not_found_sentence_once(sign_in, member, width):
    _, page = sign_in(*MEMBER)
    page.set_viewport_size({"width": width, "height": 900})
    response = page.goto("/conversations/999999/")
    assert response is not None and response.status == 404
    sentence = page.locator("main p").first.inner_text()
    assert sentence.endswith("to see.") and not sentence.endswith(".."), sentence
    assert_fits(page, f"the not-found page at {width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_it_fits_an_imported_conversations_trace_id_in_the_list(sign_in, admin_user, scripted_model, width):
    agent = Agent.objects.create(name="shop", instruction="Help.", provider="scripted", model="scripted")
    Conversation.objects.create(agent=agent, title="Imported from production", source="trace",
                                trace_service="checkout-service-production", trace_ids=[TRACE_ID])
    _, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/conversations/")
    expect(page.locator(".trace-id")).to_contain_text(TRACE_ID[:16])
    assert_fits(page, f"the conversations list at {width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_it_rings_a_focused_failed_cell_so_it_can_be_seen(sign_in, admin_user, scripted_model, width):
    agent = Agent.objects.create(name="shop", instruction="Help.", provider="scripted", model="scripted")
    suite = Suite.objects.create(name="shop", agent=agent)
    case = Case.objects.create(suite=suite, name="looks the order up")
    run = Run.objects.create(suite=suite, model_keys=[scripted_model.key], case_ids=[case.pk], total=1,
                             status=Run.Status.FAILED, failed=1)
    CaseResult.objects.create(run=run, case=case, case_name=case.name, model=scripted_model.key,
                              status="failed", reason="lookup_order was not called")
    _, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/runs/{run.pk}/")
    cell = page.locator("td.cell-failed > a")
    cell.focus()

    ring = cell.evaluate(
        "el => { const s = getComputedStyle(el); return [s.outlineStyle, s.outlineWidth, s.boxShadow]; }"
    )
    assert ring[0] == "solid" and float(ring[1].removesuffix("px")) >= 3, ring
    assert "inset" in ring[2], ring
