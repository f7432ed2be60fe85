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

import functools
import json
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

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
    ProviderError,
    StepLimitExceeded,
    TurnResult,
    UnknownModel,
    Usage,
    conversation_open,
    get_model,
    parse_model_key,
)
from runs.engine import assertions as checks
from runs.engine.case_session import CaseSession, ObservedCall, Outcome, registry
from runs.engine.durability import relax_case_commits
from runs.engine.mocking import CANARY_FUNCTION
from runs.engine.model_providers import LIVE_PROVIDER, install_providers
from runs.engine.plans import AssertionPlan, CasePlan, SuitePlan
from runs.engine.simulated_user import (
    BY_CONDITION,
    BY_ERROR,
    BY_TURN_LIMIT,
    BY_USER,
    STILL_GOING,
    Exchange,
    Move,
    SimulatedUserPlan,
    SimulationRecord,
    UnusableAnswer,
    read_move,
    stop_text,
    user_request,
)
from runs.engine.tags import TEST_TAG
from runs.tapes.replay import Replayer, Tape

if TYPE_CHECKING:
    from runs.engine.budget import RunBudget

NO_ASSERTIONS = "the case has no assertions, so it verifies nothing"
# How long a timed-out case waits for its call in flight, which its deadline has already ended: long enough for
# the call to unwind (or for an answer that came at the deadline to be counted), short enough that a case's duration
# is its timeout.
LATE_ANSWER_GRACE_SECONDS = 2.0
# The names of case threads (a stuck one is left behind: `run` exits without waiting for it).
CASE_THREAD_PREFIX = "agenttest-case"


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
    # A case with a simulated user: its turns, what stopped it and what its model used (CaseResult.simulation).
    simulation: SimulationRecord | None = None


PASSED, FAILED, ERROR = "passed", "failed", "error"


class _Progress:
    """What the case thread has done so far; read by the waiting side when the case times out."""

    def __init__(self) -> None:
        self.conversation_id: int | None = None
        self.held: HeldConversation | None = None
        self.simulation: SimulationRecord | None = None


def _close_this_threads_connection() -> None:
    # `connection` resolves to the calling thread's connection only when called, not when the method is looked up.
    connection.close()


