"""Run lifecycle: create (validated at trigger time), dispatch, execute (claimed with a conditional update),
cancel, delete, and the worker-start sweep. Every transition is guarded here."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from agents.seams import (
    Conversation,
    LoadedAgent,
    ModelConfig,
    UnknownModel,
    conversation_messages,
    get_model,
    parse_model_key,
    redact,
    redact_text,
)
from cases.models import Case, Suite
from cases.selectors import enabled_cases
from runs.mocking import MockSpec
from runs.models import CaseResult, Recording, Run
from runs.recordings import recording_save
from runs.replay import Recorder, Replayer, Tape
from runs.runner import (
    ERROR,
    AssertionPlan,
    CaseExecution,
    CasePlan,
    CaseWorker,
    SuitePlan,
    TurnPlan,
    execute_case,
)

logger = logging.getLogger(__name__)


class RunError(Exception):
    """A request about a run that cannot be honoured; `field` names the input at fault, if any."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class RunConflict(RunError):
    pass


class QueueUnavailable(RunError):
    pass


def run_validate(*, suite: Suite, model_keys: list[str], case_filter: str = "", mode: str = Run.Mode.LIVE) -> list[int]:
    """Everything that can be known at trigger time is checked here; returns the selected case ids.

    A replay calls no model, so it may name a model that is not configured here (CI without its key) as long as
    the suite has recordings of it."""
    if not suite.enabled:
        raise RunError(f"suite {suite.name!r} is disabled; enable it before running", field="suite")
    if not model_keys:
        raise RunError("choose at least one model", field="models")
    seen: set[str] = set()
    for key in model_keys:
        if key in seen:
            raise RunError(f"model {key!r} is listed twice", field="models")
        seen.add(key)
        try:
            get_model(key)
        except UnknownModel as exc:
            if mode != Run.Mode.REPLAY:
                raise RunError(str(exc), field="models") from None
            if not Recording.objects.filter(case__suite=suite, model=key).exists():
                raise RunError(
                    f"{exc}; and suite {suite.name!r} has no recording of it to replay", field="models"
                ) from None
    case_ids = list(enabled_cases(suite=suite, case_filter=case_filter).values_list("id", flat=True))
    if not case_ids:
        what = f"the case filter {case_filter!r}" if case_filter else "the suite"
        raise RunError(f"{what} selects no enabled case; enable a case or change the filter", field="case_filter")
    return case_ids


MAX_TRIALS = 20
# What Run.budget_tokens (a PositiveBigIntegerField) holds; a larger number would fail at the database.
MAX_BUDGET_TOKENS = 2**63 - 1
RESUMABLE = ("error", "cancelled")
_COUNTER = {"passed": "passed", "failed": "failed", "error": "errored", "cancelled": "cancelled"}


def _validate_options(*, mode: str, trials: int, budget_tokens: int | None, budget_cost: Any) -> None:
    if mode not in Run.Mode.values:
        raise RunError(f"mode must be one of {', '.join(Run.Mode.values)}, got {mode!r}", field="mode")
    if isinstance(trials, bool) or not isinstance(trials, int) or not 1 <= trials <= MAX_TRIALS:
        raise RunError(f"trials must be a whole number from 1 to {MAX_TRIALS}, got {trials!r}", field="trials")
    if trials > 1 and mode == Run.Mode.RECORD:
        raise RunError(
            "record mode keeps one recording per case and model, so it runs one trial; measure flakiness with "
            "trials in live mode",
            field="trials",
        )
    if trials > 1 and mode == Run.Mode.REPLAY:
        raise RunError(
            "replay serves the same recorded answers every time, so every trial would be identical; measure "
            "flakiness with trials in live mode",
            field="trials",
        )
    if budget_tokens is not None and budget_tokens <= 0:
        raise RunError("budget_tokens must be greater than 0", field="budget_tokens")
    if budget_tokens is not None and budget_tokens > MAX_BUDGET_TOKENS:
        raise RunError(f"budget_tokens must be at most {MAX_BUDGET_TOKENS}", field="budget_tokens")
    if budget_cost is not None and Decimal(str(budget_cost)) <= 0:
        raise RunError("budget_cost must be greater than 0", field="budget_cost")


