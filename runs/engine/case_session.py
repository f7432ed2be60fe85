"""The case session and the process-wide registry that holds it.

A session is what the harness knows of one conversation under test: its mocks, the suite's allow and force-block
lists, the model it runs on (and its tape in record and replay mode), the calls observed at the seam and what its
model calls used. The mock seam (mocking.py), the runtime providers (model_providers.py) and the runner find it by
conversation id in `registry`.

The registry is process-wide, not a context variable or thread-local: those are silently lost across a thread or
queue boundary, and losing a session would let a tool execute for real.

A session also meters the case's model calls (`CaseSession.spend`), so that once the case timed out nothing of it
starts any more — no tool call, no model call — while a call already in flight is still counted when it returns.
Every request of the case carries its deadline (`bounded`): the provider ends the call there, so a call in flight
at the timeout returns with it, rather than after its provider's timeout × attempts.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from agenthost.seams import (
    CONTROL_FLOW_FUNCTIONS,
    DEADLINE,
    LiveListings,
    ModelRequest,
    ModelResponse,
    ProviderError,
    Usage,
    function_is_effect_free,
)
from runs.engine.tables import TableAnswer, Tables, table_call, tables_copy
from runs.engine.throttle import CASE_TIMED_OUT, RunThrottles, Slot
from runs.tapes.replay import Tape

ALLOWED_FUNCTIONS = frozenset(CONTROL_FLOW_FUNCTIONS)
# Without a Retry-After, a rate-limited case backs off 1, 2, 4 … s; no single wait is longer than a minute.
RATE_LIMIT_BACKOFF = 1.0
RATE_LIMIT_MAX_WAIT = 60.0
# What a case keeps of its time, after the last wait for a rate limit, to report the 429 and finish.
REPORT_MARGIN_SECONDS = 0.5
# A model call the run's budget (budget.py) refused: nothing was sent (issue 37, item 7).
BUDGET_SPENT = "budget_spent"


class Outcome:
    MOCKED = "mocked"
    BLOCKED = "blocked"
    ALLOWED = "allowed"
    # Set by the host, not here: the agent does not declare the function, so the call never reached the seam.
    UNAVAILABLE = "unavailable"


class BlockedBecause:
    """Why the seam blocked a call: the root cause a failed result names first, each with its own remedy."""

    UNMOCKED = "unmocked"
    # The function has mocks, but none matches this call's arguments or call index.
    UNMATCHED = "unmatched"
    FORCE_BLOCKED = "force-blocked"
    # Force-blocked although the case mocks it: the block list wins, the mock is never used.
    FORCE_BLOCKED_MOCKED = "force-blocked-mocked"
    OUTSIDE_EFFECTS = "outside-effects"
    TIMED_OUT = "timed-out"
    CANARY = "canary"
    # An extra-allowed MCP tool whose server, listed live, no longer agrees with the cached listing.
    LIVE_LISTING = "live-listing"


@dataclass(frozen=True)
class MockSpec:
    function_name: str
    result: str
    arguments: dict[str, Any] | None = None
    call_index: int | None = None
    stop: bool = False
    state_writes: dict[str, Any] = field(default_factory=dict)
    # A stateful mock's table operation (cases/schema.py TableMock): it answers from the session's tables.
    table: dict[str, Any] | None = None


@dataclass
class ObservedCall:
    name: str
    arguments: Any
    outcome: str
    result: str
    turn: int
    # None for a call that never reached the seam (the host refused it), so no mock could be chosen by its index.
    call_index: int | None
    agent: str
    trigger: str
    # Only to place calls the host refused among the others of their turn; not part of the stored result.
    tool_call_id: str = ""
    # A BlockedBecause value for a blocked call; stored only then.
    blocked_because: str = ""

    def as_dict(self) -> dict[str, Any]:
        data = {
            "name": self.name,
            "arguments": self.arguments,
            "outcome": self.outcome,
            "result": self.result,
            "turn": self.turn,
            "call_index": self.call_index,
            "agent": self.agent,
            "trigger": self.trigger,
        }
        if self.blocked_because:
            data["blocked_because"] = self.blocked_because
        return data


@dataclass
class CaseSession:
    mocks: list[MockSpec]
    extra_allowed: frozenset[str] = frozenset()
    force_blocked: frozenset[str] = frozenset()
    # The provider every agent of the conversation runs on: one of the harness's runtime providers (model_providers.py),
    # which answers through `model_provider` (live), or through the session's tape (record, replay). The model name
    # is always the real one.
    provider: str = ""
    model: str = ""
    model_provider: str = ""
    tape: Tape | None = None
    # The run's per-provider throttles (throttle.py); None outside a run, and then calls go straight through.
    throttles: RunThrottles | None = None
    # The run's live MCP listings (one listing per server per run); a session outside a run lists for itself.
    mcp_live: LiveListings | None = None
    # Why the harness could not let the case go on (an extra-allowed MCP tool whose live listing disagrees with the
    # cache): the case's Error reason, whatever its assertions say.
    failure: str = ""
    canary_token: str = field(default_factory=lambda: secrets.token_hex(8))
    observed: list[ObservedCall] = field(default_factory=list)
    # What the case's model calls used, judge apart; read by the runner once the case thread has ended.
    usage: Usage = field(default_factory=Usage)
    model_latency_ms: float = 0.0
    judge_usage: Usage = field(default_factory=Usage)
    # What the simulated user's model used (issue 24): counted with the judge's on the result, priced at its own model.
    user_usage: Usage = field(default_factory=Usage)
    # When the case times out (time.monotonic()); a rate-limited call waits and tries again only until then.
    deadline: float | None = None
    # The waits for rate limits once the provider's own retries were spent: how many, and how long in all.
    rate_limit_waits: int = 0
    rate_limit_wait_seconds: float = 0.0
    # What the provider layer bounded in the answers (ModelResponse.notes): absurd figures, reported on the result.
    answer_notes: list[str] = field(default_factory=list)
    # How the case's agent took being stopped at the deadline (a process agent that ignored session/cancel), said
    # after a timeout, which is the news (agenthost.executor.case_stopped).
    stop_notes: list[str] = field(default_factory=list)
    # What a process agent's program said over its protocol, normalised, turn by turn (a snapshotMatches assertion
    # compares it); None while no program has said anything: the case's agent is not a process agent.
    protocol_said: list[dict[str, Any]] | None = None
    # A model call of the case ended (or was not made) because the deadline came: the case timed out, whichever
    # side noticed first.
    ran_out: bool = False
    # The case's tables as its stateful mocks have left them so far: this trial's own copy (tables.py).
    tables: Tables = field(default_factory=dict)
    _calls_per_function: dict[str, int] = field(default_factory=dict)
    _canary_open: bool = True
    _expired: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # The run's budget (budget.py), held before each model call of the case, and what a call's usage costs for whom
    # ("agent", "judge", "user"); None outside a run and in a replay, which spends nothing.
    budget: Any = None
    price: Callable[[Usage, str], Decimal] | None = None
    # The throttle slots the case's calls hold right now (throttle.py).
    _slots: list[Slot] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.extra_allowed = frozenset(name.strip() for name in self.extra_allowed)
        # Legacy rows were stored as typed. Matching them loosely can only block more, which never lets a tool run.
        self._force_blocked = frozenset(name.strip().casefold() for name in self.force_blocked)
        if self.mcp_live is None:
            self.mcp_live = LiveListings()
        self.tables = tables_copy(self.tables)

    def is_force_blocked(self, name: str) -> bool:
        return name.strip().casefold() in self._force_blocked

    def is_allowed(self, name: str, declaration: dict[str, Any] | None = None) -> bool:
        """May this call reach its real implementation? Control flow may; an extra-allowed function only if it is
        declared free of outside effects — the suite's list alone never lets an email or a payment through."""
        if self.is_force_blocked(name):
            return False
        if name in ALLOWED_FUNCTIONS:
            return True
        return name in self.extra_allowed and function_is_effect_free(name, declaration)

    def live_problem(self, declaration: dict[str, Any] | None) -> str:
        """Why an allowed MCP tool must not run for real after all: its server, listed live (once per run), does not
        list it as cached. The first such problem becomes the case's Error (`failure`). "" for anything else."""
        if not isinstance(declaration, dict) or not isinstance(declaration.get("mcp"), dict):
            return ""
        live = self.mcp_live
        assert live is not None, "__post_init__ gave a session outside a run listings of its own"
        problem = live.problem(declaration)
        if problem:
            with self._lock:
                self.failure = self.failure or problem
        return problem

    def take_canary(self, trigger: str) -> bool:
        """True once: for the harness's own direct invocation of the canary before the first turn. A model or a rule
        naming the canary must never learn the token."""
        with self._lock:
            if trigger != "direct" or not self._canary_open:
                return False
            self._canary_open = False
            return True

    def expire(self) -> None:
        self._expired.set()

    @property
    def expired(self) -> bool:
        return self._expired.is_set()

    def out_of_time(self) -> bool:
        """The case timed out: the runner said so, or its deadline has passed and the runner is about to."""
        return self.expired or (self.deadline is not None and time.monotonic() >= self.deadline)

    def bounded(self, request: ModelRequest) -> ModelRequest:
        """The request with the case's deadline, which the provider's call does not outlast."""
        return dataclasses.replace(request, deadline=self.deadline)

    def leave_behind(self) -> None:
        """The runner stops waiting for the case thread: the slots its stuck calls hold are given back."""
        for slot in list(self._slots):
            slot.throttle.release_slot(slot, self._slots)

    def spend(
        self, request: ModelRequest, call: Callable[[], ModelResponse], *, judge: bool = False, user: bool = False
    ) -> ModelResponse:
        """Make one model call of the case. None starts once the case timed out; a call that finishes is counted
        even when it returns after the timeout, because it was paid for."""
        over = self.budget.exhausted() if self.budget is not None else ""
        if over:
            reason = f"the run's budget was spent before this model call, which was not made: {over}"
            with self._lock:
                # The case's Error whichever call met it: the agent's, the judge's or the simulated user's.
                self.failure = self.failure or reason
            raise ProviderError(reason, code=BUDGET_SPENT, provider=self.provider, model=request.model)
        attempt = 0
        while True:
            if self.out_of_time():
                self.ran_out = True
                raise ProviderError(
                    "the case timed out; no further model call of it is made",
                    code=CASE_TIMED_OUT,
                    provider=self.provider,
                    model=request.model,
                )
            try:
                response = call()
                break
            except ProviderError as exc:
                if exc.code in (DEADLINE, CASE_TIMED_OUT):
                    self.ran_out = True
                    raise
                if exc.code != "rate_limited" or not self._wait_out_rate_limit(exc, attempt):
                    raise
                attempt += 1
        with self._lock:
            if response.notes:
                whose = "the judge" if judge else "the simulated user's model" if user else f"the model {request.model}"
                self.answer_notes.append(f"{whose} reported {', '.join(response.notes)}")
            if self.budget is not None:
                who = "user" if user else "judge" if judge else "agent"
                cost = self.price(response.usage, who) if self.price is not None else 0
                self.budget.add(response.usage.total_tokens, cost)
            if user:
                self.user_usage = self.user_usage + response.usage
            elif judge:
                self.judge_usage = self.judge_usage + response.usage
            else:
                self.usage = self.usage + response.usage
                self.model_latency_ms += response.latency_ms
        return response

    def _wait_out_rate_limit(self, exc: ProviderError, attempt: int) -> bool:
        """After the provider's own retries met HTTP 429 still: wait as the endpoint asked (else back off) and say
        whether to try again — only while the case may back off so long (`may_back_off`). A replay re-plays the recorded
        429s without the waiting: nothing is rate-limiting it."""
        wait = exc.retry_after if exc.retry_after else min(RATE_LIMIT_BACKOFF * 2**attempt, RATE_LIMIT_MAX_WAIT)
        wait = min(wait, RATE_LIMIT_MAX_WAIT)
        replaying = self.tape is not None and not self.tape.spends
        if not replaying and not self.may_back_off(wait):
            return False
        if not replaying and self._expired.wait(wait):
            return False
        with self._lock:
            self.rate_limit_waits += 1
            self.rate_limit_wait_seconds += 0.0 if replaying else wait
        return True

    def may_back_off(self, seconds: float) -> bool:
        """Whether a rate-limited call may wait this long and try again: only if the case can still report what
        happened afterwards — a wait that ends at its timeout would turn "rate limited" into "timed out"."""
        return self.deadline is None or time.monotonic() + seconds + REPORT_MARGIN_SECONDS < self.deadline

    def rate_limit_note(self) -> str:
        """What the case waited for rate limits, for its result; "" when it did not."""
        with self._lock:
            waits, seconds = self.rate_limit_waits, self.rate_limit_wait_seconds
        if not waits:
            return ""
        if self.tape is not None and not self.tape.spends:
            return f"replayed {waits} HTTP 429 answer(s) the recorded run waited out (without waiting now)"
        return (
            f"waited {seconds:.1f} s for rate limits ({waits} time{'s' if waits != 1 else ''} after HTTP 429 outlasted "
            "the provider's retries)"
        )

    def answer_note(self) -> str:
        """The absurd figures the case's answers reported, as they were bounded, for its result; "" when none."""
        with self._lock:
            notes = list(dict.fromkeys(self.answer_notes))
        if not notes:
            return ""
        shown = "; ".join(notes[:3]) + (f"; and {len(notes) - 3} more" if len(notes) > 3 else "")
        return (
            f"the endpoint reported absurd usage in {len(self.answer_notes)} answer(s): {shown} — this result's "
            "tokens, cost and latency count the bound, not what the endpoint said; check its usage reporting"
        )

    def throttled(self, call: Callable[[], ModelResponse], *, provider: str = "") -> ModelResponse:
        """Make a model call within its provider's concurrency limit for the run: the model under test's provider,
        or the one named (the judge's, which shares the limit with that provider's agent calls)."""
        if self.throttles is None:
            return call()
        throttle = self.throttles.for_provider(provider or self.model_provider)
        return throttle.call(call, given_up=self.out_of_time, may_back_off=self.may_back_off, held=self._slots)

    def next_call_index(self, name: str) -> int:
        with self._lock:
            index = self._calls_per_function.get(name, 0)
            self._calls_per_function[name] = index + 1
            return index

    def has_mock(self, name: str) -> bool:
        return any(mock.function_name == name for mock in self.mocks)

    def choose_mock(self, name: str, arguments: dict[str, Any], call_index: int) -> MockSpec | None:
        """Argument-subset match first, then the call index, then an unconditional mock."""
        candidates = [mock for mock in self.mocks if mock.function_name == name]
        for mock in candidates:
            if (
                mock.arguments is not None
                and is_subset(mock.arguments, arguments)
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

    def table_call(self, mock: MockSpec, name: str, arguments: Any) -> TableAnswer:
        """A stateful mock's answer, its table updated — one call at a time, as the calls of a turn come."""
        with self._lock:
            return table_call(self.tables, mock.table or {}, arguments, function=name)

    def tables_snapshot(self) -> Tables:
        with self._lock:
            return tables_copy(self.tables)

    def observe(self, call: ObservedCall) -> None:
        with self._lock:
            self.observed.append(call)

    def observe_unavailable(self, turn: int, records: Iterable[Any]) -> None:
        """Add the calls of a turn that the host refused because the agent does not declare the function. They never
        reached the seam, so only the turn's own record (host ToolCallRecords) knows them; each is placed before
        the next call of its turn that did reach the seam."""
        records = list(records)
        with self._lock:
            for position, record in enumerate(records):
                if record.outcome != Outcome.UNAVAILABLE:
                    continue
                later = {other.tool_call_id for other in records[position + 1 :] if other.tool_call_id}
                at = next(
                    (i for i, seen in enumerate(self.observed) if seen.turn == turn and seen.tool_call_id in later),
                    len(self.observed),
                )
                self.observed.insert(
                    at,
                    ObservedCall(
                        name=record.name,
                        arguments=record.arguments,
                        outcome=Outcome.UNAVAILABLE,
                        result=record.result,
                        turn=turn,
                        call_index=None,
                        agent=record.agent,
                        trigger=record.trigger,
                        tool_call_id=record.tool_call_id,
                    ),
                )

    def observe_at_turn_end(self, call: ObservedCall) -> None:
        """Add a call learnt of afterwards (from the transcript) at the end of its turn, unless already known."""
        with self._lock:
            if any(seen.tool_call_id == call.tool_call_id for seen in self.observed):
                return
            at = next((i for i, seen in enumerate(self.observed) if seen.turn > call.turn), len(self.observed))
            self.observed.insert(at, call)

    def observed_calls(self) -> list[ObservedCall]:
        with self._lock:
            return list(self.observed)

    def totals(self) -> tuple[Usage, float, Usage]:
        """Usage and model latency of the model under test, and the judge's usage."""
        with self._lock:
            return self.usage, self.model_latency_ms, self.judge_usage

    def user_total(self) -> Usage:
        """What the simulated user's model used."""
        with self._lock:
            return self.user_usage


def is_subset(expected: Any, actual: Any) -> bool:
    """Does `actual` contain `expected`: every key of an object (recursively), lists element by element, other values
    equal. How a mock and an assertion match the arguments of a call."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and is_subset(value, actual[key]) for key, value in expected.items()
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(is_subset(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return bool(expected == actual)


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
