"""Issue 36: `agenttest check --database default` lists the mocks a tool's schema now refuses — the team's tracking
tool renamed a field since its mocks were written — naming suite, case and the mock's path; a draft's recorded misfit
is the reviewer's warning, not the check's."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from agenthost.models import Agent
from cases.models import Case, Suite
from cases.services import case_create
from tests.cases.parcel_tools import parcel_tools_install

pytestmark = pytest.mark.django_db

RECORDED = {"parcel_id": "P1", "status": "in_transit", "updated_at": "2026-12-04T10:00:00+00:00"}


@pytest.fixture
def suite(db, scripted_model) -> Suite:
    parcel_tools_install(1)
    agent = Agent.objects.create(
        name="parcels", instruction="Track and ship parcels.", provider="scripted", model="scripted",
        functions=[{"name": "verify_track_parcel"}, {"name": "verify_ship_parcel"}],
    )
    suite = Suite.objects.create(name="Parcels", agent=agent)
    for name in ("Parcel status", "Recorded status"):
        case_create(suite=suite, document={
            "name": name, "turns": [{"user_message": "Where is P1?", "assertions": []}],
            "mocks": [{"function_name": "verify_track_parcel", "arguments": {"parcel_id": "P1"},
                       "result": json.dumps(RECORDED)}],
        })
    # A draft recorded from a conversation: it keeps its mocks as recorded.
    Case.objects.filter(name="Recorded status").update(enabled=False, source=Case.Source.RECORDED)
    yield suite
    parcel_tools_install(1)


def check() -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("check", "--database", "default", stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def test_it_lists_the_mocks_a_tools_changed_schema_now_refuses(suite):
    assert "cases.W001" not in check()

    parcel_tools_install(2)  # `status` renamed to `state`: the mock's result is no longer what the tool returns
    output = check()

    assert (
        "(cases.W001) suite 'Parcels', case 'Parcel status': mocks[0].result: 'state' is a required property "
        "(verify_track_parcel's output schema) (mock of verify_track_parcel)"
    ) in output
    assert "agenttest mocks verify --update" in output
    assert "Recorded status" not in output
    assert output.count("cases.W001") == 1
    # The checks every command runs as it starts do not read every case.
    out, err = io.StringIO(), io.StringIO()
    call_command("check", stdout=out, stderr=err)
    assert "cases.W001" not in out.getvalue() + err.getvalue()