class CaseWorker:
    """The thread cases run on, one after another, keeping its database connection between cases. A timed-out case
    whose thread is still stuck after its grace keeps that thread until it lets go; the next case gets a fresh one."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None

    def submit(self, work: Callable[[], None]) -> Future[None]:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=CASE_THREAD_PREFIX)
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
    budget: RunBudget | None = None,
) -> CaseExecution:
    """Run the case on the model (through `tape` in record/replay mode) and say what happened; never raises.

    `worker` is the run's case thread; without one the case gets a thread of its own. The test conversation's turns
    are written once, when the case ends: here, or with `save_conversation=False` by the caller, which saves
    `execution.conversation` with the result, in one transaction."""
    started = time.perf_counter()
    refused = _refusal(plan)
    if refused is not None:
        return CaseExecution(status=ERROR, reason=refused)
    install_providers()
    session = _case_session(plan, model, suite, tape, budget)
    progress = _Progress()
    future, outcome, timed_out = _drive(plan, suite, session, progress, tape, worker)
    execution = _what_happened(suite, session, progress, tape, outcome, timed_out=timed_out)
    if future.done() and progress.held is not None:
        # The case thread is done with the conversation; a thread left behind still holds it and saves nothing.
        execution.conversation = progress.held
        if save_conversation:
            _save_conversation(execution, progress.held)
    _overrule(execution, session, tape)
    _count_usage(execution, plan, model, suite, session, tape)
    execution.duration_ms = (time.perf_counter() - started) * 1000
    return execution


def _refusal(plan: CasePlan) -> str | None:
    """Why the case cannot run at all, before anything of it starts."""
    if not plan.turns and plan.simulated_user is None:
        return "the case has no turns, so it would verify nothing"
    if not plan.assertions and not any(turn.assertions for turn in plan.turns):
        return NO_ASSERTIONS
    if plan.simulated_user is not None and not plan.simulated_user.model:
        return (
            "no model plays the simulated user: set simulated_user.model on the case, or a judge model on the "
            "suite (the default)"
        )
    return None


def _case_session(
    plan: CasePlan, model: ModelConfig, suite: SuitePlan, tape: Tape | None, budget: RunBudget | None
) -> CaseSession:
    return CaseSession(
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
        # A replay spends nothing, so no budget stops it.
        budget=budget if tape is None or tape.spends else None,
        price=functools.partial(_price, model, suite, plan),
    )


def _drive(
    plan: CasePlan,
    suite: SuitePlan,
    session: CaseSession,
    progress: _Progress,
    tape: Tape | None,
    worker: CaseWorker | None,
) -> tuple[Future[None], dict[str, Any], bool]:
    """Play the case on its thread until it ends, or its timeout and the grace after it pass: the thread's future,
    what the thread left (its "value", or the "crash" that ended it) and whether the case timed out."""
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
    return future, outcome, timed_out


def _what_happened(
    suite: SuitePlan,
    session: CaseSession,
    progress: _Progress,
    tape: Tape | None,
    outcome: dict[str, Any],
    *,
    timed_out: bool,
) -> CaseExecution:
    """The case's execution as its thread left it, or, when it timed out or crashed, as far as it got."""
    if timed_out:
        hang = tape.hanging_at if isinstance(tape, Replayer) else ""
        execution = CaseExecution(
            status=ERROR,
            reason=f"the case timed out after {suite.timeout_seconds:g} s"
            + (f" (replayed the hang recorded for {hang})" if hang else "")
            + "".join(f"; {note}" for note in session.stop_notes),
            conversation_id=progress.conversation_id,
            tool_calls=[call.as_dict() for call in session.observed_calls()],
            simulation=progress.simulation,
        )
        if progress.simulation is not None and not progress.simulation.stop:
            progress.simulation.stop = {"by": BY_ERROR, "reason": execution.reason}
        return execution
    if "crash" in outcome:
        exc = outcome["crash"]
        what = "lost its database connection" if isinstance(exc, DatabaseError) else "crashed"
        return CaseExecution(
            status=ERROR,
            reason=f"the case {what}: {type(exc).__name__}: {str(exc).strip()}",
            conversation_id=progress.conversation_id,
        )
    played: CaseExecution = outcome["value"]
    return played


def _overrule(execution: CaseExecution, session: CaseSession, tape: Tape | None) -> None:
    """What the harness saw that outweighs the case's own verdict, and the notes every reader of it needs."""
    if tape is not None and tape.failure:
        # The replay could not go on (stale, exhausted, unreadable): whatever the loop made of it, that is the news.
        execution.status, execution.reason = ERROR, tape.failure
    if session.failure:
        # A tool the harness had to block against the suite's settings: the case proves nothing about the agent.
        execution.status, execution.reason = ERROR, session.failure
    for note in (session.rate_limit_note(), session.answer_note()):
        if note:
            execution.reason = f"{execution.reason}; {note}" if execution.reason else note


def _count_usage(
    execution: CaseExecution,
    plan: CasePlan,
    model: ModelConfig,
    suite: SuitePlan,
    session: CaseSession,
    tape: Tape | None,
) -> None:
    """The tables the case left, and what its models used and cost (nothing, for a replay)."""
    # Whatever ended the case, the tables are as its calls left them: what a reader of a timeout wants to see too.
    execution.final_tables = session.tables_snapshot()
    usage, latency_ms, judge_usage = session.totals()
    spent = tape is None or tape.spends
    execution.usage, execution.model_latency_ms, execution.judge_usage = usage, latency_ms, judge_usage
    execution.cost = _cost(model, usage) if spent else Decimal(0)
    if spent and judge_usage.total_tokens:
        # A judge that answered is a configured model: its call went through get_model.
        execution.judge_cost = _cost(get_model(suite.judge_model), judge_usage)
    if execution.simulation is not None and plan.simulated_user is not None:
        _count_user_model(execution, execution.simulation, plan.simulated_user, session.user_total(), spent=spent)


