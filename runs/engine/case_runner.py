"""Executes one case on one model: a fresh sealed conversation under the mock seam, the canary, the turns, the
assertions.

The case runs on its own thread so a per-case timeout can be enforced. Its registry entry is removed by that thread
when its last call has returned — never by the waiting side on timeout — so a late tool call is still mocked.

Every model call of the conversation goes through one of the harness's runtime providers
(runs/engine/model_providers.py), and the judge's through the case session too (and, unless replayed, through the
run's throttle for the judge model's provider, runs/engine/throttle.py), so on timeout the session is expired and
nothing of the case starts any more: no model call, no tool call, no turn. Every model request carries the case's
deadline, so the call in flight ends with it (the openai provider caps each attempt's timeout at the time left and
retries nothing past it): the case ends at its timeout, plus a short grace in which that call's answer, if it comes,
is counted in the result (and the run's budget). A case thread still busy after the grace (a provider kind that
ignores the deadline) is left behind.

In record and replay mode the case gets a tape (runs/tapes/replay.py): every model call of the conversation, the judge's
included, goes through it. On timeout the tape is abandoned, which releases a replayed hang so the thread can end.

The conversation is sealed: its key lives only here, while the case runs, so nothing can be sent to it afterwards
(and a continued test conversation could run real tools).
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

from agenthost.seams import (
    Agent,
    ConversationError,
    ConversationGone,
    HeldConversation,
    Message,
    ModelCallFailed,
    ModelConfig,
    ModelRequest,
    ModelResponse,
    StepLimitExceeded,
    TurnResult,
    Usage,
    conversation_open,
    get_model,
    parse_model_key,
)
from runs.engine import assertions as checks
from runs.engine.case_session import CaseSession, MockSpec, ObservedCall, Outcome, registry
from runs.engine.durability import relax_case_commits
from runs.engine.mocking import CANARY_FUNCTION
from runs.engine.model_providers import LIVE_PROVIDER, install_providers
from runs.tapes.replay import Replayer, Tape

TEST_TAG = "agenttest"
NO_ASSERTIONS = "the case has no assertions, so it verifies nothing"
# How long a timed-out case waits for its call in flight, which its deadline has already ended: long enough for
# the call to unwind (or for an answer that came at the deadline to be counted), short enough that a case's duration
# is its timeout.
LATE_ANSWER_GRACE_SECONDS = 2.0


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
    content_hash: str = ""
    # The records the stateful mocks read and update (runs/engine/tables.py); each execution starts from these.
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


@dataclass
class SuitePlan:
    extra_allowed: frozenset[str]
    force_blocked: frozenset[str]
    judge_model: str
    timeout_seconds: float
    tags: tuple[str, ...] = ()
    # The run the cases belong to: named by the seal of each test conversation.
    run_id: int | None = None
    # The run's per-provider concurrency limits (runs/engine/throttle.py), shared by its cases.
    throttles: Any = None
    # The run's live MCP listings (agenthost LiveListings), shared by its cases: each server listed once per run.
    mcp_live: Any = None
    # The agents that have rules (whose calls only the transcript knows); None: unknown, so every turn reads it.
    rule_agents: frozenset[str] | None = None


@dataclass
class CaseExecution:
    status: str
    reason: str = ""
    conversation_id: int | None = None
    duration_ms: float = 0.0
    model_latency_ms: float = 0.0
    # The model under test's own usage and cost; the llmJudge's are apart, at the judge model's price.
    usage: Usage = field(default_factory=Usage)
    cost: Decimal = Decimal(0)
    judge_usage: Usage = field(default_factory=Usage)
    judge_cost: Decimal = Decimal(0)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    assertions: list[dict[str, Any]] = field(default_factory=list)
    final_state: dict[str, Any] = field(default_factory=dict)
    # The tables as the stateful mocks left them (empty for a case without tables).
    final_tables: dict[str, Any] = field(default_factory=dict)
    # The case's test conversation, not saved yet (execute_case(save_conversation=False)): its caller saves it in
    # the transaction that stores the result. None once saved, or when the case thread was left behind.
    conversation: HeldConversation | None = None


PASSED, FAILED, ERROR = "passed", "failed", "error"


class _Progress:
    """What the case thread has done so far; read by the waiting side when the case times out."""

    def __init__(self) -> None:
        self.conversation_id: int | None = None
        self.held: HeldConversation | None = None


def _close_this_threads_connection() -> None:
    # `connection` resolves to the calling thread's connection only when called, not when the method is looked up.
    connection.close()


class CaseWorker:
    """The thread cases run on, one after another, keeping its database connection between cases. A timed-out case
    whose thread is still stuck after its grace keeps that thread until it lets go; the next case gets a fresh one."""

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
    *,
    plan: CasePlan,
    model: ModelConfig,
    suite: SuitePlan,
    tape: Tape | None = None,
    worker: CaseWorker | None = None,
    save_conversation: bool = True,
) -> CaseExecution:
    """Run the case on the model (through `tape` in record/replay mode) and say what happened; never raises.

    `worker` is the run's case thread; without one the case gets a thread of its own. The test conversation's turns
    are written once, when the case ends: here, or with `save_conversation=False` by the caller, which saves
    `execution.conversation` with the result, in one transaction."""
    started = time.perf_counter()
    if not plan.turns:
        return CaseExecution(status=ERROR, reason="the case has no turns, so it would verify nothing")
    if not plan.assertions and not any(turn.assertions for turn in plan.turns):
        return CaseExecution(status=ERROR, reason=NO_ASSERTIONS)
    install_providers()
    session = CaseSession(
        mocks=plan.mocks,
        extra_allowed=suite.extra_allowed,
        force_blocked=suite.force_blocked,
        provider=tape.provider_name if tape is not None else LIVE_PROVIDER,
        model=model.model,
        model_provider=model.provider,
        tape=tape,
        throttles=suite.throttles,
        mcp_live=suite.mcp_live,
        tables=plan.tables,
    )
    progress = _Progress()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            relax_case_commits()
            outcome["value"] = _run(plan, suite, session, progress)
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
    session.deadline = time.monotonic() + suite.timeout_seconds
    future = worker.submit(work)
    # The case thread may see the deadline first (its call ended there, or could not start in time).
    timed_out = not _wait(future, suite.timeout_seconds) or session.ran_out
    if timed_out:
        session.expire()
        if tape is not None:
            tape.abandon()
        if not _wait(future, LATE_ANSWER_GRACE_SECONDS):
            # Stuck past its deadline: leave the thread behind, the next case gets a fresh one.
            session.leave_behind()
            worker.abandon()
    if own_worker and future.done():
        worker.close()
    if timed_out:
        hang = tape.hanging_at if isinstance(tape, Replayer) else ""
        execution = CaseExecution(
            status=ERROR,
            reason=f"the case timed out after {suite.timeout_seconds:g} s"
            + (f" (replayed the hang recorded for {hang})" if hang else ""),
            conversation_id=progress.conversation_id,
            tool_calls=[call.as_dict() for call in session.observed_calls()],
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
    if future.done() and progress.held is not None:
        # The case thread is done with the conversation; a thread left behind still holds it and saves nothing.
        execution.conversation = progress.held
        if save_conversation:
            _save_conversation(execution)
    if tape is not None and tape.failure:
        # The replay could not go on (stale, exhausted, unreadable): whatever the loop made of it, that is the news.
        execution.status, execution.reason = ERROR, tape.failure
    if session.failure:
        # A tool the harness had to block against the suite's settings: the case proves nothing about the agent.
        execution.status, execution.reason = ERROR, session.failure
    for note in (session.rate_limit_note(), session.answer_note()):
        if note:
            execution.reason = f"{execution.reason}; {note}" if execution.reason else note
    # Whatever ended the case, the tables are as its calls left them: what a reader of a timeout wants to see too.
    execution.final_tables = session.tables_snapshot()
    usage, latency_ms, judge_usage = session.totals()
    spent = tape is None or tape.spends
    execution.usage, execution.model_latency_ms, execution.judge_usage = usage, latency_ms, judge_usage
    execution.cost = _cost(model, usage) if spent else Decimal(0)
    if spent and judge_usage.total_tokens:
        # A judge that answered is a configured model: its call went through get_model.
        execution.judge_cost = _cost(get_model(suite.judge_model), judge_usage)
    execution.duration_ms = (time.perf_counter() - started) * 1000
    return execution


CONVERSATION_GONE = "its test conversation was deleted while the case ran; the transcript is kept in this result"


def note_conversation_gone(execution: CaseExecution) -> None:
    """The case's conversation was deleted while it ran (the admin deletes any conversation): its verdict and the
    turns it held in memory stand without it."""
    execution.conversation_id = None
    execution.reason = f"{execution.reason}; {CONVERSATION_GONE}" if execution.reason else CONVERSATION_GONE


def _save_conversation(execution: CaseExecution) -> None:
    held, execution.conversation = execution.conversation, None
    try:
        held.save()
    except ConversationGone:
        note_conversation_gone(execution)
    except DatabaseError as exc:
        if execution.status != ERROR:
            execution.status = ERROR
            execution.reason = f"the case's conversation could not be written: {type(exc).__name__}: {exc}"


def _wait(future: Future, seconds: float) -> bool:
    try:
        future.result(timeout=seconds)
    except FutureTimeout:
        return False
    return True


def _cost(model: ModelConfig, usage: Usage) -> Decimal:
    return Decimal(str(round(model.cost(usage), 8)))


def _seal_reason(suite: SuitePlan) -> str:
    if suite.run_id is not None:
        return f"this conversation belongs to test run {suite.run_id}"
    return "this conversation belongs to an agenttest case"


def _run(plan: CasePlan, suite: SuitePlan, session: CaseSession, progress: _Progress) -> CaseExecution:
    tape = session.tape
    live_judge = tape.complete if tape is not None else checks.call_model_live

    def judge_call(request: ModelRequest, model_key: str) -> ModelResponse:
        if tape is not None and not tape.spends:
            # A replay calls no model: there is nothing to throttle.
            return session.spend(request, lambda: tape.complete(request, model_key), judge=True)
        # Within the judge provider's limit for the run, which its agent calls share, and backed off on its 429s.
        provider, _ = parse_model_key(model_key)
        bounded = session.bounded(request)
        return session.spend(
            bounded, lambda: session.throttled(lambda: live_judge(bounded, model_key), provider=provider), judge=True
        )

    def register(conversation: Any) -> None:
        progress.conversation_id = conversation.pk
        registry.add(conversation.pk, session)

    # The case alone drives its conversation: held from start to end, its turns are written once, when it ends.
    start = {
        "agent": plan.entry_agent,
        "tags": [TEST_TAG, *suite.tags],
        "initial_state": plan.initial_state,
        "history": plan.history,
        "title": f"[test] {plan.name} on {session.model_provider}:{session.model}"[:200],
        "on_created": register,
        "seal": _seal_reason(suite),
    }
    try:
        progress.held = conversation_open(**start)
    except DatabaseError:
        # The case thread's connection died after its last use (a database restart, a killed backend, in an
        # earlier case that wrote nothing after): nothing of this case exists yet, so it starts on a fresh one.
        connection.close()
        progress.held = conversation_open(**start)
    return _play(progress.held, plan, suite, session, judge_call)


def _play(
    held: HeldConversation,
    plan: CasePlan,
    suite: SuitePlan,
    session: CaseSession,
    judge_call: Callable[[ModelRequest, str], ModelResponse],
) -> CaseExecution:
    execution = CaseExecution(status=PASSED, conversation_id=held.conversation.pk)
    canary = held.invoke_function(CANARY_FUNCTION, record=False)
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
    under_test = f"{session.provider}:{session.model}"
    for index, turn_plan in enumerate(plan.turns):
        if session.expired:
            # The waiting side reports the timeout; no turn of a timed-out case may start.
            return execution
        if session.failure:
            # The case ends Error (execute_case); its further turns would only spend model calls.
            _finish(execution, session, results, state)
            return execution
        try:
            turn = held.send(turn_plan.user_message)
        except ConversationError as exc:
            _observe_refused(session, held, exc.partial)
            execution.status = ERROR
            execution.reason = _conversation_error_reason(exc, index)
            _finish(execution, session, results, state)
            return execution
        if _may_have_refused_calls(suite, turn):
            _observe_refused(session, held, turn)
        else:
            session.observe_unavailable(turn.turn, turn.tool_calls)
        elsewhere = [key for key in turn.models if key != under_test]
        if elsewhere:
            # Its calls bypassed the harness's provider: neither counted nor stopped at a timeout, and not the model
            # under test — whatever the turn did proves nothing about it.
            execution.status = ERROR
            execution.reason = (
                f"the model override is not live: turn {index} ran on {', '.join(elsewhere)} instead of the model "
                "under test"
            )
            _finish(execution, session, results, turn.state)
            return execution
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
            tables=session.tables_snapshot(),
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
        output="\n".join(outputs), tool_calls=all_calls, state=state, agent_chain=chain, entry_agent=entry_name,
        tables=session.tables_snapshot(),
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
    if any(call["outcome"] in (Outcome.BLOCKED, Outcome.UNAVAILABLE) for call in all_calls):
        synthetic = checks.evaluate(type="noBlockedTools", params={}, evidence=evidence, scope="case")
        synthetic.synthetic = True
        results.append(synthetic)
    _finish(execution, session, results, state)
    return execution


def _may_have_refused_calls(suite: SuitePlan, turn: TurnResult) -> bool:
    """Whether the transcript may hold refused calls the turn's record does not: a rule's, fired by an agent of the
    turn (or, on the first turn, at the conversation's start). Without rules the record says it all, and the read
    per turn is saved."""
    if suite.rule_agents is None:
        return True
    return bool(suite.rule_agents.intersection(turn.agent_chain))


def _observe_refused(session: CaseSession, held: HeldConversation, turn: TurnResult | None) -> None:
    """Make the calls the host refused because the agent does not declare the function part of the case's calls;
    they never reached the seam. A turn's record holds the model's; a rule's are read from the transcript."""
    if turn is not None:
        session.observe_unavailable(turn.turn, turn.tool_calls)
    calls: dict[str, Message] = {}
    refused: list[tuple[Message, Message]] = []
    for message in held.messages():
        if message.role == Message.Role.TOOL_CALL and message.trigger == "rule":
            calls[message.tool_call_id] = message
        elif (
            message.role == Message.Role.TOOL_RESULT
            and message.outcome == Outcome.UNAVAILABLE
            and message.tool_call_id in calls
        ):
            refused.append((calls[message.tool_call_id], message))
    names = dict(Agent.objects.filter(pk__in={call.agent_id for call, _ in refused}).values_list("pk", "name"))
    for call, message in refused:
        session.observe_at_turn_end(
            ObservedCall(
                name=call.function_name,
                arguments=call.arguments,
                outcome=Outcome.UNAVAILABLE,
                result=message.content,
                turn=call.turn,
                call_index=None,
                agent=names.get(call.agent_id, ""),
                trigger=call.trigger,
                tool_call_id=call.tool_call_id,
            )
        )


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
        execution.reason = failure_reason(failures) + (f"; {execution.reason}" if execution.reason else "")


def failure_reason(failures: list[checks.AssertionOutcome]) -> str:
    """The headline of a failed result: the root cause first. A blocked call stops its turn, so the assertions that
    fail after it are its symptoms: the blocked-call finding leads, with its remedy, and the rest are counted."""
    causes = [r for r in failures if r.type == "noBlockedTools"]
    symptoms = [r for r in failures if r.type != "noBlockedTools"]
    if causes:
        headline = "; ".join(dict.fromkeys(r.message for r in causes))
    else:
        headline, symptoms = f"{symptoms[0].type} ({symptoms[0].scope}): {symptoms[0].message}", symptoms[1:]
        return headline + (f" (+{len(symptoms)} more)" if symptoms else "")
    if not symptoms:
        return headline
    first = symptoms[0]
    more = f" (+{len(symptoms) - 1} more)" if len(symptoms) > 1 else ""
    return f"{headline} — so {first.type} ({first.scope}) failed too{more}"


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
