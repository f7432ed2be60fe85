"""AI extraction's one question to a model: where does this conversation change from one user goal to the next?

The model sees only each turn's user message and the names of the tools called in that turn — never tool arguments,
tool results or state, where the densest personal data sits — and answers only cut points and names:
`{"segments": [{"name": ..., "firstTurn": ..., "lastTurn": ...}]}`. Mocks, assertions and state still come verbatim
from the conversation (recording/drafts.py): a model that authored them would stop a case being a replay of calls
that really happened.

The answer is verified completely before anything is stored, and rejected as a whole on any fault: a half-correct
segmentation looks entirely normal in the admin and only misbehaves when someone runs it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agenthost.seams import (
    ModelRequest,
    ProviderError,
    Transcript,
    get_model,
    get_provider,
    response_problem,
    unfinished_answer,
)
from cases.schema import NAME_MAX_LENGTH
from common.inputs import MAX_JSON_DEPTH, json_text_too_deep, text_is_storable

# The prompt asks for names of at most 60 characters. A longer one is kept whole up to the case name limit, never cut
# silently; beyond that limit, or holding text no database stores, the answer is refused like any other bad answer.

SYSTEM_PROMPT = """You split a support conversation into regression test cases, one case per user goal.
You are given the conversation's turns in order. Each turn has its number, what the user said, and the names of the
tools the assistant called while answering it.
Group consecutive turns that pursue the same goal. Every turn belongs to exactly one case: the first case starts at
turn 0, each next case starts right after the previous one ends, and the last case ends at the last turn.
Name each case after the user's goal in a few words (at most 60 characters), e.g. "Track a late parcel".
Answer with JSON only, in exactly this shape:
{"segments": [{"name": "...", "firstTurn": 0, "lastTurn": 1}, {"name": "...", "firstTurn": 2, "lastTurn": 2}]}"""


# The answer's shape, sent as structured output where the extraction model supports it; verified the same either way.
SEGMENTS_SCHEMA = {
    "name": "segments",
    "schema": {
        "type": "object",
        "properties": {
            "segments": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "firstTurn": {"type": "integer"},
                        "lastTurn": {"type": "integer"},
                    },
                    "required": ["name", "firstTurn", "lastTurn"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["segments"],
        "additionalProperties": False,
    },
}


class SegmentationError(Exception):
    """The extraction model's answer could not be used; the message says why, for the person who asked."""


class ModelUnavailable(SegmentationError):
    """The extraction model did not answer at all (as opposed to answering something unusable)."""


@dataclass(frozen=True)
class Segment:
    name: str
    first_turn: int
    last_turn: int

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "firstTurn": self.first_turn, "lastTurn": self.last_turn}


def segments_request(*, transcript: Transcript, model: str) -> ModelRequest:
    """What the extraction model is sent: user messages and tool names, nothing else from the conversation."""
    turns = [
        {"turn": block.index, "user": block.user_message, "tools": _unique(call.name for call in block.calls)}
        for block in transcript.turns
    ]
    return ModelRequest(
        model=model,
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": json.dumps({"turns": turns}, ensure_ascii=False, indent=1)},
        ],
        tools=[],
        temperature=0.0,
        response_schema=SEGMENTS_SCHEMA,
        metadata={"purpose": "case extraction", "conversation_id": transcript.conversation_id},
    )


