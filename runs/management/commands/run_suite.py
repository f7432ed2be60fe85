"""Run a suite from the command line or CI: `run_suite SUITE [--models provider:model,...] [--cases FILTER]
[--wait] [--inline] [--junit FILE] [--timeout SECONDS] [--baseline RUN]`,
or `run_suite --resume RUN [--inline|--wait]`.

After the per-model table it compares the run with a baseline: the suite's blessed run by default, else the previous
run (`--baseline RUN` picks one), and lists per model what flipped, with the reason.

Exit codes: 0 the run passed; 1 a case failed (and none errored); 2 anything else — a run or case Error, a
cancelled or unfinished run, bad arguments, an unavailable run queue — so CI can tell "the agent regressed" (1) from
"the harness could not judge" (2).
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
import time
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from cases.models import Suite
from cases.selectors import suite_by_reference, suite_list
from common.inputs import number_text_is_ascii, whole_number_argument
from runs.engine.case_runner import CASE_THREAD_PREFIX
from runs.engine.numbers import format_cost, format_pass_rate, models_priced
from runs.models import CaseResult, Run
from runs.selectors import ModelSummary, run_lock_holder, run_summary
from runs.services import (
    Lease,
    RunConflict,
    RunError,
    RunLocked,
    run_cancel,
    run_claim,
    run_create,
    run_delete,
    run_execute,
    run_prepare_resume,
    run_resume,
    run_trigger,
)
from runs.web.comparison import BROKE, FIXED, ComparisonError, baseline_get, default_baseline, run_compare
from runs.web.junit import run_to_junit

EXIT_PASSED, EXIT_FAILED, EXIT_ERROR = 0, 1, 2
POLL_SECONDS = 0.3


class ExitsWhenDone:
    """A command run from the command line (`agenttest run`, `run_suite --inline`) that exits once its results are
    written, even when the team's code never returned: a case past its deadline leaves its thread behind
    (case_runner), and the interpreter would wait for that thread at exit for ever — CI hanging, the exit code lost.
    Only from the command line: call_command in a caller's process returns as always."""

    def run_from_argv(self, argv: list[str]) -> None:
        try:
            super().run_from_argv(argv)  # type: ignore[misc]
            code = EXIT_PASSED
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (EXIT_PASSED if exc.code is None else EXIT_ERROR)
        # A case thread is a daemon when the run's own thread (inline) started it, and joined at exit all the same
        # (concurrent.futures), so it is looked for by name too.
        left = [thread.name for thread in threading.enumerate()
                if thread is not threading.main_thread() and thread.is_alive()
                and (not thread.daemon or thread.name.startswith(CASE_THREAD_PREFIX))]
        if not left:
            raise SystemExit(code)
        sys.stderr.write(f"Exiting with threads still running past their case's deadline ({', '.join(left)}).\n")
        sys.stdout.flush()
        sys.stderr.flush()
        # What an ordinary exit would do after joining the threads (the scratch directory of `run`, logging).
        atexit._run_exitfuncs()
        os._exit(code)


class _Abort(Exception):
    """Stops the command with a message on stderr and exit code 2."""


def _exit_code(run: Run) -> int:
    if run.status == Run.Status.PASSED:
        return EXIT_PASSED
    if run.status == Run.Status.FAILED and not run.errored:
        return EXIT_FAILED
    return EXIT_ERROR


