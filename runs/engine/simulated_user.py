"""A simulated user (issue 24): a model that plays the user after a case's scripted turns, or instead of them.

What the user model is asked, and how its answer is read, is defined here once. It sees only what a user would: its
persona, goal and the facts it may reveal (never shown to the agent), and the conversation as a user sees it — its
own lines and the agent's replies, never a tool call, a tool result or the state. It answers with a structured move:
still going (with its next line), done or gave up (with why).

Its calls go through the case's tape like the judge's, labelled purpose "user" with the turn whose line they write
(runs/tapes/replay.py), so record keeps them and replay serves them with no key. The request names, per message, the
turn it belongs to (metadata `message_turns`, never sent): a replay whose agent answered differently from the
recording is stale at that turn, and ends the case Error saying so rather than inventing the user's next line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agenthost.seams import ModelRequest, ModelResponse, parse_model_key, unfinished_answer
from common.inputs import MAX_JSON_DEPTH, json_loads, json_text_too_deep
from runs.tapes.replay import USER

STILL_GOING, DONE, GAVE_UP = "still_going", "done", "gave_up"
MOVES = (STILL_GOING, DONE, GAVE_UP)
# Why a simulated conversation ended (SimulationRecord.stop["by"]).
BY_USER, BY_CONDITION, BY_TURN_LIMIT, BY_ERROR = "user", "condition", "turn_limit", "error"
# Far beyond what a user says in one turn, and well within what a message stores.
MAX_LINE_CHARS = 20_000
# What the user model is shown of one agent reply.
NO_REPLY = "(the assistant said nothing)"

USER_SCHEMA = {
    "name": "simulated_user_move",
    "schema": {
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": list(MOVES)},
            "message": {"type": "string", "description": "what you say next; empty when done or gave up"},
            "reason": {"type": "string", "description": "why you are done or gave up; empty while still going"},
        },
        "required": ["status", "message", "reason"],
        "additionalProperties": False,
    },
}

USER_INSTRUCTION = (
    "You play a user talking to an AI assistant, to test it. Stay in character: write only what this user would "
    "write, one message at a time, in their words. Never say that you are simulated or that this is a test, and never "
    "act as the assistant.\n\nPersona: {persona}\n\nYour goal: {goal}\n\n{facts}"
    'Each time, answer with JSON only: {{"status": "still_going" | "done" | "gave_up", "message": "<what you say '
    'next>", "reason": "<why you are done or gave up>"}}. Use "done" once your goal is reached, "gave_up" when the '
    'assistant cannot or will not get you there; then "message" may be empty. While "still_going", "message" is your '
    "next message."
)

FACTS_INTRODUCTION = "Facts you know. Reveal one only when the assistant asks for it, never before:\n"
OPENING = "(The assistant is waiting for your first message.)"


@dataclass
class SimulatedUserPlan:
    """A case's simulated user as it runs: the model that plays it is resolved (its own, else the suite's judge)."""

    persona: str
    goal: str
    facts: dict[str, str]
    max_turns: int
    model: str
    # (type, params) of each end condition: stateEquals or toolCalled, evaluated as the assertion of that type.
    end_when: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass
class Move:
    status: str
    message: str = ""
    reason: str = ""


class UnusableAnswer(Exception):
    """The user model's answer is not a move; the message says what it was instead."""


@dataclass
class Exchange:
    """One line of the conversation as the user sees it: who said it (`user` or `agent`) and the turn it is part of
    (None: the case's pre-written history)."""

    speaker: str
    text: str
    turn: int | None


def user_request(plan: SimulatedUserPlan, dialogue: list[Exchange], *, turn: int) -> ModelRequest:
    """What the user model is asked for the line that opens `turn`. Its own lines are the assistant's role and the
    agent's replies the user's: to the user model, the agent is the one it talks to."""
    facts = "".join(f"- {key}: {value}\n" for key, value in plan.facts.items())
    system = USER_INSTRUCTION.format(
        persona=plan.persona, goal=plan.goal, facts=f"{FACTS_INTRODUCTION}{facts}\n" if facts else ""
    )
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": OPENING}]
    message_turns: list[int | None] = [None, None]
    for exchange in dialogue:
        if exchange.speaker == "user":
            messages.append({"role": "assistant", "content": exchange.text})
        else:
            messages.append({"role": "user", "content": exchange.text or NO_REPLY})
        message_turns.append(exchange.turn)
    _, model = parse_model_key(plan.model)
    return ModelRequest(
        model=model,
        messages=messages,
        response_schema=USER_SCHEMA,
        metadata={"purpose": USER, "turn": turn, "message_turns": message_turns},
    )