def _count_user_model(
    execution: CaseExecution, record: SimulationRecord, user: SimulatedUserPlan, usage: Usage, *, spent: bool
) -> None:
    """The simulated user's model is the harness's, as the judge is: its tokens and cost count with the judge's on
    the result (and so in the run's budget), at its own model's price; the simulation record keeps its share."""
    cost = Decimal(0)
    if spent and usage.total_tokens:
        try:
            cost = _cost(get_model(user.model), usage)
        except UnknownModel:
            # Unconfigured since it answered (the providers file changed mid-run): unpriced rather than a crash.
            cost = Decimal(0)
    record.usage = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    record.cost = str(cost)
    execution.judge_usage = execution.judge_usage + usage
    execution.judge_cost = Decimal(execution.judge_cost or 0) + cost


CONVERSATION_GONE = "its test conversation was deleted while the case ran; the transcript is kept in this result"


def note_conversation_gone(execution: CaseExecution) -> None:
    """The case's conversation was deleted while it ran (the admin deletes any conversation): its verdict and the
    turns it held in memory stand without it."""
    execution.conversation_id = None
    execution.reason = f"{execution.reason}; {CONVERSATION_GONE}" if execution.reason else CONVERSATION_GONE


def _save_conversation(execution: CaseExecution, held: HeldConversation) -> None:
    execution.conversation = None
    try:
        held.save()
    except ConversationGone:
        note_conversation_gone(execution)
    except DatabaseError as exc:
        if execution.status != ERROR:
            execution.status = ERROR
            execution.reason = f"the case's conversation could not be written: {type(exc).__name__}: {exc}"


def _wait(future: Future[Any], seconds: float) -> bool:
    try:
        future.result(timeout=seconds)
    except FutureTimeout:
        return False
    return True


def _price(model: ModelConfig, suite: SuitePlan, plan: CasePlan, usage: Usage, who: str) -> Decimal:
    """What one call's usage costs at its model's price: the model under test's, the judge's or the simulated
    user's."""
    if who == "agent":
        return _cost(model, usage)
    key = plan.simulated_user.model if who == "user" and plan.simulated_user is not None else suite.judge_model
    try:
        return _cost(get_model(key), usage)
    except UnknownModel:
        return Decimal(0)


def _cost(model: ModelConfig, usage: Usage) -> Decimal:
    return Decimal(str(round(model.cost(usage), 8)))


def _seal_reason(suite: SuitePlan) -> str:
    if suite.run_id is not None:
        return f"this conversation belongs to test run {suite.run_id}"
    return "this conversation belongs to an agenttest case"


def _run(plan: CasePlan, suite: SuitePlan, session: CaseSession, progress: _Progress) -> CaseExecution:
    tape = session.tape
    live_call = tape.complete if tape is not None else checks.call_model_live

    def harness_call(request: ModelRequest, model_key: str, *, user: bool) -> ModelResponse:
        # The judge's and the simulated user's calls: the harness's own models, through the case's tape.
        if tape is not None and not tape.spends:
            # A replay calls no model: there is nothing to throttle.
            return session.spend(request, lambda: tape.complete(request, model_key), judge=not user, user=user)
        # Within the provider's limit for the run, which its agent calls share, and backed off on its 429s.
        provider, _ = parse_model_key(model_key)
        bounded = session.bounded(request)
        return session.spend(
            bounded,
            lambda: session.throttled(lambda: live_call(bounded, model_key), provider=provider),
            judge=not user,
            user=user,
        )

    def judge_call(request: ModelRequest, model_key: str) -> ModelResponse:
        return harness_call(request, model_key, user=False)

    def user_call(request: ModelRequest, model_key: str) -> ModelResponse:
        return harness_call(request, model_key, user=True)

    def register(conversation: Any) -> None:
        progress.conversation_id = conversation.pk
        registry.add(conversation.pk, session)

    # The case alone drives its conversation: held from start to end, its turns are written once, when it ends.
    start: dict[str, Any] = {
        "agent": plan.entry_agent,
        "tags": [TEST_TAG, *suite.tags],
        "initial_state": plan.initial_state,
        "history": plan.history,
        "title": f"[test] {plan.name} on {session.model_provider}:{session.model}"[:200],
        "on_created": register,
        "seal": _seal_reason(suite),
        "network_allow": suite.network_allow,
    }
    try:
        progress.held = conversation_open(**start)
    except DatabaseError:
        # The case thread's connection died after its last use (a database restart, a killed backend, in an
        # earlier case that wrote nothing after): nothing of this case exists yet, so it starts on a fresh one.
        connection.close()
        progress.held = conversation_open(**start)
    return _play(progress.held, plan, suite, session, judge_call, user_call, progress)


