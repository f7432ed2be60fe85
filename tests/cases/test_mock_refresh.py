"""The review panel's "Refresh drifted" (issue 36, item 3): a reviewer who sees a mock drifted from its effect-free tool
rewrites it from the real tool with one button — `agenttest mocks verify --update`'s service, so the case changes as
any reviewed edit does (its content hash). Staff who may change cases only, POST only; nothing drifted, or only a
side-effecting tool's mock drifted, is refused with a message saying so and changes nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command
from django.test import Client

from agenthost.models import Agent
from cases.models import Case, MockVerification, Suite
from cases.services import case_create, case_to_document, case_update
from tests.cases.parcel_tools import parcel_tools_install

pytestmark = pytest.mark.django_db

RECORDED = {"parcel_id": "P1", "status": "in_transit", "updated_at": "2026-12-04T10:00:00+00:00"}
SHIPPED = {"parcel_id": "P1", "status": "shipped", "updated_at": "2026-12-04T10:00:00+00:00"}


@pytest.fixture
def deployed():
    yield parcel_tools_install
    parcel_tools_install(1)


@pytest.fixture
def markers(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "markers"
    root.mkdir()
    monkeypatch.setenv("PARCEL_MARKER_DIR", str(root))
    return root


@pytest.fixture
def case(db, deployed, scripted_model) -> Case:
    deployed(1)
    agent = Agent.objects.create(
        name="parcels", instruction="Track and ship parcels.", provider="scripted", model="scripted",
        functions=[{"name": "verify_track_parcel"}, {"name": "verify_ship_parcel"}],
    )
    suite = Suite.objects.create(name="Parcels", agent=agent, mock_rules={"verify_track_parcel": {
        "ignore": ["updated_at"]}})
    return case_create(suite=suite, document={
        "name": "Parcel status",
        "turns": [{"user_message": "Where is P1? Ship it if it is here.",
                   "assertions": [{"type": "toolCalled", "params": {"function": "verify_track_parcel"}}]}],
        "mocks": [
            {"function_name": "verify_track_parcel", "arguments": {"parcel_id": "P1"}, "result": json.dumps(RECORDED)},
            {"function_name": "verify_ship_parcel", "arguments": {"parcel_id": "P1"}, "result": json.dumps(SHIPPED)},
        ],
    })


def verify() -> int:
    try:
        call_command("mocks", "verify", stdout=io.StringIO(), stderr=io.StringIO())
    except CommandError as exc:
        return exc.returncode
    return 0


def staff(django_user_model, *codenames: str):
    user = django_user_model.objects.create_user("pat", "pat@example.com", "pat-password-123", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="cases", codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def refresh(client: Client, case: Case):
    return client.post(f"/admin/cases/case/{case.pk}/refresh-drifted/", follow=True)


def said(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)] or [
        str(message) for message in response.context["messages"]
    ]


def test_it_rewrites_a_drifted_mock_from_the_real_tool_on_the_review_panel(admin_client, case, deployed):
    deployed(2)
    assert verify() == 1
    page = admin_client.get(f"/admin/cases/case/{case.pk}/change/").content.decode()
    assert "Refresh drifted</button>" in page
    before = case.content_hash

    response = refresh(admin_client, case)

    case.refresh_from_db()
    assert case.content_hash != before
    assert set(json.loads(case.mocks.get(function_name="verify_track_parcel").result)) == {
        "parcel_id", "state", "updated_at"
    }
    assert json.loads(case.mocks.get(function_name="verify_ship_parcel").result) == SHIPPED
    assert any("Rewrote mocks[0] (verify_track_parcel) of 'Parcel status' from the real tool" in message
               for message in said(response))
    page = response.content.decode()
    assert "Refresh drifted</button>" not in page
    assert 'data-verdict="equal"' in page
    assert verify() == 0


def test_it_refuses_to_refresh_when_nothing_drifted_and_changes_nothing(admin_client, case):
    assert verify() == 0
    before = case_to_document(case=case)

    response = refresh(admin_client, case)

    assert response.status_code == 200
    assert "Nothing to refresh in 'Parcel status': no mock drifted from its tool" in " ".join(said(response))
    assert case_to_document(case=Case.objects.get()) == before


def test_it_never_calls_a_side_effecting_tool_to_refresh_its_drifted_mock(admin_client, case, markers):
    document = case_to_document(case=case)
    document["mocks"][1]["result"] = json.dumps({"parcel_id": "P1", "shipped": True})
    case = case_update(case=case, document={**document, "source": "recorded", "enabled": False})
    assert verify() == 1
    assert "Refresh drifted</button>" in admin_client.get(f"/admin/cases/case/{case.pk}/change/").content.decode()

    response = refresh(admin_client, case)

    message = " ".join(said(response))
    assert "Nothing refreshed in 'Parcel status': mocks[1] (verify_ship_parcel) drifted, but its tool has effects " \
        "outside agenttest" in message
    assert list(markers.iterdir()) == []
    assert Case.objects.get().content_hash == case.content_hash


@pytest.mark.parametrize("codenames", [("view_case",), ()], ids=["view-only staff", "staff without case rights"])
def test_it_refuses_staff_who_may_not_change_cases_with_a_403(django_user_model, case, deployed, codenames):
    deployed(2)
    verify()
    before = case.content_hash

    response = staff(django_user_model, *codenames).post(f"/admin/cases/case/{case.pk}/refresh-drifted/")

    assert response.status_code == 403
    assert Case.objects.get().content_hash == before


def test_it_keeps_members_out_and_changes_nothing(member, case, deployed):
    deployed(2)
    verify()
    before = case.content_hash
    client = Client()
    client.force_login(member)

    response = client.post(f"/admin/cases/case/{case.pk}/refresh-drifted/")

    # The admin's door sends a member to its login page: the refresh never runs.
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert Case.objects.get().content_hash == before
    assert MockVerification.objects.get(function_name="verify_track_parcel").verdict == "drifted"


def test_it_refreshes_on_post_only(admin_client, case, deployed):
    deployed(2)
    verify()
    before = case.content_hash

    response = admin_client.get(f"/admin/cases/case/{case.pk}/refresh-drifted/")

    assert response.status_code == 405
    assert Case.objects.get().content_hash == before


def test_it_refuses_a_refresh_without_the_csrf_token(admin_user, case, deployed):
    deployed(2)
    verify()
    before = case.content_hash
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    response = client.post(f"/admin/cases/case/{case.pk}/refresh-drifted/")

    assert response.status_code == 403
    assert Case.objects.get().content_hash == before
