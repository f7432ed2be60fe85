"""The mock seam: a very-low-order executor provider that owns every function of a conversation under test.

It finds the conversation's case session in the process-wide registry (case_session.py) and answers each call with a
mock, a refusal (blocked), or — for control flow and an extra-allowed effect-free function — by letting that call
through to its real implementation (`PassThrough`). Conversations not under test it passes (None).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agenthost.seams import FIRST_ORDER, Conversation, FunctionContext, FunctionResult, LoadedAgent, PassThrough
from runs.engine.case_session import BlockedBecause, CaseSession, ObservedCall, Outcome, registry

CANARY_FUNCTION = "agenttest-canary"
BLOCKED_PREFIX = "[agenttest] blocked unmocked tool: "
HAS_OUTSIDE_EFFECTS = (
    " — it has effects outside agenttest, so a test must mock it; allowing it on the suite does not let it run"
)
TIMED_OUT = " — the case timed out, so nothing more of it runs"
# Force-blocked calls are not "unmocked" (the case may well mock them): their answer says what did block them.
FORCE_BLOCKED_PREFIX = "[agenttest] blocked tool: "
FORCE_BLOCKED = " — the suite force-blocks it"


class MockExecutorProvider:
    """Owns every function of a conversation under test; passes (None) for every other conversation."""

    name = "agenttest-mocks"
    order = FIRST_ORDER

    def resolve(
        self, name: str, context: FunctionContext
    ) -> Callable[[FunctionContext], FunctionResult | PassThrough] | None:
        session = registry.get(context.conversation_id)
        if session is None:
            return None
        return lambda ctx: _answer(session, name, ctx)

    def mocks(self, name: str, conversation_id: int | None) -> bool:
        """Whether the case mocks `name` (by name; which mock answers is chosen per call) and does not force-block
        it: the host offers a framework's hosted tool under test only then (agenthost.executor.mocked_by_name)."""
        session = registry.get(conversation_id)
        return session is not None and session.has_mock(name) and not session.is_force_blocked(name)

    def deadline(self, conversation_id: int | None) -> float | None:
        """When the case times out (time.monotonic()): a process agent's program is stopped there
        (agenthost.executor.case_deadline). Now, once the runner has given up on the case."""
        session = registry.get(conversation_id)
        if session is None:
            return None
        return time.monotonic() if session.expired else session.deadline

    def stopped(self, conversation_id: int | None, note: str) -> None:
        """How the case's agent took being stopped at the deadline (agenthost.executor.case_stopped): said with the
        case's timeout."""
        session = registry.get(conversation_id)
        if session is not None:
            session.stop_notes.append(note)

    def protocol(self, conversation_id: int | None, entries: list[dict[str, Any]]) -> None:
        """What a process agent's program said in a turn, normalised (agenthost.executor.case_protocol): kept for the
        case's snapshotMatches assertion."""
        session = registry.get(conversation_id)
        if session is not None:
            session.protocol_said = [*(session.protocol_said or []), *entries]

    def mocked_names(self, conversation_id: int | None) -> frozenset[str]:
        """Every name the case mocks and does not force-block: the host offers them in place of an MCP server a
        framework would connect to itself (agenthost.executor.mocked_names)."""
        session = registry.get(conversation_id)
        if session is None:
            return frozenset()
        return frozenset(
            mock.function_name for mock in session.mocks if not session.is_force_blocked(mock.function_name)
        )


def _answer(session: CaseSession, name: str, context: FunctionContext) -> FunctionResult | PassThrough:
    if session.expired:
        return _blocked(session, name, context, BlockedBecause.TIMED_OUT, TIMED_OUT)
    if name == CANARY_FUNCTION:
        if session.take_canary(context.trigger):
            return FunctionResult(content=session.canary_token, outcome=Outcome.MOCKED)
        # Anyone else naming the canary is refused like any unmocked call, in plain sight: no mock may answer it.
        return _blocked(session, name, context, BlockedBecause.CANARY)
    if session.is_force_blocked(name):
        because = BlockedBecause.FORCE_BLOCKED_MOCKED if session.has_mock(name) else BlockedBecause.FORCE_BLOCKED
        return _blocked(session, name, context, because, FORCE_BLOCKED, prefix=FORCE_BLOCKED_PREFIX)
    index = session.next_call_index(name)
    mock = session.choose_mock(name, context.arguments, index)
    if mock is not None:
        content, state_writes = mock.result, dict(mock.state_writes)
        if mock.table is not None:
            answer = session.table_call(mock, name, context.arguments)
            # A refused or unknown record changed nothing, so the mock's state writes do not apply either.
            content = (mock.result or answer.content) if answer.succeeded else answer.content
            state_writes = state_writes if answer.succeeded else {}
        result = FunctionResult(content=content, stop=mock.stop, state_writes=state_writes, outcome=Outcome.MOCKED)
        _observe(session, name, context, index, result)
        return result
    if session.is_allowed(name, context.declaration):
        # The cached listing said effect-free; the server decides now. Fails closed: the call never reaches it.
        problem = session.live_problem(context.declaration)
        if problem:
            return _blocked(session, name, context, BlockedBecause.LIVE_LISTING, f" — {problem}", index=index)

        def allowed(result: FunctionResult) -> FunctionResult:
            result.outcome = Outcome.ALLOWED
            _observe(session, name, context, index, result)
            return result

        return PassThrough(then=allowed)
    if name in session.extra_allowed:
        return _blocked(session, name, context, BlockedBecause.OUTSIDE_EFFECTS, HAS_OUTSIDE_EFFECTS, index=index)
    because = BlockedBecause.UNMATCHED if session.has_mock(name) else BlockedBecause.UNMOCKED
    return _blocked(session, name, context, because, index=index)


def _blocked(
    session: CaseSession,
    name: str,
    context: FunctionContext,
    because: str,
    why: str = "",
    *,
    index: int | None = None,
    prefix: str = BLOCKED_PREFIX,
) -> FunctionResult:
    if index is None:
        index = session.next_call_index(name)
    result = FunctionResult(content=f"{prefix}{name}{why}", stop=True, outcome=Outcome.BLOCKED)
    _observe(session, name, context, index, result, because)
    return result


def _observe(
    session: CaseSession, name: str, context: FunctionContext, index: int, result: FunctionResult, because: str = ""
) -> None:
    session.observe(
        ObservedCall(
            name=name,
            arguments=dict(context.arguments),
            outcome=result.outcome,
            result=result.content,
            turn=context.turn,
            call_index=index,
            agent=context.agent_name,
            trigger=context.trigger,
            tool_call_id=context.tool_call_id,
            blocked_because=because,
        )
    )


def apply_model_override(loaded: LoadedAgent, conversation: Conversation) -> None:
    """Agent-load hook: every agent loaded into a conversation under test runs on the model under test (through
    the record or replay provider when the run records or replays)."""
    session = registry.get(conversation.pk)
    if session is not None and session.provider:
        loaded.provider, loaded.model = session.provider, session.model
        loaded.shown_model_key = f"{session.model_provider}:{session.model}"


mock_provider = MockExecutorProvider()
