"""A conversation read once into plain data: its pre-written history, what ran at start-up, and its turns with
their tool calls and state changes. Turning it into a draft case is then a pure function of this snapshot
(recording/drafts.py), and the conversation page shows the same turns, numbered the same way.

Turns are numbered from 0 in the order their user messages were sent, after any pre-written history: each user
message opens a turn, and everything up to the next user message belongs to it, whatever the host's own turn numbers
say (pre-written history shares them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agenthost.seams import Conversation, Message, conversation_messages, conversation_state_timeline, get_function

START = -1
"""The block index of what ran before the first user message: the agent's start-up rules."""

_USER, _ASSISTANT = Message.Role.USER, Message.Role.ASSISTANT
_TOOL_CALL, _TOOL_RESULT = Message.Role.TOOL_CALL, Message.Role.TOOL_RESULT


@dataclass(frozen=True)
class StateWrite:
    key: str
    value: Any
    # The function whose result caused the change.
    function: str


@dataclass
class RecordedCall:
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


@dataclass
class Entry:
    """What the page shows in a turn, in order: an agent's text, or a tool call with its result."""

    kind: str  # "assistant" or "call"
    agent: str
    text: str = ""
    model: str = ""
    call: RecordedCall | None = None
    span_id: str = ""  # the span an imported message was read from


@dataclass
class Block:
    """One turn (index ≥ 0) or the start-up block (index START)."""

    index: int
    user_message: str = ""
    user_span_id: str = ""
    # The agent the turn started with: the entry agent, or the one an earlier turn routed to.
    agent: str = ""
    entries: list[Entry] = field(default_factory=list)
    writes: list[StateWrite] = field(default_factory=list)

    @property
    def calls(self) -> list[RecordedCall]:
        return [entry.call for entry in self.entries if entry.call is not None]

    @property
    def answer(self) -> str:
        texts = [entry.text for entry in self.entries if entry.kind == "assistant" and entry.text]
        return texts[-1] if texts else ""

    def last_writes(self) -> dict[str, Any]:
        """The block's state changes, last value per key."""
        values: dict[str, Any] = {}
        for write in self.writes:
            values[write.key] = write.value
        return values


@dataclass
class TimelineRow:
    key: str
    value: Any
    block: int | None  # None: seeded initial state
    function: str = ""


@dataclass
class Transcript:
    conversation_id: int
    label: str
    entry_agent: str
    history: list[dict[str, str]]
    # State with no causing message: what the conversation was seeded with.
    initial_state: dict[str, Any]
    start: Block
    turns: list[Block]
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

    start = Block(index=START, agent=entry_agent)
    turns: list[Block] = []
    current = start
    block_of_seq: dict[int, Block] = {}
    pending: dict[str, RecordedCall | None] = {}
    call_of_seq: dict[int, RecordedCall] = {}
    parameters = _Parameters()
    for message in messages[history_length:]:
        agent = message.author or ""
        if message.role == _USER:
            current = Block(
                index=len(turns), user_message=message.content, user_span_id=message.span_id,
                agent=agent or entry_agent,
            )
            turns.append(current)
        elif message.role == _ASSISTANT:
            current.entries.append(
                Entry(kind="assistant", agent=agent, text=message.content, model=message.model,
                      span_id=message.span_id)
            )
        elif message.role == _TOOL_CALL:
            call = RecordedCall(
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
            current.entries.append(Entry(kind="call", agent=agent, call=call, span_id=message.span_id))
        elif message.role == _TOOL_RESULT:
            answered = pending.pop(message.tool_call_id, None)
            if answered is not None:
                answered.result, answered.outcome = message.content, message.outcome
                answered.result_span_id = message.span_id
                call_of_seq[message.seq] = answered
        block_of_seq[message.seq] = current

    for block in turns:
        _mark_stop(block)

    function_of_seq = {message.seq: message.function_name for message in messages}
    initial_state: dict[str, Any] = {}
    rows: list[TimelineRow] = []
    for change in timeline:
        seq = change["message_seq"]
        if seq is None:
            initial_state[change["key"]] = change["value"]
            rows.append(TimelineRow(key=change["key"], value=change["value"], block=None))
            continue
        block = block_of_seq.get(seq, start)
        write = StateWrite(key=change["key"], value=change["value"], function=function_of_seq.get(seq, ""))
        block.writes.append(write)
        if seq in call_of_seq:
            call_of_seq[seq].writes.append(write)
        rows.append(TimelineRow(key=write.key, value=write.value, block=block.index, function=write.function))

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
            return declared["parameters"]
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


def _mark_stop(block: Block) -> None:
    """A result ends a turn when the host says so ("missing" always stops) or when the model never spoke after it."""
    last_assistant = max((i for i, entry in enumerate(block.entries) if entry.kind == "assistant"), default=-1)
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
