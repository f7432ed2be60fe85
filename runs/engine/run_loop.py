"""The loop of a run, under its executor's lease: every pending case × model × trial in case-major order, each
executed in the run's mode (live, record, replay) and stored as soon as it finishes, with the lease, the budget
and a cancel checked before each starts.

A hermetic suite may run up to `case_concurrency` pairs at once (CaseSlots). Each pair's position is fixed when it
starts, so its results read in the serial order (JUnit, the matrix) however the pairs finish; this thread alone
stores results, and it stores everything that finished before it checks the budget and a cancel, so nothing new
starts once either says stop, and what the pairs in flight used is counted before the verdict."""

from __future__ import annotations

import functools
import queue
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from decimal import Decimal
from typing import Any

from agenthost.seams import ModelConfig, UnknownModel, providers_prepare, runtime_prepare
from cases.models import Case
from cases.validation.suites import suite_hermetic_problem
from runs.engine.budget import RunBudget, Spend
from runs.engine.case_runner import ERROR, CaseExecution, CaseWorker, execute_case
from runs.engine.durability import relaxed_commit
from runs.engine.leases import Lease, LeaseLost
from runs.engine.planning import model_config, pending_pairs, run_suite_plan
from runs.engine.plans import CasePlan, SuitePlan
from runs.engine.results import reconnecting, result_store, results_cancel_remaining, run_finish, run_verdict
from runs.engine.throttle import RunThrottles
from runs.models import CaseResult, Recording, Run
from runs.tapes.replay import Recorder, Replayer, Tape

# A pair to execute: the case, the model, the trial.
Pair = tuple[CasePlan, ModelConfig, int]
# A pair started, and where its result belongs in the run.
_Started = tuple[CasePlan, ModelConfig, int, int]
# A pair finished, its spend counted, with what it recorded: to be written before the next pair starts.
_Collected = tuple[CasePlan, ModelConfig, int, int, CaseExecution, list[dict[str, Any]] | None]


