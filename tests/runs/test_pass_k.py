"""pass^k beside pass@1 (issue 24): over a run of k trials, the run page and the Markdown summary show per model and per
case the share of trials that passed (pass@1), whether every trial passed (pass^k), and what the trials cost — each
equal to the same figures worked out here by hand from the results."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from cases.models import Case
from runs.engine.numbers import format_cost, format_pass_rate
from runs.management.commands.run import _results, _summary
from runs.models import CaseResult, Run
from tests.runs.conftest import CAREFUL, SCRIPTED
from tests.runs.test_views import html_of, text_of

pytestmark = pytest.mark.django_db

PRICED, FREE = SCRIPTED, CAREFUL
P, F, E, C = "passed", "failed", "error", "cancelled"
# case → model → the status of trials 1, 2, 3. Case d's third trial on the priced model was cancelled.
STATUSES = {
    "a": {PRICED: (P, P, F), FREE: (P, P, P)},
    "b": {PRICED: (P, P, P), FREE: (F, E, P)},
    "c": {PRICED: (F, F, F), FREE: (P, P, P)},
    "d": {PRICED: (P, P, C), FREE: (P, P, P)},
}
COST, JUDGE_COST = Decimal("0.0021"), Decimal("0.0003")


def _cost(case: str, model: str, status: str) -> tuple[Decimal, Decimal]:
    """What one result cost: the priced model's answers, and the judge on case a; a cancelled trial nothing."""
    if model != PRICED or status == C:
        return Decimal(0), Decimal(0)
    return COST, JUDGE_COST if case == "a" else Decimal(0)


@pytest.fixture
def three_trials(make_suite, careful_and_hasty) -> Run:
    suite = make_suite()
    cases = {name: Case.objects.create(suite=suite, name=name) for name in STATUSES}
    run = Run.objects.create(
        suite=suite, model_keys=[PRICED, FREE], case_ids=[case.pk for case in cases.values()], trials=3,
        total=len(STATUSES) * 2 * 3, status=Run.Status.FAILED,
    )
    rows = [
        (name, model, trial, status)
        for name, models in STATUSES.items() for model, statuses in models.items()
        for trial, status in enumerate(statuses)
    ]
    CaseResult.objects.bulk_create(
        CaseResult(
            run=run, case=cases[name], case_name=name, model=model, trial=trial, position=position, status=status,
            duration_ms=100.0, model_latency_ms=40.0, cost=_cost(name, model, status)[0],
            judge_cost=_cost(name, model, status)[1],
        )
        for position, (name, model, trial, status) in enumerate(rows)
    )
    return run


def by_hand() -> dict[str, dict[str, object]]:
    """Per model, worked out from STATUSES alone: pass@1 over the trials that ran, pass^3 over the cases whose three
    trials all ran, and the trials' cost."""
    figures = {}
    for model in (PRICED, FREE):
        ran = [status for models in STATUSES.values() for status in models[model] if status != C]
        complete = [models[model] for models in STATUSES.values() if C not in models[model]]
        total = sum(sum(_cost(name, model, status)) for name, models in STATUSES.items() for status in models[model])
        figures[model] = {
            "pass@1": ran.count(P) / len(ran),
            "pass^3": sum(statuses == (P, P, P) for statuses in complete) / len(complete),
            "cost": total,
            "per trial": total / 3,
        }
    return figures


def shown(model: str) -> tuple[str, str, str, str]:
    """The hand-made figures as every page writes them (runs/engine/numbers.py)."""
    figures = by_hand()[model]
    return (
        format_pass_rate(figures["pass@1"]), format_pass_rate(figures["pass^3"]), format_cost(figures["cost"]),
        format_cost(figures["per trial"]),
    )


def test_it_works_out_the_figures_by_hand():
    hand = by_hand()
    assert (hand[PRICED]["pass@1"], hand[PRICED]["pass^3"]) == (7 / 11, 1 / 3)
    assert (hand[FREE]["pass@1"], hand[FREE]["pass^3"]) == (10 / 12, 3 / 4)
    assert (hand[PRICED]["cost"], hand[PRICED]["per trial"]) == (Decimal("0.024"), Decimal("0.008"))
    # One decimal, rounded half up, no trailing ".0"; a cost to four significant digits, free as $0.
    assert shown(PRICED) == ("63.6%", "33.3%", "$0.024", "$0.008")
    assert shown(FREE) == ("83.3%", "75%", "$0", "$0")


