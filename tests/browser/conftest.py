"""Browser tests: Playwright's sync API driving Debian's Chromium against pytest-django's live server.

A missing Chromium fails these tests — it is never a reason to skip them. Playwright is never asked to download a
browser of its own (that download fails here); it drives Debian's, at AGENTTEST_CHROMIUM or /usr/bin/chromium.

The pages show an order-support desk (`order_desk`) on the host's scripted model — a test scripts what the model
answers, and the shop's two functions below answer its calls — except where a test is about the demo itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from agenthost.functions import FunctionContext, FunctionResult, register_function
from agenthost.llm.scripted import Answer, Call, Entry
from agenthost.models import Agent, Conversation
from agenthost.services import conversation_send, conversation_start
from agenthost.testing.fixtures import ScriptedModel
from cases.models import Case
from recording.services import recording_create

CHROMIUM = os.environ.get("AGENTTEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]
# Only a guard against a hang, for every action and `expect`: a loaded machine took over 20 s to load a page and over
# 5 s to start the API docs' script, with every page right.
TIMEOUT_MS = 120_000
expect.set_options(timeout=TIMEOUT_MS)
SCREENSHOTS = Path(__file__).resolve().parent.parent.parent / "docs" / "screenshots"


@pytest.fixture(scope="package")
def _one_chromium() -> Iterator[Browser]:
    """One Chromium (and one Playwright driver) for the browser tests of a test process, not one per test: a launch
    costs about a CPU second. The package scope ends it after the last test here.

    Playwright's sync API runs an event loop in the tests' thread, and the tests (and pytest-django, between them)
    still use the database from it: DJANGO_ALLOW_ASYNC_UNSAFE is set for as long as the loop lives, never at import
    and never after — a leftover variable fails `check --deploy` in other tests' subprocesses."""
    assert os.path.exists(CHROMIUM), (
        f"Chromium is missing at {CHROMIUM}: install Debian's (apt-get install -y chromium) or set AGENTTEST_CHROMIUM"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()


@pytest.fixture
def chromium(_one_chromium: Browser) -> Iterator[Browser]:
    """The shared browser, left as a test found it: every context the test opened is closed (its cookies, its pages
    and their timers with it), so no test sees another's session."""
    assert _one_chromium.is_connected(), "Chromium stopped during an earlier browser test"
    before = set(_one_chromium.contexts)
    yield _one_chromium
    for context in _one_chromium.contexts:
        if context not in before:
            context.close()


@pytest.fixture
def sign_in(chromium: Browser, live_server) -> Callable[[str, str], tuple[BrowserContext, Page]]:
    """Log in through the login form; returns the browser context (its cookies are the session) and its page."""

    def sign_in_as(username: str, password: str) -> tuple[BrowserContext, Page]:
        context = chromium.new_context(base_url=live_server.url, viewport={"width": 1360, "height": 900})
        context.set_default_timeout(TIMEOUT_MS)
        page = context.new_page()
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("button", name="Log out")).to_be_visible()
        return context, page

    return sign_in_as


@pytest.fixture
def save_screenshot() -> Callable[[Page, str], None]:
    """Writes docs/screenshots/<name> only when AGENTTEST_SCREENSHOTS=1, so an ordinary test run changes no file."""

    def save(page: Page, name: str) -> None:
        if os.environ.get("AGENTTEST_SCREENSHOTS") == "1":
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / name), full_page=True)

    return save


# The shop's functions, under names of their own: a chat runs its functions for real, so they need an implementation,
# and a name is registered once (the demo plugin registers lookup_order and cancel_order). The look-up only reads; the
# cancellation is an effect outside agenttest. Both write the order they touched into the conversation's state.
LOOKUP_ORDER = "test-browser-lookup_order"
CANCEL_ORDER = "test-browser-cancel_order"
EMAIL = "util-email-handle_email_sender"
ORDER_STATUSES = {"1042": "shipped", "1043": "processing", "1047": "delivered"}
_ORDER_ID = {"type": "string", "description": "The order number, e.g. 1042."}


@register_function(
    name=LOOKUP_ORDER, outside_effects=False,
    description="Look up an order by its number: status, items and the customer's email.",
    parameters={"type": "object", "properties": {"order_id": _ORDER_ID}, "required": ["order_id"]},
)
def _lookup_order(context: FunctionContext, order_id: str) -> FunctionResult:
    status = ORDER_STATUSES[order_id]
    order = {"order_id": order_id, "status": status, "items": [f"item-{order_id[-2:]}", "gift wrap"],
             "customer_email": f"customer{order_id}@example.com"}
    return FunctionResult(content=json.dumps(order), state_writes={"order_id": order_id, "order_status": status})


