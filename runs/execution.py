"""The loop of a run, under its executor's lease: every pending case × model × trial in case-major order, each
executed in the run's mode (live, record, replay) and stored as soon as it finishes, with the lease, the budget
and a cancel checked before each."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from agenthost.seams import ModelConfig, UnknownModel
from cases.models import Case
from runs.budget import Spend
from runs.leases import Lease, LeaseLost
from runs.models import CaseResult, Recording, Run
from runs.planning import model_config, pending_pairs, run_suite_plan
from runs.recordings import recording_save
from runs.replay import Recorder, Replayer, Tape
from runs.results import reconnecting, result_store, results_cancel_remaining, run_finish, run_verdict
from runs.runner import ERROR, CaseExecution, CasePlan, CaseWorker, SuitePlan, execute_case


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
    position = len(done_keys)
    pending = pending_pairs(run=run, models=models, done=done_keys)
    recordings = _recordings(run) if replaying else {}
    worker = CaseWorker()
    try:
        for plan, model, trial in pending:
            lease.check()
            over = spent.exhausted(run)
            if over:
                return run_finish(
                    run=run,
                    lease=lease,
                    status=Run.Status.ERROR,
                    reason=f"budget exhausted after {position} of {run.total} results: {over}",
                )
            trial_note = f" (trial {trial + 1} of {run.trials})" if run.trials > 1 else ""
            # One statement both announces the next case and checks for a cancel: nothing starts after one.
            if not lease.held().filter(cancel_requested=False).update(
                current=f"{plan.name} on {model.key}{trial_note}"
            ):
                if not lease.held().exists():
                    raise LeaseLost(f"run #{run.pk} is no longer held by this executor")
                results_cancel_remaining(
                    run=run, lease=lease, pending=[(plan, model, trial), *pending], position=position
                )
                return run_finish(
                    run=run,
                    lease=lease,
                    status=Run.Status.CANCELLED,
                    reason=f"cancelled after {position} of {run.total} results",
                )
            execution = _execute_pair(run, plan, model, suite_plan, recordings, worker)
            reconnecting(
                result_store,
                run=run,
                lease=lease,
                plan=plan,
                model_key=model.key,
                trial=trial,
                position=position,
                execution=execution,
            )
            if not replaying:
                # A replay spends nothing: its recorded tokens count against no budget.
                spent.add(
                    execution.usage.total_tokens + execution.judge_usage.total_tokens,
                    Decimal(execution.cost or 0) + Decimal(execution.judge_cost or 0),
                )
            position += 1
    finally:
        worker.close()
    over = spent.exhausted(run)
    if over and position < run.total:
        return run_finish(
            run=run,
            lease=lease,
            status=Run.Status.ERROR,
            reason=f"budget exhausted after {position} of {run.total} results: {over}",
        )
    status, reason = run_verdict(run=run)
    return run_finish(run=run, lease=lease, status=status, reason=reason)


def _recordings(run: Run) -> dict[tuple[int, str], list[dict[str, Any]]]:
    rows = Recording.objects.filter(case_id__in=run.case_ids, model__in=run.model_keys).values_list(
        "case_id", "model", "entries"
    )
    return {(case_id, model): entries for case_id, model, entries in rows}


def _execute_pair(
    run: Run,
    plan: CasePlan,
    model: ModelConfig,
    suite_plan: SuitePlan,
    recordings: dict[tuple[int, str], list[dict[str, Any]]],
    worker: CaseWorker,
) -> CaseExecution:
    """One case × model in the run's mode. Record mode keeps what the model said, whatever the outcome: a replay
    must fail where the recorded run failed."""
    tape: Tape | None = None
    if run.mode == Run.Mode.REPLAY:
        entries = recordings.get((plan.id, model.key))
        if entries is None:
            return CaseExecution(
                status=ERROR,
                reason=f"no recording of case '{plan.name}' on {model.key}: run it in record mode first",
            )
        tape = Replayer(case_name=plan.name, model_key=model.key, entries=entries)
    elif run.mode == Run.Mode.RECORD:
        tape = Recorder(case_name=plan.name, model_key=model.key)
    execution = execute_case(plan=plan, model=model, suite=suite_plan, tape=tape, worker=worker)
    if isinstance(tape, Recorder):
        recording_save(case_id=plan.id, model=model.key, entries=tape.entries(), run=run)
    return execution
