"""Browser tests: Playwright's sync API driving Debian's Chromium against pytest-django's live server.

A missing Chromium fails these tests — it is never a reason to skip them. Playwright is never asked to download a
browser of its own (that download fails here); it drives Debian's, at AGENTTEST_CHROMIUM or /usr/bin/chromium.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from agenttest_demo.agents import demo_conversations_create
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


@pytest.fixture
def cancel_draft(demo_agents, admin_user) -> Case:
    """The recorded draft of the demo's "Cancel order 1043" conversation: disabled, with warnings for the reviewer."""
    played = {result.conversation.title: result.conversation for result in demo_conversations_create(owner=admin_user)}
    return recording_create(conversation=played["Cancel order 1043"]).cases[0]
