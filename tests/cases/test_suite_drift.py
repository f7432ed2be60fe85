"""A drifted mock marks its cases where a reviewer looks at suites (issue 36, item 3): the suite list counts the cases
whose mocks, as they stand, were last verified drifted and links to them; the case list marks and filters them; the
suite's page lists each with the paths that differ, and the mocks its tools' schemas now refuse (item 1). A case fixed
since its verification (its content changed) is no longer marked."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agenthost.models import Agent
from cases.models import Case, Suite
from cases.services import case_create, case_to_document, case_update
from tests.cases.parcel_tools import parcel_tools_install

pytestmark = pytest.mark.django_db

RECORDED = {"parcel_id": "P1", "status": "in_transit", "updated_at": "2026-12-04T10:00:00+00:00"}


@pytest.fixture
def deployed(scripted_model):
    parcel_tools_install(1)
    yield parcel_tools_install
    parcel_tools_install(1)


def parcels(name: str, cases: int = 1, drifting: int = 1) -> Suite:
    agent = Agent.objects.create(
        name=f"{name} agent", instruction="Track parcels.", provider="scripted", model="scripted",
        functions=[{"name": "verify_track_parcel"}],
    )
    suite = Suite.objects.create(name=name, agent=agent, mock_rules={"verify_track_parcel": {"ignore": ["updated_at"]}})
    for index in range(cases):
        mocks = [{"function_name": "verify_track_parcel", "arguments": {"parcel_id": "P1"},
                  "result": json.dumps(RECORDED)}] if index < drifting else []
        case_create(suite=suite, document={
            "name": f"{name} case {index}", "mocks": mocks,
            "turns": [{"user_message": "Where is P1?", "assertions": [{"type": "outputContains",
                                                                       "params": {"text": "P1"}}]}],
        })
    return suite


def verify() -> None:
    try:
        call_command("mocks", "verify", stdout=io.StringIO(), stderr=io.StringIO())
    except CommandError:
        pass


def test_it_counts_and_links_the_cases_with_a_drifted_mock_on_the_suite_list(admin_client, deployed):
    drifting = parcels("Parcels", cases=3, drifting=2)
    steady = parcels("Steady", cases=1, drifting=0)
    deployed(2)
    verify()

    page = admin_client.get("/admin/cases/suite/").content.decode()

    assert f'href="/admin/cases/case/?suite__id__exact={drifting.pk}&amp;mock_drift=yes"' in page
    assert "⚠ mock drifted in 2 cases</a>" in page
    assert f"suite__id__exact={steady.pk}&amp;mock_drift" not in page

    listed = admin_client.get(f"/admin/cases/case/?suite__id__exact={drifting.pk}&mock_drift=yes").content.decode()
    assert "Parcels case 0" in listed and "Parcels case 1" in listed and "Parcels case 2" not in listed
    assert listed.count('<span class="mock-drift"') == 2


def test_it_lists_each_drifted_case_with_its_paths_and_the_refused_mocks_on_the_suite_page(admin_client, deployed):
    suite = parcels("Parcels", cases=2, drifting=1)
    deployed(2)
    verify()
    case = Case.objects.get(name="Parcels case 0")

    page = admin_client.get(f"/admin/cases/suite/{suite.pk}/change/").content.decode()

    assert f'<a href="/admin/cases/case/{case.pk}/change/">Parcels case 0</a>' in page
    assert "mocks[0] (verify_track_parcel): drifted on" in page
    assert "status: gone (the mock has &#x27;in_transit&#x27;; the tool no longer returns it)" in page
    assert "Parcels case 1</a>" not in page
    assert ("suite &#x27;Parcels&#x27;, case &#x27;Parcels case 0&#x27;: mocks[0].result: &#x27;state&#x27; is a "
            "required property (verify_track_parcel&#x27;s output schema)") in page


def test_it_no_longer_marks_a_case_whose_mock_was_fixed_since(admin_client, deployed):
    suite = parcels("Parcels")
    deployed(2)
    verify()
    case = Case.objects.get()
    document = case_to_document(case=case)
    document["mocks"][0]["result"] = json.dumps({"parcel_id": "P1", "state": "in_transit", "updated_at": "x"})
    case_update(case=case, document=document)

    assert "⚠ mock drifted" not in admin_client.get("/admin/cases/suite/").content.decode()
    assert "⚠ mock drifted" not in admin_client.get(f"/admin/cases/suite/{suite.pk}/change/").content.decode()
    assert "⚠ mock drifted" not in admin_client.get("/admin/cases/case/").content.decode()


def test_it_marks_suites_in_the_same_number_of_queries_for_one_suite_or_many(admin_client, deployed):
    parcels("First", cases=1)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get("/admin/cases/suite/").status_code == 200
        return len(captured)

    deployed(2)
    verify()
    few = queries()
    deployed(1)
    for index in range(4):
        parcels(f"More {index}", cases=2)
    deployed(2)
    verify()

    assert queries() == few
