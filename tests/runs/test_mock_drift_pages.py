"""Issue 36, item 3: the run page marks the cases that ran a mock `agenttest mocks verify` found drifted since, and a
result page shows each mock's last verification — as the case was when the result ran it, so an edit that fixes the
mock leaves the next run unmarked while the run that ran the stale mock stays marked."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import CommandError, call_command

from agenthost.models import Agent
from cases.models import Case, Suite
from cases.services import case_create, case_to_document, case_update
from runs.models import CaseResult, Run
from tests.cases.parcel_tools import parcel_tools_install

pytestmark = pytest.mark.django_db

MODEL = "scripted:scripted"
RECORDED = {"parcel_id": "P1", "status": "in_transit", "updated_at": "2026-12-04T10:00:00+00:00"}
SHIPPED = {"parcel_id": "P1", "status": "shipped", "updated_at": "2026-12-04T10:00:00+00:00"}


@pytest.fixture
def suite(db) -> Suite:
    """Two cases: one tracks a parcel (an effect-free tool, verified for real), one only ships it (never called)."""
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
    case_create(suite=suite, document={"name": "Ship it", "turns": [turn], "mocks": [
        {"function_name": "verify_ship_parcel", "arguments": {"parcel_id": "P1"}, "result": json.dumps(SHIPPED)},
    ]})
    yield suite
    parcel_tools_install(1)


def verify() -> int:
    try:
        call_command("mocks", "verify", stdout=io.StringIO(), stderr=io.StringIO())
    except CommandError as exc:
        return exc.returncode
    return 0


def finished_run(suite: Suite) -> Run:
    """A finished run of the suite's cases as they are now, its results written as a run writes them."""
    cases = list(Case.objects.filter(suite=suite).order_by("pk"))
    run = Run.objects.create(
        suite=suite, model_keys=[MODEL], case_ids=[case.pk for case in cases], total=len(cases),
        status=Run.Status.PASSED, passed=len(cases),
    )
    CaseResult.objects.bulk_create(
        CaseResult(run=run, case=case, case_name=case.name, case_hash=case.content_hash, model=MODEL,
                   position=position, status=CaseResult.Status.PASSED)
        for position, case in enumerate(cases)
    )
    return run


def row_of(admin_client, run: Run, name: str) -> str:
    html = admin_client.get(f"/runs/{run.pk}/").content.decode()
    (row,) = re.findall(rf'<th scope="row">{re.escape(name)}(.*?)</th>', html)
    return row


def test_it_marks_on_the_run_page_the_case_whose_mock_drifted(admin_client, suite):
    run = finished_run(suite)
    assert verify() == 0
    assert 'class="mock-drift"' not in row_of(admin_client, run, "Parcel status")

    parcel_tools_install(2)  # the tool renames `status` to `state`
    assert verify() == 1

    assert "mock drifted" in row_of(admin_client, run, "Parcel status")
    # Its other case's mock is of a side-effecting tool: unverifiable, which is no drift.
    assert 'class="mock-drift"' not in row_of(admin_client, run, "Ship it")


def test_it_leaves_unmarked_a_run_of_the_fixed_mock_and_keeps_the_mark_on_the_run_that_ran_the_stale_one(
    admin_client, suite
):
    parcel_tools_install(2)
    stale_run = finished_run(suite)
    assert verify() == 1
    case = Case.objects.get(name="Parcel status")
    document = case_to_document(case=case)
    document["mocks"][0]["result"] = json.dumps({"parcel_id": "P1", "state": "in_transit", "updated_at": "x"})
    case_update(case=case, document=document)
    assert verify() == 0

    fixed_run = finished_run(suite)

    assert 'class="mock-drift"' not in row_of(admin_client, fixed_run, "Parcel status")
    assert "mock drifted" in row_of(admin_client, stale_run, "Parcel status")


def test_it_shows_each_mocks_verification_on_the_result_page(admin_client, suite):
    run = finished_run(suite)
    parcel_tools_install(2)
    assert verify() == 1
    status, ship = (CaseResult.objects.get(run=run, case_name=name) for name in ("Parcel status", "Ship it"))

    html = admin_client.get(f"/runs/{run.pk}/results/{status.pk}/").content.decode()

    (item,) = re.findall(r'<li class="mock-verification" data-verdict="drifted">(.*?)</li>\s*</ul></li>', html, re.S)
    assert "mocks[0] (verify_track_parcel)" in item and ">drifted</span>" in item and "verified on " in item
    assert "status: gone (the mock has &#x27;in_transit&#x27;; the tool no longer returns it)" in item
    assert "state: added (the tool now returns &#x27;in_transit&#x27;; the mock has none)" in item

    html = admin_client.get(f"/runs/{run.pk}/results/{ship.pk}/").content.decode()
    assert 'data-verdict="unverifiable"' in html and "has effects outside agenttest" in html


def test_it_shows_no_verification_for_a_result_of_a_case_edited_since(admin_client, suite):
    run = finished_run(suite)
    case = Case.objects.get(name="Parcel status")
    document = case_to_document(case=case)
    document["turns"][0]["user_message"] = "Where is my parcel P1?"
    case_update(case=case, document=document)
    parcel_tools_install(2)
    assert verify() == 1  # the case as it is now drifted; the result ran it as it was
    result = CaseResult.objects.get(run=run, case_name="Parcel status")

    html = admin_client.get(f"/runs/{run.pk}/results/{result.pk}/").content.decode()

    assert "mock-verification" not in html
    assert 'class="mock-drift"' not in row_of(admin_client, run, "Parcel status")
