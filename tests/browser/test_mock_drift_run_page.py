"""Issue 36, item 3, in a real browser: a suite run for real (`run_suite --inline`), then its tracking tool renamed a
field and `agenttest mocks verify` found the case's mock drifted — the run page marks that case's row (and only it),
and its result page shows the mock's verification with the paths that differ."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import CommandError, call_command
from playwright.sync_api import expect

from agenthost.models import Agent
from cases.models import Suite
from cases.services import case_create
from runs.models import CaseResult, Run
from tests.cases.parcel_tools import parcel_tools_install

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ADMIN = ("root", "root-password-123")
RECORDED = {"parcel_id": "P1", "status": "in_transit", "updated_at": "2026-12-04T10:00:00+00:00"}


@pytest.fixture
def drifted_run(admin_user, scripted_model) -> Run:
    parcel_tools_install(1)
    agent = Agent.objects.create(
        name="parcels", instruction="Track and ship parcels.", provider="scripted", model="scripted",
        functions=[{"name": "verify_track_parcel"}, {"name": "verify_ship_parcel"}],
    )
    suite = Suite.objects.create(name="Parcels", agent=agent, mock_rules={
        "verify_track_parcel": {"ignore": ["updated_at"]}})
    turn = {"user_message": "Where is P1?", "assertions": []}
    case_create(suite=suite, document={"name": "Parcel status", "turns": [turn], "mocks": [
        {"function_name": "verify_track_parcel", "arguments": {"parcel_id": "P1"}, "result": json.dumps(RECORDED)},
    ]})
    case_create(suite=suite, document={"name": "Small talk", "turns": [{"user_message": "Hello!", "assertions": []}]})
    # The agent asks which parcel it means, and greets back: the run needs a reply in each case, no call.
    scripted_model.play("Could you tell me the parcel number?", "Hello! How can I help you today?")
    with pytest.raises(SystemExit):
        call_command("run_suite", "Parcels", models=scripted_model.key, inline=True, stdout=io.StringIO())
    run = Run.objects.get(suite=suite)
    assert run.is_finished and run.results.count() == 2
    parcel_tools_install(2)  # the team's plugin renames `status` to `state`
    with pytest.raises(CommandError):
        call_command("mocks", "verify", stdout=io.StringIO(), stderr=io.StringIO())
    yield run
    parcel_tools_install(1)


def test_it_marks_the_drifted_case_on_the_run_page_and_shows_the_diff_on_its_result(sign_in, drifted_run):
    _, page = sign_in(*ADMIN)

    page.goto(f"/runs/{drifted_run.pk}/")

    drifted = page.locator("tr", has=page.get_by_role("rowheader", name="Parcel status"))
    expect(drifted.locator(".mock-drift")).to_have_text("⚠ mock drifted")
    expect(drifted.locator(".mock-drift")).to_have_attribute("title", re.compile("agenttest mocks verify"))
    expect(page.locator("tr", has=page.get_by_role("rowheader", name="Small talk")).locator(".mock-drift")) \
        .to_have_count(0)

    result = CaseResult.objects.get(run=drifted_run, case_name="Parcel status")
    drifted.locator(f'a[href$="/results/{result.pk}/"]').click()

    verification = page.locator(".mock-verification")
    expect(verification).to_have_attribute("data-verdict", "drifted")
    expect(verification.locator(".badge")).to_have_text("drifted")
    expect(verification.locator(".mock-diff li")).to_have_text([
        "status: gone (the mock has 'in_transit'; the tool no longer returns it)",
        "state: added (the tool now returns 'in_transit'; the mock has none)",
    ])
