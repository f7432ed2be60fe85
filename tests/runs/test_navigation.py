"""Getting around a run (issue 25, items 8 and 9), server-side: the matrix filtered by model and sorted by duration or
status from the query string (each link keeping the other parameters, the CSV following, a value naming nothing a
400 naming the parameter), the skip link to the first failure, previous / next failure and the case's and
conversation's links on a result, descriptions beside failures, tokens per result across trial counts, JSON tokens
kept whole. The browser's side is tests/browser/test_navigation.py."""

from __future__ import annotations

import csv
import io
import re
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest

from agenthost.models import Conversation
from cases.models import Case
from runs.models import CaseResult, Run
from runs.templatetags.runs_text import token_wrapped
from tests.runs.conftest import CAREFUL
from tests.runs.test_views import _sized_run, html_of, text_of

pytestmark = pytest.mark.django_db

MODEL_0, MODEL_1, MODEL_2 = "scripted:model-0", "scripted:model-1", "scripted:model-2"


@pytest.fixture
def sized(make_suite) -> Run:
    """Four cases on three models; the last model fails every case; case time grows with the position."""
    suite = make_suite()
    cases = Case.objects.bulk_create([Case(suite=suite, name=f"case {index}") for index in range(4)])
    return _sized_run(suite, cases, 3)


def cell_keys(html: str) -> list[str]:
    return re.findall(r'<td class="cell [^"]*" data-cell="([^"]+)"', html)


def links_of(html: str, label: str) -> list[dict[str, list[str]]]:
    """The query of each link of the page whose text starts with `label`."""
    return [
        parse_qs(urlsplit(unescape(href)).query)
        for href in re.findall(rf'<a [^>]*?href="([^"]*)"[^>]*>{re.escape(label)}', html)
    ]


def test_it_filters_the_matrix_by_model_and_every_link_keeps_the_other_parameters(admin_client, sized):
    html = html_of(admin_client.get(f"/runs/{sized.pk}/?model={MODEL_2}&sort=status&show=failures"))

    assert {key.split("|")[1] for key in cell_keys(html)} == {MODEL_2}
    assert len(cell_keys(html)) == 4
    assert re.findall(r'<th scope="col"><code class="model-key">([^<]+)', html.replace("<wbr>", "")) == [MODEL_2]
    assert links_of(html, "Failures only") == [{"model": [MODEL_2], "sort": ["status"], "show": ["failures"]}]
    assert links_of(html, "Slowest first") == [{"model": [MODEL_2], "sort": ["duration"], "show": ["failures"]}]
    assert links_of(html, "Case order") == [{"model": [MODEL_2], "show": ["failures"]}]
    assert links_of(html, "All models") == [{"sort": ["status"], "show": ["failures"]}]
    # The CSV follows the model and the sort; which rows are shown is the page's view, the CSV has them all.
    assert links_of(html, "Matrix CSV") == [{"model": [MODEL_2], "sort": ["status"]}]
    # Failures counted on the model shown: every case failed there.
    assert re.search(r'data-matrix-filter="failures"[^>]*>Failures only <span class="seg-count">4</span>', html)
    assert re.search(r'data-matrix-filter="disagree"[^>]*>Where models disagree <span class="seg-count">0</span>', html)

    passing = html_of(admin_client.get(f"/runs/{sized.pk}/?model={MODEL_0}"))
    assert re.search(r'data-matrix-filter="failures"[^>]*>Failures only <span class="seg-count">0</span>', passing)
    assert 'class="skip-link"' not in passing, "no failure on that model: nowhere to skip to"