@dataclass
class _Talk:
    """What the case's turns have produced so far, and the conversation as its simulated user sees it."""

    entry_agent: str
    state: dict[str, Any]
    exchanges: list[Exchange]
    outputs: list[str] = field(default_factory=list)
    chain: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    results: list[checks.AssertionOutcome] = field(default_factory=list)

    def evidence(self, session: CaseSession, **extra: Any) -> checks.Evidence:
        """The whole conversation so far, as case-level assertions and end conditions read it."""
        return checks.Evidence(
            output="\n".join(self.outputs),
            tool_calls=[c.as_dict() for c in session.observed_calls()],
            state=self.state,
            agent_chain=self.chain,
            entry_agent=self.entry_agent,
            tables=session.tables_snapshot(),
            nodes_visited=self.nodes,
            **extra,
        )


def _play(
    held: HeldConversation,
    plan: CasePlan,
    suite: SuitePlan,
    session: CaseSession,
    judge_call: Callable[[ModelRequest, str], ModelResponse],
    user_call: Callable[[ModelRequest, str], ModelResponse],
    progress: _Progress,
) -> CaseExecution:
    """The canary, the scripted turns, the simulated user's, then the case's assertions."""
    execution = CaseExecution(status=PASSED, conversation_id=held.conversation.pk)
    dead_seam = _canary_failure(held, session)
    if dead_seam:
        execution.status, execution.reason = ERROR, dead_seam
        return execution
    talk = _Talk(
        entry_agent=plan.entry_agent.name,
        state=dict(plan.initial_state),
        exchanges=[
            Exchange("user" if item["role"] == "user" else "agent", item["content"], None) for item in plan.history
        ],
    )
    went_on, simulated = _play_scripted(held, plan, suite, session, judge_call, talk, execution)
    if not went_on:
        return execution
    if simulated is not None:
        # Kept on the progress too: a case that times out still says which turns the user model wrote.
        record = SimulationRecord(user_model=simulated.model, goal=simulated.goal)
        execution.simulation = progress.simulation = record
        if not _simulate(held, plan, simulated, suite, session, judge_call, user_call, talk, execution, record):
            return execution
    _check_case_assertions(held, plan, suite, session, judge_call, talk)
    _finish(execution, session, talk.results, talk.state)
    _note_cut_off(execution)
    return execution


def _canary_failure(held: HeldConversation, session: CaseSession) -> str:
    """Why the mock seam is not live, or "" when the canary function answered the harness's token."""
    canary = held.invoke_function(CANARY_FUNCTION, record=False)
    if canary.content == session.canary_token:
        return ""
    return (
        "the mock seam is not live: the canary function answered "
        f"{canary.content[:200]!r} instead of the harness's token, so tools could run for real; nothing was sent"
    )


def _play_scripted(
    held: HeldConversation,
    plan: CasePlan,
    suite: SuitePlan,
    session: CaseSession,
    judge_call: Callable[[ModelRequest, str], ModelResponse],
    talk: _Talk,
    execution: CaseExecution,
) -> tuple[bool, SimulatedUserPlan | None]:
    """The case's scripted turns: whether the case can go on (else its execution says why), and the simulated user
    that plays next, unless a fatal assertion failed."""
    simulated = plan.simulated_user
    for index, turn_plan in enumerate(plan.turns):
        turn, fatal_failed = _turn(
            held,
            index,
            turn_plan.user_message,
            turn_plan.assertions,
            suite=suite,
            session=session,
            judge_call=judge_call,
            talk=talk,
            execution=execution,
        )
        if turn is None:
            return False, None
        remaining = len(plan.turns) - index - 1
        if fatal_failed and (remaining or simulated is not None):
            skipped = [f"{remaining} turn(s)"] if remaining else []
            skipped += ["the simulated user's turns"] if simulated is not None else []
            execution.reason = f"a fatal assertion failed at turn {index}; {' and '.join(skipped)} skipped"
            return True, None
    return True, simulated