def read_move(response: ModelResponse) -> Move:
    """The move in the user model's answer; UnusableAnswer saying what came instead. The answer is model output:
    anything may come back, and none of it may crash the case or become a line nobody wrote."""
    if response.tool_calls:
        names = ", ".join(dict.fromkeys(call.name for call in response.tool_calls))
        raise UnusableAnswer(f"answered with tool calls ({names}) instead of a move; a user model only talks")
    if unfinished := unfinished_answer(response):
        raise UnusableAnswer(unfinished)
    text = response.text if isinstance(response.text, str) else ""
    if not text.strip():
        raise UnusableAnswer("answered nothing (an empty answer)")
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise UnusableAnswer(f"answered without the JSON move it is asked for: {_excerpt(text)!r}")
    found = text[start : end + 1]
    if json_text_too_deep(found):
        raise UnusableAnswer(f"answered with JSON nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        data = json_loads(found)
    except json.JSONDecodeError as exc:
        raise UnusableAnswer(f"answered with malformed JSON ({exc.msg}): {_excerpt(text)!r}") from None
    if not isinstance(data, dict):
        raise UnusableAnswer(f"answered with JSON that is not an object: {_excerpt(text)!r}")
    status, message, reason = data.get("status"), data.get("message", ""), data.get("reason", "")
    if status not in MOVES:
        raise UnusableAnswer(f"answered with status {_excerpt(repr(status), 80)}; it must be one of {', '.join(MOVES)}")
    if not isinstance(message, str) or not isinstance(reason, str):
        raise UnusableAnswer("answered with a message or reason that is not text")
    if status == STILL_GOING and not message.strip():
        raise UnusableAnswer("said it is still going but wrote no message")
    if len(message) > MAX_LINE_CHARS:
        raise UnusableAnswer(
            f"wrote a message of {len(message):,} characters; a user's line is at most {MAX_LINE_CHARS:,}"
        )
    return Move(status=status, message=message.strip(), reason=reason.strip()[:2000])


def _excerpt(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def stop_text(stop: dict[str, Any]) -> str:
    """What ended a simulated conversation, as the result page and the reason say it."""
    by, after = stop.get("by"), stop.get("after_turn")
    where = f" after turn {after}" if after is not None else ""
    if by == BY_USER:
        said = "said it was done" if stop.get("status") == DONE else "gave up"
        because = f": {stop['reason']}" if stop.get("reason") else ""
        return f"the simulated user {said}{where}{because}"
    if by == BY_CONDITION:
        return f"the end condition {stop.get('condition', '')} held{where}"
    if by == BY_TURN_LIMIT:
        return (
            f"the turn limit ({stop.get('max_turns')}) ended the conversation: the simulated user never said it was "
            "done or gave up"
        )
    return str(stop.get("reason", ""))


@dataclass
class SimulationRecord:
    """What a result keeps of its simulated user (CaseResult.simulation)."""

    user_model: str
    goal: str
    # The case turn index of each generated turn, and the conversation's own turn number for it (they differ when
    # the case has pre-written history).
    turns: list[int] = field(default_factory=list)
    conversation_turns: list[int] = field(default_factory=list)
    stop: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    cost: str = "0"

    def as_dict(self) -> dict[str, Any]:
        return {
            "user_model": self.user_model,
            "goal": self.goal,
            "turns": self.turns,
            "conversation_turns": self.conversation_turns,
            "stop": {**self.stop, "text": stop_text(self.stop)} if self.stop else {},
            "usage": self.usage,
            "cost": self.cost,
        }
