"""A run as JUnit XML: what a CI server parses — suites per model, one test per case × model, and honest counts."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from django.utils import timezone

from runs.models import CaseResult, Run
from runs.web.junit import run_to_junit
from tests.runs.conftest import CAREFUL, HASTY

pytestmark = pytest.mark.django_db

FAILED_ASSERTION = {
    "type": "toolCalled", "scope": "case", "status": "failed", "expected": {"function": "lookup_order"},
    "actual": [{"name": "cancel_order"}], "message": "lookup_order was not called; calls made: cancel_order",
}
PASSED_ASSERTION = {
    "type": "outputContains", "scope": "turn 0", "status": "passed", "expected": "cancelled", "actual": "ok",
    "message": "the reply contains the text",
}


def parse(run: Run) -> ET.Element:
    return ET.fromstring(run_to_junit(run).encode("utf-8"))


def counts(element: ET.Element) -> tuple[str, ...]:
    return tuple(element.get(key) for key in ("tests", "failures", "errors", "skipped"))


@pytest.fixture
def mixed_run(make_suite, make_case):
    suite = make_suite()
    cases = [make_case(suite, name) for name in ("cancels the order", "looks it up", "is polite")]
    run = Run.objects.create(
        suite=suite, model_keys=[CAREFUL, HASTY], status=Run.Status.ERROR, case_ids=[case.pk for case in cases],
        total=6, reason="1 of 6 results are Error (the harness could not judge them)", started_at=timezone.now(),
    )
    outcomes = [
        (cases[0], CAREFUL, "passed", "", [PASSED_ASSERTION]),
        (cases[0], HASTY, "passed", "", [PASSED_ASSERTION]),
        (cases[1], CAREFUL, "passed", "", []),
        (cases[1], HASTY, "failed", "toolCalled (case): lookup_order was not called", [FAILED_ASSERTION]),
        (cases[2], CAREFUL, "error", "the case timed out after 30 s", []),
        (cases[2], HASTY, "cancelled", "the run was cancelled before this case started", []),
    ]
    for position, (case, model, status, reason, assertions) in enumerate(outcomes):
        CaseResult.objects.create(
            run=run, case=case, case_name=case.name, model=model, position=position, status=status, reason=reason,
            assertions=assertions, duration_ms=1500.0,
        )
    return run


def test_it_writes_one_testsuite_per_model_with_right_counts(mixed_run):
    root = parse(mixed_run)

    assert root.tag == "testsuites"
    assert counts(root) == ("6", "1", "1", "1")
    suites = root.findall("testsuite")
    assert [suite.get("name") for suite in suites] == [f"orders on {CAREFUL}", f"orders on {HASTY}"]
    assert counts(suites[0]) == ("3", "0", "1", "0")
    assert counts(suites[1]) == ("3", "1", "0", "1")
    assert suites[0].get("time") == "4.500"


def test_it_writes_one_testcase_per_case_and_model(mixed_run):
    hasty = parse(mixed_run).findall("testsuite")[1]

    cases = hasty.findall("testcase")
    assert [case.get("name") for case in cases] == ["cancels the order", "looks it up", "is polite"]
    assert {case.get("classname") for case in cases} == {f"orders on {HASTY}"}
    assert cases[0].get("time") == "1.500"
    assert list(cases[0]) == []


def test_it_explains_a_failure_with_the_failing_assertions(mixed_run):
    failure = parse(mixed_run).find(f"testsuite[@name='orders on {HASTY}']/testcase[@name='looks it up']/failure")

    assert failure.get("message") == "toolCalled (case): lookup_order was not called"
    assert "[case] toolCalled failed: lookup_order was not called; calls made: cancel_order" in failure.text
    assert 'expected: {"function": "lookup_order"}' in failure.text
    assert 'actual:   [{"name": "cancel_order"}]' in failure.text


def test_it_reports_an_error_with_its_reason_and_a_cancelled_case_as_skipped(mixed_run):
    root = parse(mixed_run)

    error = root.find(f"testsuite[@name='orders on {CAREFUL}']/testcase[@name='is polite']/error")
    skipped = root.find(f"testsuite[@name='orders on {HASTY}']/testcase[@name='is polite']/skipped")
    assert error.get("message") == "the case timed out after 30 s"
    assert skipped is not None and skipped.get("message") == "the run was cancelled before this case started"


def test_it_lists_cases_a_failed_run_never_reached_as_errors_with_the_runs_reason(make_suite, make_case):
    suite = make_suite()
    case = make_case(suite, "cancels the order")
    run = Run.objects.create(
        suite=suite, model_keys=[CAREFUL, HASTY], status=Run.Status.ERROR, case_ids=[case.pk], total=2,
        reason="the worker restarted while this run was in progress; 0 of 2 results were kept",
    )

    root = parse(run)

    assert counts(root) == ("2", "0", "2", "0")
    error = root.find(f"testsuite[@name='orders on {HASTY}']/testcase[@name='cancels the order']/error")
    assert error.get("message") == f"this case did not run: {run.reason}"


def test_it_lists_a_run_cancelled_before_it_started_as_skipped(make_suite, make_case):
    suite = make_suite()
    case = make_case(suite, "cancels the order")
    run = Run.objects.create(
        suite=suite, model_keys=[CAREFUL], status=Run.Status.CANCELLED, case_ids=[case.pk], total=1, cancelled=1,
        reason="cancelled before it started",
    )

    assert counts(parse(run)) == ("1", "0", "0", "1")


def test_it_keeps_results_of_cases_deleted_since(mixed_run):
    CaseResult.objects.filter(run=mixed_run).first().case.delete()

    root = parse(mixed_run)

    assert counts(root) == ("6", "1", "1", "1")
    assert root.find("testsuite/testcase[@name='cancels the order']") is not None


def test_it_stays_valid_xml_when_reasons_carry_markup_and_control_characters(make_suite, make_case):
    suite = make_suite(name="<orders> & \"co\"")
    case = make_case(suite, "ends in \x1b[31mred\x1b[0m")
    run = Run.objects.create(
        suite=suite, model_keys=[CAREFUL], status=Run.Status.FAILED, case_ids=[case.pk], total=1, failed=1
    )
    CaseResult.objects.create(
        run=run, case=case, case_name=case.name, model=CAREFUL, status="failed",
        reason="the reply </failure> was \x01 odd", assertions=[{**FAILED_ASSERTION, "actual": "<b>\x07</b>"}],
    )

    root = parse(run)

    testcase = root.find("testsuite/testcase")
    assert testcase.get("classname") == f"<orders> & \"co\" on {CAREFUL}"
    assert testcase.find("failure").get("message") == "the reply </failure> was \ufffd odd"
    assert 'actual:   "<b>\\u0007</b>"' in testcase.find("failure").text


def test_it_names_each_trial_and_lists_trials_that_never_ran(make_suite, make_case):
    suite = make_suite()
    case = make_case(suite, "cancels the order")
    run = Run.objects.create(
        suite=suite, model_keys=[CAREFUL], status=Run.Status.ERROR, case_ids=[case.pk], total=2, trials=2,
        reason="budget exhausted after 1 of 2 results: 900 tokens used of a budget of 500",
    )
    CaseResult.objects.create(run=run, case=case, case_name=case.name, model=CAREFUL, trial=0, status="passed")

    root = parse(run)

    assert counts(root) == ("2", "0", "1", "0")
    cases = root.findall("testsuite/testcase")
    assert [case.get("name") for case in cases] == [
        "cancels the order (trial 1 of 2)", "cancels the order (trial 2 of 2)"
    ]
    assert cases[1].find("error").get("message") == f"this case did not run: {run.reason}"
