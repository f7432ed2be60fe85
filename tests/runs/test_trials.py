"""Repeated trials: each case runs k times per model, and the comparison says how flaky each case is (pass rate over
trials, pass^k — all k passed — and stable-pass / stable-fail / flaky)."""

from __future__ import annotations

import csv
import io
import re
import statistics
import threading
import xml.etree.ElementTree as ET

import pytest

from agenthost.llm.scripted import Answer
from agenthost.models import Agent
from cases.models import Suite
from common.durations import format_ms
from runs.engine.numbers import format_cost
from runs.models import CaseResult, Run
from runs.selectors import FLAKY, STABLE_FAIL, STABLE_PASS, run_matrix, run_summary, run_trials
from runs.services import run_create, run_execute
from runs.web.junit import run_to_junit
from tests.runs.conftest import CAREFUL

SCRIPTED = "scripted:scripted"


class EveryThirdCallFails:
    """A scripted model that answers "ok", except every third call, when it answers "nope"."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, request) -> Answer:
        with self._lock:
            self.calls += 1
            number = self.calls
        return Answer("nope" if number % 3 == 0 else "ok")


@pytest.fixture
def flaky_suite(scripted_model, make_case) -> Suite:
    scripted_model.respond_with(EveryThirdCallFails())
    agent = Agent.objects.create(name="plain", instruction="Answer.", provider="scripted", model="scripted")
    suite = Suite.objects.create(name="flaky", agent=agent, case_timeout_seconds=20)
    make_case(suite, "a: flaky", turns=("hi",), mocks=(),
              assertions=({"type": "outputContains", "params": {"text": "ok"}},))
    make_case(suite, "b: always passes", turns=("hi",), mocks=(),
              assertions=({"type": "outputNotContains", "params": {"text": "zzz"}},))
    make_case(suite, "c: always fails", turns=("hi",), mocks=(),
              assertions=({"type": "outputContains", "params": {"text": "never"}},))
    return suite


@pytest.mark.django_db(transaction=True)
def test_it_labels_each_case_over_its_trials_and_computes_pass_k(flaky_suite, scripted_model, admin_client):
    run = run_execute(run_id=run_create(suite=flaky_suite, model_keys=[SCRIPTED], trials=3).pk)

    assert run.total == 9 and run.done == 9
    # Case-major, trials innermost: each case gets calls 3n+1..3n+3, so its third trial is the failing call.
    trials = {t.case_name: t for t in run_trials(run=run)}
    assert [(t.statuses, t.pass_rate, t.pass_all, t.label) for t in trials.values()] == [
        (["passed", "passed", "failed"], pytest.approx(2 / 3), False, FLAKY),
        (["passed", "passed", "passed"], 1.0, True, STABLE_PASS),
        (["failed", "failed", "failed"], 0.0, False, STABLE_FAIL),
    ]
    summary = run_summary(run=run)[0]
    assert (summary.mode, summary.trials, summary.cases) == ("live", 3, 3)
    assert summary.pass_rate == pytest.approx(5 / 9)
    assert summary.pass_k == pytest.approx(1 / 3)
    assert (summary.stable_pass, summary.stable_fail, summary.flaky) == (1, 1, 1)
    assert summary.as_dict()["pass_k"] == pytest.approx(1 / 3)
    cells = {row["case_name"]: row["cells"][SCRIPTED] for row in run_matrix(run=run)}
    assert cells["a: flaky"]["stability"] == FLAKY and cells["a: flaky"]["trials"] == ["passed", "passed", "failed"]
    assert cells["c: always fails"]["stability"] == STABLE_FAIL

    junit = ET.fromstring(run_to_junit(run))
    flaky_cases = [case for case in junit.iter("testcase")
                   if case.find("properties/property[@name='flaky']") is not None]
    assert {case.get("name") for case in flaky_cases} == {f"a: flaky (trial {n} of 3)" for n in (1, 2, 3)}
    failing = [case.find("failure") for case in flaky_cases if case.find("failure") is not None]
    assert [(f.get("type"), f.get("message")[:32]) for f in failing] == [("Flaky", "flaky: passed 2 of 3 trials — ou")]
    stable_fail = [case.find("failure") for case in junit.iter("testcase") if case.get("name").startswith("c:")]
    assert {f.get("type") for f in stable_fail} == {"AssertionFailed"}

    # The matrix CSV: a row per case and trial, each with its own result and its own link.
    rows = list(csv.reader(io.StringIO(admin_client.get(f"/runs/{run.pk}/matrix.csv").content.decode())))
    header, *lines = rows
    column = {name: header.index(name) for name in ("case", "trial", f"{SCRIPTED} status", f"{SCRIPTED} result_url")}
    base = f"http://testserver/runs/{run.pk}/results/"
    results = {(r.case_name, r.trial + 1): r for r in run.results.all()}
    assert len(lines) == len(results) == 9
    assert [
        (line[column["case"]], int(line[column["trial"]]), line[column[f"{SCRIPTED} status"]],
         line[column[f"{SCRIPTED} result_url"]]) for line in lines
    ] == [
        (name, trial, results[(name, trial)].status, f"{base}{results[(name, trial)].pk}/")
        for name in ("a: flaky", "b: always passes", "c: always fails") for trial in (1, 2, 3)
    ]
    assert [line[column[f"{SCRIPTED} status"]] for line in lines[:3]] == ["passed", "passed", "failed"]

    # The run page: each trials cell gives its times too, as the legend says; "Run again" keeps the 3 trials.
    page = admin_client.get(f"/runs/{run.pk}/").content.decode()
    assert "each the median over the trials that ran" in page
    assert re.findall(r'class="cell-times">([^<]*)<', page) == [
        f"{passed}/3 passed · pass^3 {mark} · {format_cost(sum(r.total_cost for r in same))} · case "
        f"{format_ms(statistics.median(r.duration_ms for r in same))} · model "
        f"{format_ms(statistics.median(r.model_latency_ms for r in same))}"
        for passed, mark, same in (
            (2, "✗", [results[("a: flaky", t)] for t in (1, 2, 3)]),
            (3, "✓", [results[("b: always passes", t)] for t in (1, 2, 3)]),
            (0, "✗", [results[("c: always fails", t)] for t in (1, 2, 3)]),
        )
    ]
    again = re.search(r'href="(/runs/new/\?[^"]+)">Run again', page).group(1).replace("&amp;", "&")
    form = admin_client.get(again).content.decode()
    assert re.search(r'<input type="number" name="trials" value="3"', form), again
    assert junit.find("testsuite/properties/property[@name='flaky']").get("value") == "3"


@pytest.mark.django_db
def test_it_labels_only_cases_whose_trials_all_ran(order_suite):
    first, second = order_suite.cases.order_by("name")
    run = Run.objects.create(suite=order_suite, model_keys=[CAREFUL], trials=2, total=4)
    rows = [(first, 0, "passed"), (first, 1, "cancelled"), (second, 0, "error"), (second, 1, "passed")]
    for position, (case, trial, status) in enumerate(rows):
        CaseResult.objects.create(run=run, case=case, case_name=case.name, model=CAREFUL, trial=trial,
                                  position=position, status=status)

    unfinished, flaky = run_trials(run=run)

    assert (unfinished.ran, unfinished.label, unfinished.pass_all) == (1, "", False)
    assert (flaky.ran, flaky.errored, flaky.label) == (2, 1, FLAKY)
    summary = run_summary(run=run)[0]
    assert (summary.cases, summary.flaky, summary.pass_k) == (1, 1, 0.0)
    rows = run_matrix(run=run)
    assert (rows[0]["cells"][CAREFUL]["stability"], rows[1]["cells"][CAREFUL]["stability"]) == ("", FLAKY)
    assert rows[1]["any_failure"] is True