def segments_parse(text: str, *, turn_count: int) -> list[Segment]:
    """The verified segments of an answer; SegmentationError saying every fault found otherwise."""
    data = _json_object(text)
    raw_segments = data.get("segments")
    if not isinstance(raw_segments, list):
        raise SegmentationError('the JSON is malformed: expected {"segments": [...]}')
    if not raw_segments:
        raise SegmentationError("the answer has no segments")
    segments = [_segment(item, index) for index, item in enumerate(raw_segments)]

    last = turn_count - 1
    problems = []
    for index, segment in enumerate(segments):
        if segment.first_turn < 0 or segment.last_turn > last or segment.first_turn > segment.last_turn:
            problems.append(
                f"segment {index} (turns {segment.first_turn}–{segment.last_turn}) is out of range: the conversation "
                f"has turns 0–{last}"
            )
    if segments[0].first_turn != 0:
        problems.append(f"the first segment starts at turn {segments[0].first_turn}, not at turn 0")
    for index, (before, after) in enumerate(zip(segments, segments[1:], strict=False)):
        if after.first_turn > before.last_turn + 1:
            problems.append(
                f"segments {index} and {index + 1} leave a gap: turns {before.last_turn + 1}–{after.first_turn - 1} "
                "are in no segment"
            )
        elif after.first_turn <= before.last_turn:
            problems.append(
                f"segments {index} and {index + 1} overlap: they both cover turns "
                f"{after.first_turn}–{min(before.last_turn, after.last_turn)}"
            )
    if not any(segment.first_turn <= last <= segment.last_turn for segment in segments):
        problems.append(
            f"the last turn ({last}) is not covered: the last segment ends at turn {segments[-1].last_turn}"
        )
    if problems:
        raise SegmentationError("; ".join(problems))
    return segments


def segments_ask(*, transcript: Transcript, model_key: str) -> list[Segment]:
    """Ask the extraction model `model_key` (provider:model) for the segments, verified. A one-turn conversation needs
    no model: it is one segment."""
    if len(transcript.turns) == 1:
        name = transcript.label[:NAME_MAX_LENGTH].strip() or "Turns 0–0"
        return [Segment(name=name, first_turn=0, last_turn=0)]
    config = get_model(model_key)
    request = segments_request(transcript=transcript, model=config.model)
    try:
        response = get_provider(config.provider).complete(request)
    except ProviderError as exc:
        raise ModelUnavailable(f"the extraction model {model_key} did not answer: {exc}") from None
    except Exception as exc:  # a plugin's provider kind may raise anything; the request must still get an answer
        raise ModelUnavailable(
            f"the extraction model {model_key} failed: the provider raised {type(exc).__name__}: {exc}"[:500]
        ) from None
    problem = response_problem(response)
    if problem:
        raise ModelUnavailable(f"the extraction model {model_key} answered something that is not a model response "
                               f"({problem})")
    unfinished = unfinished_answer(response)
    if unfinished:
        raise SegmentationError(f"the extraction model {model_key}'s answer is unusable: {unfinished}")
    return segments_parse(response.text or "", turn_count=len(transcript.turns))


def _json_object(text: str) -> dict[str, Any]:
    start = text.find("{")
    if start < 0:
        raise SegmentationError("the answer contains no JSON")
    if json_text_too_deep(text[start:]):
        raise SegmentationError(f"the JSON is malformed: nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise SegmentationError(f"the JSON is malformed: {exc.msg} at position {start + exc.pos}") from None
    if not isinstance(value, dict):
        raise SegmentationError('the JSON is malformed: expected {"segments": [...]}')
    return value


def _segment(item: Any, index: int) -> Segment:
    if not isinstance(item, dict):
        raise SegmentationError(f"the JSON is malformed: segment {index} is not an object")
    bounds = []
    for key in ("firstTurn", "lastTurn"):
        value = item.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise SegmentationError(f"the JSON is malformed: segment {index} has no whole-number {key}")
        bounds.append(value)
    name = item.get("name")
    if name is not None and not isinstance(name, str):
        raise SegmentationError(f"the JSON is malformed: the name of segment {index} is not text")
    name = " ".join((name or "").split())
    if not text_is_storable(name):
        raise SegmentationError(
            f"the name of segment {index} contains NUL (\\u0000) or a lone surrogate, which no case name may hold"
        )
    if len(name) > NAME_MAX_LENGTH:
        raise SegmentationError(
            f"the name of segment {index} is {len(name):,} characters long; a case name has at most {NAME_MAX_LENGTH}"
        )
    first, last = bounds
    return Segment(name=name or f"Turns {first}–{last}", first_turn=first, last_turn=last)


def _unique(names: Any) -> list[str]:
    seen: list[str] = []
    for name in names:
        if name and name not in seen:
            seen.append(name)
    return seen
