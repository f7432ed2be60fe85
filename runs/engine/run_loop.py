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

from agenthost.seams import ModelConfig, UnknownModel
from cases.models import Case
from cases.validation.suites import suite_hermetic_problem
from runs.engine.budget import RunBudget, Spend
from runs.engine.case_runner import ERROR, CaseExecution, CasePlan, CaseWorker, SuitePlan, execute_case
from runs.engine.durability import relaxed_commit
from runs.engine.leases import Lease, LeaseLost
from runs.engine.planning import model_config, pending_pairs, run_suite_plan
from runs.engine.results import reconnecting, result_store, results_cancel_remaining, run_finish, run_verdict
from runs.engine.throttle import RunThrottles
from runs.models import CaseResult, Recording, Run
from runs.tapes.replay import Recorder, Replayer, Tape


def run_execute_held(*, lease: Lease) -> Run:
    """Execute the run's pending pairs and write its verdict, every write conditional on `lease`."""
    run = Run.objects.select_related("suite__agent").prefetch_related("suite__agent__sub_agents").get(pk=lease.run_id)
    suite_plan = run_suite_plan(run=run)
    try:
        models = [model_config(key=key, mode=run.mode) for key in run.model_keys]
    except UnknownModel as exc:
        return run_finish(
            run=run, lease=lease, status=Run.Status.ERROR, reason=f"a model of this run is no longer configured: {exc}"
        )
    if not Case.objects.filter(pk__in=run.case_ids).exists():
        return run_finish(
            run=run,
            lease=lease,
            status=Run.Status.ERROR,
            reason="none of the selected cases exists any more; nothing was run",
        )
    # Read under the lease: no other executor can add a result from here on, so no pair runs twice.
    done_keys: set[tuple[int | None, str, int]] = set()
    spent = Spend()
    finished = CaseResult.objects.filter(run=run).values_list(
        "case_id", "model", "trial", "input_tokens", "output_tokens", "cost", "judge_input_tokens",
        "judge_output_tokens", "judge_cost",
    )
    replaying = run.mode == Run.Mode.REPLAY
    for case_id, model_key, trial, tokens_in, tokens_out, cost, judge_in, judge_out, judge_cost in finished:
        done_keys.add((case_id, model_key, trial))
        if not replaying:
            spent.add(tokens_in + tokens_out + judge_in + judge_out, Decimal(cost or 0) + Decimal(judge_cost or 0))
    # Held before every model call of the run's cases, from what its stored results used (issue 37, item 7).
    budget = RunBudget(run, spent)
    position = len(done_keys)
    pending = pending_pairs(run=run, models=models, done=done_keys)
    recordings = _recordings(run) if replaying else {}
    concurrency = _case_concurrency(run, suite_plan)
    throttles = RunThrottles(concurrency=concurrency)
    suite_plan.throttles = throttles
    slots = CaseSlots(concurrency)
    # Started pairs whose result is not stored yet: their future, and where each belongs in the run.
    in_flight: dict[Future[Any], tuple[CasePlan, ModelConfig, int, int]] = {}
    stored = position

    # Finished pairs, their spend counted, whose result is not written yet: written before the next pair starts.
    collected: list[tuple[CasePlan, ModelConfig, int, int, CaseExecution, list[dict[str, Any]] | None]] = []

    def collect_finished() -> None:
        """Count the spend of every pair finished by now and set it aside to be written; waits for none."""
        for future in sorted((f for f in in_flight if f.done()), key=lambda f: in_flight[f][3]):
            plan, model, trial, at = in_flight.pop(future)
            execution, recorded = future.result()
            collected.append((plan, model, trial, at, execution, recorded))
            if not replaying:
                # A replay spends nothing: its recorded tokens count against no budget.
                spent.add(
                    execution.usage.total_tokens + execution.judge_usage.total_tokens,
                    Decimal(execution.cost or 0) + Decimal(execution.judge_cost or 0),
                )

    def wait_for_room(*, room_for: int) -> None:
        """Collect finished pairs until fewer than `room_for` are in flight."""
        collect_finished()
        while len(in_flight) >= room_for:
            wait(in_flight, return_when=FIRST_COMPLETED)
            collect_finished()

    def write_collected(*, current: str | None = None) -> bool:
        """Write the collected results in run order, each with its conversation and recording; the
        last also announces `current` unless a cancel was asked. Returns whether it announced it."""
        nonlocal stored
        announced = False
        while collected:
            plan, model, trial, at, execution, recorded = collected[0]
            announced = reconnecting(
                result_store,
                run=run,
                lease=lease,
                plan=plan,
                model_key=model.key,
                trial=trial,
                position=at,
                execution=execution,
                recorded=recorded,
                current=current if len(collected) == 1 else None,
            )
            collected.pop(0)
            stored += 1
        if throttles.changed():
            lease.held().update(throttle=throttles.snapshot())
        return announced

    def store_finished(*, room_for: int) -> None:
        """Write each pair as it finishes — a fast one is never held back by a slow one beside it — until fewer
        than `room_for` are in flight."""
        while True:
            collect_finished()
            write_collected()
            if len(in_flight) < room_for:
                return
            wait(in_flight, return_when=FIRST_COMPLETED)

    try:
        for plan, model, trial in pending:
            # Whatever finished is counted, and then stored, before anything new starts.
            wait_for_room(room_for=concurrency)
            lease.check()
            over = spent.exhausted(run)
            if over:
                # Nothing new starts; the pairs in flight finish, and what they used is counted.
                store_finished(room_for=1)
                return run_finish(
                    run=run,
                    lease=lease,
                    status=Run.Status.ERROR,
                    reason=f"budget exhausted after {stored} of {run.total} results: {spent.exhausted(run)}",
                )
            trial_note = f" (trial {trial + 1} of {run.trials})" if run.trials > 1 else ""
            more = f"; {len(in_flight)} more in progress" if in_flight else ""
            current = f"{plan.name} on {model.key}{trial_note}{more}"
            # One statement announces the next pair and checks for a cancel: nothing starts after one. The results
            # before it are stored first, the last of them in that same statement.
            if collected:
                announced = write_collected(current=current)
            else:
                # Losing a bare announcement in a crash loses nothing: its commit need not wait for the disk.
                with relaxed_commit():
                    announced = bool(lease.held().filter(cancel_requested=False).update(current=current[:400]))
                if not announced and not lease.held().exists():
                    raise LeaseLost(f"run #{run.pk} is no longer held by this executor")
            if not announced:
                store_finished(room_for=1)
                results_cancel_remaining(
                    run=run, lease=lease, pending=[(plan, model, trial), *pending], position=position
                )
                return run_finish(
                    run=run,
                    lease=lease,
                    status=Run.Status.CANCELLED,
                    reason=f"cancelled after {stored} of {run.total} results",
                )
            # The slot's worker is the one argument left: this pair's plan and model are bound now.
            future = slots.submit(
                functools.partial(_execute_pair, run, plan, model, suite_plan, recordings, budget=budget)
            )
            in_flight[future] = (plan, model, trial, position)
            position += 1
        store_finished(room_for=1)
    finally:
        slots.close()
    over = spent.exhausted(run)
    if over and stored < run.total:
        return run_finish(
            run=run,
            lease=lease,
            status=Run.Status.ERROR,
            reason=f"budget exhausted after {stored} of {run.total} results: {over}",
        )
    status, reason = run_verdict(run=run)
    return run_finish(run=run, lease=lease, status=status, reason=reason)


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
