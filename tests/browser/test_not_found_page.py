"""Issue 16, item 11, in a real browser: with DEBUG on, as `scripts/demo` runs, a missing run or a mistyped address is
the project's 404 page — in the site's layout, with a way on — never Django's technical page; at 1366 and 800 px."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ADMIN = ("root", "root-password-123")


@pytest.mark.parametrize("width", [1366, 800])
@pytest.mark.parametrize("path", ["/runs/424242/", "/runs/424242/results/7/", "/no-such-page/"])
def test_it_shows_the_projects_404_page_with_debug_on(sign_in, settings, admin_user, width, path):
    settings.DEBUG = True
    context, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": 800})

    response = page.goto(path)

    assert response.status == 404
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()
    expect(page.locator("main")).to_contain_text(f"There is nothing at {path}")
    expect(page.get_by_text("Using the URLconf")).to_have_count(0)
    page.get_by_role("main").get_by_role("link", name="Runs").click()
    page.wait_for_url("**/runs/")
    page.goto(path)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    context.close()
