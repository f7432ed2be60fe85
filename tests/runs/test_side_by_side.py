"""Issue 25, item 2: a flipped case side by side with its baseline result (same case, same model), and a case on every
model of a run: messages, tool calls with their arguments and outcomes, and assertion outcomes aligned by turn, the
first point where they diverge marked and linked from the top; everything escaped; a `with` that names anything but
another result of the case refused with a 400 naming it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.models import CaseResult, Run
from runs.web.side_by_side import Column, aligned
from tests.properties import SUPPRESSED_WITH_FIXTURES
from tests.runs.conftest import CAREFUL, HASTY
from tests.runs.test_flipped import words
from tests.runs.test_views import html_of

pytestmark = pytest.mark.django_db

PASSED, FAILED = "passed", "failed"
FIRST, SECOND = "cancels the order", "looks the order up first"
ASK = "Please cancel order 1043"


def user(turn: int, text: str) -> dict[str, Any]:
    return {"turn": turn, "role": "user", "content": text, "agent": "order-desk"}


def said(turn: int, text: str, model: str = CAREFUL) -> dict[str, Any]:
    return {
        "turn": turn,
        "role": "assistant",
        "content": text,
        "agent": "order-desk",
        "model": model,
        "latency_ms": 3.0,
    }


def called(turn: int, call_id: str, function: str, arguments: dict, result: Any, outcome: str = "mocked") -> list:
    return [
        {
            "turn": turn,
            "role": "tool_call",
            "function_name": function,
            "arguments": arguments,
            "tool_call_id": call_id,
            "agent": "order-desk",
            "trigger": "model",
        },
        {
            "turn": turn,
            "role": "tool_result",
            "function_name": function,
            "content": json.dumps(result),
            "tool_call_id": call_id,
            "agent": "order-desk",
            "outcome": outcome,
        },
    ]


def check(scope: str, kind: str, status: str, expected: Any, actual: Any, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "scope": scope,
        "status": status,
        "expected": expected,
        "actual": actual,
        "message": message or f"{kind} {status}",
        "fatal": False,
        "synthetic": False,
    }


LOOKED_UP = [
    user(0, ASK),
    *called(0, "c1", "lookup_order", {"order_id": "1043"}, {"status": "processing"}),
    *called(0, "c2", "cancel_order", {"order_id": "1043"}, {"cancelled": True}),
    said(0, "Order 1043 is cancelled."),
    user(1, "Thanks!"),
    said(1, "You're welcome."),
]
CANCELLED_STRAIGHT_AWAY = [
    user(0, ASK),
    *called(0, "c1", "cancel_order", {"order_id": "1043"}, {"cancelled": True}),
    said(0, "Order 1043 is cancelled."),
    user(1, "Thanks!"),
    said(1, "You're welcome."),
]


def store(result: CaseResult, transcript: list, assertions: list, **fields: Any) -> CaseResult:
    CaseResult.objects.filter(pk=result.pk).update(transcript=transcript, assertions=assertions, **fields)
    result.refresh_from_db()
    return result


@pytest.fixture
def flipped_pair(order_suite, make_run, careful_and_hasty):
    """FIRST on CAREFUL: looked the order up in the blessed run (passed); cancelled straight away now (failed)."""
    blessed = make_run(order_suite, status=Run.Status.PASSED, results=((CAREFUL, PASSED), (CAREFUL, PASSED)))
    Run.objects.filter(pk=blessed.pk).update(blessed_at=timezone.now())
    current = make_run(order_suite, status=Run.Status.FAILED, results=((CAREFUL, FAILED), (CAREFUL, PASSED)))
    was = store(
        blessed.results.get(case_name=FIRST),
        LOOKED_UP,
        [
            check("turn 0", "toolCalled", PASSED, {"function": "lookup_order"}, ["lookup_order"]),
            check("case", "stateEquals", PASSED, {"order_status": "cancelled"}, {"order_status": "cancelled"}),
        ],
    )
    now = store(
        current.results.get(case_name=FIRST),
        CANCELLED_STRAIGHT_AWAY,
        [
            check("turn 0", "toolCalled", FAILED, {"function": "lookup_order"}, [], "lookup_order was not called"),
            check("case", "stateEquals", PASSED, {"order_status": "cancelled"}, {"order_status": "cancelled"}),
        ],
        reason="toolCalled (turn 0): lookup_order was not called",
    )
    return was, now


def page(client, url: str):
    response = client.get(url)
    return response, html_of(response)


def test_it_puts_the_baseline_beside_the_flipped_result_and_marks_where_they_first_diverge(admin_client, flipped_pair):
    was, now = flipped_pair
    response, html = page(admin_client, f"/runs/{now.run_id}/results/{now.pk}/side-by-side/")
    assert response.status_code == 200
    heads = re.findall(r'<div class="sbs-head" data-column="([^"]+)">', html)
    assert heads == [f"Run #{was.run_id} · {CAREFUL}", f"Run #{now.run_id} · {CAREFUL}"]
    text = words(html)
    assert f"Run #{was.run_id} {CAREFUL} Passed the blessed baseline" in text
    assert f"Run #{now.run_id} {CAREFUL} Failed this result toolCalled (turn 0): lookup_order was not called" in text

    # Aligned by content (issue 37): the one skipped call is one row, marked "skipped" and named in the summary;
    # the cancellation and the answer after it sit beside their like, not read as differences nor as a turn that
    # "ended sooner".
    summary = words(re.search(r'<div class="divergence-summary".*?</div>', html, re.S).group(0))
    assert summary == (
        f"First divergence: Turn 0, messages and tool calls, step 2: "
        f'Run #{now.run_id} · {CAREFUL}: skipped what Run #{was.run_id} · {CAREFUL} did: called lookup_order with '
        f'{{ "order_id": "1043" }} (mocked) '
        f'Run #{was.run_id} · {CAREFUL}: called lookup_order with {{ "order_id": "1043" }} (mocked) '
        f"Run #{now.run_id} · {CAREFUL}: nothing at this step"
    )
    assert '<a href="#divergence">' in html and html.count('id="divergence"') == 1
    turn0 = re.search(r'<section class="card sbs-turn" id="turn-0".*?</section>', html, re.S).group(0)
    steps = re.findall(r'<div class="sbs-step([^"]*)" data-column="Run #(\d+)[^"]*" data-kind="(\w+)">', turn0)
    base, cur = str(was.run_id), str(now.run_id)
    assert steps == [
        # messages and tool calls, aligned by content
        ("", base, "user"),
        ("", cur, "user"),
        (" sbs-diverges", base, "tool"),
        (" sbs-diverges", cur, "message"),
        ("", base, "tool"),
        ("", cur, "tool"),
        ("", base, "assistant"),
        ("", cur, "assistant"),
        # assertion outcomes
        (" sbs-differs", base, "assertion"),
        (" sbs-differs", cur, "assertion"),
    ]
    assert re.findall(r'data-difference="([\w-]+)">', turn0) == ["skipped", "different-outcome"]
    assert "nothing here: this result skipped the step" in turn0
    assert "the turn ended sooner" not in html
    # The divergence label sits right before the diverging pair.
    assert re.search(r'id="divergence">.*?First divergence</div>\s*<div class="sbs-step sbs-diverges"', turn0, re.S)
    # Turn 1 and the case assertions are the same on both sides: nothing marked.
    rest = html[html.index('id="turn-1"') :]
    assert "sbs-differs" not in rest and "sbs-diverges" not in rest and "Case assertions" in rest
    # The arguments and outcome of each call are there, as on the result page.
    assert '<span class="badge outcome-mocked">Mocked</span>' in turn0
    assert "&quot;order_id&quot;: &quot;1043&quot;" in turn0

    # Named the other way round, the earlier run is still on the left.
    _, html = page(admin_client, f"/runs/{was.run_id}/results/{was.pk}/side-by-side/?with={now.pk}")
    assert re.findall(r'<div class="sbs-head" data-column="Run #(\d+)', html) == [base, cur]


def test_it_finds_a_divergence_in_the_assertion_outcomes_and_links_to_how_the_case_changed(admin_client, flipped_pair):
    was, now = flipped_pair
    store(
        now,
        LOOKED_UP,
        [
            check("turn 0", "toolCalled", FAILED, {"function": "lookup_orders"}, ["lookup_order"]),
            check("case", "stateEquals", PASSED, {"order_status": "cancelled"}, {"order_status": "cancelled"}),
        ],
        case_hash="b" * 64,
    )
    store(was, LOOKED_UP, was.assertions, case_hash="a" * 64)
    _, html = page(admin_client, f"/runs/{now.run_id}/results/{now.pk}/side-by-side/?with={was.pk}")
    summary = words(re.search(r'<div class="divergence-summary".*?</div>', html, re.S).group(0))
    assert summary.startswith("First divergence: Turn 0, assertions, step 1:")
    assert "toolCalled passed" in summary and "toolCalled failed" in summary
    assert html.count("sbs-diverges") == 2 and "sbs-differs" not in html
    anchor = f"case-change-{'a' * 12}-{'b' * 12}"
    assert f'href="/runs/{now.run_id}/compare/?baseline={was.run_id}#{anchor}">See what changed</a>' in html


def test_it_says_when_two_results_do_not_diverge(admin_client, flipped_pair):
    was, now = flipped_pair
    store(now, LOOKED_UP, was.assertions)
    _, html = page(admin_client, f"/runs/{now.run_id}/results/{now.pk}/side-by-side/")
    assert "No divergence: the same messages, tool calls and assertion outcomes, step by step." in words(html)
    assert 'id="divergence"' not in html and "sbs-differs" not in html


def test_it_escapes_everything_it_shows_side_by_side(admin_client, flipped_pair):
    was, now = flipped_pair
    hostile = '</pre><script>alert("x")</script>'
    store(
        now,
        [user(0, hostile), *called(0, "c1", hostile, {"q": hostile}, {"r": hostile}), said(0, hostile)],
        [check("turn 0", hostile, FAILED, hostile, hostile, hostile)],
        reason=hostile,
        case_name=hostile,
    )
    long_value = "x" * 3000
    store(was, [user(0, "hi"), *called(0, "c1", "lookup_order", {"note": long_value}, {"r": 1})], [])
    response, html = page(admin_client, f"/runs/{now.run_id}/results/{now.pk}/side-by-side/?with={was.pk}")
    assert response.status_code == 200
    assert "<script>" not in html and "</pre><script" not in html
    assert "&lt;/pre&gt;&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert long_value in html  # shown whole; the page wraps it (the browser test checks nothing overflows)


@pytest.mark.parametrize(
    ("wanted", "message"),
    [
        ("abc", "with: 'abc' is not a result id (a whole number from 1)."),
        ("0", "with: '0' is not a result id (a whole number from 1)."),
        ("9" * 200, f"with: '{'9' * 80}…' is not a result id (a whole number from 1)."),
        ("1\x002", "with: '1\\x002' is not a result id"),
        ("99999999", "with: there is no result #99999999."),
        ("{self}", "with: result #{self} is this result; pick another result of “cancels the order”."),
        ("{other_case}", "with: result #{other_case} is of another case (“looks the order up first”); pick a result"),
    ],
)
def test_it_refuses_a_with_that_is_not_another_result_of_the_case(admin_client, flipped_pair, wanted, message):
    _, now = flipped_pair
    ids = {"self": now.pk, "other_case": now.run.results.get(case_name=SECOND).pk}
    url = f"/runs/{now.run_id}/results/{now.pk}/side-by-side/?with={wanted.format(**ids)}"
    response, html = page(admin_client, url)
    assert response.status_code == 400
    assert message.format(**ids) in words(html)
    assert 'class="sbs-head"' not in html


def test_it_refuses_a_deleted_case_of_the_same_name_in_another_suite(
    admin_client, flipped_pair, make_suite, make_run, make_case
):
    _, now = flipped_pair
    elsewhere = make_suite("billing")
    make_case(elsewhere, FIRST)
    foreign = make_run(elsewhere, results=((CAREFUL, PASSED),)).results.get()
    now.run.suite.cases.get(name=FIRST).delete()
    foreign.case.delete()
    response, _ = page(admin_client, f"/runs/{now.run_id}/results/{now.pk}/side-by-side/?with={foreign.pk}")
    assert response.status_code == 400


def test_it_says_when_there_is_no_baseline_result_to_show(admin_client, flipped_pair, order_suite, make_run):
    was, now = flipped_pair
    _, html = page(admin_client, f"/runs/{was.run_id}/results/{was.pk}/side-by-side/")
    assert f"Run #{was.run_id} is the first run of orders: there is no baseline to show." in words(html)
    later = make_run(order_suite, models=(HASTY,), results=((HASTY, FAILED),)).results.get()
    _, html = page(admin_client, f"/runs/{later.run_id}/results/{later.pk}/side-by-side/")
    assert f"Baseline #{was.run_id} did not run “{FIRST}” on {HASTY}." in words(html)
    assert 'class="sbs-head"' not in html


def test_it_shows_a_case_on_every_model_of_a_run_side_by_side_in_the_runs_model_order(
    admin_client, order_suite, make_run, careful_and_hasty
):
    run = make_run(
        order_suite,
        models=(HASTY, CAREFUL),
        status=Run.Status.FAILED,
        trials=2,
        results=((HASTY, FAILED), (CAREFUL, PASSED)),
    )
    hasty, careful = run.results.get(model=HASTY), run.results.get(model=CAREFUL)
    CaseResult.objects.create(
        run=run,
        case=hasty.case,
        case_name=FIRST,
        model=CAREFUL,
        trial=1,
        position=2,
        status=FAILED,
        transcript=[user(0, "a later trial")],
    )
    store(hasty, CANCELLED_STRAIGHT_AWAY, [])
    store(careful, LOOKED_UP, [])
    response, html = page(admin_client, f"/runs/{run.pk}/results/{careful.pk}/models/")
    assert response.status_code == 200
    assert f"{FIRST}: every model of run #{run.pk} (trial 1)" in words(html)
    assert re.findall(r'<div class="sbs-head" data-column="([^"]+)">', html) == [HASTY, CAREFUL]
    assert "a later trial" not in html
    summary = words(re.search(r'<div class="divergence-summary".*?</div>', html, re.S).group(0))
    assert summary.startswith("First divergence: Turn 0, messages and tool calls, step 2:")
    assert f"{CAREFUL}: added a step {HASTY} did not take: called lookup_order" in summary
    assert f'href="/runs/{run.pk}/results/{hasty.pk}/"' in html and "this result" in html


def test_it_says_when_only_one_model_ran_the_case(admin_client, flipped_pair):
    _, now = flipped_pair
    _, html = page(admin_client, f"/runs/{now.run_id}/results/{now.pk}/models/")
    assert f"Only {CAREFUL} ran “{FIRST}” in run #{now.run_id}." in words(html)
    assert 'class="sbs-head"' not in html


def test_it_sends_anonymous_visitors_to_log_in_and_answers_404_for_a_result_of_another_run(
    client, admin_client, flipped_pair
):
    was, now = flipped_pair
    for url in (f"/runs/{now.run_id}/results/{now.pk}/side-by-side/", f"/runs/{now.run_id}/results/{now.pk}/models/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/?next=")
    assert admin_client.get(f"/runs/{was.run_id}/results/{now.pk}/side-by-side/").status_code == 404
    assert admin_client.get(f"/runs/{was.run_id}/results/{now.pk}/models/").status_code == 404


def test_it_names_the_argument_or_the_result_field_that_differs(admin_client, flipped_pair):
    was, now = flipped_pair
    # A case edit changed the look-up's mock: the same calls, in the same order, one result differs in one field.
    delivered = [
        user(0, ASK),
        *called(0, "c1", "lookup_order", {"order_id": "1043"}, {"status": "delivered"}),
        *called(0, "c2", "cancel_order", {"order_id": "1043"}, {"cancelled": True}),
        said(0, "Order 1043 is cancelled."),
        user(1, "Thanks!"),
        said(1, "You're welcome."),
    ]
    store(now, delivered, was.assertions)
    _, html = page(admin_client, f"/runs/{now.run_id}/results/{now.pk}/side-by-side/")
    what = re.findall(r"<li data-divergence-what>(.*?)</li>", html)
    assert what == [f"Run #{now.run_id} · {CAREFUL}: got a different result from lookup_order (status)"]
    assert re.findall(r'data-difference="([\w-]+)">', html) == ["different-result"]

    other_order = [*LOOKED_UP[:1], *called(0, "c1", "lookup_order", {"order_id": "1044"}, {"status": "processing"}),
                   *LOOKED_UP[3:]]
    store(now, other_order, was.assertions)
    _, html = page(admin_client, f"/runs/{now.run_id}/results/{now.pk}/side-by-side/")
    what = re.findall(r"<li data-divergence-what>(.*?)</li>", html)
    assert what == [f"Run #{now.run_id} · {CAREFUL}: called lookup_order with different arguments (order_id)"]


def _assert_one_row_differs_for_one_call_left_out_and_one_put_in(calls: list[str], left_out: int, put_in: int) -> None:
    def transcript(names: list[str]) -> list[dict[str, Any]]:
        rows = [user(0, ASK)]
        for index, name in enumerate(names):
            rows += called(0, f"c{index}", name, {"order_id": "1043"}, {"ok": True})
        return [*rows, said(0, "Done.")]

    fewer = calls[:left_out] + calls[left_out + 1:]
    more = calls[:put_in] + ["escalate"] + calls[put_in:]
    base = CaseResult(pk=1, run_id=1, model=CAREFUL, transcript=transcript(calls))

    for other, expected in ((fewer, ["skipped"]), (more, ["added"])):
        columns = [Column(base), Column(CaseResult(pk=2, run_id=2, model=CAREFUL, transcript=transcript(other)))]
        turns, divergence = aligned(columns)
        rows = turns[0].blocks[0].rows
        assert [step.difference for row in rows for step in row.steps if step.difference] == expected
        assert divergence is not None and divergence.row.steps[1].difference == expected[0]


@settings(max_examples=40, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(
    calls=st.lists(st.sampled_from(["lookup_order", "cancel_order", "refund", "email"]), min_size=1, max_size=8),
    data=st.data(),
)
def test_it_marks_one_skipped_and_one_added_row_for_one_call_left_out_and_one_put_in(calls, data):
    left_out = data.draw(st.integers(0, len(calls) - 1))
    put_in = data.draw(st.integers(0, len(calls) - 1))
    _assert_one_row_differs_for_one_call_left_out_and_one_put_in(calls, left_out, put_in)


def test_it_marks_one_skipped_row_where_the_longest_matching_block_lies_across_the_gap():
    # Found by the property above: matching the longest block first (difflib) read the cancel left out of
    # L L C L C L as one row added and two skipped.
    calls = ["lookup_order", "lookup_order", "cancel_order", "lookup_order", "cancel_order", "lookup_order"]
    _assert_one_row_differs_for_one_call_left_out_and_one_put_in(calls, left_out=2, put_in=0)
