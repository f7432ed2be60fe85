"""Browser tests: Playwright's sync API driving Debian's Chromium against pytest-django's live server.

A missing Chromium fails these tests — it is never a reason to skip them. Playwright is never asked to download a
browser of its own (that download fails here); it drives Debian's, at AGENTTEST_CHROMIUM or /usr/bin/chromium.

The pages show an order-support desk (`order_desk`) on the host's scripted model — a test scripts what the model
answers, and the tests' order tools (tests/order_tools.py) answer its calls. A run a real worker executes plays the
desk of tests/desk.py, whose models the worker reads from a providers file (`run_queue`). The demo's own pages are
tested in tests/demo/browser/, with these fixtures.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from agenthost.llm.scripted import Answer, Call, Entry
from agenthost.models import Agent, Conversation
from agenthost.services import conversation_send, conversation_start
from agenthost.testing.fixtures import ScriptedModel
from agenttest.celery import app
from cases.models import Case
from recording.services import recording_create
from tests.order_tools import TRACK_ORDER, VOID_ORDER
from tests.workers import runs_worker

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


def _drop_publisher_connections() -> None:
    # The Celery app builds its connection and producer pools from broker_url on first use and keeps them; dropping
    # them makes the next publish connect to the broker configured now (what Celery itself does after a fork).
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def run_queue(settings, tmp_path) -> Iterator[Callable[..., AbstractContextManager]]:
    """The embedded broker in a temporary file: the trigger's ping checks it and the page's trigger publishes to it.
    Yields a function that starts a real runs worker on it (and on the test database), with the environment
    variables it is given (a providers file, say)."""
    url = f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    settings.CELERY_BROKER_URL = url
    previous = app.conf.broker_url
    app.conf.broker_url = url
    _drop_publisher_connections()
    log = tmp_path / "worker.log"
    yield lambda **env: runs_worker(url, log, **env)
    app.conf.broker_url = previous
    _drop_publisher_connections()


@pytest.fixture
def save_screenshot() -> Callable[[Page, str], None]:
    """Writes docs/screenshots/<name> only when AGENTTEST_SCREENSHOTS=1, so an ordinary test run changes no file."""

    def save(page: Page, name: str) -> None:
        if os.environ.get("AGENTTEST_SCREENSHOTS") == "1":
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / name), full_page=True)

    return save


EMAIL = "util-email-handle_email_sender"

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
        Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1043"})]),
        Answer(tool_calls=[Call(VOID_ORDER, {"order_id": "1043", "reason": "requested by the customer"})]),
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
        functions=[{"name": TRACK_ORDER}],
    )
    cancellation = Agent.objects.create(
        name="order-cancellation", provider="scripted", model="scripted",
        description="Cancels orders and sends confirmation emails to the customer.",
        instruction="You cancel orders. Look the order up first; do not cancel one that is already delivered. After a "
                    "cancellation, email the customer a confirmation.",
        functions=[{"name": TRACK_ORDER}, {"name": VOID_ORDER}, {"name": EMAIL}],
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
