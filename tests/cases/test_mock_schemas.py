"""Mocks held to their tools' schemas (issue 36): a mock whose arguments the tool would reject, or whose result the tool
could never return, is refused at every door — the API, the admin, a case file (`apply`), `cases import` — naming
the mock and the path; a recorded draft keeps it and the reviewer is warned; and no door accepts what another
refuses."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from django.core.management import CommandError, call_command
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost.models import Agent
from cases.files import FilesRejected, files_apply
from cases.models import Case, Mock, Suite
from cases.services import case_create, case_enable, cases_import
from cases.validation.callable_functions import case_callable_functions
from cases.validation.case_documents import validate_case_document, validate_mock
from cases.validation.problems import CaseValidationError
from tests.cases import parcel_tools  # noqa: F401  (registers the typed tools the agent declares)
from tests.cases.test_admin import change_form, change_url
from tests.properties import SUPPRESSED_WITH_FIXTURES

pytestmark = pytest.mark.django_db

PARCEL = {"parcel_id": "P1", "status": "in_transit", "updated_at": "2026-12-04T10:00:00Z"}


@pytest.fixture
def parcels(db, scripted_model) -> Suite:
    agent = Agent.objects.create(
        name="parcels", instruction="Track parcels.", provider="scripted", model="scripted",
        functions=[{"name": "track_parcel"}, {"name": "parcel_note"}],
    )
    return Suite.objects.create(name="Parcels", agent=agent)


def parcel_case(**mock: Any) -> dict[str, Any]:
    return {
        "name": "Parcel status",
        "turns": [{"user_message": "Where is parcel P1?",
                   "assertions": [{"type": "toolCalled", "params": {"function": "track_parcel"}}]}],
        "mocks": [{"function_name": "track_parcel", "arguments": {"parcel_id": "P1"}, "result": json.dumps(PARCEL),
                   **mock}],
    }


def problems_by_field(problems) -> dict[str, str]:
    return {problem.field: problem.message for problem in problems}


BAD_MOCKS = [
    pytest.param({"arguments": {"parcel_id": 12}}, "mocks[0].arguments.parcel_id", "is not of type 'string'",
                 id="argument-of-the-wrong-type"),
    pytest.param({"arguments": {"parcel_id": "P1", "carrier": "fedex"}}, "mocks[0].arguments.carrier",
                 "'fedex' is not one of ['dhl', 'ups']", id="argument-outside-its-enum"),
    pytest.param({"arguments": {"parcel": "P1"}}, "mocks[0].arguments", "'parcel' was unexpected",
                 id="argument-the-tool-does-not-take"),
    pytest.param({"result": json.dumps({**PARCEL, "status": "lost"})}, "mocks[0].result.status",
                 "'lost' is not one of ['in_transit', 'delivered']", id="status-the-tool-never-returns"),
    pytest.param({"result": json.dumps({"parcel_id": "P1", "state": "in_transit", "updated_at": "x"})},
                 "mocks[0].result", "'status' is a required property", id="renamed-result-field"),
]


@pytest.mark.parametrize(
    "mock",
    [
        pytest.param({}, id="fits"),
        # Mock arguments are what a call must contain, so a mock may leave a required argument out.
        pytest.param({"arguments": {}}, id="no-arguments"),
        pytest.param({"arguments": {"carrier": "ups"}}, id="optional-argument-only"),
        # Text that is not JSON is the error any tool may answer.
        pytest.param({"result": "the carrier's service is down"}, id="error-text"),
        # A stop-completion's text is the turn's reply, not the tool's output.
        pytest.param({"result": "Your parcel is on its way.", "stop": True}, id="stop"),
    ],
)
def test_it_accepts_a_mock_that_fits_the_tools_schemas(parcels, mock):
    assert validate_case_document(parcel_case(**mock), suite=parcels) == []


def test_it_holds_a_text_tool_to_its_input_schema_only(parcels):
    document = parcel_case(function_name="parcel_note", result=json.dumps({"any": "json"}))

    assert validate_case_document(document, suite=parcels) == []
    document["mocks"][0]["arguments"] = {"parcel_id": ["P1"]}
    assert set(problems_by_field(validate_case_document(document, suite=parcels))) == {"mocks[0].arguments.parcel_id"}


@pytest.mark.parametrize(("mock", "field", "message"), BAD_MOCKS)
def test_it_refuses_a_mock_the_tool_would_not_take_or_give_naming_the_path(parcels, mock, field, message):
    problems = problems_by_field(validate_case_document(parcel_case(**mock), suite=parcels))

    assert set(problems) == {field}
    assert message in problems[field] and "(mock of track_parcel)" in problems[field]


@pytest.mark.parametrize(("mock", "field", "message"), BAD_MOCKS)
def test_it_refuses_it_at_the_api_with_a_400_naming_the_mock(admin_client_api, parcels, mock, field, message):
    response = admin_client_api.post("/api/cases/", {"suite": parcels.pk, **parcel_case(**mock)}, format="json")

    assert response.status_code == 400
    errors = {error["field"]: error["message"] for error in response.json()["errors"]}
    assert message in errors[field]
    assert not Case.objects.exists()


def test_it_refuses_it_in_the_admin_and_saves_nothing(admin_client, parcels):
    case = case_create(suite=parcels, document=parcel_case())
    data = change_form(case)
    data["mocks-0-result"] = json.dumps({**PARCEL, "status": "lost"})

    response = admin_client.post(change_url(case), data)

    assert response.status_code == 200
    assert "result.status: &#x27;lost&#x27; is not one of" in response.content.decode()
    assert json.loads(Mock.objects.get(case=case).result) == PARCEL


CASE_FILE = """\
name: Parcel status
turns:
- user_message: Where is parcel P1?
  assertions:
  - type: toolCalled
    params:
      function: track_parcel
