"""The mock seam: a very-low-order executor provider that owns every function of a conversation under test.

Sessions live in a process-wide registry keyed by conversation id. Not a context variable or thread-local: those
are silently lost across a thread or queue boundary, and losing one would let a tool execute for real.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.seams import (
    CONTROL_FLOW_FUNCTIONS,
    Conversation,
    FunctionContext,
    FunctionResult,
    LoadedAgent,
    execute_without_providers,
)

if TYPE_CHECKING:
    from runs.replay import Tape

CANARY_FUNCTION = "agenttest-canary"
BLOCKED_PREFIX = "[agenttest] blocked unmocked tool: "
ALLOWED_FUNCTIONS = frozenset(CONTROL_FLOW_FUNCTIONS)


class Outcome:
    MOCKED = "mocked"
    BLOCKED = "blocked"
    ALLOWED = "allowed"


@dataclass(frozen=True)
class MockSpec:
    function_name: str
    result: str
    arguments: dict[str, Any] | None = None
    call_index: int | None = None
    stop: bool = False
    state_writes: dict[str, Any] = field(default_factory=dict)


@dataclass
class ObservedCall:
    name: str
    arguments: dict[str, Any]
    outcome: str
    result: str
    turn: int
    call_index: int
    agent: str
    trigger: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "arguments": self.arguments,
            "outcome": self.outcome,
            "result": self.result,
            "turn": self.turn,
            "call_index": self.call_index,
            "agent": self.agent,
            "trigger": self.trigger,
        }


@dataclass
class CaseSession:
    mocks: list[MockSpec]
    extra_allowed: frozenset[str] = frozenset()
    force_blocked: frozenset[str] = frozenset()
    # The provider every agent of the conversation runs on: the model under test's, or in record/replay mode the
    # runtime provider that serves the session's tape. The model name is always the real one.
    provider: str = ""
    model: str = ""
    tape: Tape | None = None
    canary_token: str = field(default_factory=lambda: secrets.token_hex(8))
    observed: list[ObservedCall] = field(default_factory=list)
    _calls_per_function: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def is_allowed(self, name: str) -> bool:
        if name in self.force_blocked:
            return False
        return name in ALLOWED_FUNCTIONS or name in self.extra_allowed

    def next_call_index(self, name: str) -> int:
        with self._lock:
            index = self._calls_per_function.get(name, 0)
            self._calls_per_function[name] = index + 1
            return index

    def choose_mock(self, name: str, arguments: dict[str, Any], call_index: int) -> MockSpec | None:
        """Argument-subset match first, then the call index, then an unconditional mock."""
        candidates = [mock for mock in self.mocks if mock.function_name == name]
        for mock in candidates:
            if (
                mock.arguments is not None
                and _is_subset(mock.arguments, arguments)
                and (mock.call_index is None or mock.call_index == call_index)
            ):
                return mock
        for mock in candidates:
            if mock.arguments is None and mock.call_index == call_index:
                return mock
        for mock in candidates:
            if mock.arguments is None and mock.call_index is None:
                return mock
        return None

    def observe(self, call: ObservedCall) -> None:
        with self._lock:
            self.observed.append(call)

    def observed_calls(self) -> list[ObservedCall]:
        with self._lock:
            return list(self.observed)


def _is_subset(expected: Any, actual: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and _is_subset(value, actual[key]) for key, value in expected.items()
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(_is_subset(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return expected == actual


class SessionRegistry:
    def __init__(self) -> None:
        self._sessions: dict[int, CaseSession] = {}
        self._lock = threading.Lock()

    def add(self, conversation_id: int, session: CaseSession) -> None:
        with self._lock:
            self._sessions[conversation_id] = session

    def get(self, conversation_id: int | None) -> CaseSession | None:
        if conversation_id is None:
            return None
        with self._lock:
            return self._sessions.get(conversation_id)

    def remove(self, conversation_id: int) -> None:
        with self._lock:
            self._sessions.pop(conversation_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)


registry = SessionRegistry()


class MockExecutorProvider:
    """Owns every function of a conversation under test; passes (None) for every other conversation."""

    name = "agenttest-mocks"
    order = -1_000_000

    def resolve(self, name: str, context: FunctionContext) -> Any:
        session = registry.get(context.conversation_id)
        if session is None:
            return None
        if name == CANARY_FUNCTION:
            return lambda ctx: FunctionResult(content=session.canary_token, outcome=Outcome.MOCKED)
        return lambda ctx: _answer(session, name, ctx)


def _answer(session: CaseSession, name: str, context: FunctionContext) -> FunctionResult:
    index = session.next_call_index(name)
    if name not in session.force_blocked:
        mock = session.choose_mock(name, context.arguments, index)
        if mock is not None:
            result = FunctionResult(
                content=mock.result, stop=mock.stop, state_writes=dict(mock.state_writes), outcome=Outcome.MOCKED
            )
            _observe(session, name, context, index, result)
            return result
        if session.is_allowed(name):
            result = execute_without_providers(name, context)
            result.outcome = Outcome.ALLOWED
            _observe(session, name, context, index, result)
            return result
    result = FunctionResult(content=f"{BLOCKED_PREFIX}{name}", stop=True, outcome=Outcome.BLOCKED)
    _observe(session, name, context, index, result)
    return result


def _observe(session: CaseSession, name: str, context: FunctionContext, index: int, result: FunctionResult) -> None:
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
        )
    )


def apply_model_override(loaded: LoadedAgent, conversation: Conversation) -> None:
    """Agent-load hook: every agent loaded into a conversation under test runs on the model under test (through
    the record or replay provider when the run records or replays)."""
    session = registry.get(conversation.pk)
    if session is not None and session.provider:
        loaded.provider, loaded.model = session.provider, session.model


mock_provider = MockExecutorProvider()
