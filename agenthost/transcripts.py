"""A conversation read once into plain data, the one shape every page draws and the harness reads: a `Transcript` of
turns (`TranscriptTurn`), each a list of entries (`TranscriptEntry`: a user's or an agent's message, or a tool call
with its result and outcome), each naming its agent and the spans it was read from.

Two readers fill it: `transcript_load`/`transcript_build` from a conversation's `Message` rows, and
`transcript_from_stored` from a transcript stored as rows of plain JSON (a case result's), whose keys are the
`Message` fields' own names (`function_name`, not `function`: decision 0045).

Turns of a conversation are numbered from 0 in the order their user messages were sent, after any pre-written
history: each user message opens a turn, and everything up to the next user message belongs to it, whatever the
host's own turn numbers say (pre-written history shares them). A stored transcript keeps the turn numbers it was
stored with: a case's turns, numbered by the case.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agenthost.functions import get_function
from agenthost.models import Conversation, Message
from agenthost.selectors import conversation_messages, conversation_state_timeline

START = -1
"""The turn index of what ran before the first user message: the agent's start-up rules."""

USER, ASSISTANT, TOOL = "user", "assistant", "tool"
"""The kinds of entry."""

_USER, _ASSISTANT = Message.Role.USER, Message.Role.ASSISTANT
_TOOL_CALL, _TOOL_RESULT = Message.Role.TOOL_CALL, Message.Role.TOOL_RESULT


@dataclass(frozen=True)
class StateWrite:
    key: str
    value: Any
    # The function whose result caused the change.
    function: str


@dataclass
class TranscriptCall:
    """One tool call with the result it got. `arguments` is None when the model's arguments were not a JSON object:
    the host answered such a call itself, without asking any executor."""

    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str
    agent: str
    trigger: str
    tool_call_id: str
    seq: int
    result: str | None = None
    outcome: str = ""
    # The result ended the turn (a stop-completion): nothing the model said came after it.
    stop: bool = False
    # The JSON Schema of the function's arguments as the calling agent offered it; None when nothing is known of it.
    parameters: dict[str, Any] | None = None
    # The state changes this call's result made, in order.
    writes: list[StateWrite] = field(default_factory=list)
    # An imported call's spans: the one the call was read from (the model's) and its result's (the tool's).
    span_id: str = ""
    result_span_id: str = ""

    @property
    def shows_arguments(self) -> bool:
        """A result stored without the call it answered has no arguments to show."""
        return self.arguments is not None or bool(self.raw_arguments)


@dataclass
class TranscriptEntry:
    """What a turn shows, in order: a user's message, an agent's text, or a tool call with its result."""

    kind: str  # USER, ASSISTANT or TOOL
    agent: str
    text: str = ""
    model: str = ""
    call: TranscriptCall | None = None
    span_id: str = ""  # the span an imported message was read from
    # A user message the simulated user's model wrote, not the case.
    simulated: bool = False
    # The model's time for this answer, when the transcript kept it (a stored one does).
    latency_ms: float | None = None


@dataclass
class TranscriptTurn:
    """One turn (index ≥ 0) or the start-up turn (index START)."""

    index: int
    # The agent the turn started with: the entry agent, or the one an earlier turn routed to.
    agent: str = ""
    entries: list[TranscriptEntry] = field(default_factory=list)
    writes: list[StateWrite] = field(default_factory=list)
    # What the turn cost and who took part, summed from its messages (a conversation's; a stored transcript has none).
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0
    steps: int = 0
    agents: list[str] = field(default_factory=list)

    @property
    def user_message(self) -> str:
        return next((entry.text for entry in self.entries if entry.kind == USER), "")

    @property
    def user_span_id(self) -> str:
        return next((entry.span_id for entry in self.entries if entry.kind == USER), "")

    @property
    def calls(self) -> list[TranscriptCall]:
        return [entry.call for entry in self.entries if entry.call is not None]

    @property
    def answer(self) -> str:
        texts = [entry.text for entry in self.entries if entry.kind == ASSISTANT and entry.text]
        return texts[-1] if texts else ""

    @property
    def finish(self) -> str:
        """How the turn ended, as a turn's result says it: "answer", "stop_completion" or "missing_function"."""
        stopped = next((call for call in reversed(self.calls) if call.stop), None)
        if stopped is None:
            return "answer"
        return "missing_function" if stopped.outcome == "missing" else "stop_completion"

    def last_writes(self) -> dict[str, Any]:
        """The turn's state changes, last value per key."""
        values: dict[str, Any] = {}
        for write in self.writes:
            values[write.key] = write.value
        return values