mocks:
- function_name: track_parcel
  arguments:
    parcel_id: P1
  result:
    parcel_id: P1
    status: {status}
    updated_at: '2026-12-04T10:00:00Z'
"""


def write_repo(root: Path, status: str) -> Path:
    files = {
        "agents/parcels.yaml": "name: parcels\nmodel: scripted:scripted\ninstruction: Track parcels.\n"
                               "functions:\n- track_parcel\n",
        "suites/parcels/suite.yaml": "name: Parcels\nagent: parcels\n",
        "suites/parcels/cases/status.yaml": CASE_FILE.format(status=status),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_it_refuses_it_in_a_case_file_naming_file_and_path(tmp_path, db, scripted_model):
    files_apply(directory=write_repo(tmp_path, "in_transit"))
    write_repo(tmp_path, "lost")

    with pytest.raises(FilesRejected) as raised:
        files_apply(directory=tmp_path)

    assert any(
        str(problem).startswith("suites/parcels/cases/status.yaml: mocks[0].result.status: 'lost' is not one of")
        for problem in raised.value.problems
    ), raised.value.problems
    assert json.loads(Mock.objects.get().result)["status"] == "in_transit"


def test_it_refuses_it_at_cases_import_naming_case_and_path(tmp_path, parcels):
    path = tmp_path / "import.json"
    path.write_text(json.dumps({"cases": [parcel_case(arguments={"parcel_id": 12})]}))
    stderr = io.StringIO()

    with pytest.raises(CommandError) as raised:
        call_command("cases", "import", str(path), "--suite", "Parcels", stderr=stderr)

    assert raised.value.returncode == 1
    expected = "case 'Parcel status', cases[0].mocks[0].arguments.parcel_id: 12 is not of type 'string'"
    assert expected in stderr.getvalue()
    assert not Case.objects.exists()


def test_it_keeps_a_recorded_drafts_misfit_with_a_warning_and_refuses_to_enable_it(admin_client_api, parcels):
    draft = case_create(suite=parcels, document={
        **parcel_case(result=json.dumps({**PARCEL, "status": "lost"})), "source": "recorded", "enabled": False,
    })

    warnings = admin_client_api.get(f"/api/cases/{draft.pk}/").json()["warnings"]
    page = admin_client_api.get(f"/admin/cases/case/{draft.pk}/change/")
    with pytest.raises(CaseValidationError) as raised:
        case_enable(case=draft)

    assert [note for note in warnings if note.startswith("mocks[0].result.status: 'lost' is not one of")]
    assert "the mock of track_parcel does not fit the tool&#x27;s schema" in page.content.decode()
    assert set(problems_by_field(raised.value.problems)) == {"mocks[0].result.status"}
    draft.refresh_from_db()
    assert draft.enabled is False


def test_it_lets_a_reviewer_edit_a_draft_in_the_admin_before_fixing_its_mock(admin_client, parcels):
    draft = case_create(suite=parcels, document={
        **parcel_case(arguments={"parcel_id": 12}), "source": "recorded", "enabled": False,
    })

    response = admin_client.post(change_url(draft), change_form(draft, priority=3))

    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.priority == 3


# --- No door accepts what another refuses ------------------------------------------------------------------------

PROPERTY_SCHEMAS = st.sampled_from([
    {"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "number"},
    {"type": "string", "enum": ["a", "b"]}, {"type": "array", "items": {"type": "string"}},
    {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"], "additionalProperties": False},
])
NAMES = st.sampled_from(["order_id", "mode", "items", "note"])
INPUT_SCHEMAS = st.builds(
    lambda properties, required, closed: {
        "type": "object", "properties": properties, "required": sorted(set(required) & set(properties)),
        "additionalProperties": not closed,
    },
    st.dictionaries(NAMES, PROPERTY_SCHEMAS, min_size=1, max_size=3), st.lists(NAMES), st.booleans(),
)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["a", "b", "1042", ""]),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["id", "x"]), inner, max_size=2),
    max_leaves=4,
)
ARGUMENTS = st.none() | st.dictionaries(NAMES | st.just("other"), VALUES, max_size=3)
RESULTS = st.builds(json.dumps, st.dictionaries(st.sampled_from(list(PARCEL) + ["state"]), VALUES, max_size=4)) | (
    st.sampled_from(["not json", json.dumps(PARCEL)])
)


def relaxed(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {key: relaxed(value) for key, value in schema.items() if key != "required"}
    return [relaxed(item) for item in schema] if isinstance(schema, list) else schema


def expected_to_fit(schema: dict[str, Any], arguments: Any, result: str) -> bool:
    """The oracle, written from the rule rather than the code: arguments that a call fitting the schema could contain,
    and a JSON result that fits the typed tool's return type (text that is not JSON being an error message)."""
    if arguments is not None and not jsonschema.Draft202012Validator(relaxed(schema)).is_valid(arguments):
        return False
    try:
        value = json.loads(result)
    except ValueError:
        return True
    return jsonschema.Draft202012Validator(parcel_tools.Parcel.model_json_schema()).is_valid(value)


@settings(max_examples=60, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(schema=INPUT_SCHEMAS, arguments=ARGUMENTS, result=RESULTS)
def test_no_door_accepts_what_another_refuses(admin_client_api, parcels, schema, arguments, result):
    Case.objects.all().delete()
    agent = parcels.agent
    # A native declaration carries the generated input schema; the typed plugin tool its return type.
    agent.functions = [{"name": "hypo_tool", "parameters": schema, "output": "ok"}, {"name": "track_parcel"}]
    agent.save()
    mocks = [
        {"function_name": "hypo_tool", "arguments": copy.deepcopy(arguments), "result": "ok"},
        {"function_name": "track_parcel", "result": result},
    ]
    document = {**parcel_case(), "mocks": mocks}
    functions = case_callable_functions(suite=parcels)

    inline = all(not validate_mock(mock, functions=functions) for mock in mocks)  # the admin's mock rows
    api = admin_client_api.post("/api/cases/", {"suite": parcels.pk, **document}, format="json").status_code == 201
    Case.objects.all().delete()
    try:
        cases_import(suite=parcels, documents=[copy.deepcopy(document)])
        imported = True
    except CaseValidationError:
        imported = False

    assert inline == api == imported == expected_to_fit(schema, arguments, result)
