"""A conversation, or a slice of its turns, as a draft case document. Pure: it reads a Transcript and writes nothing;
recording/services.py stores the document through `cases.services.case_create`, so a draft meets the rules every case
meets.

The mapping — a draft must replay its own source conversation green:

- each user message opens a turn; pre-written history stays history;
- each real tool result becomes a mock: function name, the arguments of the call it answered, its call index for that
  function, the result verbatim, and whether it ended the turn. A function the draft mocks more than once keeps, on
  each mock, the arguments that identify its call, as a single call does (issue 36: looking order 1042 up, then
  1043, must not let 1042's mock answer a look-up of the wrong order); where its calls have none to keep, its mocks
  match by call order alone, and the reviewer is warned naming them. Calls that a replay never sends to an executor
  get no mock: the five control-flow functions (they run for real under test), calls skipped after a stop, calls
  invoked directly rather than by the agent, calls whose arguments were not a JSON object (the host answers those
  itself), and calls the model provider ran itself in an imported conversation (no local tool ran, so no mock may
  stand in for one).
  Start-up rule calls are mocked too, because a replay starts the conversation and fires them again;
- state with no causing message is initial state. Each turn's state changes (last value per key) become the state
  writes of that turn's last mock; a turn with changes but no mock drops them, with a warning. Start-up changes ride
  on the last start-up mock, or are initial state when there is none. A slice that starts after turn 0 starts from
  the state as it stood then: the seeded state plus every earlier change;
- a slice that starts after turn 0 starts where a test of it would start: with the conversation's entry agent, the
  earlier turns as history (each user message and the answer it got). The hand-offs the conversation made from
  there (a sub-agent handing back to the router, the router routing again) are made again, rather than the case
  starting with whichever agent the conversation happened to stand at — which may not reach the slice's tools;
- assertions: `toolCalled` with the recorded arguments for each mock, in its turn (start-up mocks at case level), and
  `stateEquals` at case level for each key the draft's own mocks write, with its last value. Never output-text
  assertions or a judge: a model's exact wording is not a stable baseline;
- the draft is disabled: a person reviews and enables it before it joins a run.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from agenthost.seams import (
    CONTROL_FLOW_FUNCTIONS,
    PROVIDER_EXECUTED,
    TRANSCRIPT_START,
    Transcript,
    TranscriptCall,
    TranscriptTurn,
)
from cases.schema import NAME_MAX_LENGTH

# Longer text, or any with a space in it, is wording rather than an identifier.
IDENTIFYING_TEXT_MAX_LENGTH = 64
_CONTROL_FLOW = frozenset(CONTROL_FLOW_FUNCTIONS)


class NothingToRecord(ValueError):
    """The conversation (or the requested slice) has no turn to make a case of."""


def draft_document(
    transcript: Transcript,
    *,
    name: str,
    source: str,
    suite_agent: str,
    first_turn: int = 0,
    last_turn: int | None = None,
) -> dict[str, Any]:
    """The case document for turns `first_turn`..`last_turn` (default: all) of the transcript.

    `suite_agent` is the agent of the suite the draft goes to: a draft of a conversation that began with another
    agent names that agent as its entry agent."""
    if not transcript.turns:
        raise NothingToRecord("the conversation has no turns: there is no user message to replay")
    last_turn = len(transcript.turns) - 1 if last_turn is None else last_turn
    if not 0 <= first_turn <= last_turn < len(transcript.turns):
        raise NothingToRecord(
            f"turns {first_turn}–{last_turn} are not in the conversation (it has turns 0–{len(transcript.turns) - 1})"
        )
    turns = transcript.turns[first_turn : last_turn + 1]
    opening = first_turn == 0
    warnings: list[str] = []

    mocks, mock_calls, mock_blocks = _mocks([transcript.start, *turns], warnings)
    initial_state = dict(transcript.initial_state) if opening else transcript.state_before(first_turn)
    for block in ([transcript.start] if opening else []) + turns:
        _attach_writes(block, mocks, mock_calls, mock_blocks, initial_state, warnings)
    own_writes: dict[str, Any] = {}
    for mock in mocks:
        for key, value in mock["state_writes"].items():
            own_writes.pop(key, None)
            own_writes[key] = value

    def tool_called(block_index: int) -> list[dict[str, Any]]:
        return _unique(
            [
                _tool_called(mocks[index]["function_name"], identifying_arguments(mock_calls[index])[0])
                for index, mock_block in enumerate(mock_blocks)
                if mock_block == block_index
            ]
        )

    turn_documents = [{"user_message": block.user_message, "assertions": tool_called(block.index)} for block in turns]
    case_assertions = tool_called(TRANSCRIPT_START) if opening else []
    case_assertions.extend(
        {"type": "stateEquals", "params": {"key": key, "value": value}, "fatal": False}
        for key, value in own_writes.items()
    )
    if not case_assertions and not any(turn["assertions"] for turn in turn_documents):
        warnings.append(
            "no assertions were generated (no turn called a mocked tool or changed the state): as it stands the "
            "case only checks that the conversation completes; add an assertion"
        )

    history = [dict(message) for message in transcript.history]
    if not opening:
        history += _as_history(transcript.turns[:first_turn])
        earlier = "turn 0 is" if first_turn == 1 else f"turns 0–{first_turn - 1} are"
        warnings.append(
            f"{earlier} this case's history (what the user said and the answers given); "
            f"the case starts with {transcript.entry_agent}, as the conversation did, and only the calls of its own "
            "turns are mocked and asserted"
        )
    if transcript.binding:
        # Its drafts run against that agent: a reviewer checks it is the one that ran in production.
        warnings.insert(0, f"{transcript.binding}: its runs use that agent's code and tools")
    span = f"turn {first_turn}" if first_turn == last_turn else f"turns {first_turn}–{last_turn}"
    return {
        "name": name[:NAME_MAX_LENGTH],
        "description": f"Recorded from conversation #{transcript.conversation_id} ({transcript.label}), {span}"
        + (f", {transcript.origin}." if transcript.origin else "."),
        "enabled": False,
        "source": source,
        "source_conversation": transcript.conversation_id,
        "type": "agent",
        "entry_agent": None if transcript.entry_agent == suite_agent else transcript.entry_agent,
        "initial_state": initial_state,
        "priority": 0,
        "tags": [],
        "unmocked_policy": "block",
        "warnings": warnings,
        "history": history,
        "turns": turn_documents,
        "assertions": case_assertions,
        "mocks": mocks,
    }


def _as_history(blocks: list[TranscriptTurn]) -> list[dict[str, str]]:
    """Earlier turns as pre-written history: each user message, and the last thing said in answer (none when the
    turn ended without a word, e.g. on a stop)."""
    history = []
    for block in blocks:
        history.append({"role": "user", "content": block.user_message})
        if block.answer.strip():
            history.append({"role": "assistant", "content": block.answer})
    return history


def _mocks(
    blocks: list[TranscriptTurn], warnings: list[str]
) -> tuple[list[dict[str, Any]], list[TranscriptCall], list[int]]:
    """The mocks of the calls a replay will send to an executor, in call order; with the call each one answers and
    the block it belongs to."""
    mocks: list[dict[str, Any]] = []
    mock_calls: list[TranscriptCall] = []
    mock_blocks: list[int] = []
    calls_per_function: Counter[str] = Counter()
    for block in blocks:
        for call in block.calls:
            if not _replayed(call, block, warnings):
                continue
            kept, left_out = identifying_arguments(call)
            mocks.append(
                {
                    "function_name": call.name,
                    "arguments": kept,
                    "call_index": calls_per_function[call.name],
                    "result": call.result,
                    "stop": call.stop,
                    "state_writes": {},
                }
            )
            mock_calls.append(call)
            mock_blocks.append(block.index)
            calls_per_function[call.name] += 1
            if left_out and kept:
                warnings.append(_left_out_note(block, call.name, kept, left_out))
            if call.outcome == "missing":
                warnings.append(
                    f"{_where(block)}: {call.name} had no implementation when the conversation ran; its mock replays "
                    f"that answer ({call.result!r})"
                )
            elif call.outcome == "blocked":
                warnings.append(
                    f"{_where(block)}: {call.name} was blocked by a test run when the conversation ran; its mock "
                    "replays the block message, which no real run of the tool would answer"
                )
    _unidentified_notes(mocks, mock_calls, mock_blocks, calls_per_function, blocks, warnings)
    return mocks, mock_calls, mock_blocks


def _unidentified_notes(
    mocks: list[dict[str, Any]], mock_calls: list[TranscriptCall], mock_blocks: list[int],
    calls_per_function: Counter[str], blocks: list[TranscriptTurn], warnings: list[str],
) -> None:
    """A mock with no identifying argument answers its function's N-th call whatever it asks for; the reviewer is told
    which, and why. For a function called once that is the only call there is, so only free text is worth a note."""
    where = {block.index: block for block in blocks}
    for index, mock in enumerate(mocks):
        if mock["arguments"]:
            continue
        call, block = mock_calls[index], where[mock_blocks[index]]
        _kept, left_out = identifying_arguments(call)
        name = mock["function_name"]
        if calls_per_function[name] > 1:
            why = f"; left out: {', '.join(f'{key} ({reason})' for key, reason in left_out)}" if left_out else ""
            warnings.append(
                f"{_where(block)}: mocks[{index}] ({name}, call #{mock['call_index']}) keeps no argument that "
                f"identifies its call{why}, and {name} is called {calls_per_function[name]} times: it answers that "
                "call by its order alone, whatever it asks for; add the argument that tells the calls apart"
            )
        elif left_out:
            warnings.append(_left_out_note(block, name, {}, left_out))


def identifying_arguments(call: TranscriptCall) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The arguments that identify a call, and each one left out with why.

    Identifying: a key the function's schema requires (every key when no schema is known) whose value is a short
    scalar — an id, an enum value, a number, a boolean. Free text (a reason, an email body), optional keys, lists and
    objects are left out: a model words them differently each time, and a mock or an assertion that demanded the
    recorded wording would be an output-text assertion in disguise."""
    schema = call.parameters if isinstance(call.parameters, dict) else None
    properties = schema.get("properties") if schema is not None else None
    properties = properties if isinstance(properties, dict) else {}
    required: set[str] | None = None
    if schema is not None:
        listed = schema.get("required")
        required = {key for key in listed if isinstance(key, str)} if isinstance(listed, list) else set()
    kept: dict[str, Any] = {}
    left_out: list[tuple[str, str]] = []
    # In key order: the stored arguments come back in the database's order (PostgreSQL's jsonb sorts by length), and
    # a draft must read the same on every backend.
    for key, value in sorted((call.arguments or {}).items()):
        if required is not None and key not in required:
            left_out.append((key, "optional"))
            continue
        spec = properties.get(key)
        why = _not_identifying(value, spec if isinstance(spec, dict) else {})
        if why:
            left_out.append((key, why))
        else:
            kept[key] = value
    return kept, left_out


