"""Import is all or nothing; export and import round-trip a suite through a file and the `cases` command."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from cases.models import Case, Suite
from cases.services import case_to_document, cases_import
from cases.validation.problems import CaseValidationError

pytestmark = pytest.mark.django_db


def test_it_imports_every_document(suite, case_document):
    cases = cases_import(suite=suite, documents=[case_document(name="One"), case_document(name="Two")])

    assert [case.name for case in cases] == ["One", "Two"]
    assert Case.objects.filter(suite=suite).count() == 2


def test_it_stores_nothing_when_one_document_is_invalid_and_names_every_problem(suite, case_document):
    bad_regex = case_document(name="Bad regex")
    bad_regex["turns"][0]["assertions"][1]["params"]["pattern"] = "(unclosed"
    documents = [case_document(name="Good"), bad_regex, case_document(name="No turns", turns=[])]

    with pytest.raises(CaseValidationError) as raised:
        cases_import(suite=suite, documents=documents)

    found = {(problem.case, problem.field) for problem in raised.value.problems}
    assert found == {
        ("Bad regex", "cases[1].turns[0].assertions[1].params.pattern"),
        ("No turns", "cases[2].turns"),
    }
    assert not Case.objects.exists()


def test_it_refuses_a_name_used_twice_in_one_import(suite, case_document):
    with pytest.raises(CaseValidationError) as raised:
        cases_import(suite=suite, documents=[case_document(name="Twin"), case_document(name="Twin")])

    [problem] = raised.value.problems
    assert problem.field == "cases[1].name"
    assert "also by cases[0]" in problem.message


def test_it_refuses_an_existing_name_unless_replacing_and_then_keeps_the_id(suite, make_case, case_document):
    existing = make_case(name="Refund")
    changed = case_document(name="Refund", description="Rewritten", mocks=[])

    with pytest.raises(CaseValidationError):
        cases_import(suite=suite, documents=[changed])
    [replaced] = cases_import(suite=suite, documents=[changed], replace=True)

    assert replaced.pk == existing.pk
    assert replaced.description == "Rewritten"
    assert replaced.mocks.count() == 0


def test_it_drops_a_link_to_a_conversation_that_does_not_exist_here_and_says_so(suite, case_document):
    [case] = cases_import(suite=suite, documents=[case_document(source="recorded", source_conversation=424242)])

    assert case.source_conversation is None
    assert "#424242" in case.warnings[-1]


def test_it_round_trips_a_suite_through_export_and_import(tmp_path, judged_suite, make_case, capsys, scripted_model):
    make_case(judged_suite, name="Polite", assertions=[{"type": "llmJudge", "params": {"criterion": "Polite"}}])
    make_case(judged_suite, name="Draft", enabled=False)
    path = tmp_path / "suite.json"

    call_command("cases", "export", "Judged", "--output", str(path))
    call_command("cases", "import", str(path), "--suite", "Judged copy")

    exported = json.loads(path.read_text())
    assert exported["suite"]["judge_model"] == scripted_model.key
    copy = Suite.objects.get(name="Judged copy")
    assert (copy.agent, copy.judge_model) == (judged_suite.agent, judged_suite.judge_model)
    assert [case_to_document(case=case) for case in copy.cases.order_by("name")] == exported["cases"]
    assert "Created suite 'Judged copy': 2 case(s)." in capsys.readouterr().out


def test_it_exports_to_standard_output(suite, make_case, capsys):
    make_case(name="Only")

    call_command("cases", "export", "Support")

    assert [case["name"] for case in json.loads(capsys.readouterr().out)["cases"]] == ["Only"]


def write(tmp_path, content) -> str:
    path = tmp_path / "import.json"
    path.write_text(json.dumps(content))
    return str(path)


def failed_import(*args: str) -> tuple[CommandError, str]:
    """Runs `cases import` expecting it to fail: the error (its returncode is the exit code) and what went to stderr."""
    stderr = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("cases", "import", *args, stderr=stderr)
    return raised.value, stderr.getvalue()


def test_it_prints_each_problem_with_the_case_name_and_exits_with_1(tmp_path, suite, case_document):
    path = write(tmp_path, {"cases": [case_document(name="Fine"), case_document(name="Leaky", unmocked_policy="run")]})

    error, err = failed_import(path, "--suite", "Support")

    assert error.returncode == 1
    assert "1 problem(s)" in str(error) and "nothing was imported" in str(error)
    assert "case 'Leaky', cases[1].unmocked_policy: must be 'block'" in err
    assert not Case.objects.exists()


def test_it_reports_suite_and_case_problems_together_and_creates_no_suite(tmp_path, db, case_document):
    content = {"suite": {"name": "New", "agent": "nobody"}, "cases": [case_document(name="Empty", turns=[])]}

    _, err = failed_import(write(tmp_path, content))

    assert "suite.agent: no agent named 'nobody'" in err
    assert "case 'Empty', cases[0].turns:" in err
    assert not Suite.objects.filter(name="New").exists()


def test_it_refuses_a_file_that_is_not_json(tmp_path, db):
    path = tmp_path / "broken.json"
    path.write_text("{not json")

    error, _ = failed_import(str(path))

    assert error.returncode == 1
    assert "is not valid JSON" in str(error)