def _millis(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _amount(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or not number_text_is_ascii(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount of money, e.g. 0.50")
    return value


def _pass_rate_change(before: float | None, after: float | None) -> str:
    if before is None or after is None:
        return f"{format_pass_rate(before)} → {format_pass_rate(after)}"
    points = (after - before) * 100
    change = f"{'+' if points >= 0 else '−'}{abs(points):.1f} pts"
    return f"{format_pass_rate(before)} → {format_pass_rate(after)} ({change})"


class Command(ExitsWhenDone, BaseCommand):
    help = (
        "Run a suite's enabled cases on one or more models. Without --wait or --inline the run is queued for the "
        "runs worker and its id printed. Exit code: 0 passed, 1 a case failed, 2 an error (run or case Error, "
        "cancelled or unfinished run, bad arguments, queue unavailable)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("suite", nargs="?", default="", help="The suite's name or id (not with --resume).")
        parser.add_argument(
            "--resume", type=whole_number_argument, metavar="RUN",
            help="Resume run RUN (ended in Error or Cancelled): only the case × model pairs without a result run.",
        )
        parser.add_argument(
            "--models", default="", help="Comma-separated provider:model keys; default: the suite agent's own model."
        )
        parser.add_argument("--cases", default="", help="Case filter: a name substring, or tag:<tag>.")
        parser.add_argument(
            "--mode", choices=Run.Mode.values, default=Run.Mode.LIVE,
            help="live: call the models; record: call them and keep every answer; replay: serve recorded answers "
            "(no key, no network).",
        )
        parser.add_argument(
            "--trials", type=whole_number_argument, default=1, help="Run each case this many times on each model."
        )
        parser.add_argument(
            "--budget-tokens", type=whole_number_argument, help="Stop the run once its results used this many tokens."
        )
        parser.add_argument("--budget-cost", type=_amount, help="Stop the run once its results cost this much.")
        parser.add_argument("--wait", action="store_true", help="Queue the run, then follow it until it finishes.")
        parser.add_argument(
            "--inline", action="store_true",
            help="Execute the run in this process, serially, through the same runner as the worker (no broker).",
        )
        parser.add_argument("--junit", metavar="FILE", help="Write the results as JUnit XML (with --wait/--inline).")
        parser.add_argument(
            "--baseline", type=whole_number_argument, metavar="RUN",
            help="Compare with run RUN (an earlier run of the suite); default: the suite's blessed run, else the "
            "previous run.",
        )
        parser.add_argument(
            "--timeout", type=float, metavar="SECONDS",
            help="Stop waiting after this long and cancel the run (with --wait/--inline); exit code 2.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            code = self._handle(options)
        except (_Abort, RunError) as exc:
            field = getattr(exc, "field", "")
            self.stderr.write(f"error: {field}: {exc}" if field else f"error: {exc}")
            code = EXIT_ERROR
        if code != EXIT_PASSED:
            raise SystemExit(code)

    def _handle(self, options: dict[str, Any]) -> int:
        follow = options["wait"] or options["inline"]
        if not follow and (options["junit"] or options["timeout"] is not None):
            raise _Abort("--junit and --timeout need --wait or --inline")
        if options["timeout"] is not None and options["timeout"] <= 0:
            raise _Abort("--timeout must be a positive number of seconds")
        if options["resume"] is not None:
            return self._resume(options, follow)
        if not options["suite"]:
            raise _Abort("name the suite to run (or --resume RUN)")
        suite = self._suite(options["suite"])
        model_keys = [key.strip() for key in options["models"].split(",") if key.strip()] or [suite.agent.model_key]
        arguments = {
            "suite": suite, "model_keys": model_keys, "case_filter": options["cases"], "mode": options["mode"],
            "trials": options["trials"], "budget_tokens": options["budget_tokens"],
            "budget_cost": options["budget_cost"],
        }
        if options["inline"]:
            self._refuse_while_locked(suite.isolation_group)
            run = run_create(**arguments)
            try:
                lease = run_claim(run_id=run.pk, in_order=False)
            except RunLocked:
                # Another executor took the lock since the check: this run never started, so it leaves nothing.
                run_delete(runs=[run])
                raise
            worker = _InlineRun(run.pk, lease)
            worker.start()
        else:
            run = run_trigger(**arguments)
            worker = None
        shape = f"{len(run.case_ids)} case(s) × {len(model_keys)} model(s)"
        if run.trials > 1:
            shape += f" × {run.trials} trials"
        shape += f" = {run.total} result(s)"
        if not follow:
            self.stdout.write(f"Queued run #{run.pk} of suite {suite.name!r}: {shape}.")
            return EXIT_PASSED
        how = "executing in this process" if worker else "queued; waiting for the runs worker"
        if run.mode != Run.Mode.LIVE:
            how = f"{run.get_mode_display().lower()} mode, {how}"
        self.stdout.write(f"Run #{run.pk} of suite {suite.name!r}: {shape} ({how}).")
        return self._finish(run, worker, options)

    def _finish(self, run: Run, worker: _InlineRun | None, options: dict[str, Any]) -> int:
        run = self._follow(run, worker, options["timeout"])
        self._report(run)
        self._compare(run, options.get("baseline"))
        if options["junit"]:
            Path(options["junit"]).write_text(run_to_junit(run), encoding="utf-8")
            self.stdout.write(f"JUnit XML written to {options['junit']}.")
        return _exit_code(run)

    def _resume(self, options: dict[str, Any], follow: bool) -> int:
        run = Run.objects.select_related("suite").filter(pk=options["resume"]).first()
        if run is None:
            raise _Abort(f"there is no run #{options['resume']}")
        if options["inline"]:
            self._refuse_while_locked(run.isolation_group)
            run = run_prepare_resume(run=run)
            try:
                lease = run_claim(run_id=run.pk, in_order=False)
            except RunLocked as exc:
                raise _Abort(f"{exc}; run #{run.pk} stays Pending for the runs worker") from None
            inline = _InlineRun(run.pk, lease)
            inline.start()
            worker: _InlineRun | None = inline
        else:
            run = run_resume(run=run)
            worker = None
        kept = run.done
        if not follow:
            self.stdout.write(f"Queued run #{run.pk} again: {run.total - kept} of {run.total} result(s) to go.")
            return EXIT_PASSED
        self.stdout.write(f"Resuming run #{run.pk} of suite {run.suite.name!r}: {kept} of {run.total} results kept.")
        return self._finish(run, worker, options)

    @staticmethod
    def _refuse_while_locked(group: str) -> None:
        holder = run_lock_holder(group=group)
        if holder is not None:
            raise RunLocked(holder_id=holder.pk, started_at=holder.started_at)

    def _suite(self, reference: str) -> Suite:
        suites = suite_list()
        suite = suite_by_reference(reference, queryset=suites)
        if suite is None:
            known = ", ".join(suites.values_list("name", flat=True)) or "none"
            raise _Abort(f"no suite with the name or id {reference!r}; suites: {known}")
        return suite

    def _follow(self, run: Run, worker: _InlineRun | None, timeout: float | None) -> Run:
        """Print each result as it is written until the run finishes (and, inline, its thread has ended)."""
        deadline = time.monotonic() + timeout if timeout is not None else None
        last_id, shown, gave_up = 0, 0, False
        while True:
            # State before results: once the thread is seen ended or the status finished, every result is written.
            alive = worker.is_alive() if worker else False
            run.refresh_from_db()
            for result in CaseResult.objects.filter(run_id=run.pk, pk__gt=last_id).order_by("pk").only(
                "case_name", "model", "trial", "status", "reason", "duration_ms"
            ):
                shown += 1
                last_id = result.pk
                self._progress(result, shown, run)
            running = alive if worker else not run.is_finished
            if not running or (gave_up and worker is None):
                break
            try:
                if deadline is not None and not gave_up and time.monotonic() >= deadline:
                    gave_up = True
                    self._give_up(run, f"still {run.get_status_display().lower()} after {timeout:g} s")
                time.sleep(POLL_SECONDS)
            except KeyboardInterrupt:
                if gave_up:
                    raise
                gave_up = True
                self._give_up(run, "interrupted")
        if worker and worker.failure is not None:
            raise _Abort(f"run #{run.pk} stopped unexpectedly: {type(worker.failure).__name__}: {worker.failure}")
        run.refresh_from_db()
        return run

    def _give_up(self, run: Run, why: str) -> None:
        try:
            run = run_cancel(run=run)
        except RunConflict:
            return  # it finished in the meantime; nothing to cancel
        if run.is_finished:
            self.stderr.write(f"Run #{run.pk} {why}: cancelled.")
        else:
            self.stderr.write(f"Run #{run.pk} {why}: cancellation requested (it stops after the case in progress).")

    def _progress(self, result: CaseResult, number: int, run: Run) -> None:
        styles: dict[str, Callable[[str], str]] = {
            CaseResult.Status.PASSED: self.style.SUCCESS,
            CaseResult.Status.FAILED: self.style.ERROR,
            CaseResult.Status.ERROR: self.style.ERROR,
            CaseResult.Status.CANCELLED: self.style.WARNING,
        }
        label = styles.get(result.status, str)(result.status.upper())
        seconds = result.duration_ms / 1000
        trial = f" (trial {result.trial + 1} of {run.trials})" if run.trials > 1 else ""
        self.stdout.write(
            f"[{number}/{run.total}] {label}  {result.case_name}{trial}  on {result.model}  ({seconds:.1f} s)"
        )
        if result.status != CaseResult.Status.CANCELLED and result.reason:
            # A server's error lists one problem per line: each stays under its result.
            self.stdout.write("        " + result.reason.replace("\n", "\n          "))

    def _report(self, run: Run) -> None:
        header: tuple[str, ...] = (
            "model", "pass rate", "passed", "failed", "error", "cancelled", "p50 ms", "p95 ms",
            "tokens (incl. judge)", "cost (incl. judge)",
        )
        summaries = run_summary(run=run)
        priced = models_priced(summary.model for summary in summaries)
        rows = [self._row(summary, priced[summary.model] or run.mode == Run.Mode.REPLAY) for summary in summaries]
        if run.trials > 1:
            # Over repeated trials the pass rate (pass@1, every trial counted) hides flakiness: pass^k counts the cases
            # that passed every trial, and each of those certainties costs k trials.
            header = ("model", "pass@1", *header[2:], f"pass^{run.trials}", "flaky", "cost per trial")
            rows = [
                (*row, format_pass_rate(item.pass_k), str(item.flaky),
                 format_cost(item.trial_cost, priced=priced[item.model] or run.mode == Run.Mode.REPLAY))
                for row, item in zip(rows, summaries, strict=True)
            ]
        rows.insert(0, header)
        widths = [max(len(row[index]) for row in rows) for index in range(len(header))]
        self.stdout.write("")
        for row in rows:
            cells = [cell.rjust(width) for cell, width in zip(row, widths, strict=True)]
            cells[0] = row[0].ljust(widths[0])
            self.stdout.write("  ".join(cells).rstrip())
        for summary in summaries:
            if summary.unanswered:
                self.stdout.write(
                    f"{summary.model}: {summary.unanswered} result(s) without an answer from the model (not in "
                    "p50/p95)"
                )
        if summaries and summaries[0].cost_note:
            self.stdout.write(f"cost: {summaries[0].cost_note}")
        self.stdout.write("")
        status = run.get_status_display()
        if run.status == Run.Status.PASSED:
            style = self.style.SUCCESS
        else:
            style = self.style.WARNING if run.status == Run.Status.CANCELLED else self.style.ERROR
        self.stdout.write(style(f"Run #{run.pk} {status}") + (f": {run.reason}" if run.reason else ""))

    @staticmethod
    def _row(summary: ModelSummary, priced: bool = True) -> tuple[str, ...]:
        return (
            summary.model, format_pass_rate(summary.pass_rate), str(summary.passed), str(summary.failed),
            str(summary.errored), str(summary.cancelled), _millis(summary.latency_p50_ms),
            _millis(summary.latency_p95_ms), f"{summary.total_tokens:,}",
            format_cost(summary.total_cost, priced=priced),
        )

    def _compare(self, run: Run, baseline_id: int | None) -> None:
        """What flipped since the baseline (the suite's blessed run by default), per model, with the reasons."""
        if baseline_id is not None:
            try:
                baseline = baseline_get(run=run, baseline_id=baseline_id)
            except ComparisonError as exc:
                self.stdout.write(f"No comparison: {exc}.")
                return
            which = "the blessed baseline" if baseline.is_blessed else "chosen with --baseline"
        else:
            found = default_baseline(run=run)
            if found is None:
                return
            baseline = found
            which = "the blessed baseline" if baseline.is_blessed else "the previous run; none is blessed"
        self.stdout.write(f"Compared with run #{baseline.pk} ({which}):")
        before = {summary.model: summary for summary in run_summary(run=baseline)}
        after = {summary.model: summary for summary in run_summary(run=run)}
        for comparison in run_compare(run=run, baseline=baseline):
            old, new = before.get(comparison.model), after.get(comparison.model)
            rate = _pass_rate_change(old.pass_rate if old else None, new.pass_rate if new else None)
            counts = ", ".join(f"{len(flips)} {label}" for _, label, flips in comparison.sections() if flips)
            self.stdout.write(f"  {comparison.model}: pass rate {rate}; {counts or 'nothing flipped'}")
            for flip in comparison.flips[BROKE]:
                self.stdout.write(f"    pass → fail  {flip.case_name}: {flip.current_reason}")
            for flip in comparison.flips[FIXED]:
                self.stdout.write(f"    fail → pass  {flip.case_name}")


class _InlineRun(threading.Thread):
    """Executes a run through run_execute on its own thread, so the command can print progress meanwhile."""

    def __init__(self, run_id: int, lease: Lease | None) -> None:
        super().__init__(name=f"agenttest-run-{run_id}", daemon=True)
        self.run_id = run_id
        self.lease = lease
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            run_execute(run_id=self.run_id, lease=self.lease)
        except BaseException as exc:  # reported by the command; the thread must not die silently
            self.failure = exc
        finally:
            connection.close()