def test_it_shows_pass_k_beside_pass_at_1_on_the_run_page(three_trials, admin_client, django_assert_num_queries):
    # session, user; run, summary, matrix, what its cases are for (said beside a failure), earlier runs for the
    # compare form: no more for k trials.
    with django_assert_num_queries(7):
        response = admin_client.get(f"/runs/{three_trials.pk}/")
    html, text = html_of(response), text_of(response)

    summary = re.search(r'<table class="list summary-table">.*?</table>', html, re.S).group(0)
    headers = [re.sub(r"<[^>]+>", "", header).strip() for header in re.findall(r"<th scope=\"col\"[^>]*>(.*?)</th>",
                                                                                 summary, re.S)]
    assert headers[:4] == ["Model", "pass@1", "pass^3", "Stable pass · Flaky · Stable fail"]
    assert "Cost of 3 trials" in headers
    rows = {
        re.search(r'<code class="model-key">(.*?)</code>', row).group(1).replace("<wbr>", ""): row
        for row in re.findall(r"<tr>\s*<th scope=\"row\">.*?</tr>", summary, re.S)
    }
    for model, cases in ((PRICED, "1 of 3 cases"), (FREE, "3 of 4 cases")):
        at_1, at_k, cost, per_trial = shown(model)
        row = rows[model]
        assert re.search(r'class="rate-text[^"]*">([^<]*)<', row).group(1) == at_1
        assert re.search(r'class="num pass-k"><strong>([^<]*)</strong>', row).group(1) == at_k
        assert re.search(r'class="num cost[^"]*"[^>]*>([^<]*)<', row).group(1) == cost
        assert f'<span class="muted small trial-cost">{per_trial} per trial</span>' in row
        assert cases in row
    assert "pass@1 is the share of the trials that passed" in text
    assert "pass^3 is the share of the cases that passed all 3 of their trials" in text

    details = re.findall(r'class="cell-times">([^<]*)<', html)
    # Per case and model: its pass@1 as a fraction, pass^3 (✓ all passed, ✗ one did not, — not all ran), its cost.
    assert [detail.split(" · case")[0] for detail in details] == [
        "2/3 passed · pass^3 ✗ · $0.0072", "3/3 passed · pass^3 ✓ · $0",
        "3/3 passed · pass^3 ✓ · $0.0063", "1/3 passed · pass^3 ✗ · $0",
        "0/3 passed · pass^3 ✗ · $0.0063", "3/3 passed · pass^3 ✓ · $0",
        "2/2 passed · pass^3 — · $0.0042", "3/3 passed · pass^3 ✓ · $0",
    ]


def test_it_shows_pass_k_beside_pass_at_1_in_the_markdown_summary(three_trials):
    markdown = _summary([three_trials], _results([three_trials]), None)

    lines = markdown.splitlines()
    header = next(line for line in lines if line.startswith("| model"))
    assert header.split(" | ")[:3] == ["| model", "pass@1", "pass^3"]
    assert header.endswith("| cost of 3 trials | per trial |")
    for model, counts in ((PRICED, "7 | 4 | 0"), (FREE, "10 | 1 | 1")):
        at_1, at_k, cost, per_trial = shown(model)
        row = next(line for line in lines if line.startswith(f"| {model} |"))
        assert row.startswith(f"| {model} | {at_1} | {at_k} | {counts} |") and row.endswith(f"| {cost} | {per_trial} |")
    assert "pass@1: the share of the trials that passed" in markdown
    start = lines.index("### pass^3 per case: orders")
    assert lines[start + 2 : start + 4 + 8] == [
        "| case | model | passed | pass@1 | pass^3 | cost of 3 trials |",
        "|---|---|---:|---:|:---:|---:|",
        f"| a | {PRICED} | 2/3 | 66.7% | ✗ | $0.0072 |",
        f"| a | {FREE} | 3/3 | 100% | ✓ | $0 |",
        f"| b | {PRICED} | 3/3 | 100% | ✓ | $0.0063 |",
        f"| b | {FREE} | 1/3 | 33.3% | ✗ | $0 |",
        f"| c | {PRICED} | 0/3 | 0% | ✗ | $0.0063 |",
        f"| c | {FREE} | 3/3 | 100% | ✓ | $0 |",
        f"| d | {PRICED} | 2/2 | 100% | — | $0.0042 |",
        f"| d | {FREE} | 3/3 | 100% | ✓ | $0 |",
    ]
