"""`manage.py run_suite`: a suite run from the command line, its progress, comparison table, JUnit file and exit code.

Cases run for real on the scripted models of the order desk (tests/runs/conftest.py); only the model is scripted, the
harness is not.
"""

from __future__ import annotations

import re
import threading
import xml.etree.ElementTree as ET
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from agenthost.llm.scripted import Answer, Call
from cases.models import Suite
from runs.models import CaseResult, Run
from runs.services import run_bless
from tests.runs.conftest import CAREFUL, HASTY

pytestmark = pytest.mark.django_db(transaction=True)

# How long a gate waits for the step it waits on before the test fails: never reached unless the behaviour broke.
GATE_SECONDS = 60


@pytest.fixture
def order_agent(order_agent, order_desk):
    """The order desk on the careful model, which a run without --models runs on."""
    order_agent.provider, order_agent.model = CAREFUL.split(":")
    order_agent.save()
    return order_agent


def run_suite(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) as a shell would see them."""
    out, err = StringIO(), StringIO()
    try:
        call_command("run_suite", *args, stdout=out, stderr=err, no_color=True)
    except SystemExit as exc:
        return int(exc.code), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def table_row(output: str, model: str) -> list[str]:
    return next(line.split() for line in output.splitlines() if line.startswith(model))


def test_it_exits_0_on_the_agents_own_model_when_every_case_passes(make_suite, make_case):
    suite = make_suite()
    make_case(suite, "cancels the order", assertions=({"type": "toolCalled", "params": {"function": "cancel_order"}},))

    code, out, err = run_suite("orders", "--inline")

    assert (code, err) == (0, "")
    run = Run.objects.get()
    assert run.model_keys == [CAREFUL] and run.status == Run.Status.PASSED
    assert f"[1/1] PASSED  cancels the order  on {CAREFUL}  (" in out
    assert table_row(out, CAREFUL)[:6] == [CAREFUL, "100%", "1", "0", "0", "0"]
    assert f"Run #{run.pk} Passed: all 1 results passed" in out


def test_it_compares_with_the_blessed_run_by_default_and_names_what_broke(order_suite):
    run_suite("orders", "--models", CAREFUL, "--inline")
    blessed = run_bless(run=Run.objects.get())
    run_suite("orders", "--models", HASTY, "--inline")
    # The suite now blocks the look-up its cases mock: on the careful model the look-up case breaks, for that reason.
    Suite.objects.filter(pk=order_suite.pk).update(force_blocked_functions=["lookup_order"])
    code, out, _ = run_suite("orders", "--models", f"{CAREFUL},{HASTY}", "--inline")

    assert code == 1
    assert f"Compared with run #{blessed.pk} (the blessed baseline):" in out
    assert f"  {CAREFUL}: pass rate 100% → 0% (−100.0 pts); 2 pass → fail" in out
    assert (
        "    pass → fail  looks the order up first: lookup_order is force-blocked by the suite (it has a mock; "
        "remove it from the suite's force-blocked functions to let the mock answer)"
    ) in out
    assert f"  {HASTY}: pass rate — → 50%; 2 new" in out
    code, out, _ = run_suite("orders", "--models", CAREFUL, "--inline", "--baseline", "99999")
    assert "No comparison: there is no run #99999." in out


def test_it_exits_1_and_compares_the_models_when_one_fails_a_case(order_suite, tmp_path):
    junit = tmp_path / "report.xml"

    code, out, err = run_suite("orders", "--models", f"{CAREFUL},{HASTY}", "--inline", "--junit", str(junit))

    assert code == 1 and err == ""
    assert f"FAILED  looks the order up first  on {HASTY}" in out
    assert "lookup_order was not called; calls made: cancel_order" in out
    assert out.count("PASSED  ") == 3
    header = next(line for line in out.splitlines() if line.startswith("model"))
    assert header.split()[:3] == ["model", "pass", "rate"]
    assert header.endswith("ms  tokens (incl. judge)  cost (incl. judge)")
    careful, hasty = table_row(out, CAREFUL), table_row(out, HASTY)
    assert careful[1:6] == ["100%", "2", "0", "0", "0"]
    assert hasty[1:6] == ["50%", "1", "1", "0", "0"]
    assert int(careful[8].replace(",", "")) > 0 and careful[9] == "$0", "a model of a free kind is free, not unpriced"
    assert "Failed: 1 of 4 results failed" in out

    root = ET.parse(junit).getroot()
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    assert set(suites) == {f"orders on {CAREFUL}", f"orders on {HASTY}"}
    hasty_suite = suites[f"orders on {HASTY}"]
    assert (hasty_suite.get("tests"), hasty_suite.get("failures"), hasty_suite.get("errors")) == ("2", "1", "0")
    failure = hasty_suite.find("testcase[@name='looks the order up first']/failure")
    assert "lookup_order was not called" in failure.get("message")
    assert suites[f"orders on {CAREFUL}"].get("failures") == "0"


def test_it_exits_2_when_a_case_errors_even_if_another_only_failed(order_suite, make_case):
    make_case(
        order_suite, "is polite",
        assertions=({"type": "llmJudge", "params": {"criterion": "The reply is polite."}},),
    )

    code, out, _ = run_suite("orders", "--models", f"{CAREFUL},{HASTY}", "--inline")

    assert code == 2
    assert f"ERROR  is polite  on {CAREFUL}" in out
    assert "no judge model is configured on the suite" in out
    assert Run.objects.get().status == Run.Status.ERROR
    assert "Error: 2 of 6 results are Error" in out


def test_it_writes_error_cases_to_junit_with_the_reason(make_suite, make_case, tmp_path):
    suite = make_suite()
    make_case(suite, "says nothing", turns=())
    junit = tmp_path / "report.xml"

    code, _, _ = run_suite(str(suite.pk), "--inline", "--junit", str(junit))

    assert code == 2
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("errors"), root.get("failures")) == ("1", "1", "0")
    error = root.find("testsuite/testcase[@name='says nothing']/error")
    assert error.get("message") == "the case has no turns, so it would verify nothing"


def test_it_runs_only_the_cases_the_filter_selects(order_suite):
    code, out, _ = run_suite("orders", "--models", HASTY, "--cases", "CANCELS", "--inline")

    assert code == 0
    assert list(CaseResult.objects.values_list("case_name", flat=True)) == ["cancels the order"]
    assert f"[1/1] PASSED  cancels the order  on {HASTY}" in out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["nope", "--inline"], "no suite with the name or id 'nope'; suites: orders"),
        (["orders", "--models", "scripted:nope", "--inline"], "error: models: model 'scripted:nope' is not"),
        (["orders", "--models", f"{CAREFUL},{CAREFUL}", "--inline"], "is listed twice"),
        (["orders", "--cases", "refund", "--inline"], "error: case_filter: the case filter 'refund' selects no"),
        (["orders", "--junit", "out.xml"], "--junit and --timeout need --wait or --inline"),
        (["orders", "--inline", "--timeout", "0"], "--timeout must be a positive number of seconds"),
        (["orders", "--inline", "--trials", "0"], "error: trials: trials must be a whole number from 1 to"),
    ],
)
def test_it_exits_2_with_a_message_on_bad_arguments_and_starts_nothing(order_suite, arguments, message):
    code, out, err = run_suite(*arguments)

    assert code == 2
    assert message in err
    assert out == ""
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--trials", "٣"], "argument --trials: must be a whole number written with the digits 0-9, e.g. 3"),
        (["--budget-tokens", "١٠"], "argument --budget-tokens: must be a whole number written with the digits 0-9"),
        (["--budget-cost", "١"], "argument --budget-cost: '١' is not an amount of money"),
        (["--resume", "٣"], "argument --resume: must be a whole number written with the digits 0-9"),
    ],
)
def test_it_reads_numbers_on_the_command_line_as_every_api_does(order_suite, arguments, message):
    # int() read "٣" as 3 and started a run of 3 trials; argparse's own error is exit 2 in a shell.
    with pytest.raises(CommandError, match=re.escape(message)):
        run_suite("orders", "--inline", *arguments)

    assert not Run.objects.exists()


def test_it_refuses_a_disabled_suite(order_suite):
    order_suite.enabled = False
    order_suite.save()

    code, _, err = run_suite("orders", "--inline")

    assert code == 2 and "suite 'orders' is disabled" in err
    assert not Run.objects.exists()


def test_it_exits_2_when_the_run_queue_is_unavailable(order_suite, dead_run_queue):
    code, out, err = run_suite("orders", "--wait")

    assert code == 2
    assert "the run queue is unavailable" in err and "redis://127.0.0.1:1/0" in err
    assert not Run.objects.exists()


def test_it_queues_a_run_and_exits_0_without_waiting(order_suite, run_queue):
    code, out, err = run_suite("orders", "--models", f"{CAREFUL},{HASTY}")

    assert (code, err) == (0, "")
    run = Run.objects.get()
    assert out.strip() == f"Queued run #{run.pk} of suite 'orders': 2 case(s) × 2 model(s) = 4 result(s)."
    assert run.model_keys == [CAREFUL, HASTY]


def test_it_follows_a_queued_run_and_exits_with_its_verdict(order_suite, run_queue, tmp_path):
    junit = tmp_path / "report.xml"

    code, out, _ = run_suite("orders", "--models", f"{CAREFUL},{HASTY}", "--wait", "--junit", str(junit))

    assert code == 1
    assert f"[4/4] FAILED  looks the order up first  on {HASTY}" in out
    assert ET.parse(junit).getroot().get("failures") == "1"


class _Gate(StringIO):
    """An output stream that holds the command at its first write containing `holds_at` until `opens` is set, and
    sets `on` once `sets_at` is written: the test decides when the command gets there, not the machine's speed."""

    def __init__(self, *, holds_at: str = "", opens: threading.Event | None = None, sets_at: str = "",
                 on: threading.Event | None = None) -> None:
        super().__init__()
        self.holds_at, self.opens, self.sets_at, self.on = holds_at, opens, sets_at, on

    def write(self, text: str) -> int:
        if self.opens is not None and self.holds_at and self.holds_at in text:
            assert self.opens.wait(GATE_SECONDS), f"never let through: {text!r}"
        written = super().write(text)
        if self.on is not None and self.sets_at and self.sets_at in text:
            self.on.set()
        return written