@dataclass
class TimelineRow:
    key: str
    value: Any
    turn: int | None  # None: seeded initial state
    function: str = ""


@dataclass
class Transcript:
    conversation_id: int | None
    label: str
    entry_agent: str
    history: list[dict[str, str]]
    # State with no causing message: what the conversation was seeded with.
    initial_state: dict[str, Any]
    start: TranscriptTurn
    turns: list[TranscriptTurn]
    timeline: list[TimelineRow]
    # Where an imported conversation came from and which agent it was bound to; empty for a chat.
    origin: str = ""
    # Which trace an imported conversation is and to which of agenttest's agents it is bound, how; empty for a chat.
    binding: str = ""

    def state_before(self, turn: int) -> dict[str, Any]:
        """The state as it stood when turn `turn` began: seeded, start-up and every earlier turn's changes."""
        state = dict(self.initial_state)
        for block in [self.start, *self.turns[:turn]]:
            state.update(block.last_writes())
        return state


def transcript_load(*, conversation: Conversation) -> Transcript:
    messages = list(conversation_messages(conversation=conversation))
    timeline = conversation_state_timeline(conversation=conversation)
    imported = conversation.source == Conversation.Source.TRACE
    transcript = transcript_build(
        conversation_id=conversation.pk,
        label=str(conversation),
        entry_agent=conversation.agent.name,
        messages=messages,
        timeline=timeline,
        imported=imported,
    )
    if imported:
        traces = ", ".join(conversation.trace_ids) or "(none named)"
        bound = (
            f"bound to agent {conversation.agent.name} by {_BINDINGS.get(conversation.bound_by, conversation.bound_by)}"
        )
        transcript.origin = (
            f"imported from the traces of service {conversation.trace_service or '(unnamed)'} (key "
            f"{conversation.trace_key}, trace {traces}), {bound}"
        )
        trace_agent = f" (agent {conversation.trace_agent})" if conversation.trace_agent else ""
        transcript.binding = (
            f"the trace of service {conversation.trace_service or '(unnamed)'}{trace_agent} is {bound}"
        )
    return transcript


_BINDINGS = {
    "agent name": "the trace's agent name (gen_ai.agent.name)",
    "service name": "the trace's service name (service.name)",
    "chosen": "choice",
}


