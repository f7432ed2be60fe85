"""Agents, suites and cases as files: `agenttest apply` (all or nothing, plan, prune), `export` (byte-identical round
trip), `schema`, and results that say their case has changed since."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import jsonschema
import pytest
import yaml
from django.core.management import call_command
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost.models import Agent
from cases.files import FilesRejected, files_apply, files_export
from cases.models import Case, Suite
from cases.schema import KINDS, schema_for, schema_problems
from cases.services import case_create, case_update
from runs.models import CaseResult, Run
from tests.properties import SUPPRESSED_WITH_FIXTURES

pytestmark = pytest.mark.django_db

EXAMPLE = Path(__file__).resolve().parent.parent.parent / "examples" / "order-support"


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


AGENT = """\
name: support
model: scripted:scripted
instruction: |
  Help with orders.
  Look first.
functions:
- track_order
- void_order
"""
SUITE = "name: Support\nagent: support\n"
CASE = """\
name: Status
turns:
- user_message: Where is order 1042?
  assertions:
  - type: toolCalled
    params:
      function: track_order
mocks:
- function_name: track_order
  result:
    status: shipped
"""


@pytest.fixture
def repo(tmp_path, scripted_model) -> Path:
    return write(tmp_path / "repo", {
        "agents/support.yaml": AGENT,
        "suites/support/suite.yaml": SUITE,
        "suites/support/cases/status.yaml": CASE,
    })


def snapshot() -> str:
    """Everything apply may touch, as text: equal snapshots mean the database was not changed."""
    out = io.StringIO()
    call_command("dumpdata", "agenthost.agent", "cases", stdout=out)
    return out.getvalue()


def test_it_creates_agents_suites_and_cases_from_the_files(repo):
    report = files_apply(directory=repo)

    assert [(change.kind, change.action) for change in report.changes] == [
        ("agent", "created"), ("suite", "created"), ("case", "created"),
    ]
    agent = Agent.objects.get(name="support")
    assert agent.instruction == "Help with orders.\nLook first.\n"
    assert agent.functions == [{"name": "track_order"}, {"name": "void_order"}]
    case = Case.objects.get(name="Status")
    assert case.mocks.get().result == '{"status": "shipped"}'


def test_it_plans_without_changing_anything_on_a_dry_run(repo):
    before = snapshot()

    report = files_apply(directory=repo, dry_run=True)

    assert report.count("created") == 3
    assert snapshot() == before


def test_it_reports_unchanged_and_changed_on_a_second_apply(repo):
    files_apply(directory=repo)
    case = Case.objects.get(name="Status")
    (repo / "suites/support/cases/status.yaml").write_text(CASE.replace("1042", "1043"))

    report = files_apply(directory=repo)

    assert {change.kind: change.action for change in report.changes} == {
        "agent": "unchanged", "suite": "unchanged", "case": "changed",
    }
    assert Case.objects.get(pk=case.pk).turns.get().user_message == "Where is order 1043?"


def test_it_resets_a_suite_setting_the_file_leaves_out(repo):
    files_apply(directory=repo)
    Suite.objects.filter(name="Support").update(case_timeout_seconds=30)

    files_apply(directory=repo)

    assert Suite.objects.get(name="Support").case_timeout_seconds == 120


def test_it_disables_cases_no_file_names_only_with_prune(repo):
    files_apply(directory=repo)
    suite = Suite.objects.get(name="Support")
    case_create(suite=suite, document={**yaml.safe_load(CASE), "name": "Made in the admin",
                                       "mocks": []})

    kept = files_apply(directory=repo)
    pruned = files_apply(directory=repo, prune=True)

    assert [c.action for c in kept.changes if c.name.endswith("Made in the admin")] == ["not in files"]
    assert [c.action for c in pruned.changes if c.name.endswith("Made in the admin")] == ["disabled"]
    assert Case.objects.get(name="Made in the admin").enabled is False


@pytest.mark.parametrize(
    ("file", "text", "problem"),
    [
        ("suites/support/cases/status.yaml", CASE.replace("user_message", "user_mesage"),
         "suites/support/cases/status.yaml: turns[0].user_mesage: unknown field 'user_mesage'"),
        ("suites/support/cases/status.yaml", CASE.replace("function: track_order\nmocks", "function: 5\nmocks"),
         "suites/support/cases/status.yaml: turns[0].assertions[0].params.function: must be a string, not a number"),
        ("suites/support/cases/status.yaml", CASE.replace("- function_name: track_order", "- function_name: refund"),
         "suites/support/cases/status.yaml: mocks[0].function_name: 'refund' is not a function the agent under test"),
        ("suites/support/cases/status.yaml", "name: [unclosed\n",
         "suites/support/cases/status.yaml: is not valid YAML: line 2"),
        ("suites/support/cases/other.yaml", CASE,
         "suites/support/cases/status.yaml: name: 'Status' is also the name of the case of suite 'Support' in "
         "suites/support/cases/other.yaml"),
        ("agents/support.yaml", AGENT.replace("instruction: |\n  Help with orders.\n  Look first.\n",
                                              "instruction_file: missing.md\n"),
         "agents/support.yaml: instruction_file: 'missing.md' does not exist"),
        ("agents/support.yaml", AGENT.replace("scripted:scripted", "scripted:nope"),
         "agents/support.yaml: model: "),
        ("agents/support.yaml", AGENT.replace("scripted:scripted", "scripted:" + "m" * 201),
         "agents/support.yaml: model: the provider may have at most 100 characters and the model 200"),
        ("suites/support/suite.yaml", SUITE + "agent: twice\n",
         "suites/support/suite.yaml: agent: the key is written twice (lines 2 and 3)"),
    ],
)
def test_it_names_the_file_and_key_of_each_problem_and_changes_nothing(repo, file, text, problem):
    files_apply(directory=repo)
    before = snapshot()
    if file != "agents/support.yaml":
        # A good change beside the bad one is not applied either.
        write(repo, {"agents/support.yaml": AGENT.replace("Look first.", "Look first, always.")})
    write(repo, {file: text})

    with pytest.raises(FilesRejected) as raised:
        files_apply(directory=repo)

    assert any(str(found).startswith(problem) for found in raised.value.problems), raised.value.problems
    assert snapshot() == before


def test_it_round_trips_byte_for_byte_through_an_empty_database(repo, tmp_path):
    files_apply(directory=repo)
    first, second = tmp_path / "first", tmp_path / "second"
    files_export(directory=first)
    Case.objects.all().delete()
    Suite.objects.all().delete()
    Agent.objects.all().delete()

    files_apply(directory=first)
    files_export(directory=second)

    names = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    assert all((first / name).read_bytes() == (second / name).read_bytes() for name in names)
    text = (first / "suites/support/cases/status.yaml").read_text()
    assert "result:\n    status: shipped" in text  # a JSON tool result reads as YAML, not as escaped text


# Each example exports and applies a whole directory; YAML's quoting rules are met well within 60 texts of each kind.
@settings(max_examples=60, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(
    message=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1).filter(
        lambda t: t.strip()
    ),
    result=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40),
    instruction=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00{}%#"), min_size=1),
)
def test_it_round_trips_any_text(suite, tmp_path_factory, message, result, instruction):
    Case.objects.filter(suite=suite).delete()
    Agent.objects.filter(pk=suite.agent_id).update(instruction=instruction)
    case_create(suite=suite, document={
        "name": "Any", "turns": [{"user_message": message, "assertions": [
            {"type": "noBlockedTools", "params": {}}]}],
        "mocks": [{"function_name": "track_order", "result": result}],
    })
    first, second = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
    files_export(directory=first)
    case = Case.objects.get(suite=suite)
    case_update(case=case, document={"name": "Any", "turns": [{"user_message": "x"}]})
    Agent.objects.filter(pk=suite.agent_id).update(instruction="changed")

    files_apply(directory=first)
    files_export(directory=second)

    stored = Case.objects.get(suite=suite)
    assert Agent.objects.get(pk=suite.agent_id).instruction == instruction
    assert stored.turns.get().user_message == message
    assert stored.mocks.get().result == result
    for path in first.rglob("*.yaml"):
        assert path.read_bytes() == (second / path.relative_to(first)).read_bytes()


def test_it_publishes_a_schema_the_example_files_meet():
    for kind in KINDS:
        jsonschema.Draft202012Validator.check_schema(schema_for(kind))
    out = io.StringIO()
    call_command("schema", "case", stdout=out)
    assert json.loads(out.getvalue())["title"] == "agenttest case"
    for path in (EXAMPLE / "suites").rglob("cases/*.yaml"):
        assert schema_problems("case", yaml.safe_load(path.read_text())) == []
    assert schema_problems("agent", yaml.safe_load((EXAMPLE / "agents/order-support.yaml").read_text())) == []


def test_it_shows_a_result_whose_case_changed_since(repo, scripted_model):
    files_apply(directory=repo)
    case = Case.objects.get(name="Status")
    run = Run.objects.create(suite=case.suite, model_keys=[scripted_model.key], case_ids=[case.pk], total=1)
    result = CaseResult.objects.create(run=run, case=case, case_name=case.name, model=scripted_model.key,
                                       status="passed", case_hash=case.content_hash)
    assert result.case_changed_since is False

    (repo / "suites/support/cases/status.yaml").write_text(CASE.replace("1042", "1043"))
    files_apply(directory=repo)

    assert CaseResult.objects.get(pk=result.pk).case_changed_since is True


def test_it_applies_through_the_command_and_exits_2_naming_the_problem(repo):
    shutil.copy(repo / "suites/support/cases/status.yaml", repo / "suites/support/cases/copy.yaml")
    err = io.StringIO()

    with pytest.raises(SystemExit) as exited:
        call_command("apply", str(repo), stderr=err)

    assert exited.value.code == 2
    assert "Nothing was changed: 1 problem(s)." in err.getvalue()
    assert not Agent.objects.filter(name="support").exists()


def test_it_exports_a_reviewed_draft_from_the_admin_as_files_apply_reads(admin_client, repo, tmp_path):
    files_apply(directory=repo)
    suite = Suite.objects.get(name="Support")
    draft = case_create(suite=suite, document={
        **yaml.safe_load(CASE), "name": "Recorded draft", "enabled": False,
        "mocks": [{"function_name": "track_order", "result": '{"status": "shipped"}'}],
    })

    response = admin_client.post(
        "/admin/cases/case/", {"action": "export_case_files", "_selected_action": [draft.pk]}
    )

    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path / "unpacked")
    assert names == ["agents/support.md", "agents/support.yaml", "suites/support/cases/recorded-draft.yaml",
                     "suites/support/suite.yaml"]
    assert "enabled: false" in (tmp_path / "unpacked/suites/support/cases/recorded-draft.yaml").read_text()
    draft.delete()
    report = files_apply(directory=tmp_path / "unpacked", dry_run=True)
    assert [c.action for c in report.changes if c.kind == "case" and "Recorded draft" in c.name] == ["created"]


def test_it_says_on_the_result_page_that_the_case_changed_since(admin_client, repo, scripted_model):
    files_apply(directory=repo)
    case = Case.objects.get(name="Status")
    run = Run.objects.create(suite=case.suite, model_keys=[scripted_model.key], case_ids=[case.pk], total=1)
    result = CaseResult.objects.create(run=run, case=case, case_name=case.name, model=scripted_model.key,
                                       status="passed", case_hash=case.content_hash)
    page = f"/admin/runs/caseresult/{result.pk}/change/"
    before = admin_client.get(page).content.decode()
    assert "Case changed since" in before and "earlier version of the case" not in before

    (repo / "suites/support/cases/status.yaml").write_text(CASE.replace("1042", "1043"))
    files_apply(directory=repo)

    assert "this result tells of an earlier version of the case" in admin_client.get(page).content.decode()


def test_it_round_trips_the_run_settings_of_a_suite_and_a_default_temperature(tmp_path, scripted_model):
    hermetic_agent = AGENT.replace("model: scripted:scripted\n", "model: scripted:scripted\ntemperature: null\n")
    repo = write(tmp_path / "repo", {
        "agents/support.yaml": hermetic_agent,
        "suites/support/suite.yaml": SUITE + "isolation_group: shop-db\ncase_concurrency: 4\n",
        "suites/support/cases/status.yaml": CASE,
    })
    files_apply(directory=repo)
    suite = Suite.objects.get(name="Support")
    assert (suite.isolation_group, suite.case_concurrency) == ("shop-db", 4)
    assert Agent.objects.get(name="support").temperature is None

    first, second = tmp_path / "first", tmp_path / "second"
    files_export(directory=first)
    Case.objects.all().delete()
    Suite.objects.all().delete()
    Agent.objects.all().delete()
    files_apply(directory=first)
    files_export(directory=second)

    suite_text = (first / "suites/support/suite.yaml").read_text()
    assert "isolation_group: shop-db" in suite_text and "case_concurrency: 4" in suite_text
    assert "temperature: null" in (first / "agents/support.yaml").read_text()
    assert suite_text == (second / "suites/support/suite.yaml").read_text()
