"""Issue 36, item 3, in a real browser: the case review panel shows each mock's last verification against the real
tool — drifted with the paths that differ, unverifiable with why — and the mocks the tool's schemas now refuse."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from playwright.sync_api import expect

from agenthost.models import Agent
from cases.models import Case, Suite
from cases.services import case_create
from tests.cases.parcel_tools import parcel_tools_install

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ADMIN = ("root", "root-password-123")
RECORDED = {"parcel_id": "P1", "status": "in_transit", "updated_at": "2026-12-04T10:00:00+00:00"}


@pytest.fixture
def drifted_case(admin_user, scripted_model) -> Case:
    """A case whose tracking tool renamed `status` to `state` since its mock was written, verified since."""
    parcel_tools_install(1)
    agent = Agent.objects.create(
        name="parcels", instruction="Track and ship parcels.", provider="scripted", model="scripted",
        functions=[{"name": "verify_track_parcel"}, {"name": "verify_ship_parcel"}],
    )
    suite = Suite.objects.create(name="Parcels", agent=agent, mock_rules={"verify_track_parcel": {
        "ignore": ["updated_at"]}})
    case = case_create(suite=suite, document={
        "name": "Parcel status",
        "turns": [{"user_message": "Where is P1?",
                   "assertions": [{"type": "toolCalled", "params": {"function": "verify_track_parcel"}}]}],
        "mocks": [
            {"function_name": "verify_track_parcel", "arguments": {"parcel_id": "P1"}, "result": json.dumps(RECORDED)},
            {"function_name": "verify_ship_parcel", "arguments": {"parcel_id": "P1"}, "result": "shipped"},
        ],
    })
    parcel_tools_install(2)
    with pytest.raises(CommandError):
        call_command("mocks", "verify")
    yield case
    parcel_tools_install(1)


def test_it_shows_each_mocks_verification_and_drift_on_the_review_panel(sign_in, drifted_case):
    _, page = sign_in(*ADMIN)

    page.goto(f"/admin/cases/case/{drifted_case.pk}/change/")

    review = page.locator(".case-review")
    track, ship = review.locator(".review-mock").nth(0), review.locator(".review-mock").nth(1)
    expect(track.locator(".review-verification")).to_have_attribute("data-verdict", "drifted")
    expect(track.locator(".review-verification .review-badge")).to_have_text("drifted")
    expect(track.locator(".review-diff li")).to_have_text([
        "status: gone (the mock has 'in_transit'; the tool no longer returns it)",
        "state: added (the tool now returns 'in_transit'; the mock has none)",
    ])
    expect(ship.locator(".review-verification")).to_contain_text("unverifiable")
    expect(ship.locator(".review-verification")).to_contain_text("has effects outside agenttest")
    expect(review.locator(".review-warnings")).to_contain_text(
        "mocks[0].result: 'state' is a required property (verify_track_parcel's output schema)"
    )