@transaction.atomic
def run_create(
    *,
    suite: Suite,
    model_keys: list[str],
    case_filter: str = "",
    triggered_by: Any = None,
    mode: str = Run.Mode.LIVE,
    trials: int = 1,
    budget_tokens: int | None = None,
    budget_cost: Any = None,
) -> Run:
    _validate_options(mode=mode, trials=trials, budget_tokens=budget_tokens, budget_cost=budget_cost)
    case_ids = run_validate(suite=suite, model_keys=model_keys, case_filter=case_filter, mode=mode)
    return Run.objects.create(
        suite=suite,
        model_keys=list(model_keys),
        case_filter=case_filter,
        case_ids=case_ids,
        mode=mode,
        trials=trials,
        budget_tokens=budget_tokens,
        budget_cost=Decimal(str(budget_cost)) if budget_cost is not None else None,
        total=len(case_ids) * len(model_keys) * trials,
        triggered_by=triggered_by,
        agent_snapshot=_agent_snapshot(suite),
    )


def run_trigger(
    *,
    suite: Suite,
    model_keys: list[str],
    case_filter: str = "",
    triggered_by: Any = None,
    dispatch: Callable[[int], None] | None = None,
    **options: Any,
) -> Run:
    """Create and queue a run. If the queue does not take it, nothing is left behind and QueueUnavailable says why.

    `options` are run_create's: mode, trials, budget_tokens, budget_cost."""
    _validate_options(
        mode=options.get("mode", Run.Mode.LIVE),
        trials=options.get("trials", 1),
        budget_tokens=options.get("budget_tokens"),
        budget_cost=options.get("budget_cost"),
    )
    run_validate(suite=suite, model_keys=model_keys, case_filter=case_filter, mode=options.get("mode", Run.Mode.LIVE))
    _ping_queue()
    run = run_create(suite=suite, model_keys=model_keys, case_filter=case_filter, triggered_by=triggered_by, **options)
    _queue_or_undo(run, dispatch, undo=run.delete)
    return run


def _ping_queue() -> None:
    from agenttest.broker import BrokerUnavailable, broker_ping

    try:
        broker_ping(timeout=3.0)
    except BrokerUnavailable as exc:
        raise QueueUnavailable(f"the run queue is unavailable: {exc}") from None


def _queue_or_undo(run: Run, dispatch: Callable[[int], None] | None, *, undo: Callable[[], Any]) -> None:
    try:
        (dispatch or run_dispatch)(run.pk)
    except Exception as exc:
        undo()
        raise QueueUnavailable(f"the run queue is unavailable: {exc}") from None


@transaction.atomic
def run_prepare_resume(*, run: Run) -> Run:
    """Put an interrupted run back to Pending. Finished results stay; cancelled ones are dropped so those pairs run
    again. Only pairs without a result are executed."""
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.status not in RESUMABLE:
        raise RunConflict(
            f"run #{run.pk} is {run.get_status_display()}; only a run that ended in Error or Cancelled can be resumed"
        )
    CaseResult.objects.filter(run=run, status=CaseResult.Status.CANCELLED).delete()
    counts = _counts(run)
    kept = sum(counts.values())
    if kept >= run.total:
        raise RunConflict(f"run #{run.pk} has a result for every case and model; there is nothing to resume")
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.PENDING,
        cancel_requested=False,
        finished_at=None,
        current="",
        reason=f"resumed with {kept} of {run.total} results kept",
        **counts,
    )
    run.refresh_from_db()
    return run


def run_resume(*, run: Run, dispatch: Callable[[int], None] | None = None) -> Run:
    """Resume an interrupted run through the queue; if the queue does not take it the run is left as it was."""
    before = Run.objects.get(pk=run.pk)
    _ping_queue()
    run = run_prepare_resume(run=run)

    def undo() -> None:
        Run.objects.filter(pk=run.pk, status=Run.Status.PENDING).update(
            status=before.status, reason=before.reason, finished_at=before.finished_at
        )

    _queue_or_undo(run, dispatch, undo=undo)
    return run


def _counts(run: Run) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "errored": 0, "cancelled": 0}
    for status in CaseResult.objects.filter(run=run).values_list("status", flat=True):
        counts[_COUNTER[status]] += 1
    return counts


def run_dispatch(run_id: int) -> None:
    from runs.tasks import execute_run

    execute_run.apply_async(args=[run_id], queue="runs", retry=False)