def test_it_sorts_the_matrix_slowest_first_or_worst_first_keeping_the_case_order_among_equals(admin_client, sized):
    cases = list(sized.results.filter(model=MODEL_0).order_by("position").values_list("case_id", flat=True))
    rows = lambda html: list(dict.fromkeys(key.split("|")[0] for key in cell_keys(html)))  # noqa: E731

    assert rows(html_of(admin_client.get(f"/runs/{sized.pk}/"))) == [str(case) for case in cases]
    assert rows(html_of(admin_client.get(f"/runs/{sized.pk}/?sort=duration"))) == [
        str(case) for case in reversed(cases)
    ]
    # Make the third case fail on the first model too, and the second error on it: errors first, then failures.
    CaseResult.objects.filter(run=sized, model=MODEL_0, case_id=cases[2]).update(status="failed")
    CaseResult.objects.filter(run=sized, model=MODEL_0, case_id=cases[1]).update(status="error")
    assert rows(html_of(admin_client.get(f"/runs/{sized.pk}/?sort=status"))) == [
        str(cases[1]),
        str(cases[0]),
        str(cases[2]),
        str(cases[3]),
    ]
    # On the first model alone: the error, the failure, then the passes in case order.
    assert rows(html_of(admin_client.get(f"/runs/{sized.pk}/?sort=status&model={MODEL_0}"))) == [
        str(cases[1]),
        str(cases[2]),
        str(cases[0]),
        str(cases[3]),
    ]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        (
            "model=scripted:nobody",
            f"model: 'scripted:nobody' is not a model of this run; its models are {MODEL_0}, {MODEL_1}, {MODEL_2}.",
        ),
        ("model=" + "m" * 300, "model: '" + "m" * 59 + "…' is not a model of this run"),
        ("sort=fastest", "sort: 'fastest' is not a way to sort the matrix; use duration (slowest first) or status"),
        ("sort=DURATION", "sort: 'DURATION' is not a way to sort the matrix"),
    ],
    ids=["unknown-model", "long-model", "unknown-sort", "sort-in-capitals"],
)
def test_it_refuses_a_model_or_sort_that_names_nothing_naming_the_parameter(admin_client, sized, query, named):
    page = admin_client.get(f"/runs/{sized.pk}/?{query}")
    assert page.status_code == 400
    assert named in unescape(text_of(page))

    export = admin_client.get(f"/runs/{sized.pk}/matrix.csv?{query}")
    assert export.status_code == 400 and export["Content-Type"].startswith("text/plain")
    assert named in export.content.decode() and "Nothing was exported." in export.content.decode()


def test_it_reads_an_empty_model_or_sort_as_the_whole_matrix_in_case_order(admin_client, sized):
    whole = admin_client.get(f"/runs/{sized.pk}/")
    empty = admin_client.get(f"/runs/{sized.pk}/?model=&sort=")
    assert empty.status_code == 200 and cell_keys(html_of(empty)) == cell_keys(html_of(whole))


def test_it_exports_the_csv_of_one_model_sorted_as_the_page_sorts_it(admin_client, sized):
    rows = list(
        csv.reader(
            io.StringIO(admin_client.get(f"/runs/{sized.pk}/matrix.csv?model={MODEL_0}&sort=duration").content.decode())
        )
    )
    header, lines = rows[0], rows[1:]
    assert header[:3] == ["case_id", "case", "trial"]
    assert all(column.startswith(MODEL_0) for column in header[3:]) and f"{MODEL_0} status" in header
    durations = [float(line[header.index(f"{MODEL_0} duration_ms")]) for line in lines]
    assert len(lines) == 4 and durations == sorted(durations, reverse=True)


def test_it_puts_the_skip_link_first_on_the_first_failed_cell_in_matrix_order(admin_client, sized):
    html = html_of(admin_client.get(f"/runs/{sized.pk}/"))
    first = sized.results.filter(status="failed").order_by("position").first()
    body = html[html.index("<body>") :]
    assert re.match(r'<body>\s*<a class="skip-link" href="#first-failure"[^>]*>Skip to first failure</a>', body)
    assert html.count('id="first-failure"') == 1
    assert f'href="/runs/{sized.pk}/results/{first.pk}/" id="first-failure"' in html

    sorted_page = html_of(admin_client.get(f"/runs/{sized.pk}/?sort=duration"))
    last_case = sized.results.filter(status="failed").order_by("-position").first()
    assert f'href="/runs/{sized.pk}/results/{last_case.pk}/" id="first-failure"' in sorted_page


def test_it_links_a_result_to_the_previous_and_next_failure_of_its_run_in_matrix_order(admin_client, sized):
    failures = list(sized.results.filter(status="failed").order_by("position"))
    passed = sized.results.filter(status="passed").order_by("position")[2]
    base = f"/runs/{sized.pk}/results/"

    first = html_of(admin_client.get(f"{base}{failures[0].pk}/"))
    assert "Failure 1 of 4" in first and "Previous failure" not in first
    assert f'<a href="{base}{failures[1].pk}/" rel="next" data-nav="next-failure">' in first
    middle = html_of(admin_client.get(f"{base}{failures[2].pk}/"))
    assert "Failure 3 of 4" in middle
    assert f'<a href="{base}{failures[1].pk}/" rel="prev"' in middle
    assert f'<a href="{base}{failures[3].pk}/" rel="next"' in middle
    last = html_of(admin_client.get(f"{base}{failures[3].pk}/"))
    assert "Next failure" not in last and f'<a href="{base}{failures[2].pk}/" rel="prev"' in last
    # A passing result links to the failures on either side of it.
    between = html_of(admin_client.get(f"{base}{passed.pk}/"))
    before = [failure for failure in failures if failure.position < passed.position]
    after = [failure for failure in failures if failure.position > passed.position]
    assert before and after and "4 failures in this run" in text_of(admin_client.get(f"{base}{passed.pk}/"))
    assert f'<a href="{base}{before[-1].pk}/" rel="prev"' in between
    assert f'<a href="{base}{after[0].pk}/" rel="next"' in between


