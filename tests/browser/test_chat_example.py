"""Issue 16, item 7, in a real browser: the README's chat example, typed in order in one conversation with the model's
answers scripted as the README tells them, reaches the sub-agent each request is handed to (the second one through the
look-up agent's hand-back to the router), and the chat and the conversation page say the same agent made each call."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Conversation
from tests.browser.conftest import CANCEL_1043, EMAIL, cancellation_of_1043, routed_to
from tests.order_tools import TRACK_ORDER, VOID_ORDER

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

README_EXAMPLE = ("Where is order #1042?", CANCEL_1043)
EXPECTED_CALLS = [
    ("route_to_agent", "order-router"),
    (TRACK_ORDER, "order-lookup"),
    ("util-routing-fallback_to_router", "order-lookup"),
    ("route_to_agent", "order-router"),
    (TRACK_ORDER, "order-cancellation"),
    (VOID_ORDER, "order-cancellation"),
    (EMAIL, "order-cancellation"),
]


def calls_shown(page: Page) -> list[tuple[str, str]]:
    """(tool, agent) of every tool call on the page, from each call's summary line ("… by <agent>")."""
    summaries = page.locator("details.tool-call > summary")
    shown = []
    for index in range(summaries.count()):
        summary = summaries.nth(index)
        by = summary.locator("text=/^by /").inner_text().removeprefix("by ").strip()
        shown.append((summary.locator(".tool-name").inner_text().strip(), by))
    return shown


def speakers(page: Page) -> list[str]:
    """Who said each of the agent's replies, by agent name (the conversation page adds the model after a dot)."""
    return [text.split(" · ")[0].strip() for text in page.locator(".msg-agent .msg-who").all_text_contents()]


def no_horizontal_overflow(page: Page) -> None:
    width, window = page.evaluate("document.documentElement.scrollWidth"), page.viewport_size["width"]
    assert width <= window, f"the page is {width} px wide in a {window} px window"


@pytest.mark.parametrize("width", [1366, 800])
def test_it_plays_the_readme_chat_example_in_one_conversation_and_both_pages_agree_on_the_agents(
    sign_in, order_desk, scripted_model, width
):
    scripted_model.play(
        routed_to("order-lookup"),
        Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1042"})]),
        "Order 1042 is delivered. Items: item-42.",
        # The second request reaches the look-up agent the first one left the conversation with: it cannot cancel, so
        # it hands the turn back to the router, which routes it on.
        Answer(tool_calls=[Call("util-routing-fallback_to_router", {"reason": "outside my scope: a cancellation"})]),
        routed_to("order-cancellation"),
        *cancellation_of_1043(),
    )
    get_user_model().objects.create_user(username="ana", password="a-long-password-1")
    context, page = sign_in("ana", "a-long-password-1")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/chat/")
    page.get_by_role("button", name="Start new conversation").click()
    message = page.locator("#message-input")
    transcript = page.locator("#transcript")
    for text, answer in zip(README_EXAMPLE, ["Order 1042 is", "Order 1043 is now cancelled"], strict=True):
        expect(message).to_be_enabled()
        message.fill(text)
        page.get_by_role("button", name="Send").click()
        expect(transcript).to_contain_text(answer)
    expect(page.locator(".turn-meta").last).to_contain_text("order-lookup → order-router → order-cancellation")

    conversation = Conversation.objects.get()
    assert conversation.turn_count == 2
    assert calls_shown(page) == EXPECTED_CALLS, "the chat, live"
    assert speakers(page) == ["order-lookup", "order-cancellation"]
    no_horizontal_overflow(page)

    page.goto(f"/chat/?conversation={conversation.pk}")
    expect(transcript).to_contain_text("Order 1043 is now cancelled")
    assert calls_shown(page) == EXPECTED_CALLS, "the chat, reloaded from the stored messages"

    page.goto(f"/conversations/{conversation.pk}/")
    expect(page.locator(".tool-name").first).to_be_visible()
    assert calls_shown(page) == EXPECTED_CALLS, "the conversation page"
    assert speakers(page) == ["order-lookup", "order-cancellation"]
    no_horizontal_overflow(page)
    context.close()