def test_it_cancels_the_run_when_the_timeout_passes(make_suite, make_case, scripted_model, tmp_path):
    # The timeout's clock starts once the first case is in progress (the command's header waits for the model's
    # first request), and the model answers only once the command has asked to cancel: however slow the machine,
    # the timeout passes during the first case, which is kept, and the two after it never start.
    in_progress, cancel_asked = threading.Event(), threading.Event()

    def answer(request):
        if request.messages[-1]["role"] == "tool":
            return "Order 1043 is cancelled."
        in_progress.set()
        assert cancel_asked.wait(GATE_SECONDS), "the command never asked to cancel"
        return Answer(tool_calls=[Call("cancel_order", {"order_id": "1043"})])

    scripted_model.respond_with(answer)
    suite = make_suite()
    for number in range(3):
        make_case(
            suite, f"cancels the order {number}",
            assertions=({"type": "toolCalled", "params": {"function": "cancel_order"}},),
        )
    junit = tmp_path / "report.xml"
    out = _Gate(holds_at="executing in this process", opens=in_progress)
    err = _Gate(sets_at="cancellation requested", on=cancel_asked)

    with pytest.raises(SystemExit) as exited:
        call_command(
            "run_suite", "orders", "--models", scripted_model.key, "--inline", "--timeout", "0.5",
            "--junit", str(junit), stdout=out, stderr=err, no_color=True,
        )

    assert exited.value.code == 2
    assert "still running after 0.5 s: cancellation requested" in err.getvalue()
    run = Run.objects.get()
    assert run.status == Run.Status.CANCELLED
    assert (run.passed, run.cancelled, run.done) == (1, 2, 3)
    assert len(scripted_model.requests) == 2  # the two after the first case never reached the model
    output = out.getvalue()
    assert "[1/3] PASSED  cancels the order 0" in output
    assert "CANCELLED  cancels the order 1" in output and "CANCELLED  cancels the order 2" in output
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("skipped")) == ("3", "2")