def _not_identifying(value: Any, spec: dict[str, Any]) -> str:
    """Why a value cannot identify a call; empty when it can."""
    if value is None or isinstance(value, bool | int | float):
        return ""
    if isinstance(value, str):
        enum = spec.get("enum")
        if isinstance(enum, list) and value in enum:
            return ""
        if len(value) <= IDENTIFYING_TEXT_MAX_LENGTH and not any(character.isspace() for character in value):
            return ""
        return "free text"
    return "a list" if isinstance(value, list) else "an object"


def _left_out_note(block: TranscriptTurn, name: str, kept: dict[str, Any], left_out: list[tuple[str, str]]) -> str:
    listed = ", ".join(f"{key} ({why})" for key, why in left_out)
    matched = f"on {', '.join(kept)} only" if kept else "whatever its arguments"
    return (
        f"{_where(block)}: the mock and the toolCalled assertion of {name} match {matched}; left out: {listed}, so a "
        "reworded call still matches"
    )


def _attach_writes(
    block: TranscriptTurn,
    mocks: list[dict[str, Any]],
    mock_calls: list[TranscriptCall],
    mock_blocks: list[int],
    initial_state: dict[str, Any],
    warnings: list[str],
) -> None:
    """Put each state change of the block on the mock of the call that made it. A key whose last change no mocked
    call made (a control-flow function, a direct invocation) rides on the block's last mock, is initial state at
    start-up, or is dropped with a warning."""
    carriers = [index for index, mock_block in enumerate(mock_blocks) if mock_block == block.index]
    claimed: set[int] = set()
    for index in carriers:
        for write in mock_calls[index].writes:
            mocks[index]["state_writes"][write.key] = write.value
            claimed.add(id(write))
    last_write = {write.key: write for write in block.writes}
    unclaimed = {key: write.value for key, write in last_write.items() if id(write) not in claimed}
    if not unclaimed:
        return
    if carriers:
        mocks[carriers[-1]]["state_writes"].update(unclaimed)
    elif block.index == TRANSCRIPT_START:
        # Nothing in a replay would write them, and they stood before the first user message.
        initial_state.update(unclaimed)
    else:
        sources = sorted({last_write[key].function for key in unclaimed if last_write[key].function})
        warnings.append(
            f"turn {block.index}: its state changes ({', '.join(unclaimed)}) were dropped, because the turn has no "
            f"mocked tool call to carry them"
            + (f" (they came from {', '.join(sources)})" if sources else "")
            + "; no stateEquals assertion was generated for them"
        )