class RunLoop:
    """One run's pending pairs executed under `lease`, and its verdict; every write conditional on the lease.

    `run()` is the whole story: set up, then for each pair wait for room, check the lease, stop on the budget or a
    cancel, start it; store what is still in flight; write the verdict. The steps below it each do one of those."""

    def __init__(self, *, lease: Lease) -> None:
        self._lease = lease
        self._spent = Spend()
        # Started pairs whose result is not stored yet: their future, and where each belongs in the run.
        self._in_flight: dict[Future[Any], _Started] = {}
        # Finished pairs, their spend counted, whose result is not written yet: written before the next pair starts.
        self._collected: list[_Collected] = []

    def run(self) -> Run:
        """Execute the run's pending pairs and write its verdict."""
        refused = self._set_up()
        if refused is not None:
            return refused
        try:
            for plan, model, trial in self._pending:
                # Whatever finished is counted, and then stored, before anything new starts.
                self._wait_for_room(room_for=self._concurrency)
                self._lease.check()
                stopped = self._stop_over_budget() or self._announce_or_cancel((plan, model, trial))
                if stopped is not None:
                    return stopped
                self._start((plan, model, trial))
            self._store_finished(room_for=1)
        finally:
            self._slots.close()
        return self._verdict()

    def _set_up(self) -> Run | None:
        """Read the run, its models, its cases and what its stored results used; the run's verdict when it cannot
        start, else None."""
        run = self._run = (
            Run.objects.select_related("suite__agent").prefetch_related("suite__agent__sub_agents").get(pk=self._lease.run_id)
        )
        self._replaying = run.mode == Run.Mode.REPLAY
        self._suite = run_suite_plan(run=run)
        try:
            models = [model_config(key=key, mode=run.mode) for key in run.model_keys]
        except UnknownModel as exc:
            return self._finish(Run.Status.ERROR, f"a model of this run is no longer configured: {exc}")
        if not Case.objects.filter(pk__in=run.case_ids).exists():
            return self._finish(Run.Status.ERROR, "none of the selected cases exists any more; nothing was run")
        done = self._read_stored()
        # Held before every model call of the run's cases, from what its stored results used (issue 37, item 7).
        self._budget = RunBudget(run, self._spent)
        self._position = self._stored = len(done)
        self._pending = pending_pairs(run=run, models=models, done=done)
        self._recordings = _recordings(run) if self._replaying else {}
        self._concurrency = _case_concurrency(run, self._suite)
        self._throttles = self._suite.throttles = RunThrottles(concurrency=self._concurrency)
        self._slots = CaseSlots(self._concurrency)
        if self._pending:
            # Before any case's clock starts: what the model providers and the agent's runtime load at a first call
            # or turn (a worker did the providers' before its pool forked; `agenttest run` and a command's run not).
            providers_prepare()
            runtime_prepare(run.suite.agent)
        return None

    def _read_stored(self) -> set[tuple[int | None, str, int]]:
        """The pairs with a stored result, their spend counted. Read under the lease: no other executor can add a
        result from here on, so no pair runs twice."""
        done: set[tuple[int | None, str, int]] = set()
        stored = CaseResult.objects.filter(run=self._run).values_list(
            "case_id", "model", "trial", "input_tokens", "output_tokens", "cost", "judge_input_tokens",
            "judge_output_tokens", "judge_cost",
        )
        for case_id, model_key, trial, tokens_in, tokens_out, cost, judge_in, judge_out, judge_cost in stored:
            done.add((case_id, model_key, trial))
            if not self._replaying:
                self._spent.add(
                    tokens_in + tokens_out + judge_in + judge_out, Decimal(cost or 0) + Decimal(judge_cost or 0)
                )
        return done

    def _collect_finished(self) -> None:
        """Count the spend of every pair finished by now and set it aside to be written; waits for none."""
        in_flight = self._in_flight
        for future in sorted((f for f in in_flight if f.done()), key=lambda f: in_flight[f][3]):
            plan, model, trial, at = in_flight.pop(future)
            execution, recorded = future.result()
            self._collected.append((plan, model, trial, at, execution, recorded))
            if not self._replaying:
                # A replay spends nothing: its recorded tokens count against no budget.
                self._spent.add(
                    execution.usage.total_tokens + execution.judge_usage.total_tokens,
                    Decimal(execution.cost or 0) + Decimal(execution.judge_cost or 0),
                )

    def _wait_for_room(self, *, room_for: int) -> None:
        """Collect finished pairs until fewer than `room_for` are in flight."""
        self._collect_finished()
        while len(self._in_flight) >= room_for:
            wait(self._in_flight, return_when=FIRST_COMPLETED)
            self._collect_finished()

    def _write_collected(self, *, current: str | None = None) -> bool:
        """Write the collected results in run order, each with its conversation and recording; the last also
        announces `current` unless a cancel was asked. Returns whether it announced it."""
        announced = False
        while self._collected:
            plan, model, trial, at, execution, recorded = self._collected[0]
            announced = reconnecting(
                result_store,
                run=self._run,
                lease=self._lease,
                plan=plan,
                model_key=model.key,
                trial=trial,
                position=at,
                execution=execution,
                recorded=recorded,
                current=current if len(self._collected) == 1 else None,
            )
            self._collected.pop(0)
            self._stored += 1
        if self._throttles.changed():
            self._lease.held().update(throttle=self._throttles.snapshot())
        return announced

    def _store_finished(self, *, room_for: int) -> None:
        """Write each pair as it finishes — a fast one is never held back by a slow one beside it — until fewer
        than `room_for` are in flight."""
        while True:
            self._collect_finished()
            self._write_collected()
            if len(self._in_flight) < room_for:
                return
            wait(self._in_flight, return_when=FIRST_COMPLETED)

    def _stop_over_budget(self) -> Run | None:
        """Once the budget is spent nothing new starts; the pairs in flight finish, and what they used is counted
        in the verdict. Spent by the stored results, or by the model calls of the pairs in flight, counted as each
        returns: a pair that finished first may hold less than the budget while others in flight crossed it."""
        if not (self._spent.exhausted(self._run) or self._budget.exhausted()):
            return None
        self._store_finished(room_for=1)
        over = self._spent.exhausted(self._run) or self._budget.exhausted()
        return self._finish(
            Run.Status.ERROR, f"budget exhausted after {self._stored} of {self._run.total} results: {over}"
        )

    def _announce_or_cancel(self, pair: Pair) -> Run | None:
        """Announce `pair` as the run's current one, or, when a cancel was asked, store what is in flight, cancel
        the rest and return the verdict."""
        plan, model, trial = pair
        trial_note = f" (trial {trial + 1} of {self._run.trials})" if self._run.trials > 1 else ""
        more = f"; {len(self._in_flight)} more in progress" if self._in_flight else ""
        if self._announce(f"{plan.name} on {model.key}{trial_note}{more}"):
            return None
        self._store_finished(room_for=1)
        results_cancel_remaining(
            run=self._run, lease=self._lease, pending=[pair, *self._pending], position=self._position
        )
        return self._finish(Run.Status.CANCELLED, f"cancelled after {self._stored} of {self._run.total} results")

    def _announce(self, current: str) -> bool:
        """One statement announces the next pair and checks for a cancel: nothing starts after one. The results
        before it are stored first, the last of them in that same statement. False: a cancel was asked."""
        if self._collected:
            return self._write_collected(current=current)
        # Losing a bare announcement in a crash loses nothing: its commit need not wait for the disk.
        with relaxed_commit():
            announced = bool(self._lease.held().filter(cancel_requested=False).update(current=current[:400]))
        if not announced and not self._lease.held().exists():
            raise LeaseLost(f"run #{self._run.pk} is no longer held by this executor")
        return announced

    def _start(self, pair: Pair) -> None:
        plan, model, trial = pair
        # The slot's worker is the one argument left: this pair's plan and model are bound now.
        future = self._slots.submit(
            functools.partial(_execute_pair, self._run, plan, model, self._suite, self._recordings, budget=self._budget)
        )
        self._in_flight[future] = (plan, model, trial, self._position)
        self._position += 1

    def _verdict(self) -> Run:
        """Every pair ran: Error when the budget ran out before the last result, else the results' verdict."""
        over = self._spent.exhausted(self._run)
        if over and self._stored < self._run.total:
            return self._finish(
                Run.Status.ERROR, f"budget exhausted after {self._stored} of {self._run.total} results: {over}"
            )
        status, reason = run_verdict(run=self._run)
        return self._finish(status, reason)

    def _finish(self, status: str, reason: str) -> Run:
        return run_finish(run=self._run, lease=self._lease, status=status, reason=reason)