def test_it_repeats_cases_for_each_trial(order_suite, tmp_path):
    junit = tmp_path / "report.xml"

    code, out, _ = run_suite("orders", "--cases", "up first", "--trials", "2", "--inline", "--junit", str(junit))

    assert code == 0
    assert "1 case(s) × 1 model(s) × 2 trials = 2 result(s)" in out
    assert f"[2/2] PASSED  looks the order up first (trial 2 of 2)  on {CAREFUL}" in out
    header = next(line for line in out.splitlines() if line.startswith("model")).split()
    assert header[:2] == ["model", "pass@1"] and header[-5:] == ["pass^2", "flaky", "cost", "per", "trial"]
    # pass^2, flaky cases, and what one trial of the suite cost (the careful model is free).
    assert table_row(out, CAREFUL)[-3:] == ["100%", "0", "$0"]
    names = [case.get("name") for case in ET.parse(junit).getroot().iter("testcase")]
    assert names == ["looks the order up first (trial 1 of 2)", "looks the order up first (trial 2 of 2)"]


def test_it_stops_a_run_that_exhausts_its_token_budget(order_suite):
    code, out, _ = run_suite("orders", "--budget-tokens", "1", "--inline")

    assert code == 2
    run = Run.objects.get()
    assert (run.status, run.done, run.total) == (Run.Status.ERROR, 1, 2)
    assert "budget exhausted after 1 of 2 results" in out


def test_it_records_a_run_and_replays_it_with_the_same_verdicts(order_suite, settings):
    recorded, out, _ = run_suite("orders", "--models", f"{CAREFUL},{HASTY}", "--mode", "record", "--inline")
    assert recorded == 1 and "record mode" in out
    # The replay machine has no scripted provider at all: every answer comes from the recordings.
    settings.AGENTTEST_PROVIDERS = {}

    replayed, out, err = run_suite("orders", "--models", f"{CAREFUL},{HASTY}", "--mode", "replay", "--inline")

    assert (replayed, err) == (1, "")
    assert f"[4/4] FAILED  looks the order up first  on {HASTY}" in out
    assert "cost: replayed from recordings" in out
    first, second = Run.objects.order_by("pk")
    assert [(r.case_name, r.model, r.status) for r in first.results.order_by("position")] == [
        (r.case_name, r.model, r.status) for r in second.results.order_by("position")
    ]
