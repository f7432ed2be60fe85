"""A page that is not there is the project's 404 page, with DEBUG on (as `scripts/demo` runs) and off; the API keeps
its JSON 404; /favicon.ico exists (issue 16, item 11)."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

MISSING_PAGES = [
    "/runs/999999/", "/runs/999999/results/1/", "/runs/999999/compare/", "/no-such-page/", "/conversations/999999/",
]


@pytest.fixture
def staff_browser(admin_user) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


@pytest.mark.parametrize("debug", [True, False])
@pytest.mark.parametrize("path", MISSING_PAGES)
def test_it_shows_the_projects_404_page_for_a_missing_page(staff_browser, settings, debug, path):
    settings.DEBUG = debug

    response = staff_browser.get(path)

    assert response.status_code == 404
    text = response.content.decode()
    assert "<h1>Page not found</h1>" in text and f"There is nothing at <code>{path}</code>" in text
    assert "Using the URLconf" not in text and "technical" not in text
    assert 'href="/runs/"' in text, "it offers a way on, in the site's own layout"


def test_it_names_what_a_view_said_was_missing_but_not_a_database_query(staff_browser, settings):
    settings.DEBUG = True

    conversation = staff_browser.get("/conversations/999999/").content.decode()
    run = staff_browser.get("/runs/999999/").content.decode()

    assert "Conversation 999999 does not exist or is not yours to see." in conversation
    assert "matches the given query" not in run and "There is nothing at <code>/runs/999999/</code>." in run


@pytest.mark.parametrize("debug", [True, False])
def test_it_keeps_the_apis_json_404(staff_browser, settings, debug):
    settings.DEBUG = debug

    response = staff_browser.get("/api/runs/999999/")

    assert response.status_code == 404 and response["Content-Type"] == "application/json"


def test_it_still_redirects_an_address_missing_its_slash(staff_browser, settings):
    settings.DEBUG = True

    response = staff_browser.get("/runs")

    assert (response.status_code, response["Location"]) == (301, "/runs/")


def test_it_serves_a_favicon_to_anyone(client):
    response = client.get("/favicon.ico")

    assert (response.status_code, response["Content-Type"]) == (200, "image/svg+xml")
    assert b"<svg" in response.content and "max-age=86400" in response["Cache-Control"]
    assert client.post("/favicon.ico").status_code == 405