def _case_concurrency(run: Run, suite_plan: SuitePlan) -> int:
    """How many pairs of the run execute at once: the suite's case concurrency while the suite is still hermetic
    (a function's declaration may have changed since the suite was saved; an extra-allowed MCP tool's annotations
    are taken from its server, listed live, never from the cache — a replay contacts no server for it, so such a
    suite replays one pair at a time); else one at a time."""
    wanted = max(1, run.suite.case_concurrency)
    live = suite_plan.mcp_live if run.mode != Run.Mode.REPLAY else None
    if wanted > 1 and suite_hermetic_problem(suite=run.suite, live=live):
        return 1
    return wanted


class CaseSlots:
    """Up to `size` case × model pairs at once. A pair runs on a slot thread that waits on its own CaseWorker — the
    case thread with its own database connection — so each case keeps its timeout; with one slot the pair runs on
    the calling thread, as a serial run always did."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._workers: queue.SimpleQueue[CaseWorker] = queue.SimpleQueue()
        for _ in range(size):
            self._workers.put(CaseWorker())
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="agenttest-slot") if size > 1 else None

    def submit(self, work: Callable[[CaseWorker], Any]) -> Future[Any]:
        if self._pool is None:
            future: Future[Any] = Future()
            future.set_result(self._with_worker(work))
            return future
        return self._pool.submit(self._with_worker, work)

    def _with_worker(self, work: Callable[[CaseWorker], Any]) -> Any:
        worker = self._workers.get()
        try:
            return work(worker)
        finally:
            self._workers.put(worker)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for _ in range(self._size):
            self._workers.get().close()


def _recordings(run: Run) -> dict[tuple[int, str], list[dict[str, Any]]]:
    rows = Recording.objects.filter(case_id__in=run.case_ids, model__in=run.model_keys).values_list(
        "case_id", "model", "entries"
    )
    return {(case_id, model): entries for case_id, model, entries in rows}


def _no_recording_reason(plan: CasePlan, model_key: str) -> str:
    """Why a replay has nothing to play, naming the models the case's recordings are on: a recording on another
    model (a draft recorded from a trace is on the trace's model) needs that model chosen, not a record run. One
    query, on this error's path only."""
    recorded_on = list(
        Recording.objects.filter(case_id=plan.id).order_by("model").values_list("model", flat=True)
    )
    if not recorded_on:
        return f"no recording of case '{plan.name}' on any model: run it in record mode on {model_key} first"
    on = ", ".join(recorded_on)
    return (
        f"no recording of case '{plan.name}' on {model_key}: its recording{'s are' if len(recorded_on) > 1 else ' is'}"
        f" on {on}; replay it on {'one of those' if len(recorded_on) > 1 else 'that model'}, or run it in record "
        f"mode on {model_key} first"
    )


def _execute_pair(
    run: Run,
    plan: CasePlan,
    model: ModelConfig,
    suite_plan: SuitePlan,
    recordings: dict[tuple[int, str], list[dict[str, Any]]],
    worker: CaseWorker,
    budget: RunBudget,
) -> tuple[CaseExecution, list[dict[str, Any]] | None]:
    """One case × model in the run's mode, and in record mode what the model said — kept whatever the outcome (a
    replay must fail where the recorded run failed), keyed by case and model, never by the order cases finished."""
    tape: Tape | None = None
    if run.mode == Run.Mode.REPLAY:
        entries = recordings.get((plan.id, model.key))
        if entries is None:
            return CaseExecution(status=ERROR, reason=_no_recording_reason(plan, model.key)), None
        tape = Replayer(case_name=plan.name, model_key=model.key, entries=entries)
    elif run.mode == Run.Mode.RECORD:
        tape = Recorder(case_name=plan.name, model_key=model.key)
    # Saved by result_store, in the transaction that stores the result.
    execution = execute_case(
        plan=plan, model=model, suite=suite_plan, tape=tape, worker=worker, save_conversation=False, budget=budget
    )
    return execution, (tape.entries() if isinstance(tape, Recorder) else None)
