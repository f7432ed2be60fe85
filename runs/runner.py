"""Executes one case on one model: a fresh conversation under the mock seam, the canary, the turns, the assertions.

The case runs on its own thread so a per-case timeout can be enforced. Its registry entry is removed by that thread
when its last call has returned — never by the waiting side on timeout — so a late tool call is still mocked.

In record and replay mode the case gets a tape (runs/replay.py): every model call of the conversation, the judge's
included, goes through it. On timeout the tape is abandoned, which releases a replayed hang so the thread can end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import DatabaseError, connection

from agents.seams import (
    Agent,
    ConversationError,
    ModelCallFailed,
    ModelConfig,
    StepLimitExceeded,
    TurnResult,
    Usage,
    conversation_invoke_function,
    conversation_send,
    conversation_start,
)
from runs import assertions as checks
from runs.mocking import CANARY_FUNCTION, CaseSession, MockSpec, registry
from runs.replay import Replayer, Tape, install_providers

TEST_TAG = "agenttest"


@dataclass
class AssertionPlan:
    type: str
    params: dict[str, Any]
    fatal: bool = False


@dataclass
class TurnPlan:
    user_message: str
    assertions: list[AssertionPlan] = field(default_factory=list)


@dataclass
class CasePlan:
    """Everything needed to run a case, read once per run so executing it costs no case queries."""

    id: int
    name: str
    type: str
    entry_agent: Agent
    history: list[dict[str, str]]
    initial_state: dict[str, Any]
    turns: list[TurnPlan]
    assertions: list[AssertionPlan]
    mocks: list[MockSpec]


@dataclass
class SuitePlan:
    extra_allowed: frozenset[str]
    force_blocked: frozenset[str]
    judge_model: str
    timeout_seconds: float
    tags: tuple[str, ...] = ()


@dataclass
class CaseExecution:
    status: str
    reason: str = ""
    conversation_id: int | None = None
    duration_ms: float = 0.0
    model_latency_ms: float = 0.0
    usage: Usage = field(default_factory=Usage)
    cost: Decimal = Decimal(0)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    assertions: list[dict[str, Any]] = field(default_factory=list)
    final_state: dict[str, Any] = field(default_factory=dict)


PASSED, FAILED, ERROR = "passed", "failed", "error"


class _Progress:
    """What the case thread has done so far; read by the waiting side when the case times out."""

    def __init__(self) -> None:
        self.conversation_id: int | None = None
        self.session: CaseSession | None = None
        self.usage = Usage()
        self.model_latency_ms = 0.0

    def add_turn(self, turn: TurnResult) -> None:
        self.usage = self.usage + turn.usage
        self.model_latency_ms += turn.model_latency_ms


def _close_this_threads_connection() -> None:
    # `connection` resolves to the calling thread's connection only when called, not when the method is looked up.
    connection.close()


class CaseWorker:
    """The thread cases run on, one after another, keeping its database connection between cases. A case that times
    out keeps its thread until its in-flight call returns; the next case gets a fresh one."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None

    def submit(self, work: Callable[[], None]) -> Future:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agenttest-case")
        return self._executor.submit(work)

    def abandon(self) -> None:
        if self._executor is not None:
            # Queued behind the stuck case: its thread closes its own connection once the case lets go.
            self._executor.submit(_close_this_threads_connection)
            self._executor.shutdown(wait=False)
            self._executor = None

    def close(self) -> None:
        if self._executor is not None:
            self._executor.submit(_close_this_threads_connection).result()
            self._executor.shutdown(wait=True)
            self._executor = None


def execute_case(
    *, plan: CasePlan, model: ModelConfig, suite: SuitePlan, tape: Tape | None = None, worker: CaseWorker | None = None
) -> CaseExecution:
    """Run the case on the model (through `tape` in record/replay mode) and say what happened; never raises.

    `worker` is the run's case thread; without one the case gets a thread of its own."""
    started = time.perf_counter()
    if not plan.turns:
        return CaseExecution(status=ERROR, reason="the case has no turns, so it would verify nothing")
    if tape is not None:
        install_providers()
    progress = _Progress()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = _run(plan, model, suite, progress, tape)
        except BaseException as exc:  # reported as the case's Error; a crash must not take the run down
            outcome["crash"] = exc
            if isinstance(exc, DatabaseError):
                # A lost connection stays broken in this thread; the next case must start on a fresh one.
                connection.close()
        finally:
            if progress.conversation_id is not None:
                registry.remove(progress.conversation_id)

    own_worker = worker is None
    worker = worker or CaseWorker()
    try:
        worker.submit(work).result(timeout=suite.timeout_seconds)
        finished = True
    except FutureTimeout:
        finished = False
        worker.abandon()
    if own_worker and finished:
        worker.close()
    if not finished and tape is not None:
        tape.abandon()
    if not finished:
        hang = tape.hanging_at if isinstance(tape, Replayer) else ""
        execution = CaseExecution(
            status=ERROR,
            reason=f"the case timed out after {suite.timeout_seconds:g} s"
            + (f" (replayed the hang recorded for {hang})" if hang else ""),
            conversation_id=progress.conversation_id,
            tool_calls=[c.as_dict() for c in (progress.session.observed_calls() if progress.session else [])],
        )
    elif "crash" in outcome:
        exc = outcome["crash"]
        what = "lost its database connection" if isinstance(exc, DatabaseError) else "crashed"
        execution = CaseExecution(
            status=ERROR,
            reason=f"the case {what}: {type(exc).__name__}: {str(exc).strip()}",
            conversation_id=progress.conversation_id,
        )
    else:
        execution = outcome["value"]
    if tape is not None and tape.failure:
        # The replay could not go on (stale, exhausted, unreadable): whatever the loop made of it, that is the news.
        execution.status, execution.reason = ERROR, tape.failure
    execution.usage = progress.usage
    execution.model_latency_ms = progress.model_latency_ms
    spent = tape is None or tape.spends
    execution.cost = Decimal(str(round(model.cost(progress.usage), 8))) if spent else Decimal(0)
    execution.duration_ms = (time.perf_counter() - started) * 1000
    return execution