def transcript_build(
    *,
    conversation_id: int,
    label: str,
    entry_agent: str,
    messages: Iterable[Message],
    timeline: Iterable[dict[str, Any]],
    imported: bool = False,
) -> Transcript:
    """`imported`: the messages were read from a team's traces, which hold no pre-written history — its assistant
    messages may name no model, which would make them look like history."""
    messages = sorted(messages, key=lambda message: message.seq)
    history_length = 0 if imported else _history_length(messages)
    history = [{"role": message.role, "content": message.content} for message in messages[:history_length]]

    start = TranscriptTurn(index=START, agent=entry_agent)
    turns: list[TranscriptTurn] = []
    current = start
    block_of_seq: dict[int, TranscriptTurn] = {}
    pending: dict[str, TranscriptCall | None] = {}
    call_of_seq: dict[int, TranscriptCall] = {}
    parameters = _Parameters()
    for message in messages[history_length:]:
        agent = message.author or ""
        if message.role == _USER:
            current = TranscriptTurn(index=len(turns), agent=agent or entry_agent)
            current.entries.append(
                TranscriptEntry(kind=USER, agent=agent, text=message.content, span_id=message.span_id)
            )
            turns.append(current)
        elif message.role == _ASSISTANT:
            current.entries.append(
                TranscriptEntry(kind=ASSISTANT, agent=agent, text=message.content, model=message.model,
                                span_id=message.span_id)
            )
        elif message.role == _TOOL_CALL:
            call = TranscriptCall(
                name=message.function_name,
                arguments=_arguments(message),
                raw_arguments=message.raw_arguments,
                agent=agent,
                trigger=message.trigger or "model",
                tool_call_id=message.tool_call_id,
                seq=message.seq,
                parameters=parameters.of(message),
                span_id=message.span_id,
            )
            # Ids are only unique per model response, so a result answers the latest call that used its id.
            pending[message.tool_call_id] = call
            current.entries.append(TranscriptEntry(kind=TOOL, agent=agent, call=call, span_id=message.span_id))
        elif message.role == _TOOL_RESULT:
            answered = pending.pop(message.tool_call_id, None)
            if answered is not None:
                answered.result, answered.outcome = message.content, message.outcome
                answered.result_span_id = message.span_id
                call_of_seq[message.seq] = answered
        block_of_seq[message.seq] = current
        _count(current, message)

    for block in turns:
        _mark_stop(block)

    function_of_seq = {message.seq: message.function_name for message in messages}
    initial_state: dict[str, Any] = {}
    rows: list[TimelineRow] = []
    for change in timeline:
        seq = change["message_seq"]
        if seq is None:
            initial_state[change["key"]] = change["value"]
            rows.append(TimelineRow(key=change["key"], value=change["value"], turn=None))
            continue
        block = block_of_seq.get(seq, start)
        write = StateWrite(key=change["key"], value=change["value"], function=function_of_seq.get(seq, ""))
        block.writes.append(write)
        if seq in call_of_seq:
            call_of_seq[seq].writes.append(write)
        rows.append(TimelineRow(key=write.key, value=write.value, turn=block.index, function=write.function))

    return Transcript(
        conversation_id=conversation_id,
        label=label,
        entry_agent=entry_agent,
        history=history,
        initial_state=initial_state,
        start=start,
        turns=turns,
        timeline=rows,
    )


class _Parameters:
    """The argument schema of each (agent, function) a conversation called, looked up once: what the agent declares,
    else what the registered function says."""

    def __init__(self) -> None:
        self._known: dict[tuple[int | None, str], dict[str, Any] | None] = {}

    def of(self, message: Message) -> dict[str, Any] | None:
        key = (message.agent_id, message.function_name)
        if key not in self._known:
            self._known[key] = self._look_up(message)
        return self._known[key]

    @staticmethod
    def _look_up(message: Message) -> dict[str, Any] | None:
        declarations = (message.agent.functions if message.agent is not None else None) or []
        name = message.function_name
        declared = next((item for item in declarations if isinstance(item, dict) and item.get("name") == name), None)
        if declared is not None and isinstance(declared.get("parameters"), dict):
            parameters: dict[str, Any] = declared["parameters"]
            return parameters
        registered = get_function(message.function_name)
        return registered.parameters if registered is not None else None


def _is_model_step(message: Message) -> bool:
    return message.role == _ASSISTANT and bool(message.model)


def _history_length(messages: list[Message]) -> int:
    """How many leading messages were pre-written when the conversation started.

    The host writes pre-written history first, with the same roles and turn numbers as live messages; what tells them
    apart is that a live turn asked a model (its assistant messages name one) and pre-written ones did not."""
    first_activity = next(
        (index for index, message in enumerate(messages) if message.role in (_TOOL_CALL, _TOOL_RESULT)
         or _is_model_step(message)),
        None,
    )
    if first_activity is None:
        # No model was ever asked: user messages after the last pre-written answer are turns that failed at once.
        return max((index + 1 for index, message in enumerate(messages) if message.role == _ASSISTANT), default=0)
    if not _is_model_step(messages[first_activity]):
        # A call nobody's model step made (a start-up rule, a direct invocation) runs right after the history.
        return first_activity
    return max((index for index in range(first_activity) if messages[index].role == _USER), default=0)


def _arguments(message: Message) -> dict[str, Any] | None:
    """The call's arguments as the host parsed them; None when the host refused them before any executor ran."""
    raw = (message.raw_arguments or "").strip()
    if raw:
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            return None
        if not isinstance(parsed, dict):
            return None
    return message.arguments if isinstance(message.arguments, dict) else {}


