"""Issue 36, item 3, in a real browser, beside the run page's mark: after the tracking tool renamed a field and
`agenttest mocks verify` found a case's mock drifted, the admin's suite list marks the suite and leads to its marked
cases; the suite's page names the case with the paths that differ; the case's review panel refreshes the mock from
the real tool, after which no page marks it."""

from __future__ import annotations

import io
import json
import re

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
def drifted_suite(admin_user, scripted_model) -> Suite:
    parcel_tools_install(1)
    agent = Agent.objects.create(
        name="parcels", instruction="Track parcels.", provider="scripted", model="scripted",
        functions=[{"name": "verify_track_parcel"}],
    )
    suite = Suite.objects.create(name="Parcels", agent=agent, mock_rules={
        "verify_track_parcel": {"ignore": ["updated_at"]}})
    turn = {"user_message": "Where is P1?", "assertions": [{"type": "outputContains", "params": {"text": "P1"}}]}
    case_create(suite=suite, document={"name": "Parcel status", "turns": [turn], "mocks": [
        {"function_name": "verify_track_parcel", "arguments": {"parcel_id": "P1"}, "result": json.dumps(RECORDED)},
    ]})
    case_create(suite=suite, document={"name": "Small talk", "turns": [turn]})
    parcel_tools_install(2)  # the team's plugin renames `status` to `state`
    with pytest.raises(CommandError):
        call_command("mocks", "verify", stdout=io.StringIO(), stderr=io.StringIO())
    yield suite
    parcel_tools_install(1)


def test_it_marks_the_drifted_case_from_the_suite_list_to_its_refresh(sign_in, drifted_suite):
    _, page = sign_in(*ADMIN)

    page.goto("/admin/cases/suite/")
    row = page.locator("tr", has=page.get_by_role("link", name="Parcels", exact=True))
    expect(row.locator(".mock-drift")).to_have_text("⚠ mock drifted in 1 case")
    row.locator(".mock-drift").click()

    expect(page).to_have_url(re.compile(r"mock_drift=yes"))
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    marked = page.locator("#result_list tbody tr", has=page.get_by_role("link", name="Parcel status"))
    expect(marked.locator(".mock-drift")).to_have_text("⚠ mock drifted")

    page.goto(f"/admin/cases/suite/{drifted_suite.pk}/change/")
    drift = page.locator(".suite-drift")
    expect(drift).to_have_count(1)
    expect(drift.get_by_role("link")).to_have_text("Parcel status")
    expect(drift.locator("code")).to_have_text([
        "status: gone (the mock has 'in_transit'; the tool no longer returns it)",
        "state: added (the tool now returns 'in_transit'; the mock has none)",
    ])
    expect(page.locator(".suite-refused li")).to_contain_text(["mocks[0].result: 'state' is a required property"])

    drift.get_by_role("link", name="Parcel status").click()
    page.get_by_role("button", name="Refresh drifted").click()

    expect(page.locator(".messagelist")).to_contain_text("Rewrote mocks[0] (verify_track_parcel) of 'Parcel status'")
    expect(page.locator(".review-verification")).to_have_attribute("data-verdict", "equal")
    assert set(json.loads(Case.objects.get(name="Parcel status").mocks.get().result)) == {
        "parcel_id", "state", "updated_at"}
    page.goto("/admin/cases/suite/")
    expect(page.locator(".mock-drift")).to_have_count(0)
    page.goto(f"/admin/cases/suite/{drifted_suite.pk}/change/")
    expect(page.locator(".suite-drift")).to_have_count(0)
    expect(page.locator(".suite-refused")).to_have_count(0)