def _run(plan: CasePlan, model: ModelConfig, suite: SuitePlan, progress: _Progress, tape: Tape | None) -> CaseExecution:
    session = CaseSession(
        mocks=plan.mocks,
        extra_allowed=suite.extra_allowed,
        force_blocked=suite.force_blocked,
        provider=tape.provider_name if tape is not None else model.provider,
        model=model.model,
        tape=tape,
    )
    judge_call = tape.complete if tape is not None else None
    progress.session = session

    def register(conversation: Any) -> None:
        progress.conversation_id = conversation.pk
        registry.add(conversation.pk, session)

    conversation = conversation_start(
        agent=plan.entry_agent,
        tags=[TEST_TAG, *suite.tags],
        initial_state=plan.initial_state,
        history=plan.history,
        title=f"[test] {plan.name} on {model.key}"[:200],
        on_created=register,
    )
    execution = CaseExecution(status=PASSED, conversation_id=conversation.pk)

    canary = conversation_invoke_function(conversation=conversation, name=CANARY_FUNCTION, record=False)
    if canary.content != session.canary_token:
        execution.status = ERROR
        execution.reason = (
            "the mock seam is not live: the canary function answered "
            f"{canary.content[:200]!r} instead of the harness's token, so tools could run for real; nothing was sent"
        )
        return execution

    outputs: list[str] = []
    chain: list[str] = []
    results: list[checks.AssertionOutcome] = []
    entry_name = plan.entry_agent.name
    state: dict[str, Any] = dict(plan.initial_state)
    for index, turn_plan in enumerate(plan.turns):
        try:
            turn = conversation_send(conversation=conversation, text=turn_plan.user_message)
        except ConversationError as exc:
            if exc.partial is not None:
                progress.add_turn(exc.partial)
            execution.status = ERROR
            execution.reason = _conversation_error_reason(exc, index)
            _finish(execution, session, results, state)
            return execution
        progress.add_turn(turn)
        outputs.append(turn.output)
        _extend_chain(chain, turn.agent_chain)
        state = turn.state
        turn_calls = [c.as_dict() for c in session.observed_calls() if c.turn == turn.turn]
        evidence = checks.Evidence(
            output=turn.output,
            tool_calls=turn_calls,
            state=state,
            agent_chain=turn.agent_chain,
            entry_agent=entry_name,
        )
        fatal_failed = False
        for assertion in turn_plan.assertions:
            result = checks.evaluate(
                type=assertion.type,
                params=assertion.params,
                evidence=evidence,
                scope=f"turn {index}",
                judge_model=suite.judge_model,
                fatal=assertion.fatal,
                judge_call=judge_call,
            )
            results.append(result)
            fatal_failed = fatal_failed or (assertion.fatal and not result.passed)
        if fatal_failed and index + 1 < len(plan.turns):
            execution.reason = (
                f"a fatal assertion failed at turn {index}; {len(plan.turns) - index - 1} turn(s) skipped"
            )
            break

    all_calls = [c.as_dict() for c in session.observed_calls()]
    evidence = checks.Evidence(
        output="\n".join(outputs), tool_calls=all_calls, state=state, agent_chain=chain, entry_agent=entry_name
    )
    for assertion in plan.assertions:
        results.append(
            checks.evaluate(
                type=assertion.type,
                params=assertion.params,
                evidence=evidence,
                scope="case",
                judge_model=suite.judge_model,
                fatal=assertion.fatal,
                judge_call=judge_call,
            )
        )
    if any(call["outcome"] == "blocked" for call in all_calls):
        synthetic = checks.evaluate(type="noBlockedTools", params={}, evidence=evidence, scope="case")
        synthetic.synthetic = True
        results.append(synthetic)
    _finish(execution, session, results, state)
    return execution


def _finish(
    execution: CaseExecution, session: CaseSession, results: list[checks.AssertionOutcome], state: dict[str, Any]
) -> None:
    execution.tool_calls = [c.as_dict() for c in session.observed_calls()]
    execution.assertions = [r.as_dict() for r in results]
    execution.final_state = state
    if execution.status == ERROR:
        return
    errors = [r for r in results if r.status == checks.ERROR]
    failures = [r for r in results if r.status == checks.FAILED]
    if errors:
        execution.status = ERROR
        execution.reason = f"{errors[0].type} ({errors[0].scope}) could not be evaluated: {errors[0].message}"
    elif failures:
        execution.status = FAILED
        first = failures[0]
        summary = f"{first.type} ({first.scope}): {first.message}"
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        execution.reason = f"{summary}{more}" + (f"; {execution.reason}" if execution.reason else "")
    elif not results:
        execution.reason = "no assertions: the case only checks that the conversation completes"


def _conversation_error_reason(exc: ConversationError, turn_index: int) -> str:
    if isinstance(exc, ModelCallFailed):
        return f"the model call failed at turn {turn_index}: {exc}"
    if isinstance(exc, StepLimitExceeded):
        return f"turn {turn_index} did not finish: {exc}"
    return f"turn {turn_index} could not run: {exc}"


def _extend_chain(chain: list[str], turn_chain: list[str]) -> None:
    for name in turn_chain:
        if not chain or chain[-1] != name:
            chain.append(name)
