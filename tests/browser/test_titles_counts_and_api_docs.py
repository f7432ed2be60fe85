"""The rest of issue 37's smaller findings (item 11), where a person sees them, at 1366 and at 800 px: a chat started
in Chat is listed by its first message, not "(untitled)"; the run page counts what flipped in one unit, its heading
and its filter alike; the API docs lead back to the app and name each schema apart."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from agenthost.models import Agent
from cases.models import Case, Suite
from runs.models import CaseResult, Run
from tests.browser.conftest import SCRIPTED, SCRIPTED_OTHER
from tests.browser.pages import ADMIN, WIDTHS, assert_fits

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", WIDTHS)
def test_it_lists_a_chat_by_its_first_message(sign_in, admin_user, scripted_model, width):
    scripted_model.play("Order 1042 has shipped.", "Order 1043 is being prepared.")
    Agent.objects.create(name="shop", instruction="Help the customers.", provider="scripted", model="scripted")
    _, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/chat/")
    page.get_by_role("button", name="Start new conversation").click()
    message = page.locator("#message-input")
    expect(message).to_be_enabled()
    first = "Where is order 1042? It was due on Monday and the tracking page has said nothing since."
    message.fill(first)
    page.get_by_role("button", name="Send").click()
    replies = page.locator("#transcript .msg-agent")
    expect(replies).to_have_count(1)
    message.fill("And order 1043?")
    page.get_by_role("button", name="Send").click()
    expect(replies).to_have_count(2)

    page.goto("/conversations/")
    title = page.locator(".conversation-title").first
    # The first message, cut at a word: the second does not retitle it.
    expect(title).to_have_text("Where is order 1042? It was due on Monday and the tracking page has said…")
    expect(page.locator(".conversation-title", has_text="(untitled)")).to_have_count(0)
    assert_fits(page, f"the conversations list at {width}")


def _run(suite: Suite, cases: list[Case], status: str, **counts: int) -> Run:
    return Run.objects.create(suite=suite, model_keys=[SCRIPTED, SCRIPTED_OTHER], case_ids=[case.pk for case in cases],
                              total=2 * len(cases), status=status, **counts)


@pytest.mark.parametrize("width", WIDTHS)
def test_it_counts_what_flipped_in_one_unit_in_the_heading_and_the_filter(
    sign_in, admin_user, two_scripted_models, width
):
    agent = Agent.objects.create(name="shop", instruction="Help.", provider="scripted", model="scripted")
    suite = Suite.objects.create(name="shop", agent=agent)
    lookup = Case.objects.create(suite=suite, name="looks the order up")
    greet = Case.objects.create(suite=suite, name="greets")
    baseline = _run(suite, [lookup, greet], Run.Status.PASSED, passed=4)
    current = _run(suite, [lookup, greet], Run.Status.FAILED, passed=2, failed=2)
    for position, case in enumerate([lookup, greet]):
        for model in (SCRIPTED, SCRIPTED_OTHER):
            CaseResult.objects.create(run=baseline, case=case, case_name=case.name, model=model, status="passed",
                                      position=position)
            # The look-up case regressed on both models: two flips, one case.
            failed = case == lookup
            CaseResult.objects.create(run=current, case=case, case_name=case.name, model=model,
                                      status="failed" if failed else "passed", position=position,
                                      reason="lookup_order was not called" if failed else "")
    _, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/runs/{current.pk}/")

    expect(page.locator("#flipped-heading")).to_have_text(f"2 flipped since baseline #{baseline.pk}")
    expect(page.locator('#flipped [data-count="regressions"]')).to_have_text("2 regressions")
    expect(page.locator('[data-matrix-filter="flipped"] .seg-count')).to_have_text("2")
    expect(page.locator("#matrix-table .flip-mark")).to_have_count(2)
    assert_fits(page, f"the run page at {width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_it_leads_back_from_the_api_docs_and_names_each_schema_apart(sign_in, admin_user, width):
    context, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/runs/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="API docs").click()
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("agenttest API")
    back = page.get_by_role("link", name="← Back to the app")
    expect(back).to_be_in_viewport()

    schema = context.request.get("/api/schema/?format=json").json()
    titles = [body["title"] for body in schema["components"]["schemas"].values() if "title" in body]
    assert len(titles) == len(set(titles)), sorted(titles)
    case_bodies = page.locator(".swagger-ui .models").get_by_text("agenttest case document", exact=False)
    page.locator(".swagger-ui .models-control").scroll_into_view_if_needed()
    expect(case_bodies.first).to_be_visible()
    shown = {text.strip() for text in case_bodies.all_inner_texts()}
    assert len(shown) == case_bodies.count() >= 3, shown
    assert_fits(page, f"the API docs at {width}")

    back.click()
    expect(page).to_have_url(re.compile(r"/runs/$"))
    expect(page.get_by_role("heading", level=1)).to_be_visible()
