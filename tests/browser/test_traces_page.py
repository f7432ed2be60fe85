"""The traces page where staff see it (issue 35, item 8), at 1366 and at 800 px: every conversation's received time,
service, first user message, model, spans, binding and status readable without scrolling sideways, the filters
working, the link to where ingest tokens are made, and the app's styled page for a member."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import expect
from rest_framework.authtoken.models import Token

from agenthost.models import Agent
from tests.browser.pages import ADMIN, MEMBER, WIDTHS, assert_fits
from tests.traces.test_conversations import FIND_ORDER
from tests.traces.test_cut_history import FIRST, SECOND
from tests.traces.test_receiver_conversations import send
from tests.traces.test_traces_page import exported

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def conversations(client, django_user_model) -> None:
    token = Token.objects.create(user=django_user_model.objects.create_user("exporter", is_staff=True)).key
    Agent.objects.create(name="storefront", provider="scripted", model="scripted", functions=[FIND_ORDER])
    runs = [
        ("storefront", "Where is order 1042?"),
        ("warehouse-service-in-the-eu-central-region", "Is order 7 in stock?"),
        ("storefront", FIRST, SECOND),
    ]
    # The agents run in a thread of their own: Playwright's event loop is running in this one.
    with ThreadPoolExecutor(max_workers=1) as pool:
        for spans in pool.map(lambda run: exported(*run), runs):
            send(client, token, spans)


@pytest.mark.parametrize("width", WIDTHS)
def test_it_shows_staff_each_conversations_columns_and_filters_them(sign_in, admin_user, conversations, width):
    _, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/traces/conversations/")

    table = page.locator("table.trace-conversations")
    expect(table.locator("tbody tr")).to_have_count(3)
    for text in ("Where is order 1042?", "orders-model", "bound to agent storefront", "Incomplete", "Not imported",
                 "warehouse-service-in-the-eu-central-region"):
        expect(table).to_contain_text(text)
    expect(page.locator("tbody tr time").first).to_be_visible()
    # Styled as the app's list: its stylesheet applied, not the browser's bare table.
    assert table.evaluate("el => getComputedStyle(el).borderCollapse") == "collapse"
    assert_fits(page, f"the traces page at {width}")
    expect(page.get_by_role("link", name="Make an ingest token")).to_have_attribute(
        "href", "/admin/traces/ingesttoken/add/"
    )

    page.get_by_label("Status").select_option("unimported")
    page.get_by_role("button", name="Filter").click()
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table).to_contain_text("is bound to no agent")
    expect(page.get_by_label("Agent")).to_be_visible()  # the form that binds it
    assert_fits(page, f"the filtered traces page at {width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_it_shows_a_member_the_apps_staff_only_page(sign_in, member, conversations, width):
    _, page = sign_in(*MEMBER)
    page.set_viewport_size({"width": width, "height": 900})
    response = page.goto("/traces/conversations/")

    assert response is not None and response.status == 403
    expect(page.get_by_role("heading", name="Staff only")).to_be_visible()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()  # the app's menu, not Django's bare page
    expect(page.locator("body")).not_to_contain_text("Where is order 1042?")
    assert_fits(page, f"the staff-only page at {width}")