def _mark_stop(block: TranscriptTurn) -> None:
    """A result ends a turn when the host says so ("missing" always stops) or when the model never spoke after it."""
    last_assistant = max((i for i, entry in enumerate(block.entries) if entry.kind == ASSISTANT), default=-1)
    executed = [
        (i, entry.call)
        for i, entry in enumerate(block.entries)
        if entry.call is not None and entry.call.trigger == "model" and entry.call.result is not None
        and entry.call.outcome != "skipped"
    ]
    for _, call in executed:
        call.stop = call.outcome == "missing"
    if executed and executed[-1][0] > last_assistant:
        executed[-1][1].stop = True


def _count(turn: TranscriptTurn, message: Message) -> None:
    """What a message adds to its turn's figures: who took part, in order, and each model answer's cost and time."""
    agent = message.author or ""
    if message.role != _USER and agent and (not turn.agents or turn.agents[-1] != agent):
        turn.agents.append(agent)
    if message.role == _ASSISTANT:
        turn.input_tokens += message.input_tokens
        turn.output_tokens += message.output_tokens
        turn.latency_ms += message.latency_ms
        turn.steps += 1 if message.model else 0


def transcript_from_stored(
    rows: Iterable[Mapping[str, Any]], *, observed: Iterable[Mapping[str, Any]] = ()
) -> Transcript:
    """A transcript stored as JSON rows (a case result's: each row a message, keyed by the `Message` fields' names),
    turned by turn as it was stored. Each tool call is joined with the result that answers it; a result no stored
    call asked for shows on its own. `observed`: the harness's record of each call (`turn`, `name`, `outcome`,
    `result`), which says how a call was answered when its result row does not."""
    rows = list(rows)
    results_by_call = {
        row["tool_call_id"]: row for row in rows if row.get("role") == _TOOL_RESULT and row.get("tool_call_id")
    }
    seen_calls: dict[tuple[Any, str], list[Mapping[str, Any]]] = defaultdict(list)
    for record in observed:
        seen_calls[(record.get("turn"), record.get("name", ""))].append(record)
    turns: list[TranscriptTurn] = []
    joined: set[str] = set()
    for row in rows:
        role, agent = row.get("role", ""), row.get("agent", "")
        if not turns or turns[-1].index != row.get("turn"):
            turns.append(TranscriptTurn(index=row.get("turn")))  # type: ignore[arg-type]
        entries = turns[-1].entries
        if role == _TOOL_CALL:
            answer = results_by_call.get(row.get("tool_call_id")) or {}
            joined.add(row.get("tool_call_id") or "")
            seen = seen_calls.get((row.get("turn"), row.get("function_name", "")))
            said: Mapping[str, Any] = seen.pop(0) if seen else {}
            call = TranscriptCall(
                name=row.get("function_name", ""),
                arguments=row.get("arguments") or {},
                raw_arguments="",
                agent=agent,
                trigger=row.get("trigger", ""),
                tool_call_id=row.get("tool_call_id", ""),
                seq=row.get("seq", 0),
                result=_text(answer.get("content", said.get("result", ""))),
                outcome=answer.get("outcome") or said.get("outcome", ""),
            )
            entries.append(TranscriptEntry(kind=TOOL, agent=agent, call=call))
        elif role == _TOOL_RESULT:
            if row.get("tool_call_id") and row.get("tool_call_id") in joined:
                continue
            call = TranscriptCall(
                name=row.get("function_name", ""), arguments=None, raw_arguments="", agent=agent, trigger="",
                tool_call_id=row.get("tool_call_id", ""), seq=row.get("seq", 0), result=_text(row.get("content", "")),
                outcome=row.get("outcome", ""),
            )
            entries.append(TranscriptEntry(kind=TOOL, agent=agent, call=call))
        elif row.get("content"):
            entries.append(
                TranscriptEntry(
                    kind=USER if role == _USER else ASSISTANT,
                    agent=agent,
                    text=row["content"],
                    model=row.get("model", ""),
                    simulated=bool(row.get("simulated")),
                    latency_ms=row.get("latency_ms") or None,
                )
            )
    return Transcript(
        conversation_id=None,
        label="",
        entry_agent="",
        history=[],
        initial_state={},
        start=TranscriptTurn(index=START),
        turns=[turn for turn in turns if turn.entries],
        timeline=[],
    )


def _text(value: Any) -> str:
    """A stored result's text; a value stored as JSON rather than text is shown as JSON."""
    return value if isinstance(value, str) else json.dumps(value)