@register_function(
    name=CANCEL_ORDER, outside_effects=True, description="Cancel an order that has not been delivered yet.",
    parameters={
        "type": "object",
        "properties": {"order_id": _ORDER_ID, "reason": {"type": "string", "description": "Why they cancel."}},
        "required": ["order_id"],
    },
)
def _cancel_order(context: FunctionContext, order_id: str, reason: str = "") -> FunctionResult:
    return FunctionResult(content=json.dumps({"order_id": order_id, "cancelled": True, "refund": "full"}),
                          state_writes={"order_id": order_id, "order_status": "cancelled"})


# The model `scripted_model` configures, and the second one `two_scripted_models` adds.
SCRIPTED, SCRIPTED_OTHER = "scripted:scripted", "scripted:other"
CANCEL_1043 = "Please cancel order 1043, my email is ana@example.com"
CANCELLED_1043 = (
    "Order 1043 is now cancelled. I checked it first (it was processing). I sent a confirmation email to "
    "ana@example.com."
)


def routed_to(agent: str) -> Answer:
    """A router's answer: hand the turn to `agent`."""
    return Answer(tool_calls=[Call("route_to_agent", {"agent_name": agent, "reason": "it handles this request"})])


def cancellation_of_1043() -> list[Entry]:
    """What the cancellation agent answers to a request to cancel order 1043 (ana@example.com): it looks the order up,
    cancels it (giving a reason, which a recording leaves out of its mock), emails the customer and says so."""
    return [
        Answer(tool_calls=[Call(LOOKUP_ORDER, {"order_id": "1043"})]),
        Answer(tool_calls=[Call(CANCEL_ORDER, {"order_id": "1043", "reason": "requested by the customer"})]),
        Answer(tool_calls=[Call(EMAIL, {
            "to": "ana@example.com", "subject": "Order 1043 is now cancelled",
            "body": "Hello,\n\nOrder 1043 is now cancelled.\n\nKind regards,\nCustomer support",
        })]),
        Answer(CANCELLED_1043),
    ]


@pytest.fixture
def two_scripted_models(scripted_model, settings) -> ScriptedModel:
    """The scripted provider with a second model, SCRIPTED_OTHER, for the pages of a run on two models: both play the
    one script."""
    scripted = settings.AGENTTEST_PROVIDERS["scripted"]
    other = {"name": "other", "input_price": 0.0, "output_price": 0.0, "label": "Scripted, other (tests)"}
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS, "scripted": {**scripted, "models": [*scripted["models"], other]},
    }
    return scripted_model


@pytest.fixture
def order_desk(scripted_model) -> dict[str, Agent]:
    """An order-support desk on the scripted model, by name: order-router hands each request to order-lookup, which
    looks orders up, or to order-cancellation, which also cancels them and emails the customer."""
    lookup = Agent.objects.create(
        name="order-lookup", provider="scripted", model="scripted",
        description="Looks up orders: status, items and the customer's email for an order number.",
        instruction="You answer questions about existing orders. Look the order up before you say anything about it.",
        functions=[{"name": LOOKUP_ORDER}],
    )
    cancellation = Agent.objects.create(
        name="order-cancellation", provider="scripted", model="scripted",
        description="Cancels orders and sends confirmation emails to the customer.",
        instruction="You cancel orders. Look the order up first; do not cancel one that is already delivered. After a "
                    "cancellation, email the customer a confirmation.",
        functions=[{"name": LOOKUP_ORDER}, {"name": CANCEL_ORDER}, {"name": EMAIL}],
    )
    router = Agent.objects.create(
        name="order-router", provider="scripted", model="scripted",
        description="Routes order-support requests to the right specialist.",
        instruction="You are the front desk of an online shop's order support. Hand each request to the sub-agent "
                    "that handles it.",
    )
    router.sub_agents.set([lookup, cancellation])
    return {agent.name: agent for agent in (lookup, cancellation, router)}


@pytest.fixture
def cancel_conversation(order_desk, scripted_model, admin_user) -> Conversation:
    """The admin's conversation "Cancel order 1043", played on the order desk: routed to order-cancellation, which
    looks the order up, cancels it and emails the customer."""
    scripted_model.play(routed_to("order-cancellation"), *cancellation_of_1043())
    conversation = conversation_start(agent=order_desk["order-router"], owner=admin_user, title="Cancel order 1043")
    conversation_send(conversation=conversation, text=CANCEL_1043)
    return conversation


@pytest.fixture
def cancel_draft(cancel_conversation) -> Case:
    """The recorded draft of the "Cancel order 1043" conversation: disabled, with warnings for the reviewer."""
    return recording_create(conversation=cancel_conversation).cases[0]
