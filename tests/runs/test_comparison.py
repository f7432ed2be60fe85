"""Run vs baseline: which cases flipped per model, and which earlier runs can serve as the baseline."""

from __future__ import annotations

import pytest

from runs.models import CaseResult, Run
from runs.web.comparison import ComparisonError, baseline_get, default_baseline, earlier_runs, run_compare
from tests.runs.conftest import CAREFUL, HASTY

pytestmark = pytest.mark.django_db

PASSED, FAILED, ERROR, CANCELLED = "passed", "failed", "error", "cancelled"
FIRST, SECOND = "cancels the order", "looks the order up first"


def flips(comparison) -> dict[str, list[tuple[str, str, str]]]:
    return {
        kind: [(flip.case_name, flip.baseline_status, flip.current_status) for flip in items]
        for kind, items in comparison.flips.items()
    }


def test_it_lists_cases_that_broke_and_that_were_fixed_per_model(order_suite, make_run):
    baseline = make_run(order_suite, models=(CAREFUL, HASTY),
                        results=((CAREFUL, PASSED), (HASTY, PASSED), (CAREFUL, FAILED), (HASTY, PASSED)))
    current = make_run(order_suite, models=(CAREFUL, HASTY),
                       results=((CAREFUL, PASSED), (HASTY, ERROR), (CAREFUL, PASSED), (HASTY, PASSED)))
    careful, hasty = run_compare(run=current, baseline=baseline)
    assert careful.model == CAREFUL and hasty.model == HASTY
    assert flips(careful) == {"broke": [], "fixed": [(SECOND, FAILED, PASSED)], "new": [], "gone": []}
    assert flips(hasty) == {"broke": [(FIRST, PASSED, ERROR)], "fixed": [], "new": [], "gone": []}
    assert (careful.unchanged, hasty.unchanged) == (1, 1)
    broke = hasty.flips["broke"][0]
    assert broke.label == "pass → fail"
    assert broke.baseline_result_id == baseline.results.get(case_name=FIRST, model=HASTY).pk
    assert broke.current_result_id == current.results.get(case_name=FIRST, model=HASTY).pk


def test_it_counts_failed_to_error_as_unchanged(order_suite, make_run):
    baseline = make_run(order_suite, results=((CAREFUL, FAILED), (CAREFUL, PASSED)))
    current = make_run(order_suite, results=((CAREFUL, ERROR), (CAREFUL, PASSED)))
    (careful,) = run_compare(run=current, baseline=baseline)
    assert careful.changed == 0 and careful.unchanged == 2


def test_it_lists_new_and_gone_cases(order_suite, make_run):
    baseline = make_run(order_suite, results=((CAREFUL, PASSED),))
    current = make_run(order_suite, results=((CAREFUL, PASSED), (CAREFUL, FAILED)))
    (careful,) = run_compare(run=current, baseline=baseline)
    assert flips(careful)["new"] == [(SECOND, "", FAILED)]
    (backwards,) = run_compare(run=baseline, baseline=current)
    assert flips(backwards)["gone"] == [(SECOND, FAILED, "")]


def test_it_does_not_compare_cancelled_results(order_suite, make_run):
    baseline = make_run(order_suite, results=((CAREFUL, PASSED), (CAREFUL, CANCELLED)))
    current = make_run(order_suite, results=((CAREFUL, CANCELLED), (CAREFUL, PASSED)))
    (careful,) = run_compare(run=current, baseline=baseline)
    assert careful.changed == 0 and careful.not_compared == 2 and careful.unchanged == 0


def test_it_treats_a_model_only_one_run_has_as_all_new_or_all_gone(order_suite, make_run):
    baseline = make_run(order_suite, models=(CAREFUL,), results=((CAREFUL, PASSED), (CAREFUL, PASSED)))
    current = make_run(order_suite, models=(HASTY,), results=((HASTY, FAILED), (HASTY, PASSED)))
    hasty, careful = run_compare(run=current, baseline=baseline)
    assert (hasty.model, hasty.in_baseline, hasty.in_current) == (HASTY, False, True)
    assert [flip.case_name for flip in hasty.flips["new"]] == [FIRST, SECOND]
    assert (careful.model, careful.in_baseline, careful.in_current) == (CAREFUL, True, False)
    assert [flip.case_name for flip in careful.flips["gone"]] == [FIRST, SECOND]


def test_it_matches_a_deleted_case_by_name(order_suite, make_run):
    baseline = make_run(order_suite, results=((CAREFUL, PASSED), (CAREFUL, PASSED)))
    current = make_run(order_suite, results=((CAREFUL, PASSED), (CAREFUL, FAILED)))
    order_suite.cases.get(name=SECOND).delete()
    assert CaseResult.objects.filter(case_name=SECOND, case__isnull=True).count() == 2
    (careful,) = run_compare(run=current, baseline=baseline)
    assert flips(careful)["broke"] == [(SECOND, PASSED, FAILED)] and careful.unchanged == 1


def test_it_offers_earlier_runs_of_the_same_suite_newest_first(order_suite, make_suite, make_run):
    first = make_run(order_suite)
    make_run(make_suite("billing"))
    second = make_run(order_suite)
    current = make_run(order_suite)
    make_run(order_suite)
    assert list(earlier_runs(run=current)) == [second, first]
    assert list(earlier_runs(run=first)) == []


def test_it_defaults_to_the_latest_earlier_run_that_finished_with_verdicts(order_suite, make_run):
    assert default_baseline(run=make_run(order_suite)) is None
    failed = make_run(order_suite, status=Run.Status.FAILED)
    make_run(order_suite, status=Run.Status.ERROR)
    make_run(order_suite, status=Run.Status.CANCELLED)
    current = make_run(order_suite)
    assert default_baseline(run=current) == failed


def test_it_falls_back_to_the_latest_earlier_run_of_any_status(order_suite, make_run):
    errored = make_run(order_suite, status=Run.Status.ERROR)
    assert default_baseline(run=make_run(order_suite)) == errored


def test_it_refuses_a_baseline_that_is_missing_later_or_of_another_suite(order_suite, make_suite, make_run):
    first = make_run(order_suite)
    second = make_run(order_suite)
    foreign = make_run(make_suite("billing"))
    assert baseline_get(run=second, baseline_id=first.pk) == first
    with pytest.raises(ComparisonError, match="is not earlier than run"):
        baseline_get(run=first, baseline_id=second.pk)
    with pytest.raises(ComparisonError, match="is not earlier than run"):
        baseline_get(run=first, baseline_id=first.pk)
    with pytest.raises(ComparisonError, match=r"is of another suite \(billing\)"):
        baseline_get(run=second, baseline_id=foreign.pk)
    with pytest.raises(ComparisonError, match="there is no run #9999"):
        baseline_get(run=second, baseline_id=9999)


def test_it_passes_a_case_with_trials_only_when_every_trial_passed(order_suite, make_run):
    baseline = make_run(order_suite, results=((CAREFUL, PASSED), (CAREFUL, PASSED)))
    current = make_run(order_suite, results=((CAREFUL, PASSED), (CAREFUL, PASSED)), trials=2)
    CaseResult.objects.create(run=current, case=order_suite.cases.get(name=FIRST), case_name=FIRST, model=CAREFUL,
                              trial=1, position=2, status=FAILED)
    (careful,) = run_compare(run=current, baseline=baseline)
    (broke,) = careful.flips["broke"]
    assert (broke.case_name, broke.current_status) == (FIRST, FAILED)
    assert broke.current_result_id == current.results.get(case_name=FIRST, trial=1).pk
    assert careful.unchanged == 1
