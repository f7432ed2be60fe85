"""Run lifecycle: create (validated at trigger time), dispatch, execute (claimed with a conditional update),
cancel, delete, and the worker-start sweep. Every transition is guarded here."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from agenthost.seams import (
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
from runs.models import CaseResult, Recording, Run, RunLock
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
from runs.selectors import prunable_test_conversation_ids, run_conversation_ids, run_tag

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
    # A run whose executor died is resumable at once, without waiting for a worker's sweep.
    run_sweep_expired()
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.lease_expires_at is not None and run.lease_expires_at > timezone.now():
        raise RunConflict(
            f"run #{run.pk} is still held by its executor (lease until "
            f"{run.lease_expires_at.isoformat(timespec='seconds')}); wait for it to stop, or cancel it"
        )
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


class RunLocked(RunConflict):
    """Another run holds the run lock; `retry_after` is how long a queued run waits before it asks again."""

    def __init__(self, *, holder_id: int | None, started_at: Any) -> None:
        started = started_at.isoformat(timespec="seconds") if started_at else "not started yet"
        super().__init__(f"run #{holder_id} holds the run lock (started {started}); wait for it or cancel it")
        self.holder_id = holder_id
        self.retry_after = max(1.0, min(5.0, _lease_seconds() / 3))


class LeaseLost(Exception):
    """This executor no longer holds its run (its lease expired and the run was swept or taken over): it must stop
    and write nothing more — no result, no verdict."""


def _lease_seconds() -> float:
    return float(settings.AGENTTEST_RUN_LEASE_SECONDS)


def _expired(now: Any) -> Q:
    # A Running row without a lease predates leases (or its executor never got to renew): nobody holds it.
    return Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now)


class Lease:
    """An executor's hold on the run it claimed and on the run lock. A heartbeat thread, on its own connection,
    renews both every third of AGENTTEST_RUN_LEASE_SECONDS; a renewal that finds the run no longer held sets `lost`."""

    def __init__(self, *, run_id: int, owner: str, group: str) -> None:
        self.run_id = run_id
        self.owner = owner
        self.group = group
        self.lost = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def held(self) -> QuerySet[Run]:
        """The run, only while this executor holds it: a write through this is conditional on the lease."""
        return Run.objects.filter(pk=self.run_id, lease_owner=self.owner)

    def check(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(f"run #{self.run_id} is no longer held by this executor")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._beat, name=f"agenttest-lease-{self.run_id}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def renew(self) -> bool:
        expires = timezone.now() + timedelta(seconds=_lease_seconds())
        with transaction.atomic():
            held = self.held().filter(status=Run.Status.RUNNING).update(lease_expires_at=expires)
            if held:
                RunLock.objects.filter(group=self.group, run_id=self.run_id).update(expires_at=expires)
        return bool(held)

    def _beat(self) -> None:
        try:
            while not self._stopping.wait(_lease_seconds() / 3):
                try:
                    if not self.renew():
                        self.lost.set()
                        return
                except DatabaseError:
                    # Not lost yet: the lease runs out only if the database stays away longer than it lasts.
                    logger.warning("could not renew the lease of run %s; retrying", self.run_id, exc_info=True)
                    connection.close()
        finally:
            connection.close()


def _executor_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"[:200]


def _lock_holder_error(group: str) -> RunLocked:
    lock = RunLock.objects.filter(group=group).select_related("run").first()
    holder = lock.run if lock is not None else None
    return RunLocked(holder_id=holder.pk if holder else None, started_at=holder.started_at if holder else None)


def run_claim(*, run_id: int, group: str = RunLock.DEFAULT_GROUP) -> Lease | None:
    """Claim a Pending run for this executor: take the run lock (free, or held by an expired lease) and the run in
    one transaction, each with a conditional update. None when the run is not Pending (a duplicate delivery, a
    cancel, a delete); RunLocked when another run holds the lock — then nothing changed."""
    run_sweep_expired()
    RunLock.objects.get_or_create(group=group)
    owner = _executor_id()
    now = timezone.now()
    expires = now + timedelta(seconds=_lease_seconds())
    with transaction.atomic():
        if not Run.objects.filter(pk=run_id, status=Run.Status.PENDING).exists():
            return None
        free = Q(run__isnull=True) | Q(expires_at__isnull=True) | Q(expires_at__lte=now)
        if not RunLock.objects.filter(free, group=group).update(run_id=run_id, expires_at=expires):
            raise _lock_holder_error(group)
        claimed = Run.objects.filter(pk=run_id, status=Run.Status.PENDING).update(
            status=Run.Status.RUNNING, started_at=now, current="", lease_owner=owner, lease_expires_at=expires
        )
        if claimed != 1:
            transaction.set_rollback(True)
            return None
    return Lease(run_id=run_id, owner=owner, group=group)


def run_wait_for_lock(*, run_id: int, holder_id: int | None) -> None:
    """Say on a Pending run why it has not started."""
    Run.objects.filter(pk=run_id, status=Run.Status.PENDING).update(
        current=f"waiting for run #{holder_id} to finish (it holds the run lock)"
    )


def run_execute(*, run_id: int, lease: Lease | None = None) -> Run | None:
    """Execute a queued run under its lease (claimed here unless the caller claimed it). Returns None when there was
    nothing to claim; raises RunLocked when another run holds the run lock. Any failure of the loop ends the run
    Error with a reason naming it; an executor that lost its lease stops without writing anything more."""
    lease = lease or run_claim(run_id=run_id)
    if lease is None:
        logger.info("run %s was not pending (duplicate delivery, cancelled or deleted); nothing to do", run_id)
        return None
    lease.start()
    try:
        return _execute_held(lease)
    except LeaseLost:
        logger.warning("run %s: this executor lost its lease; it stopped without writing a verdict", run_id)
        return Run.objects.filter(pk=run_id).first()
    except Exception as exc:
        logger.exception("run %s failed", run_id)
        return _reconnecting(_fail, lease, exc)
    finally:
        lease.stop()


def _fail(lease: Lease, exc: Exception) -> Run | None:
    if not connection.in_atomic_block:
        # Whatever failed may have left the connection broken or mid-transaction: the verdict goes on a fresh one.
        connection.close()
    run = Run.objects.get(pk=lease.run_id)
    kept = CaseResult.objects.filter(run_id=lease.run_id).count()
    detail = redact_text(f"{type(exc).__name__}: {str(exc).strip()}")[:1000]
    reason = (
        f"the run stopped on a failure: {detail}; {kept} of {run.total} results were kept (resume it once the cause "
        "is fixed)"
    )
    try:
        return _finish(run, lease, Run.Status.ERROR, reason)
    except LeaseLost:
        return Run.objects.filter(pk=lease.run_id).first()


def _execute_held(lease: Lease) -> Run:
    run = Run.objects.select_related("suite__agent").prefetch_related("suite__agent__sub_agents").get(pk=lease.run_id)
    suite = run.suite
    suite_plan = SuitePlan(
        extra_allowed=frozenset(suite.extra_allowed_functions or []),
        force_blocked=frozenset(suite.force_blocked_functions or []),
        judge_model=suite.judge_model,
        timeout_seconds=float(suite.case_timeout_seconds),
        tags=(run_tag(run.pk),),
        run_id=run.pk,
    )
    try:
        models = [_model_config(key, run.mode) for key in run.model_keys]
    except UnknownModel as exc:
        return _finish(run, lease, Run.Status.ERROR, f"a model of this run is no longer configured: {exc}")
    if not Case.objects.filter(pk__in=run.case_ids).exists():
        return _finish(run, lease, Run.Status.ERROR, "none of the selected cases exists any more; nothing was run")
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
    pending = _pending(run, models, done_keys)
    recordings = _recordings(run) if replaying else {}
    worker = CaseWorker()
    try:
        for plan, model, trial in pending:
            lease.check()
            over = spent.exhausted(run)
            if over:
                return _finish(
                    run, lease, Run.Status.ERROR, f"budget exhausted after {position} of {run.total} results: {over}"
                )
            trial_note = f" (trial {trial + 1} of {run.trials})" if run.trials > 1 else ""
            # One statement both announces the next case and checks for a cancel: nothing starts after one.
            if not lease.held().filter(cancel_requested=False).update(
                current=f"{plan.name} on {model.key}{trial_note}"
            ):
                if not lease.held().exists():
                    raise LeaseLost(f"run #{run.pk} is no longer held by this executor")
                _cancel_remaining(run, lease, [(plan, model, trial), *pending], position)
                return _finish(run, lease, Run.Status.CANCELLED, f"cancelled after {position} of {run.total} results")
            execution = _execute_pair(run, plan, model, suite_plan, recordings, worker)
            _reconnecting(_store_result, run, lease, plan, model.key, trial, position, execution)
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
        return _finish(
            run, lease, Run.Status.ERROR, f"budget exhausted after {position} of {run.total} results: {over}"
        )
    return _finish(run, lease, *_verdict(run))


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
    """Tokens and cost the run's results used so far, the llmJudge's included, held against its budget."""

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
    run: Run, lease: Lease, plan: CasePlan, model_key: str, trial: int, position: int, execution: CaseExecution
) -> CaseResult:
    counter = _COUNTER[execution.status]
    # First, and conditional on the lease: on PostgreSQL this locks the run row, so a result is only ever written
    # by the executor holding the run.
    if not lease.held().update(**{counter: F(counter) + 1}):
        raise LeaseLost(f"run #{run.pk} is no longer held by this executor")
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
        judge_input_tokens=execution.judge_usage.input_tokens,
        judge_output_tokens=execution.judge_usage.output_tokens,
        judge_cost=execution.judge_cost,
        # Messages were redacted when written; what the harness observed itself (arguments as the model sent
        # them, assertion evidence) is redacted here, before it is stored.
        transcript=transcript,
        tool_calls=redact(execution.tool_calls),
        assertions=redact(execution.assertions),
        final_state=redact(execution.final_state),
    )
    return result


@transaction.atomic
def _cancel_remaining(run: Run, lease: Lease, pending: list[tuple[CasePlan, Any, int]], position: int) -> None:
    if not lease.held().update(cancelled=F("cancelled") + len(pending)):
        raise LeaseLost(f"run #{run.pk} is no longer held by this executor")
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


def _verdict(run: Run) -> tuple[str, str]:
    run.refresh_from_db()
    if run.errored:
        return Run.Status.ERROR, f"{run.errored} of {run.total} results are Error (the harness could not judge them)"
    if run.failed:
        return Run.Status.FAILED, f"{run.failed} of {run.total} results failed"
    return Run.Status.PASSED, f"all {run.passed} results passed"


@transaction.atomic
def _finish(run: Run, lease: Lease, status: str, reason: str) -> Run:
    """The verdict, written only while this executor still holds the run; releases the lease and the run lock."""
    if not lease.held().update(
        status=status, reason=reason, finished_at=timezone.now(), current="", lease_owner="", lease_expires_at=None
    ):
        raise LeaseLost(f"run #{run.pk} is no longer held by this executor")
    RunLock.objects.filter(group=lease.group, run_id=run.pk).update(run=None, expires_at=None)
    run.refresh_from_db()
    return run


def run_cancel(*, run: Run) -> Run:
    """A pending run is cancelled at once; a running one stops between cases."""
    if run.is_finished:
        raise RunConflict(f"run #{run.pk} has already finished ({run.get_status_display()}); nothing to cancel")
    if Run.objects.filter(pk=run.pk, status=Run.Status.PENDING).update(
        status=Run.Status.CANCELLED,
        current="",
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
    """Delete runs that are not in progress, and the test conversations they made; returns (deleted ids, skipped
    running ids)."""
    skipped = [run.pk for run in runs if run.status == Run.Status.RUNNING]
    deleted = [run.pk for run in runs if run.status != Run.Status.RUNNING]
    deletable = Run.objects.filter(pk__in=deleted).exclude(status=Run.Status.RUNNING)
    conversation_ids = run_conversation_ids(run_ids=list(deletable.values_list("pk", flat=True)))
    deletable.delete()
    Conversation.objects.filter(pk__in=conversation_ids).delete()
    return deleted, skipped


MAX_PRUNE_DAYS = 36500


@transaction.atomic
def run_conversations_prune(*, older_than_days: int, dry_run: bool = False) -> int:
    """Delete the test conversations created more than `older_than_days` days ago, except those of a run still in
    progress; returns how many were (with `dry_run`: would be) deleted."""
    if isinstance(older_than_days, bool) or not isinstance(older_than_days, int) or not (
        1 <= older_than_days <= MAX_PRUNE_DAYS
    ):
        raise RunError(
            f"the age must be a whole number of days from 1 to {MAX_PRUNE_DAYS}, got {older_than_days!r}",
            field="older_than",
        )
    ids = prunable_test_conversation_ids(cutoff=timezone.now() - timedelta(days=older_than_days))
    if not dry_run:
        for start in range(0, len(ids), PLAN_CHUNK):
            Conversation.objects.filter(pk__in=ids[start : start + PLAN_CHUNK]).delete()
    return len(ids)


def run_sweep_expired() -> list[int]:
    """Every Running run whose lease expired (its executor was killed or hung) becomes Error, keeping every finished
    result, and lets go of the run lock. A run whose executor still renews its lease is never touched."""
    now = timezone.now()
    swept = []
    for run_id in Run.objects.filter(_expired(now), status=Run.Status.RUNNING).values_list("pk", flat=True):
        with transaction.atomic():
            # Clearing the owner first makes every later write of a stalled executor fail its lease check.
            if not Run.objects.filter(_expired(now), pk=run_id, status=Run.Status.RUNNING).update(
                status=Run.Status.ERROR, finished_at=now, current="", lease_owner="", lease_expires_at=None
            ):
                continue
            run = Run.objects.get(pk=run_id)
            kept = CaseResult.objects.filter(run_id=run_id).count()
            Run.objects.filter(pk=run_id).update(
                reason=(
                    "the executor of this run stopped (its worker was killed, restarted or hung, so its lease "
                    f"expired); {kept} of {run.total} results were kept"
                )
            )
            RunLock.objects.filter(run_id=run_id).update(run=None, expires_at=None)
        swept.append(run_id)
    return swept


def run_sweep_interrupted(*, dispatch: Callable[[int], None] | None = None) -> tuple[list[int], list[int]]:
    """At worker start: sweep the Running runs whose lease expired (run_sweep_expired); a Pending run may have lost
    its message — it is dispatched again (a duplicate is harmless: the claim is conditional)."""
    swept = run_sweep_expired()
    pending = list(Run.objects.filter(status=Run.Status.PENDING).values_list("pk", flat=True))
    redispatched = []
    for run_id in pending:
        try:
            (dispatch or run_dispatch)(run_id)
            redispatched.append(run_id)
        except Exception:
            logger.exception("could not re-dispatch pending run %s", run_id)
    return swept, redispatched