def _replayed(call: TranscriptCall, block: TranscriptTurn, warnings: list[str]) -> bool:
    """Whether a replay sends this call to an executor, so that it needs a mock."""
    if not call.name.strip() or call.name in _CONTROL_FLOW:
        return False
    if call.result is None or call.outcome in ("skipped", "routed", "output"):
        # A framework's own hand-off or output tool (a runtime agent's) runs no tool of the team's: a replay makes it
        # again, with no mock.
        return False
    if call.outcome == PROVIDER_EXECUTED:
        warnings.append(
            f"{_where(block)}: {call.name} was run by the model provider itself (no local tool ran), so it got no "
            "mock: the agent must be able to call it under test, or the case must mock it by name"
        )
        return False
    if call.trigger == "direct":
        warnings.append(
            f"{_where(block)}: {call.name} was invoked directly, not by the agent, so a replay will not call it and "
            "it got no mock"
        )
        return False
    if call.outcome == "unavailable":
        warnings.append(
            f"{_where(block)}: the model called {call.name}, which the agent does not declare; the host refused it "
            "without running anything, so a replay will refuse it too and it got no mock"
        )
        return False
    if call.arguments is None:
        warnings.append(
            f"{_where(block)}: the model's arguments for {call.name} were not a JSON object, so the host answered "
            "without running it; it got no mock"
        )
        return False
    return True


def _tool_called(function: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {"function": function}
    if arguments:
        params["arguments"] = arguments
    return {"type": "toolCalled", "params": params, "fatal": False}


def _unique(assertions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two calls with the same arguments in one turn would give the same assertion twice; it is listed once."""
    seen: set[str] = set()
    result = []
    for assertion in assertions:
        key = json.dumps(assertion, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            result.append(assertion)
    return result


def _where(block: TranscriptTurn) -> str:
    return "at start-up" if block.index == TRANSCRIPT_START else f"turn {block.index}"
