"""Issue 25, item 1: what flipped since the baseline, where a reviewer looks first — counted and listed at the top of
the run page, each flipped cell marked in the matrix (in words, with a label for screen readers), a baseline column in
the runs list, and the baseline's verdict on the result page of a flipped case. The baseline is the suite's blessed
run when it is earlier, else the previous run, as on the compare page; query counts are pinned with the other pages'
in test_views."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.utils import timezone

from runs.models import CaseResult, Run
from runs.web.comparison import default_baseline, run_flipped, runs_verdicts, with_default_baseline
from tests.runs.conftest import CAREFUL, HASTY
from tests.runs.test_views import html_of

pytestmark = pytest.mark.django_db

PASSED, FAILED, ERROR, CANCELLED = "passed", "failed", "error", "cancelled"
FIRST, SECOND = "cancels the order", "looks the order up first"


def bless(run: Run) -> Run:
    Run.objects.filter(pk=run.pk).update(blessed_at=timezone.now())
    run.refresh_from_db()
    return run


@pytest.fixture
def three_runs(order_suite, make_run, careful_and_hasty):
    """A blessed run, a later unblessed one, and the current run: against the blessed run, FIRST regressed on
    HASTY (passed → error) and SECOND was fixed on CAREFUL (failed → passed); against the run in between, nothing
    flipped."""
    blessed = bless(
        make_run(
            order_suite,
            models=(CAREFUL, HASTY),
            status=Run.Status.FAILED,
            results=((CAREFUL, PASSED), (HASTY, PASSED), (CAREFUL, FAILED), (HASTY, PASSED)),
        )
    )
    between = make_run(
        order_suite,
        models=(CAREFUL, HASTY),
        status=Run.Status.FAILED,
        results=((CAREFUL, PASSED), (HASTY, ERROR), (CAREFUL, PASSED), (HASTY, PASSED)),
    )
    current = make_run(
        order_suite,
        models=(CAREFUL, HASTY),
        status=Run.Status.FAILED,
        results=((CAREFUL, PASSED), (HASTY, ERROR), (CAREFUL, PASSED), (HASTY, PASSED)),
    )
    CaseResult.objects.filter(run=current, case_name=FIRST, model=HASTY).update(reason="the model timed out after 30 s")
    CaseResult.objects.filter(run=blessed, case_name=SECOND, model=CAREFUL).update(reason="lookup_order was not called")
    return blessed, between, current


def words(markup: str) -> str:
    """Markup as a person reads it: a block's tags part words, inline ones join them; entities read; whitespace
    collapsed."""
    text = re.sub(r"</?(?:li|p|div|h\d|tr|td|th|ul|section|br)\b[^>]*>", " ", markup)
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", "", text))).strip()


def text_of(response) -> str:
    return words(html_of(response))


def result_of(run: Run, case: str, model: str) -> CaseResult:
    return run.results.get(case_name=case, model=model)


# --- The run page -------------------------------------------------------------------------------------------------


def test_it_counts_and_lists_what_flipped_since_the_blessed_baseline_at_the_top_of_the_run_page(
    admin_client, three_runs
):
    blessed, _, current = three_runs
    response = admin_client.get(f"/runs/{current.pk}/")
    html, text = html_of(response), text_of(response)
    top = re.search(r'<section class="card flipped-box has-regressions" id="flipped".*?</section>', html, re.S).group(0)
    assert f"2 flipped since baseline #{blessed.pk}" in text
    assert f"Run #{blessed.pk} is the blessed baseline of orders." in text
    assert "1 regression · 1 fix · compare with" in text
    items = re.findall(r'<li class="flip-item flip-(\w+)" data-case="([^"]+)" data-model="([^"]+)">', top)
    assert items == [("broke", FIRST, HASTY), ("fixed", SECOND, CAREFUL)]

    broke, was = result_of(current, FIRST, HASTY), result_of(blessed, FIRST, HASTY)
    assert f'href="/runs/{current.pk}/results/{broke.pk}/">{FIRST}</a>' in top
    assert f'href="/runs/{blessed.pk}/results/{was.pk}/">baseline result</a>' in top
    assert f'href="/runs/{current.pk}/results/{broke.pk}/side-by-side/?with={was.pk}">side by side</a>' in top
    assert f'href="/runs/{current.pk}/compare/?baseline={blessed.pk}"' in top
    top_text = words(top)
    assert f"▼ Regression cancels the order on {HASTY} Passed → Error" in top_text
    assert "the model timed out after 30 s" in top_text
    assert "was: lookup_order was not called" in top_text


def test_it_compares_with_the_previous_run_when_none_is_blessed_and_says_so(admin_client, three_runs):
    blessed, between, current = three_runs
    Run.objects.filter(pk=blessed.pk).update(blessed_at=None)
    text = text_of(admin_client.get(f"/runs/{current.pk}/"))
    assert f"Nothing flipped since baseline #{between.pk}" in text
    assert f"No earlier run of orders is blessed: the baseline is the previous run, #{between.pk}" in text
    assert "Every case has the verdict it had there." in text


def test_it_shows_no_baseline_on_the_first_run_of_a_suite(admin_client, three_runs):
    blessed, _, _ = three_runs
    html = html_of(admin_client.get(f"/runs/{blessed.pk}/"))
    assert 'id="flipped"' not in html and 'class="flip-mark' not in html and 'data-matrix-filter="flipped"' not in html


def test_it_marks_each_flipped_cell_in_words_with_a_label_for_screen_readers(admin_client, three_runs):
    blessed, _, current = three_runs
    html = html_of(admin_client.get(f"/runs/{current.pk}/"))
    matrix = re.search(r'<table class="matrix".*?</table>', html, re.S).group(0)
    broke, fixed = result_of(current, FIRST, HASTY), result_of(current, SECOND, CAREFUL)

    def cell(result: CaseResult) -> str:
        return re.search(rf'<td class="[^"]*" data-cell="{result.case_id}\|{result.model}">.*?</td>', matrix).group(0)

    assert cell(broke).startswith('<td class="cell cell-error flipped"')
    assert (
        '<span class="flip-mark flip-broke"><span aria-hidden="true">▼</span> Regressed<span class="visually-hidden">'
        f" since baseline #{blessed.pk}: it passed there</span></span>"
    ) in cell(broke)
    assert (
        '<span class="flip-mark flip-fixed"><span aria-hidden="true">▲</span> Fixed<span class="visually-hidden">'
        f" since baseline #{blessed.pk}: it failed there</span></span>"
    ) in cell(fixed)
    assert matrix.count('class="flip-mark') == 2
    rows = {key: classes for classes, key in re.findall(r'<tr class="([^"]*)" data-row="(\d+)">', matrix)}
    assert rows == {str(broke.case_id): "has-failure disagree has-flip", str(fixed.case_id): "has-flip"}
    assert f"Flipped since #{blessed.pk} 2" in text_of(admin_client.get(f"/runs/{current.pk}/"))
    assert 'data-show="flipped"' in html_of(admin_client.get(f"/runs/{current.pk}/?show=flipped"))


def test_it_links_each_matrix_row_to_its_case_on_every_model_side_by_side(admin_client, three_runs):
    _, _, current = three_runs
    html = html_of(admin_client.get(f"/runs/{current.pk}/"))
    first = result_of(current, FIRST, CAREFUL)
    assert f'<a class="row-models" href="/runs/{current.pk}/results/{first.pk}/models/">models side by side' in html


def test_it_escapes_what_it_lists_of_a_flipped_case(admin_client, three_runs):
    _, _, current = three_runs
    CaseResult.objects.filter(case_name=FIRST).update(case_name='<script>alert("flip")</script>')
    CaseResult.objects.filter(run=current, model=HASTY, status=ERROR).update(reason="<img src=x onerror=alert(1)>")
    html = html_of(admin_client.get(f"/runs/{current.pk}/"))
    assert "<script>alert" not in html and "<img src=x" not in html
    assert 'data-case="&lt;script&gt;alert(&quot;flip&quot;)&lt;/script&gt;"' in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_it_lists_at_most_a_screenful_of_flips_and_sends_the_rest_to_the_compare_page(
    admin_client, order_suite, make_run, make_case
):
    from runs.web import pages

    for index in range(pages.FLIPS_LISTED + 1):  # with the suite's two, 3 more than are listed
        make_case(order_suite, f"case {index:02d}")
    cases = order_suite.cases.count()
    bless(make_run(order_suite, status=Run.Status.PASSED, results=((CAREFUL, PASSED),) * cases))
    current = make_run(order_suite, status=Run.Status.FAILED, results=((CAREFUL, FAILED),) * cases)
    response = admin_client.get(f"/runs/{current.pk}/")
    assert html_of(response).count('<li class="flip-item') == pages.FLIPS_LISTED
    assert f"…and {cases - pages.FLIPS_LISTED} more: see them all on the compare page." in text_of(response)


# --- What flips, over trials --------------------------------------------------------------------------------------


def test_it_flips_a_case_of_several_trials_only_when_its_verdict_over_them_changed(order_suite, make_run):
    baseline = bless(make_run(order_suite, results=((CAREFUL, PASSED), (CAREFUL, PASSED)), trials=2))
    current = make_run(order_suite, results=((CAREFUL, PASSED), (CAREFUL, PASSED)), trials=2)
    first, second = order_suite.cases.order_by("pk")
    for run, case, status in (
        (baseline, first, PASSED),
        (baseline, second, PASSED),
        (current, first, FAILED),
        (current, second, CANCELLED),
    ):
        CaseResult.objects.create(
            run=run, case=case, case_name=case.name, model=CAREFUL, trial=1, position=5, status=status
        )
    verdicts = runs_verdicts(run_ids=[baseline.pk, current.pk])
    # One trial of FIRST failed: it regressed. SECOND's cancelled trial did not run: it still passes.
    assert verdicts[current.pk].flips_since(verdicts[baseline.pk]) == (1, 0)
    assert verdicts[current.pk].totals(CAREFUL) == (3, 2)


def test_it_lists_flips_case_by_case_in_the_runs_order_regressions_first(order_suite, make_run):
    bless(
        make_run(
            order_suite,
            models=(CAREFUL, HASTY),
            results=((CAREFUL, PASSED), (HASTY, FAILED), (CAREFUL, PASSED), (HASTY, PASSED)),
        )
    )
    current = make_run(
        order_suite,
        models=(HASTY, CAREFUL),
        results=((HASTY, PASSED), (CAREFUL, FAILED), (HASTY, FAILED), (CAREFUL, FAILED)),
    )
    flipped = run_flipped(run=with_default_baseline(Run.objects.all()).get(pk=current.pk))
    assert [(flip.case_name, flip.model) for flip in flipped.regressions] == [
        (FIRST, CAREFUL),
        (SECOND, HASTY),
        (SECOND, CAREFUL),
    ]
    assert [(flip.case_name, flip.model, flip.kind) for flip in flipped.fixes] == [(FIRST, HASTY, "fixed")]
    assert flipped.count == 4 and flipped.blessed


def test_it_annotates_each_run_with_the_baseline_the_compare_page_would_pick(order_suite, make_suite, make_run):
    other_suite = make_suite("billing")
    first = make_run(order_suite, status=Run.Status.FAILED)
    make_run(other_suite, status=Run.Status.PASSED)
    errored = make_run(order_suite, status=Run.Status.ERROR)
    latest = make_run(order_suite)
    later_blessed = bless(make_run(order_suite, status=Run.Status.PASSED))
    runs = {run.pk: run for run in with_default_baseline(Run.objects.all())}
    for run in Run.objects.all():
        expected = default_baseline(run=run)
        assert runs[run.pk].baseline_id == (expected.pk if expected else None), run.pk
        assert (runs[run.pk].baseline_rank == 0) == bool(expected and expected.is_blessed)
    # A blessed run serves only the runs after it: before it, the latest run that finished with verdicts does.
    assert runs[latest.pk].baseline_id == first.pk and runs[errored.pk].baseline_id == first.pk
    assert runs[later_blessed.pk].baseline_id == latest.pk


# --- The runs list ------------------------------------------------------------------------------------------------


def test_it_names_each_runs_baseline_and_counts_its_regressions_in_the_runs_list(
    admin_client, three_runs, make_suite, make_run
):
    blessed, between, current = three_runs
    elsewhere = make_suite("billing")
    before = make_run(elsewhere, status=Run.Status.PASSED, results=((CAREFUL, PASSED), (CAREFUL, PASSED)))
    after = make_run(elsewhere, status=Run.Status.FAILED, results=((CAREFUL, FAILED), (CAREFUL, PASSED)))
    html = html_of(admin_client.get("/runs/"))

    def since(run: Run) -> str:
        row = re.search(rf'<a href="/runs/{run.pk}/">#{run.pk}</a>.*?</tr>', html, re.S).group(0)
        cell = re.search(r'<td class="since-baseline">(.*?)</td>', row, re.S).group(1)
        return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", cell)).strip()

    assert since(current) == f"#{blessed.pk} blessed ▼ 1 regression · ▲ 1 fix"
    assert since(between) == f"#{blessed.pk} blessed ▼ 1 regression · ▲ 1 fix"
    assert since(blessed) == "—"
    assert since(after) == f"#{before.pk} previous ▼ 1 regression"
    assert since(before) == "—"
    assert f'<a href="/runs/{current.pk}/compare/?baseline={blessed.pk}"' in html
    # The per-model pass rates still come from the same figures.
    assert f"{CAREFUL}: 2 of 2 passed" in html and f"{HASTY}: 1 of 2 passed" in html


def test_it_says_no_regression_when_nothing_regressed(admin_client, order_suite, make_run):
    bless(make_run(order_suite, status=Run.Status.PASSED, results=((CAREFUL, PASSED), (CAREFUL, FAILED))))
    current = make_run(order_suite, status=Run.Status.FAILED, results=((CAREFUL, PASSED), (CAREFUL, FAILED)))
    html = html_of(admin_client.get("/runs/"))
    row = re.search(rf'<a href="/runs/{current.pk}/">#{current.pk}</a>.*?</tr>', html, re.S).group(0)
    assert '<span class="muted" data-count="regressions">no regression</span>' in row


# --- The result page ----------------------------------------------------------------------------------------------


def test_it_gives_a_flipped_result_its_baseline_context(admin_client, three_runs):
    blessed, _, current = three_runs
    broke, was = result_of(current, FIRST, HASTY), result_of(blessed, FIRST, HASTY)
    response = admin_client.get(f"/runs/{current.pk}/results/{broke.pk}/")
    html = html_of(response)
    box = re.search(r'<aside class="baseline-context flip-broke".*?</aside>', html, re.S).group(0)
    box_text = words(box)
    assert f"Regression since baseline #{blessed.pk} (the blessed baseline): there it Passed" in box_text
    assert f'href="/runs/{blessed.pk}/results/{was.pk}/" data-baseline-status="passed"' in box
    assert f'href="/runs/{current.pk}/results/{broke.pk}/side-by-side/?with={was.pk}">See the two side by side' in box

    fixed, failed_there = result_of(current, SECOND, CAREFUL), result_of(blessed, SECOND, CAREFUL)
    box = re.search(
        r'<aside class="baseline-context flip-fixed".*?</aside>',
        html_of(admin_client.get(f"/runs/{current.pk}/results/{fixed.pk}/")),
        re.S,
    ).group(0)
    said = words(box)
    assert f"Fixed since baseline #{blessed.pk} (the blessed baseline): there it Failed — lookup_order was" in said
    assert f'href="/runs/{blessed.pk}/results/{failed_there.pk}/"' in box


def test_it_says_when_a_result_has_the_verdict_it_had_in_the_baseline_or_was_not_there(
    admin_client, three_runs, make_case, order_suite
):
    blessed, _, current = three_runs
    same = result_of(current, FIRST, CAREFUL)
    text = text_of(admin_client.get(f"/runs/{current.pk}/results/{same.pk}/"))
    assert f"Unchanged since baseline #{blessed.pk} (the blessed baseline): there it Passed" in text
    added = make_case(order_suite, "a case the baseline never ran")
    new = CaseResult.objects.create(
        run=current, case=added, case_name=added.name, model=CAREFUL, position=9, status=FAILED
    )
    text = text_of(admin_client.get(f"/runs/{current.pk}/results/{new.pk}/"))
    assert f"Baseline #{blessed.pk} (the blessed baseline): it did not run this case on this model." in text
    assert "side by side" not in text.split("Baseline #")[1].split("Reason")[0]
    first = blessed.results.first()
    assert 'class="baseline-context' not in html_of(admin_client.get(f"/runs/{blessed.pk}/results/{first.pk}/"))
