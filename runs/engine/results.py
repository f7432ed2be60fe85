"""What a run writes: each case result as soon as it finishes, the cancelled remainder, and the verdict — every
write conditional on the executor's lease, so an executor that lost its run writes nothing more."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from agenthost.seams import Conversation, ConversationGone, Message, conversation_messages, redact, redact_text
from runs.engine.case_runner import CaseExecution, note_conversation_gone
from runs.engine.leases import Lease, LeaseLost
from runs.engine.plans import CasePlan
from runs.models import CaseResult, Run, RunLock
from runs.tapes.files import recording_save

# The Run counter each result status adds to.
COUNTER = {"passed": "passed", "failed": "failed", "error": "errored", "cancelled": "cancelled"}
# What a result's columns hold: token counts below 2**31, costs of 14 digits with 8 decimals.
MAX_RESULT_TOKENS = 2**31 - 1
MAX_RESULT_COST = Decimal("999999.99999999")
_TOKEN_FIGURES = (
    ("input_tokens", "usage", "input_tokens", "input tokens"),
    ("output_tokens", "usage", "output_tokens", "output tokens"),
    ("cached_input_tokens", "usage", "cached_input_tokens", "cached input tokens"),
    ("reasoning_tokens", "usage", "reasoning_tokens", "reasoning tokens"),
    ("judge_input_tokens", "judge_usage", "input_tokens", "judge input tokens"),
    ("judge_output_tokens", "judge_usage", "output_tokens", "judge output tokens"),
)


def result_counts(*, run: Run) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "errored": 0, "cancelled": 0}
    for status in CaseResult.objects.filter(run=run).values_list("status", flat=True):
        counts[COUNTER[status]] += 1
    return counts


@transaction.atomic
def result_store(
    *,
    run: Run,
    lease: Lease,
    plan: CasePlan,
    model_key: str,
    trial: int,
    position: int,
    execution: CaseExecution,
    recorded: list[dict[str, Any]] | None = None,
    current: str | None = None,
) -> bool:
    """Store a finished pair's result with its test conversation and, in record mode, the model traffic it
    `recorded`, in one transaction. With `current` (what the run loop starts next) the same statement announces it
    unless a cancel was asked; returns whether it did (False: the cancel came, and nothing more may start)."""
    announced = _count_result(run=run, lease=lease, status=execution.status, current=current)
    if recorded is not None:
        # Under the lease, with the result: an executor that lost its run must not replace the recording of the
        # executor that resumed it, nor leave one behind a run that kept no result of it.
        recording_save(case_id=plan.id, model=model_key, entries=recorded, run=run)
    messages, names = _conversation_save(execution)
    simulation = execution.simulation.as_dict() if execution.simulation is not None else {}
    transcript = _transcript(messages, names, simulated_turns=set(simulation.get("conversation_turns", [])))
    figures, beyond = _storable_figures(execution)
    reason = execution.reason
    if beyond:
        note = (
            f"this result used more than it can hold ({', '.join(beyond)}); it is stored as the most it holds"
        )
        reason = f"{reason}; {note}" if reason else note
    CaseResult.objects.create(
        run=run,
        case_id=plan.id,
        case_name=plan.name,
        case_hash=plan.content_hash,
        model=model_key,
        trial=trial,
        position=position,
        status=execution.status,
        reason=redact_text(reason),
        conversation_id=execution.conversation_id,
        duration_ms=execution.duration_ms,
        model_latency_ms=execution.model_latency_ms,
        **figures,
        # Messages were redacted when written; what the harness observed itself (arguments as the model sent
        # them, assertion evidence) is redacted here, before it is stored.
        transcript=transcript,
        tool_calls=redact(execution.tool_calls),
        assertions=redact(execution.assertions),
        final_state=redact(execution.final_state),
        final_tables=redact(execution.final_tables),
        simulation=redact(simulation),
    )
    return announced


def _count_result(*, run: Run, lease: Lease, status: str, current: str | None) -> bool:
    """Add the result to the run's counter and, with `current`, announce it unless a cancel was asked: whether it
    did. First in the result's transaction, and conditional on the lease: on PostgreSQL this locks the run row, so
    a result is only ever written by the executor holding the run."""
    counter = COUNTER[status]
    announced = current is not None and bool(
        lease.held().filter(cancel_requested=False).update(**{counter: F(counter) + 1}, current=current[:400])
    )
    if not announced and not lease.held().update(**{counter: F(counter) + 1}):
        raise LeaseLost(f"run #{run.pk} is no longer held by this executor")
    return announced


def _conversation_save(execution: CaseExecution) -> tuple[list[Message], dict[int, str]]:
    """Write the case's held conversation, if the caller left it to the result, and read its messages and the
    names of their agents."""
    held = execution.conversation
    if held is not None:
        # The case's conversation is written with its result: one commit, and neither survives a crash without the
        # other.
        try:
            held.save()
        except ConversationGone:
            # Its save wrote nothing (a conditional update matched no row), so this transaction goes on.
            note_conversation_gone(execution)
        return held.messages(), held.agent_names()
    if execution.conversation_id is not None:
        messages = list(conversation_messages(conversation=Conversation(pk=execution.conversation_id)))
        return messages, {m.agent.pk: m.agent.name for m in messages if m.agent is not None}
    return [], {}


def _transcript(messages: list[Message], names: dict[int, str], *, simulated_turns: set[int]) -> list[dict[str, Any]]:
    """The conversation as the result keeps it."""
    return [
        {
            "seq": m.seq,
            "turn": m.turn,
            "role": m.role,
            "content": m.content,
            "function_name": m.function_name,
            "arguments": m.arguments,
            "tool_call_id": m.tool_call_id,
            "agent": m.agent_name or (names.get(m.agent_id, "") if m.agent_id is not None else ""),
            "outcome": m.outcome,
            "trigger": m.trigger,
            "model": m.model,
            "latency_ms": m.latency_ms,
            # Written by the simulated user's model, not by the case: the page marks it so.
            **({"simulated": True} if m.role == "user" and m.turn in simulated_turns else {}),
        }
        for m in messages
    ]


def _storable_figures(execution: CaseExecution) -> tuple[dict[str, Any], list[str]]:
    """The result's token counts and costs as its columns can hold them, and each one that was more (a sum of many
    answers, each within its own bound, or their price) — a figure must never fail the write of a finished result."""
    figures: dict[str, Any] = {}
    beyond: list[str] = []
    for column, usage, name, label in _TOKEN_FIGURES:
        value = getattr(getattr(execution, usage), name)
        figures[column] = min(value, MAX_RESULT_TOKENS)
        if value > MAX_RESULT_TOKENS:
            beyond.append(f"{label} {value}")
    for column, label in (("cost", "cost"), ("judge_cost", "judge cost")):
        value = Decimal(getattr(execution, column) or 0)
        figures[column] = min(value, MAX_RESULT_COST)
        if value > MAX_RESULT_COST:
            beyond.append(f"{label} ${value:f}")
    return figures, beyond


@transaction.atomic
def results_cancel_remaining(
    *, run: Run, lease: Lease, pending: list[tuple[CasePlan, Any, int]], position: int
) -> None:
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


def run_verdict(*, run: Run) -> tuple[str, str]:
    run.refresh_from_db()
    if run.errored:
        return Run.Status.ERROR, f"{run.errored} of {run.total} results are Error (the harness could not judge them)"
    if run.failed:
        return Run.Status.FAILED, f"{run.failed} of {run.total} results failed"
    return Run.Status.PASSED, f"all {run.passed} results passed"


@transaction.atomic
def run_finish(*, run: Run, lease: Lease, status: str, reason: str) -> Run:
    """The verdict, written only while this executor still holds the run; releases the lease and the run lock."""
    if not lease.held().update(
        status=status, reason=reason, finished_at=Now(), current="", lease_owner="", lease_expires_at=None
    ):
        raise LeaseLost(f"run #{run.pk} is no longer held by this executor")
    RunLock.objects.filter(group=lease.group, run_id=run.pk).update(run=None, expires_at=None)
    run.refresh_from_db()
    return run


def run_fail(*, lease: Lease, exc: Exception) -> Run | None:
    """The verdict of a run whose loop failed: Error, naming the failure, with every finished result kept."""
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
        return run_finish(run=run, lease=lease, status=Run.Status.ERROR, reason=reason)
    except LeaseLost:
        return Run.objects.filter(pk=lease.run_id).first()


def reconnecting(write: Callable[..., Any], **kwargs: Any) -> Any:
    """Run a write; if the connection was lost under it (a database restart, a killed backend), reconnect once and
    write again, so a finished result is not lost to a connection that died while the case ran."""
    try:
        return write(**kwargs)
    except (OperationalError, InterfaceError):
        connection.close()
        return write(**kwargs)
