"""The chat page in a real browser: talk to an order-support router on the scripted model and see tool calls, the
agent chain and the state as they happen."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from tests.browser.conftest import CANCEL_1043, EMAIL, cancellation_of_1043, routed_to
from tests.order_tools import TRACK_ORDER, VOID_ORDER

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def test_it_chats_with_a_router_showing_tool_calls_and_state(sign_in, save_screenshot, order_desk, scripted_model):
    scripted_model.play(routed_to("order-cancellation"), *cancellation_of_1043())
    get_user_model().objects.create_user(username="ana", password="a-long-password-1")
    _, page = sign_in("ana", "a-long-password-1")
    page.goto("/chat/")
    expect(page.locator("#agent-select")).to_have_value(str(order_desk["order-router"].pk))
    page.get_by_role("button", name="Start new conversation").click()
    message = page.locator("#message-input")
    expect(message).to_be_enabled()
    message.fill(CANCEL_1043)
    page.get_by_role("button", name="Send").click()
    transcript = page.locator("#transcript")
    expect(transcript).to_contain_text("Order 1043 is now cancelled")
    for tool in ["route_to_agent", TRACK_ORDER, VOID_ORDER, EMAIL]:
        expect(transcript).to_contain_text(tool)
    expect(transcript).to_contain_text("order-cancellation")
    state = page.locator("#state-table")
    expect(state).to_be_visible()
    expect(state).to_contain_text("order_status")
    expect(state).to_contain_text("cancelled")
    save_screenshot(page, "chat.png")
