"""`agenttest mocks verify` (issue 36): each mock of an effect-free tool is checked against the real tool on the mock's
arguments — a renamed field fails it naming mock, case and path; an unchanged tool verifies green; an `ignore`d
timestamp does not drift; a side-effecting tool is never called; each mock keeps its last verification."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from agenthost.models import Agent
from agenthost.seams import FunctionContext, function_execute
from cases.models import Case, MockVerification, Suite
from cases.services import case_create, case_to_document, case_update
from tests.cases.parcel_tools import parcel_tools_install

pytestmark = pytest.mark.django_db

RECORDED = {"parcel_id": "P1", "status": "in_transit", "updated_at": "2026-12-04T10:00:00+00:00"}
SHIPPED = {"parcel_id": "P1", "status": "shipped", "updated_at": "2026-12-04T10:00:00+00:00"}


@pytest.fixture
def deployed():
    """Installs a version of the team's parcel plugin; version 1 again afterwards, as the other tests expect."""
    yield parcel_tools_install
    parcel_tools_install(1)


@pytest.fixture
def markers(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "markers"
    root.mkdir()
    monkeypatch.setenv("PARCEL_MARKER_DIR", str(root))
    return root


@pytest.fixture
def suite(db, deployed, scripted_model) -> Suite:
    deployed(1)
    agent = Agent.objects.create(
        name="parcels", instruction="Track and ship parcels.", provider="scripted", model="scripted",
        functions=[{"name": "verify_track_parcel"}, {"name": "verify_ship_parcel"}],
    )
    suite = Suite.objects.create(name="Parcels", agent=agent)
    case_create(suite=suite, document={
        "name": "Parcel status",
        "turns": [{"user_message": "Where is P1? Ship it if it is here.",
                   "assertions": [{"type": "toolCalled", "params": {"function": "verify_track_parcel"}}]}],
        "mocks": [
            {"function_name": "verify_track_parcel", "arguments": {"parcel_id": "P1"}, "result": json.dumps(RECORDED)},
            {"function_name": "verify_ship_parcel", "arguments": {"parcel_id": "P1"}, "result": json.dumps(SHIPPED)},
        ],
    })
    return suite


def verify(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("mocks", "verify", *args, stdout=out, stderr=err)
    except CommandError as exc:
        err.write(str(exc))
        return exc.returncode, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def rules(suite: Suite, **rule) -> None:
    suite.mock_rules = {"verify_track_parcel": rule}
    suite.save()


def test_it_verifies_an_unchanged_tool_green_when_its_timestamp_is_ignored(suite):
    rules(suite, ignore=["updated_at"])

    code, out, err = verify()

    assert code == 0, err
    assert "equal: suite 'Parcels', case 'Parcel status', mocks[0] (verify_track_parcel)" in out
    verification = MockVerification.objects.get(function_name="verify_track_parcel")
    assert (verification.verdict, verification.diff) == ("equal", [])
    assert json.loads(verification.real_result)["status"] == "in_transit"


def test_it_calls_a_timestamp_that_changed_drift_unless_ignored_or_compared_by_shape(suite):
    code, _, err = verify()

    assert code == 1
    assert "drifted: suite 'Parcels', case 'Parcel status', mocks[0] (verify_track_parcel)" in err
    assert "updated_at: '2026-12-04T10:00:00+00:00' in the mock" in err

    rules(suite, compare="shape")
    code, out, err = verify()

    assert code == 0, err
    assert "equal in shape: suite 'Parcels', case 'Parcel status', mocks[0] (verify_track_parcel)" in out


def test_it_exits_non_zero_naming_mock_case_and_path_when_the_tool_renames_a_field(suite, deployed):
    rules(suite, ignore=["updated_at"])
    deployed(2)

    code, _, err = verify("--suite", "Parcels")

    assert code == 1
    assert "drifted: suite 'Parcels', case 'Parcel status', mocks[0] (verify_track_parcel)" in err
    assert "status: gone (the mock has 'in_transit'; the tool no longer returns it)" in err
    assert "state: added (the tool now returns 'in_transit'; the mock has none)" in err
    verification = MockVerification.objects.get(function_name="verify_track_parcel")
    assert verification.verdict == "drifted"
    assert {(item["path"], item["change"]) for item in verification.diff} == {("status", "gone"), ("state", "added")}


def test_it_never_calls_a_side_effecting_tool_and_lists_it_unverifiable(suite, markers):
    rules(suite, ignore=["updated_at"])

    code, out, _ = verify()

    assert code == 0
    assert "unverifiable: suite 'Parcels', case 'Parcel status', mocks[1] (verify_ship_parcel) — has effects " in out
    assert list(markers.iterdir()) == []
    assert MockVerification.objects.get(function_name="verify_ship_parcel").verdict == "unverifiable"
    # The marker is what a real call leaves: its absence above means the tool did not run.
    function_execute("verify_ship_parcel", FunctionContext(name="verify_ship_parcel", arguments={"parcel_id": "P1"}))
    assert [path.name for path in markers.iterdir()] == ["shipped-P1"]


def test_it_checks_a_side_effecting_tools_mock_against_its_output_schema(suite):
    rules(suite, ignore=["updated_at"])
    case = Case.objects.get()
    document = case_to_document(case=case)
    document["mocks"][1]["result"] = json.dumps({"parcel_id": "P1", "shipped": True})
    # A recorded draft keeps what it was given, so the tool's output schema is only applied by verify here.
    case_update(case=case, document={**document, "source": "recorded", "enabled": False})

    code, _, err = verify()

    assert code == 1
    assert "drifted: suite 'Parcels', case 'Parcel status', mocks[1] (verify_ship_parcel)" in err
    assert "result: 'status' is a required property" in err


def test_it_keeps_each_mocks_last_verification_across_saves_that_leave_it_unchanged(suite):
    rules(suite, ignore=["updated_at"])
    verify()
    case = Case.objects.get()

    case_update(case=case, document={**case_to_document(case=case), "description": "Edited."})

    kept = {item.function_name: item.verdict for item in case.mock_verifications.all()}
    assert kept == {"verify_track_parcel": "equal", "verify_ship_parcel": "unverifiable"}


def test_it_rewrites_a_drifted_mock_from_the_real_tool_with_update(suite, deployed, tmp_path):
    rules(suite, ignore=["updated_at"])
    deployed(2)
    before = Case.objects.get().content_hash
    summary = tmp_path / "mocks.md"

    code, _, err = verify("--update", "--summary", str(summary))

    assert code == 0, err
    case = Case.objects.get()
    assert case.content_hash != before
    assert set(json.loads(case.mocks.get(function_name="verify_track_parcel").result)) == {
        "parcel_id", "state", "updated_at"
    }
    assert verify()[0] == 0
    assert "| Unverifiable | Parcels | Parcel status | mocks[1] (verify_ship_parcel) |" in summary.read_text()


def test_it_writes_a_markdown_summary_naming_each_drifted_path(suite, deployed, tmp_path):
    rules(suite, ignore=["updated_at"])
    deployed(2)
    summary = tmp_path / "mocks.md"

    verify("--summary", str(summary))

    text = summary.read_text()
    counts = "0 equal, 0 equal in shape, 1 drifted, 0 tool failed, 1 unverifiable."
    assert text.startswith(f"# Mock verification\n\n{counts}")
    assert "| Drifted | Parcels | Parcel status | mocks[0] (verify_track_parcel) | status: gone" in text


def test_it_verifies_a_repositorys_files_and_rewrites_them_with_update(db, deployed, tmp_path, scripted_model):
    deployed(1)
    repo = tmp_path / "repo"
    files = {
        "agents/parcels.yaml": "name: parcels\nmodel: scripted:scripted\ninstruction: Track parcels.\n"
                               "functions:\n- verify_track_parcel\n",
        "suites/parcels/suite.yaml": "name: Parcels\nagent: parcels\nmock_rules:\n  verify_track_parcel:\n"
                                     "    ignore: [updated_at]\n",
        "suites/parcels/cases/status.yaml": "name: Parcel status\nturns:\n- user_message: Where is P1?\n  assertions:\n"
                                            "  - type: toolCalled\n    params:\n      function: verify_track_parcel\n"
                                            "mocks:\n- function_name: verify_track_parcel\n  arguments:\n"
                                            "    parcel_id: P1\n  result:\n    parcel_id: P1\n"
                                            "    status: delivered\n    updated_at: x\n",
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)

    code, _, err = verify(str(repo))
    assert code == 1 and "status: 'delivered' in the mock, 'in_transit' from the tool" in err

    assert verify(str(repo), "--update")[0] == 0
    assert "status: in_transit" in (repo / "suites/parcels/cases/status.yaml").read_text()
    assert verify(str(repo))[0] == 0

    # A tool whose declared return type changed: applying the files already refuses the mock, naming file and path.
    deployed(2)
    code, _, err = verify(str(repo))
    assert code == 1
    assert "suites/parcels/cases/status.yaml: mocks[0].result: 'state' is a required property" in err


@pytest.mark.parametrize(
    ("rules_given", "field", "message"),
    [
        pytest.param({"verify_track_parcl": {}}, "mock_rules.verify_track_parcl",
                     "did you mean 'verify_track_parcel'?", id="a-function-no-agent-can-call"),
        pytest.param({"verify_track_parcel": {"compare": "loose"}}, "mock_rules.verify_track_parcel.compare",
                     "must be 'exact' or 'shape'", id="an-unknown-comparison"),
        pytest.param({"verify_track_parcel": {"ignore": ["items[x]"]}}, "mock_rules.verify_track_parcel.ignore[0]",
                     "must be a path into the tool's result", id="a-path-that-is-not-one"),
    ],
)
def test_it_refuses_a_bad_comparison_rule_with_a_400_naming_it(admin_client_api, suite, rules_given, field, message):
    response = admin_client_api.patch(f"/api/suites/{suite.pk}/", {"mock_rules": rules_given}, format="json")

    assert response.status_code == 400, response.content
    errors = {error["field"]: error["message"] for error in response.json()["errors"]}
    assert message in errors[field], errors
    suite.refresh_from_db()
    assert suite.mock_rules == {}


def test_it_keeps_the_comparison_rules_the_api_is_given(admin_client_api, suite):
    rules_given = {"verify_track_parcel": {"compare": "shape", "ignore": ["updated_at", "items[*].price"]}}

    response = admin_client_api.patch(f"/api/suites/{suite.pk}/", {"mock_rules": rules_given}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["mock_rules"] == rules_given
    suite.refresh_from_db()
    assert suite.mock_rules == rules_given


def test_it_never_runs_a_mocked_control_flow_function_outside_its_conversation(suite):
    rules(suite, ignore=["updated_at"])
    case_create(suite=suite, document={
        "name": "Hand over",
        "turns": [{"user_message": "A person, please.",
                   "assertions": [{"type": "toolCalled", "params": {"function": "human_intervention_needed"}}]}],
        "mocks": [{"function_name": "human_intervention_needed", "result": "A person will answer.", "stop": False}],
    })

    code, out, _ = verify()

    assert code == 0
    assert ("unverifiable: suite 'Parcels', case 'Hand over', mocks[0] (human_intervention_needed) — a control-flow "
            "function acts on its conversation") in out
