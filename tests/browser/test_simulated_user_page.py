"""A simulated user's result page (issue 37, item 7 of the findings): it shows whom the user model played — persona,
goal and the facts it could reveal — and counts the turns it wrote from 1 (a conversation the user model opened at
the first turn used to read "Simulated turns 0", as if there were none), at 1366 and at 800 px wide."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from agenttest_demo.suite import simulated_users_suite_ensure
from runs.models import CaseResult
from runs.services import run_create, run_execute
from tests.browser.test_review_pages import WIDTHS, assert_fits
from tests.browser.test_run_pages import ADMIN, CAREFUL

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ASKED = "The order number is given only when asked"


def test_it_shows_the_persona_goal_and_facts_and_counts_turns_from_one(sign_in, demo_agents, admin_user):
    suite, _ = simulated_users_suite_ensure()
    played = suite.cases.get(name=ASKED).simulated_user
    run = run_execute(run_id=run_create(suite=suite, model_keys=[CAREFUL], case_filter=ASKED).pk)
    result = CaseResult.objects.get(run=run)
    assert result.simulation["turns"] == [0, 1]
    _, page = sign_in(*ADMIN)

    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"/runs/{run.pk}/results/{result.pk}/")
        box = page.locator(".simulated-user")
        expect(box.locator('[data-field="persona"]')).to_contain_text(played["persona"])
        expect(box.locator('[data-field="goal"]')).to_contain_text(played["goal"])
        for key, value in played["facts"].items():
            expect(box.locator('[data-field="facts"]')).to_contain_text(key)
            expect(box.locator('[data-field="facts"]')).to_contain_text(value)
        expect(box.locator('[data-field="simulated-turns"]')).to_have_text("1, 2")
        assert_fits(page, f"the simulated user's result page at {width}")