def _agent_snapshot(suite: Suite) -> dict[str, Any]:
    agent = suite.agent
    loaded = LoadedAgent(
        id=agent.pk,
        name=agent.name,
        description=agent.description,
        instruction=agent.instruction,
        provider=agent.provider,
        model=agent.model,
        temperature=agent.temperature,
        functions=list(agent.functions or []),
        rules=list(agent.rules or []),
        sub_agents=[(sub.name, sub.description) for sub in agent.sub_agents.all()],
    )
    return {
        "agent": agent.name,
        "instruction_hash": hashlib.sha256(agent.instruction.encode()).hexdigest(),
        "model": agent.model_key,
        "temperature": agent.temperature,
        "functions": loaded.tools(entry_agent_name=agent.name),
        "sub_agents": [name for name, _ in loaded.sub_agents],
    }


def _case_plans(case_ids: list[int], default_agent: Any) -> list[CasePlan]:
    cases = (
        Case.objects.filter(pk__in=case_ids)
        .select_related("entry_agent")
        .prefetch_related("history", "turns__assertions", "assertions", "mocks", "entry_agent__sub_agents")
    )
    by_id = {case.pk: case for case in cases}
    plans = []
    for case_id in case_ids:
        case = by_id.get(case_id)
        if case is None:
            continue
        turns = sorted(case.turns.all(), key=lambda t: (t.position, t.pk))
        plans.append(
            CasePlan(
                id=case.pk,
                name=case.name,
                type=case.type,
                entry_agent=case.entry_agent or default_agent,
                history=[{"role": h.role, "content": h.content} for h in case.history.all()],
                initial_state=dict(case.initial_state or {}),
                turns=[
                    TurnPlan(
                        user_message=turn.user_message,
                        assertions=[
                            AssertionPlan(a.type, dict(a.params or {}), a.fatal)
                            for a in sorted(turn.assertions.all(), key=lambda a: (a.position, a.pk))
                        ],
                    )
                    for turn in turns
                ],
                assertions=[
                    AssertionPlan(a.type, dict(a.params or {}), a.fatal)
                    for a in case.assertions.all()
                    if a.turn_id is None
                ],
                mocks=[
                    MockSpec(
                        function_name=m.function_name,
                        result=m.result,
                        arguments=m.arguments,
                        call_index=m.call_index,
                        stop=m.stop,
                        state_writes=dict(m.state_writes or {}),
                    )
                    for m in case.mocks.all()
                ],
            )
        )
    return plans


def run_execute(*, run_id: int) -> Run | None:
    """Execute a queued run. Claimed with a conditional update: a duplicate delivery finds nothing to claim."""
    claimed = Run.objects.filter(pk=run_id, status=Run.Status.PENDING).update(
        status=Run.Status.RUNNING, started_at=timezone.now()
    )
    if claimed != 1:
        logger.info("run %s was not pending (duplicate delivery, cancelled or deleted); nothing to do", run_id)
        return None
    run = Run.objects.select_related("suite__agent").prefetch_related("suite__agent__sub_agents").get(pk=run_id)
    suite = run.suite
    suite_plan = SuitePlan(
        extra_allowed=frozenset(suite.extra_allowed_functions or []),
        force_blocked=frozenset(suite.force_blocked_functions or []),
        judge_model=suite.judge_model,
        timeout_seconds=float(suite.case_timeout_seconds),
        tags=(f"run:{run.pk}",),
    )
    try:
        models = [_model_config(key, run.mode) for key in run.model_keys]
    except UnknownModel as exc:
        return _finish(run, Run.Status.ERROR, f"a model of this run is no longer configured: {exc}")
    if not Case.objects.filter(pk__in=run.case_ids).exists():
        return _finish(run, Run.Status.ERROR, "none of the selected cases exists any more; nothing was run")
    done_keys: set[tuple[int | None, str, int]] = set()
    spent = Spend()
    finished = CaseResult.objects.filter(run=run).values_list(
        "case_id", "model", "trial", "input_tokens", "output_tokens", "cost"
    )
    replaying = run.mode == Run.Mode.REPLAY
    for case_id, model_key, trial, tokens_in, tokens_out, cost in finished:
        done_keys.add((case_id, model_key, trial))
        if not replaying:
            spent.add(tokens_in + tokens_out, cost)
    position = len(done_keys)
    pending = _pending(run, models, done_keys)
    recordings = _recordings(run) if replaying else {}
    worker = CaseWorker()
    try:
        for plan, model, trial in pending:
            over = spent.exhausted(run)
            if over:
                return _finish(
                    run, Run.Status.ERROR, f"budget exhausted after {position} of {run.total} results: {over}"
                )
            trial_note = f" (trial {trial + 1} of {run.trials})" if run.trials > 1 else ""
            # One statement both announces the next case and checks for a cancel: nothing starts after one.
            if not Run.objects.filter(pk=run.pk, cancel_requested=False).update(
                current=f"{plan.name} on {model.key}{trial_note}"
            ):
                _cancel_remaining(run, [(plan, model, trial), *pending], position)
                return _finish(run, Run.Status.CANCELLED, f"cancelled after {position} of {run.total} results")
            execution = _execute_pair(run, plan, model, suite_plan, recordings, worker)
            _reconnecting(_store_result, run, plan, model.key, trial, position, execution)
            if not replaying:
                # A replay spends nothing: its recorded tokens count against no budget.
                spent.add(execution.usage.total_tokens, execution.cost)
            position += 1
    finally:
        worker.close()
    over = spent.exhausted(run)
    if over and position < run.total:
        return _finish(run, Run.Status.ERROR, f"budget exhausted after {position} of {run.total} results: {over}")
    return _finish(run, *_verdict(run))


