"""Reads of runs: lists with filters, the per-model comparison and the case × model matrix."""

from __future__ import annotations

from decimal import Decimal

import pytest

from runs.models import CaseResult, Run
from runs.selectors import nearest_rank, run_list, run_matrix, run_results, run_summary
from tests.runs.conftest import CAREFUL, HASTY

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("values", "percentile", "expected"),
    [
        ([], 50, None),
        ([7.0], 95, 7.0),
        ([4.0, 1.0, 3.0, 2.0], 50, 2.0),
        ([float(n) for n in range(1, 21)], 95, 19.0),
        ([float(n) for n in range(1, 21)], 100, 20.0),
        ([5.0, 1.0], 1, 1.0),
    ],
)
def test_it_takes_percentiles_by_nearest_rank(values, percentile, expected):
    assert nearest_rank(values, percentile) == expected


def add_result(run, position, model, status, *, latency=0.0, tokens=(0, 0), cost="0", case=None, name=None):
    return CaseResult.objects.create(
        run=run, case=case, case_name=name or f"case {position}", model=model, position=position, status=status,
        model_latency_ms=latency, input_tokens=tokens[0], output_tokens=tokens[1], cost=Decimal(cost),
    )


@pytest.fixture
def compared_run(order_suite):
    return Run.objects.create(suite=order_suite, model_keys=[HASTY, CAREFUL, "openai:gpt-4o"], total=6)


def test_it_summarises_each_model_in_the_runs_order(compared_run):
    add_result(compared_run, 0, CAREFUL, "passed", latency=100, tokens=(10, 5), cost="0.25")
    add_result(compared_run, 1, HASTY, "failed", latency=40, tokens=(8, 2), cost="0.10")
    add_result(compared_run, 2, CAREFUL, "failed", latency=300, tokens=(20, 10), cost="0.50")
    add_result(compared_run, 3, HASTY, "passed", latency=60, tokens=(8, 2), cost="0.10")
    add_result(compared_run, 4, CAREFUL, "cancelled", latency=0)
    add_result(compared_run, 5, HASTY, "error", latency=900)

    summary = run_summary(run=compared_run)

    assert [item.model for item in summary] == [HASTY, CAREFUL, "openai:gpt-4o"]
    hasty, careful, unused = summary
    assert (careful.total, careful.passed, careful.failed, careful.cancelled) == (3, 1, 1, 1)
    assert careful.pass_rate == 0.5
    assert (careful.latency_p50_ms, careful.latency_p95_ms) == (100, 300)
    assert (careful.total_tokens, careful.cost) == (45, Decimal("0.75"))
    assert hasty.pass_rate == pytest.approx(1 / 3)
    assert (hasty.errored, hasty.latency_p95_ms) == (1, 900)
    assert (unused.total, unused.pass_rate, unused.latency_p50_ms) == (0, None, None)
    assert careful.as_dict()["cost"] == 0.75 and careful.as_dict()["total_tokens"] == 45


def test_it_has_no_pass_rate_for_a_model_whose_results_were_all_cancelled(compared_run):
    add_result(compared_run, 0, CAREFUL, "cancelled")

    careful = run_summary(run=compared_run)[1]

    assert (careful.total, careful.cancelled, careful.pass_rate) == (1, 1, None)


def test_it_builds_the_matrix_and_flags_disagreement(order_suite, compared_run):
    first, second = order_suite.cases.order_by("name")
    add_result(compared_run, 0, HASTY, "passed", case=second, name=second.name)
    add_result(compared_run, 1, CAREFUL, "passed", case=second, name=second.name)
    add_result(compared_run, 2, HASTY, "failed", case=first, name=first.name)
    add_result(compared_run, 3, CAREFUL, "passed", case=first, name=first.name)

    rows = run_matrix(run=compared_run)

    assert [row["case_name"] for row in rows] == [second.name, first.name]
    assert (rows[0]["disagree"], rows[0]["any_failure"]) == (False, False)
    assert (rows[1]["disagree"], rows[1]["any_failure"]) == (True, True)
    assert rows[1]["cells"][HASTY]["status"] == "failed"
    assert [r.position for r in run_results(run=compared_run)] == [0, 1, 2, 3]


def test_it_lists_runs_newest_first_filtered_by_suite_and_status(order_suite, make_suite, make_run):
    other = make_suite("other")
    older = make_run(order_suite, status=Run.Status.FAILED)
    newer = make_run(order_suite, status=Run.Status.PASSED)
    elsewhere = make_run(other, status=Run.Status.PASSED)

    assert list(run_list()) == [elsewhere, newer, older]
    assert list(run_list(suite_id=order_suite.pk)) == [newer, older]
    assert list(run_list(status=Run.Status.PASSED)) == [elsewhere, newer]