def _check_case_assertions(
    held: HeldConversation,
    plan: CasePlan,
    suite: SuitePlan,
    session: CaseSession,
    judge_call: Callable[[ModelRequest, str], ModelResponse],
    talk: _Talk,
) -> None:
    """The case-level assertions on the whole conversation, and a blocked or unavailable call's own finding."""
    transcript = (
        [
            {"role": m.role, "content": m.content, "function_name": m.function_name, "arguments": m.arguments}
            for m in held.messages()
        ]
        if _judges_a_goal(plan)
        else []
    )
    evidence = talk.evidence(
        session, transcript=transcript, goal=plan.simulated_user.goal if plan.simulated_user else "",
        protocol_said=session.protocol_said, updating_snapshots=suite.update_snapshots,
    )
    for assertion in plan.assertions:
        talk.results.append(
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
    if any(call["outcome"] in (Outcome.BLOCKED, Outcome.UNAVAILABLE) for call in evidence.tool_calls):
        synthetic = checks.evaluate(type="noBlockedTools", params={}, evidence=evidence, scope="case")
        synthetic.synthetic = True
        talk.results.append(synthetic)


def _note_cut_off(execution: CaseExecution) -> None:
    simulation = execution.simulation
    if simulation is not None and simulation.stop.get("by") == BY_TURN_LIMIT and execution.status != ERROR:
        # Cut off, not finished: like a timeout, it says nothing certain about the agent (the assertions still
        # show how far it got).
        note = stop_text(simulation.stop)
        execution.status = ERROR
        execution.reason = f"{note}; raise max_turns, or check the user model's goal" + (
            f" ({execution.reason})" if execution.reason else ""
        )


def _judges_a_goal(plan: CasePlan) -> bool:
    return any(assertion.type == "goalReached" for assertion in plan.assertions)


def _turn(
    held: HeldConversation,
    index: int,
    text: str,
    assertions: list[AssertionPlan],
    *,
    suite: SuitePlan,
    session: CaseSession,
    judge_call: Callable[[ModelRequest, str], ModelResponse],
    talk: _Talk,
    execution: CaseExecution,
) -> tuple[TurnResult | None, bool]:
    """Send one user message and check its turn's assertions: the turn, and whether a fatal assertion failed. None
    when the case cannot go on (its execution then says why, or the waiting side reports the timeout)."""
    if session.expired:
        # The waiting side reports the timeout; no turn of a timed-out case may start.
        return None, False
    if session.failure:
        # The case ends Error (execute_case); its further turns would only spend model calls.
        _finish(execution, session, talk.results, talk.state)
        return None, False
    try:
        turn = held.send(text)
    except ConversationError as exc:
        _observe_refused(session, held, exc.partial)
        execution.status = ERROR
        execution.reason = _conversation_error_reason(exc, index)
        _finish(execution, session, talk.results, talk.state)
        return None, False
    if _may_have_refused_calls(suite, turn):
        _observe_refused(session, held, turn)
    else:
        session.observe_unavailable(turn.turn, turn.tool_calls)
    elsewhere = _models_elsewhere(session, turn)
    if elsewhere:
        # Its calls bypassed the harness's provider: neither counted nor stopped at a timeout, and not the model
        # under test — whatever the turn did proves nothing about it.
        execution.status = ERROR
        execution.reason = (
            f"the model override is not live: turn {index} ran on {', '.join(elsewhere)} instead of the model "
            "under test"
        )
        _finish(execution, session, talk.results, turn.state)
        return None, False
    talk.outputs.append(turn.output)
    _extend_chain(talk.chain, turn.agent_chain)
    talk.nodes.extend(turn.nodes_visited)
    talk.state = turn.state
    talk.exchanges += [Exchange("user", text, index), Exchange("agent", turn.output, index)]
    fatal_failed = _check_turn_assertions(
        turn, index, assertions, suite=suite, session=session, judge_call=judge_call, talk=talk
    )
    return turn, fatal_failed


def _models_elsewhere(session: CaseSession, turn: TurnResult) -> list[str]:
    """The models the turn ran on other than the model under test."""
    under_test = f"{session.provider}:{session.model}"
    return [key for key in turn.models if key != under_test]


def _check_turn_assertions(
    turn: TurnResult,
    index: int,
    assertions: list[AssertionPlan],
    *,
    suite: SuitePlan,
    session: CaseSession,
    judge_call: Callable[[ModelRequest, str], ModelResponse],
    talk: _Talk,
) -> bool:
    """The turn's assertions on what the turn did, added to the case's results: whether a fatal one failed."""
    turn_calls = [c.as_dict() for c in session.observed_calls() if c.turn == turn.turn]
    evidence = checks.Evidence(
        output=turn.output,
        tool_calls=turn_calls,
        state=turn.state,
        agent_chain=turn.agent_chain,
        entry_agent=talk.entry_agent,
        tables=session.tables_snapshot(),
        nodes_visited=turn.nodes_visited,
    )
    fatal_failed = False
    for assertion in assertions:
        result = checks.evaluate(
            type=assertion.type,
            params=assertion.params,
            evidence=evidence,
            scope=f"turn {index}",
            judge_model=suite.judge_model,
            fatal=assertion.fatal,
            judge_call=judge_call,
        )
        talk.results.append(result)
        fatal_failed = fatal_failed or (assertion.fatal and not result.passed)
    return fatal_failed


def _simulate(
    held: HeldConversation,
    plan: CasePlan,
    user: SimulatedUserPlan,
    suite: SuitePlan,
    session: CaseSession,
    judge_call: Callable[[ModelRequest, str], ModelResponse],
    user_call: Callable[[ModelRequest, str], ModelResponse],
    talk: _Talk,
    execution: CaseExecution,
    record: SimulationRecord,
) -> bool:
    """The simulated user's turns, after the scripted ones, until it is done or gives up, an end condition holds or
    the turn limit is reached (`record.stop` says which). False when the case cannot go on: its execution says why."""
    first = len(plan.turns)
    for index in range(first, first + user.max_turns):
        after = index - 1 if index > 0 else None
        if session.expired:
            return False
        if session.failure:
            _finish(execution, session, talk.results, talk.state)
            return False
        move = _user_move(user, user_call, talk, index, execution)
        if move is None:
            record.stop = {"by": BY_ERROR, "reason": execution.reason, "after_turn": after}
            _finish(execution, session, talk.results, talk.state)
            return False
        if move.status != STILL_GOING:
            record.stop = {"by": BY_USER, "status": move.status, "reason": move.reason, "after_turn": after}
            if move.message:
                record.stop["message"] = move.message
            return True
        turn, _ = _turn(
            held,
            index,
            move.message,
            [],
            suite=suite,
            session=session,
            judge_call=judge_call,
            talk=talk,
            execution=execution,
        )
        if turn is None:
            return False
        record.turns.append(index)
        record.conversation_turns.append(turn.turn)
        for kind, params in user.end_when:
            if checks.evaluate(type=kind, params=params, evidence=talk.evidence(session), scope="end").passed:
                record.stop = {"by": BY_CONDITION, "condition": _condition_text(kind, params), "after_turn": index}
                return True
    record.stop = {"by": BY_TURN_LIMIT, "max_turns": user.max_turns, "after_turn": first + user.max_turns - 1}
    return True


def _user_move(
    user: SimulatedUserPlan,
    user_call: Callable[[ModelRequest, str], ModelResponse],
    talk: _Talk,
    index: int,
    execution: CaseExecution,
) -> Move | None:
    """The simulated user's next move, or None when its model could not give one (the execution then says why)."""
    try:
        return read_move(user_call(user_request(user, talk.exchanges, turn=index), user.model))
    except (ProviderError, UnknownModel, UnusableAnswer) as exc:
        execution.status = ERROR
        if isinstance(exc, UnusableAnswer):
            execution.reason = f"the simulated user's model (turn {index}) {exc}"
        elif isinstance(exc, UnknownModel):
            execution.reason = f"the simulated user's model cannot be used: {exc}"
        else:
            execution.reason = f"the simulated user's model failed at turn {index}: {exc}"
        return None


def _condition_text(kind: str, params: dict[str, Any]) -> str:
    return f"{kind} {json.dumps(params, ensure_ascii=False, sort_keys=True)}"


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
    names: dict[int | None, str] = dict(
        Agent.objects.filter(pk__in={call.agent_id for call, _ in refused}).values_list("pk", "name")
    )
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