PLAN_CHUNK = 100


def _pending(
    run: Run, models: list[ModelConfig], done: set[tuple[int | None, str, int]]
) -> Iterator[tuple[CasePlan, ModelConfig, int]]:
    """The case × model × trial triples still to run, case-major. Cases are read a chunk at a time so memory stays
    flat however large the suite."""
    agent = run.suite.agent
    for start in range(0, len(run.case_ids), PLAN_CHUNK):
        for plan in _case_plans(run.case_ids[start : start + PLAN_CHUNK], agent):
            for model in models:
                for trial in range(run.trials):
                    if (plan.id, model.key, trial) not in done:
                        yield plan, model, trial


def _model_config(key: str, mode: str) -> ModelConfig:
    """The configured model; in replay mode an unconfigured one too (nothing calls it, so it has no price)."""
    try:
        return get_model(key)
    except UnknownModel:
        if mode != Run.Mode.REPLAY:
            raise
        provider, model = parse_model_key(key)
        return ModelConfig(provider=provider, model=model)


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


def _reconnecting(write: Callable[..., Any], *args: Any) -> Any:
    """Run a write; if the connection was lost under it (a database restart, a killed backend), reconnect once and
    write again, so a finished result is not lost to a connection that died while the case ran."""
    try:
        return write(*args)
    except (OperationalError, InterfaceError):
        connection.close()
        return write(*args)


class Spend:
    """Tokens and cost the run's results used so far, held against its budget."""

    def __init__(self) -> None:
        self.tokens = 0
        self.cost = Decimal(0)

    def add(self, tokens: int, cost: Any) -> None:
        self.tokens += tokens
        self.cost += Decimal(str(cost or 0))

    def exhausted(self, run: Run) -> str:
        if run.budget_tokens is not None and self.tokens >= run.budget_tokens:
            return f"{self.tokens} tokens used of a budget of {run.budget_tokens}"
        if run.budget_cost is not None and self.cost >= run.budget_cost:
            return f"${self.cost:.4f} spent of a budget of ${run.budget_cost:.4f}"
        return ""