def test_it_links_the_case_and_the_conversation_for_staff_and_names_them_for_members(
    admin_client, member_client, sized, order_agent, admin_user
):
    result = sized.results.order_by("position").first()
    conversation = Conversation.objects.create(agent=order_agent, owner=admin_user)
    CaseResult.objects.filter(pk=result.pk).update(conversation=conversation)
    Case.objects.filter(pk=result.case_id).update(description="Says what the case is for.")
    url = f"/runs/{sized.pk}/results/{result.pk}/"

    staff = html_of(admin_client.get(url))
    assert f'<a href="/admin/cases/case/{result.case_id}/change/" data-nav="edit-case">Edit the case</a>' in staff
    assert (
        f'<a href="/conversations/{conversation.pk}/" data-field="conversation">Conversation #{conversation.pk}</a>'
        in staff
    )
    assert "Says what the case is for." in staff

    member = member_client.get(url)
    assert "Edit the case" not in html_of(member) and f'href="/conversations/{conversation.pk}/"' not in html_of(member)
    assert f"Conversation #{conversation.pk}" in text_of(member) and "Says what the case is for." in text_of(member)


def test_it_shows_a_case_description_beside_a_failing_row_only(admin_client, sized):
    failing_everywhere, passing_case = sized.results.order_by("position").values_list("case_id", flat=True)[::3][:2]
    Case.objects.filter(suite=sized.suite).update(description="What this case is for.")
    CaseResult.objects.filter(run=sized, case_id=passing_case).update(status="passed")

    html = html_of(admin_client.get(f"/runs/{sized.pk}/"))
    rows = dict(re.findall(r'<tr class="[^"]*" data-row="(\d+)"><th scope="row">(.*?)</th>', html))
    assert '<span class="case-description">What this case is for.</span>' in rows[str(failing_everywhere)]
    assert "case-description" not in rows[str(passing_case)]


def test_it_gives_tokens_per_result_beside_totals_of_runs_with_different_trial_counts(
    admin_client, order_suite, make_run
):
    baseline = make_run(
        order_suite, models=(CAREFUL,), status=Run.Status.PASSED, results=((CAREFUL, "passed"), (CAREFUL, "passed"))
    )
    three = make_run(
        order_suite,
        models=(CAREFUL,),
        status=Run.Status.PASSED,
        trials=3,
        results=tuple((CAREFUL, "passed") for _ in range(6)),
    )
    CaseResult.objects.filter(run=three).update(input_tokens=20, output_tokens=10)

    html = html_of(admin_client.get(f"/runs/{three.pk}/compare/?baseline={baseline.pk}"))
    # 2 results of 15 tokens, then 6 of 30: the totals say 30 → 180, one result 15 → 30.
    assert re.search(
        r'<td class="num delta-tokens">30 → 180.*?<span class="muted small per-result"[^>]*>15 → 30 per '
        r"result</span>",
        html,
        re.S,
    )

    same = make_run(order_suite, models=(CAREFUL,), status=Run.Status.PASSED, results=((CAREFUL, "passed"),) * 2)
    assert "per-result" not in html_of(admin_client.get(f"/runs/{same.pk}/compare/?baseline={baseline.pk}"))


def test_it_keeps_json_tokens_whole_and_escapes_them():
    text = '{\n  "function": "util-email-handle_email_sender",\n  "html": "<b>&"\n}'
    assert token_wrapped(text) == (
        '<span class="tok">{</span>\n  <span class="tok">&quot;function&quot;:</span> '
        '<span class="tok">&quot;util-email-handle_email_sender&quot;,</span>\n  '
        '<span class="tok">&quot;html&quot;:</span> <span class="tok">&quot;&lt;b&gt;&amp;&quot;</span>\n'
        '<span class="tok">}</span>'
    )
    long_token = "x" * 40
    assert token_wrapped(f"a {long_token}") == f'<span class="tok">a</span> {long_token}'