@transaction.atomic
def _store_result(
    run: Run, plan: CasePlan, model_key: str, trial: int, position: int, execution: CaseExecution
) -> CaseResult:
    transcript = []
    if execution.conversation_id is not None:
        conversation = Conversation(pk=execution.conversation_id)
        transcript = [
            {
                "seq": m.seq,
                "turn": m.turn,
                "role": m.role,
                "content": m.content,
                "function": m.function_name,
                "arguments": m.arguments,
                "tool_call_id": m.tool_call_id,
                "agent": m.agent.name if m.agent else "",
                "outcome": m.outcome,
                "trigger": m.trigger,
                "model": m.model,
                "latency_ms": m.latency_ms,
            }
            for m in conversation_messages(conversation=conversation)
        ]
    result = CaseResult.objects.create(
        run=run,
        case_id=plan.id,
        case_name=plan.name,
        model=model_key,
        trial=trial,
        position=position,
        status=execution.status,
        reason=redact_text(execution.reason),
        conversation_id=execution.conversation_id,
        duration_ms=execution.duration_ms,
        model_latency_ms=execution.model_latency_ms,
        input_tokens=execution.usage.input_tokens,
        output_tokens=execution.usage.output_tokens,
        cost=execution.cost,
        # Messages were redacted when written; what the harness observed itself (arguments as the model sent
        # them, assertion evidence) is redacted here, before it is stored.
        transcript=transcript,
        tool_calls=redact(execution.tool_calls),
        assertions=redact(execution.assertions),
        final_state=redact(execution.final_state),
    )
    counter = _COUNTER[execution.status]
    Run.objects.filter(pk=run.pk).update(**{counter: F(counter) + 1})
    return result


def _cancel_remaining(run: Run, pending: list[tuple[CasePlan, Any, int]], position: int) -> None:
    CaseResult.objects.bulk_create(
        [
            CaseResult(
                run=run,
                case_id=plan.id,
                case_name=plan.name,
                model=model.key,
                trial=trial,
                position=position + offset,
                status=CaseResult.Status.CANCELLED,
                reason="the run was cancelled before this case started",
            )
            for offset, (plan, model, trial) in enumerate(pending)
        ]
    )
    Run.objects.filter(pk=run.pk).update(cancelled=F("cancelled") + len(pending))


def _verdict(run: Run) -> tuple[str, str]:
    run.refresh_from_db()
    if run.errored:
        return Run.Status.ERROR, f"{run.errored} of {run.total} results are Error (the harness could not judge them)"
    if run.failed:
        return Run.Status.FAILED, f"{run.failed} of {run.total} results failed"
    return Run.Status.PASSED, f"all {run.passed} results passed"


def _finish(run: Run, status: str, reason: str) -> Run:
    Run.objects.filter(pk=run.pk).update(status=status, reason=reason, finished_at=timezone.now(), current="")
    run.refresh_from_db()
    return run


def run_cancel(*, run: Run) -> Run:
    """A pending run is cancelled at once; a running one stops between cases."""
    if run.is_finished:
        raise RunConflict(f"run #{run.pk} has already finished ({run.get_status_display()}); nothing to cancel")
    if Run.objects.filter(pk=run.pk, status=Run.Status.PENDING).update(
        status=Run.Status.CANCELLED,
        cancel_requested=True,
        reason="cancelled before it started",
        finished_at=timezone.now(),
    ):
        Run.objects.filter(pk=run.pk).update(cancelled=F("total"))
    else:
        Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING).update(cancel_requested=True)
    run.refresh_from_db()
    return run


@transaction.atomic
def run_delete(*, runs: list[Run]) -> tuple[list[int], list[int]]:
    """Delete runs that are not in progress; returns (deleted ids, skipped running ids)."""
    skipped = [run.pk for run in runs if run.status == Run.Status.RUNNING]
    deleted = [run.pk for run in runs if run.status != Run.Status.RUNNING]
    Run.objects.filter(pk__in=deleted).exclude(status=Run.Status.RUNNING).delete()
    return deleted, skipped


def run_sweep_interrupted(*, dispatch: Callable[[int], None] | None = None) -> tuple[list[int], list[int]]:
    """At worker start: a Running run was interrupted by a restart — it becomes Error keeping its results; a
    Pending run may have lost its message — it is dispatched again (a duplicate is harmless: the claim is
    conditional)."""
    swept = []
    for run in Run.objects.filter(status=Run.Status.RUNNING):
        kept = CaseResult.objects.filter(run=run).count()
        updated = Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING).update(
            status=Run.Status.ERROR,
            finished_at=timezone.now(),
            current="",
            reason=(f"the worker restarted while this run was in progress; {kept} of {run.total} results were kept"),
        )
        if updated:
            swept.append(run.pk)
    pending = list(Run.objects.filter(status=Run.Status.PENDING).values_list("pk", flat=True))
    redispatched = []
    for run_id in pending:
        try:
            (dispatch or run_dispatch)(run_id)
            redispatched.append(run_id)
        except Exception:
            logger.exception("could not re-dispatch pending run %s", run_id)
    return swept, redispatched
