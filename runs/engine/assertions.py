"""Deterministic assertions (and the one model-scored kind) over what a case run produced.

A result is "passed", "failed" (the agent did not do it) or "error" (we could not tell: the judge failed). Each keeps
expected, actual and a message a person can act on.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import regex

from agenthost.seams import (
    ModelRequest,
    ModelResponse,
    ProviderError,
    UnknownModel,
    get_model,
    get_provider,
    parse_model_key,
    unfinished_answer,
)
from cases.snapshot_files import snapshot_lines
from common import patterns
from common.inputs import MAX_JSON_DEPTH, json_loads, json_text_too_deep
from runs.engine.case_session import BlockedBecause, is_subset
from runs.engine.tables import same_value, table_differences

DEFAULT_JUDGE_MIN_SCORE = 4

PASSED, FAILED, ERROR = "passed", "failed", "error"


@dataclass
class Evidence:
    """What one turn (or, for case-level assertions, the whole conversation) produced."""

    output: str
    tool_calls: list[dict[str, Any]]
    state: dict[str, Any]
    agent_chain: list[str]
    entry_agent: str
    # The stateful mocks' tables as they are at this point (after the turn, or at the end for the case).
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # The whole conversation (role, content, function, arguments per message), for goalReached; case level only.
    transcript: list[dict[str, Any]] = field(default_factory=list)
    # The simulated user's goal, when the case has one.
    goal: str = ""
    # The graph nodes a langgraph agent ran, in order (TurnResult.nodes_visited).
    nodes_visited: list[str] = field(default_factory=list)
    # What a process agent's program said, normalised (agenthost/runtimes/protocol_transcript.py); None for any other
    # agent. Case level only.
    protocol_said: list[dict[str, Any]] | None = None
    # The run rewrites its snapshots (`agenttest run --update-snapshots`): snapshotMatches passes, keeping what was
    # said.
    updating_snapshots: bool = False


# How the judge's request reaches a model: (request, "provider:model") → response. Record and replay runs pass their
# case's tape, so the judge's exchanges are kept and served like the agent's.
JudgeCall = Callable[[ModelRequest, str], ModelResponse]


def call_model_live(request: ModelRequest, model_key: str) -> ModelResponse:
    config = get_model(model_key)
    return get_provider(config.provider).complete(request)


@dataclass(frozen=True)
class Judge:
    model: str
    call: JudgeCall
    scope: str


@dataclass
class AssertionOutcome:
    type: str
    scope: str
    status: str
    expected: Any
    actual: Any
    message: str
    fatal: bool = False
    synthetic: bool = False
    usage: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def evaluate(
    *,
    type: str,
    params: dict[str, Any],
    evidence: Evidence,
    scope: str,
    judge_model: str = "",
    fatal: bool = False,
    judge_call: JudgeCall | None = None,
) -> AssertionOutcome:
    handler = _HANDLERS.get(type)
    if handler is None:
        return AssertionOutcome(type, scope, ERROR, type, None, f"unknown assertion type {type!r}", fatal)
    judge = Judge(model=judge_model, call=judge_call or call_model_live, scope=scope)
    status, expected, actual, message, *extra = handler(params, evidence, judge)
    outcome = AssertionOutcome(type, scope, status, expected, actual, message, fatal)
    if extra:
        outcome.usage = extra[0]
    return outcome


def _contains(params: dict[str, Any], evidence: Evidence, _judge: Judge) -> tuple[Any, ...]:
    text = params["text"]
    found = _find(text, evidence.output, params.get("case_sensitive", False))
    if found:
        return PASSED, text, _excerpt(evidence.output), "the reply contains the text"
    return FAILED, text, _excerpt(evidence.output), f"the reply does not contain {text!r}"


def _not_contains(params: dict[str, Any], evidence: Evidence, _judge: Judge) -> tuple[Any, ...]:
    text = params["text"]
    if _find(text, evidence.output, params.get("case_sensitive", False)):
        return FAILED, f"not {text!r}", _excerpt(evidence.output), f"the reply contains {text!r}, which it must not"
    return PASSED, f"not {text!r}", _excerpt(evidence.output), "the reply does not contain the text"


def _find(needle: str, haystack: str, case_sensitive: bool) -> bool:
    return needle in haystack if case_sensitive else needle.casefold() in haystack.casefold()


def _regex(params: dict[str, Any], evidence: Evidence, _judge: Judge) -> tuple[Any, ...]:
    # A pattern that does not compile or does not finish says nothing about the agent: the harness could not judge,
    # so the assertion is an Error (exit 2), never a Failed (exit 1, "the agent regressed").
    pattern = params["pattern"]
    try:
        match = regex.search(pattern, evidence.output, flags=patterns.FLAGS, timeout=patterns.MATCH_TIMEOUT_SECONDS)
    except regex.error as exc:
        return ERROR, pattern, _excerpt(evidence.output), f"the regex does not compile: {exc}; fix the assertion"
    except TimeoutError:
        return (
            ERROR,
            pattern,
            _excerpt(evidence.output),
            f"could not tell whether the reply matches: the regex took longer than "
            f"{patterns.MATCH_TIMEOUT_SECONDS:g} s on this reply ({len(evidence.output):,} characters), which "
            "usually means it backtracks catastrophically; simplify it (e.g. (a|aa)+ → a+)",
        )
    if match:
        return PASSED, pattern, match.group(0), "the reply matches"
    return FAILED, pattern, _excerpt(evidence.output), f"the reply does not match /{pattern}/i"


def _calls_named(evidence: Evidence, name: str) -> list[dict[str, Any]]:
    wanted = name.casefold()
    return [call for call in evidence.tool_calls if call["name"].casefold() == wanted]


def _tool_called(params: dict[str, Any], evidence: Evidence, _judge: Judge) -> tuple[Any, ...]:
    name, expected_args = params["function"], params.get("arguments")
    calls = _calls_named(evidence, name)
    expected = {"function": name, "arguments": expected_args} if expected_args else {"function": name}
    called = [_call_summary(call) for call in evidence.tool_calls]
    if not calls:
        return (
            FAILED,
            expected,
            called,
            f"{name} was not called"
            + (f"; calls made: {', '.join(c['name'] for c in called)}" if called else "; no tool was called"),
        )
    if expected_args:
        if not any(is_subset(expected_args, call["arguments"]) for call in calls):
            return (
                FAILED,
                expected,
                [_call_summary(call) for call in calls],
                (f"{name} was called, but never with arguments containing {json.dumps(expected_args)}"),
            )
    return PASSED, expected, [_call_summary(call) for call in calls], f"{name} was called"


def _tool_not_called(params: dict[str, Any], evidence: Evidence, _judge: Judge) -> tuple[Any, ...]:
    name = params["function"]
    calls = _calls_named(evidence, name)
    if calls:
        blocked = any(call["outcome"] == "blocked" for call in calls)
        return (
            FAILED,
            f"{name} not called",
            [_call_summary(c) for c in calls],
            (
                f"{name} was called {len(calls)} time(s)"
                + (" (blocked, which still counts as called)" if blocked else "")
            ),
        )
    return PASSED, f"{name} not called", [], f"{name} was not called"


def _state_equals(params: dict[str, Any], evidence: Evidence, _judge: Judge) -> tuple[Any, ...]:
    key, value = params["key"], params.get("value")
    if key not in evidence.state:
        return FAILED, {key: value}, None, f"state '{key}' is not set"
    actual = evidence.state[key]
    if _same_json(actual, value):
        return PASSED, {key: value}, {key: actual}, f"state '{key}' equals the expected value"
    return FAILED, {key: value}, {key: actual}, f"state '{key}' is {json.dumps(actual)}, expected {json.dumps(value)}"


# How many of a table's differences a failure spells out; the result page shows the whole table.
TABLE_DIFFERENCES_SHOWN = 10


def _table_equals(params: dict[str, Any], evidence: Evidence, _judge: Judge) -> tuple[Any, ...]:
    name, key, rows = params["table"], params.get("key", "id"), params["rows"]
    exact = params.get("exact", False)
    expected = {"table": name, "key": key, "rows": rows, **({"exact": True} if exact else {})}
    if name not in evidence.tables:
        return ERROR, expected, None, f"the case has no table {name!r}, so its final state cannot be checked"
    actual = evidence.tables[name]
    differences = table_differences(actual, name=name, key=key, rows=rows, exact=exact)
    wanted = [row.get(key) for row in rows]
    # The rows the check is about (all of them when exact), not a whole table of a thousand rows per assertion.
    shown = actual if exact else [row for row in actual if key in row and any(same_value(row[key], v) for v in wanted)]
    if not differences:
        how = "holds exactly" if exact else "holds"
        return PASSED, expected, shown, f"table {name} {how} the {len(rows)} expected row(s)"
    more = len(differences) - TABLE_DIFFERENCES_SHOWN
    message = "; ".join(differences[:TABLE_DIFFERENCES_SHOWN]) + (f" (+{more} more)" if more > 0 else "")
    return FAILED, expected, shown, f"table {name} differs from the expected rows: {message}"


def _same_json(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _routed(params: dict[str, Any], evidence: Evidence, _judge: Judge) -> tuple[Any, ...]:
    agent = params["agent"]
    routed = [name for name in evidence.agent_chain[1:]]
    if any(name.casefold() == agent.casefold() for name in routed):
        return PASSED, agent, evidence.agent_chain, f"routed to {agent}"
    where = " → ".join(evidence.agent_chain) or "nothing"
    return FAILED, agent, evidence.agent_chain, f"not routed to {agent}; the agent chain was {where}"


def _fits(actual: list[str], expected: list[str], mode: str) -> bool:
    """Whether `actual` names `expected` (case-insensitively): exactly, all of them in any order (contains), or in
    their order with anything between (ordered)."""
    folded = [name.casefold() for name in actual]
    wanted = [name.casefold() for name in expected]
    if mode == "exact":
        return folded == wanted
    if mode == "contains":
        return all(name in folded for name in wanted)
    position = 0
    for name in folded:
        if position < len(wanted) and name == wanted[position]:
            position += 1
    return position == len(wanted)


def _chain(params: dict[str, Any], evidence: Evidence, _judge: Judge) -> tuple[Any, ...]:
    expected = list(params["agents"])
    mode = params.get("mode", "ordered")
    actual = evidence.agent_chain
    ok = _fits(actual, expected, mode)
    shown = " → ".join(actual) or "nothing"
    if ok:
        return PASSED, {"agents": expected, "mode": mode}, actual, f"the agent chain {shown} fits ({mode})"
    return (
        FAILED,
        {"agents": expected, "mode": mode},
        actual,
        (f"the agent chain was {shown}; expected {mode} {' → '.join(expected)}"),
    )


# Per cause of a block, what to say: the cause, then the remedy that fits it (a mocked function the suite
# force-blocks does not need "a mock"; it needs to come off the block list).
_BLOCKED_CAUSES = {
    BlockedBecause.FORCE_BLOCKED_MOCKED: "{names} {is} force-blocked by the suite (it has a mock; remove it from the "
    "suite's force-blocked functions to let the mock answer)",
    BlockedBecause.FORCE_BLOCKED: "{names} {is} force-blocked by the suite (to let the case answer it, remove it "
    "from the suite's force-blocked functions and add a mock)",
    BlockedBecause.UNMATCHED: "no mock of {names} matched the call (the mocks expect other arguments or another call "
    "index; widen a mock's arguments or add a mock for this call)",
    BlockedBecause.OUTSIDE_EFFECTS: "{names} {is} allowed on the suite but {has} effects outside agenttest, so it "
    "was blocked (add a mock for it)",
    BlockedBecause.TIMED_OUT: "{names} {was} blocked because the case had timed out",
    BlockedBecause.LIVE_LISTING: "{names} {was} blocked: {its} server no longer lists {it} as cached (run `agenttest "
    "mcp refresh`, then check whether {it} may still be allowed)",
    BlockedBecause.CANARY: "{names} is the harness's own canary, which nothing may call",
    BlockedBecause.UNMOCKED: "{names} {has} no mock, so {it} {was} blocked (add a mock for each; only a function free "
    "of outside effects may be allowed on the suite instead)",
}


def _blocked_cause(because: str, names: list[str]) -> str:
    one = len(names) == 1
    return _BLOCKED_CAUSES.get(because, _BLOCKED_CAUSES[BlockedBecause.UNMOCKED]).format(
        names=", ".join(names), it="it" if one else "they", its="its" if one else "their", **{
            "is": "is" if one else "are", "has": "has" if one else "have", "was": "was" if one else "were",
        }
    )


def _no_blocked(params: dict[str, Any], evidence: Evidence, _judge: Judge) -> tuple[Any, ...]:
    blocked = [call["name"] for call in evidence.tool_calls if call["outcome"] == "blocked"]
    # Refused by the host before the seam: the agent does not declare the function, so nothing ran.
    unavailable = [call["name"] for call in evidence.tool_calls if call["outcome"] == "unavailable"]
    if not blocked and not unavailable:
        return PASSED, "no blocked tool calls", [], "no tool call was blocked"
    by_cause: dict[str, list[str]] = {}
    for call in evidence.tool_calls:
        if call["outcome"] == "blocked":
            names = by_cause.setdefault(call.get("blocked_because") or BlockedBecause.UNMOCKED, [])
            if call["name"] not in names:
                names.append(call["name"])
    problems = [_blocked_cause(because, names) for because, names in by_cause.items()]
    for name in dict.fromkeys(unavailable):
        problems.append(f"{name} was called, but the agent does not declare it, so it did not run")
    return FAILED, "no blocked tool calls", blocked + unavailable, "; ".join(problems)


# The verdict's shape, sent as structured output where the judge's model supports it; parsed the same either way.
JUDGE_SCHEMA = {
    "name": "judge_verdict",
    "schema": {
        "type": "object",
        "properties": {
            "score": {"type": "integer", "description": "1 (does not meet the criterion) to 5 (fully meets it)"},
            "reason": {"type": "string", "description": "one sentence"},
        },
        "required": ["score", "reason"],
        "additionalProperties": False,
    },
}

JUDGE_INSTRUCTION = (
    "You grade one reply of an AI assistant against one criterion. Score from 1 (does not meet it at all) to 5 "
    '(fully meets it). Answer with JSON only: {"score": <integer 1-5>, "reason": "<one sentence>"}.'
)


class _NoVerdict(Exception):
    """The judge gave no usable verdict: `outcome` is the assertion's Error."""

    def __init__(self, outcome: tuple[Any, ...]) -> None:
        super().__init__(outcome[3])
        self.outcome = outcome


def _ask_judge(
    judge: Judge,
    *,
    expected: str,
    instruction: str,
    prompt: str,
    schema: dict[str, Any],
    parse: Callable[[str], Any],
) -> tuple[Any, dict[str, int]]:
    """Ask the judge model (llmJudge's and goalReached's alike) and parse its verdict: the verdict and the usage, or
    _NoVerdict with the assertion's Error — the usage of an answer that came still counted."""
    try:
        _, model = parse_model_key(judge.model)
        response = judge.call(
            ModelRequest(
                model=model,
                messages=[{"role": "system", "content": instruction}, {"role": "user", "content": prompt}],
                temperature=0.0,
                response_schema=schema,
                metadata={"purpose": "judge", "scope": judge.scope},
            ),
            judge.model,
        )
    except UnknownModel as exc:
        raise _NoVerdict((ERROR, expected, None, f"the judge model cannot be used: {exc}")) from exc
    except ProviderError as exc:
        raise _NoVerdict((ERROR, expected, None, f"the judge model failed: {exc}")) from exc
    usage = {"input_tokens": response.usage.input_tokens, "output_tokens": response.usage.output_tokens}
    unfinished = unfinished_answer(response)
    if unfinished:
        raise _NoVerdict(
            (ERROR, expected, _excerpt(response.text or ""), f"the judge's answer is unusable: {unfinished}", usage)
        )
    verdict = parse(response.text)
    if isinstance(verdict, str):
        raise _NoVerdict(
            (ERROR, expected, _excerpt(response.text), f"the judge's answer is unusable: {verdict}", usage)
        )
    return verdict, usage


def _judge(params: dict[str, Any], evidence: Evidence, judge: Judge) -> tuple[Any, ...]:
    criterion = params["criterion"]
    minimum = int(params.get("min_score", DEFAULT_JUDGE_MIN_SCORE))
    expected = f"score ≥ {minimum} for: {criterion}"
    if not judge.model:
        return ERROR, expected, None, "no judge model is configured on the suite; set one to use llmJudge"
    try:
        (score, reason), usage = _ask_judge(
            judge,
            expected=expected,
            instruction=JUDGE_INSTRUCTION,
            prompt=f"Criterion: {criterion}\n\nReply:\n{evidence.output}",
            schema=JUDGE_SCHEMA,
            parse=_parse_verdict,
        )
    except _NoVerdict as no:
        return no.outcome
    if score >= minimum:
        return PASSED, expected, {"score": score, "reason": reason}, f"the judge scored {score}: {reason}", usage
    return (
        FAILED,
        expected,
        {"score": score, "reason": reason},
        (f"the judge scored {score}, below {minimum}: {reason}"),
        usage,
    )


GOAL_SCHEMA = {
    "name": "goal_verdict",
    "schema": {
        "type": "object",
        "properties": {
            "reached": {"type": "boolean", "description": "whether the user's goal was reached"},
            "reason": {"type": "string", "description": "one sentence"},
        },
        "required": ["reached", "reason"],
        "additionalProperties": False,
    },
}

GOAL_INSTRUCTION = (
    "You judge whether a user reached their goal in a conversation with an AI assistant, from the whole transcript "
    "(the assistant's tool calls and their results included). The goal is reached only if the assistant really did "
    "what the user needed, not merely said so. Answer with JSON only: "
    '{"reached": true or false, "reason": "<one sentence>"}.'
)
# Bounds on what the goal judge is shown: each message, and the transcript as a whole (its end is kept: that is
# where a goal is reached or not).
_GOAL_LINE_CHARS = 2_000
_GOAL_TRANSCRIPT_CHARS = 60_000


def goal_transcript(messages: list[dict[str, Any]]) -> str:
    """The conversation as the goal judge reads it: who said what, and each tool call with its result."""
    lines = []
    for message in messages:
        role, content = message.get("role"), str(message.get("content") or "")
        if role == "user":
            lines.append(f"User: {content}")
        elif role == "assistant" and content:
            lines.append(f"Assistant: {content}")
        elif role == "tool_call":
            arguments = json.dumps(message.get("arguments") or {}, ensure_ascii=False, sort_keys=True)
            lines.append(f"Assistant called {message.get('function_name', '')}({arguments})")
        elif role == "tool_result":
            lines.append(f"  → {content}")
    bounded = [line if len(line) <= _GOAL_LINE_CHARS else line[:_GOAL_LINE_CHARS] + "…" for line in lines]
    text = "\n".join(bounded)
    return text if len(text) <= _GOAL_TRANSCRIPT_CHARS else "…" + text[-_GOAL_TRANSCRIPT_CHARS:]


def _goal(params: dict[str, Any], evidence: Evidence, judge: Judge) -> tuple[Any, ...]:
    goal = (params.get("goal") or "").strip() or evidence.goal
    expected = f"the user's goal is reached: {goal}"
    if not goal:
        return ERROR, expected, None, "there is no goal to judge: the case has no simulated user and no params.goal"
    if not judge.model:
        return ERROR, expected, None, "no judge model is configured on the suite; set one to use goalReached"
    try:
        (reached, reason), usage = _ask_judge(
            judge,
            expected=expected,
            instruction=GOAL_INSTRUCTION,
            prompt=f"The user's goal: {goal}\n\nTranscript:\n{goal_transcript(evidence.transcript)}",
            schema=GOAL_SCHEMA,
            parse=_parse_goal_verdict,
        )
    except _NoVerdict as no:
        return no.outcome
    actual = {"reached": reached, "reason": reason}
    if reached:
        return PASSED, expected, actual, f"the judge found the goal reached: {reason}", usage
    return FAILED, expected, actual, f"the judge found the goal not reached: {reason}", usage


def _parse_goal_verdict(text: str) -> tuple[bool, str] | str:
    match = re.search(r"\{.*\}", text if isinstance(text, str) else "", re.DOTALL)
    if not match:
        return "no JSON object in it"
    if json_text_too_deep(match.group(0)):
        return f"malformed JSON (nested more than {MAX_JSON_DEPTH} levels deep)"
    try:
        data = json_loads(match.group(0))
    except json.JSONDecodeError as exc:
        return f"malformed JSON ({exc.msg})"
    reached = data.get("reached") if isinstance(data, dict) else None
    if not isinstance(reached, bool):
        return f"'reached' must be true or false, got {_excerpt(repr(reached), 80)}"
    return reached, _storable(_excerpt(str(data.get("reason", "")), 1000))


def _parse_verdict(text: str) -> tuple[int, str] | str:
    """(score, reason) from the judge's answer, or why it is unusable. The answer is model output: anything the
    decoder accepts may come back (NaN, 1e999, a 5,000-digit integer, deep nesting), and none of it may crash the
    case — each is a reason instead."""
    match = re.search(r"\{.*\}", text if isinstance(text, str) else "", re.DOTALL)
    if not match:
        return "no JSON object in it"
    # Checked in the text: decoding deeper nesting could hit Python's recursion limit.
    if json_text_too_deep(match.group(0)):
        return f"malformed JSON (nested more than {MAX_JSON_DEPTH} levels deep)"
    try:
        # An integer too long for int() decodes to a TooLongInteger, refused below as not a whole number.
        data = json_loads(match.group(0))
    except json.JSONDecodeError as exc:
        return f"malformed JSON ({exc.msg})"
    score = data.get("score") if isinstance(data, dict) else None
    shown = _excerpt(repr(score), 80)
    if isinstance(score, bool) or not isinstance(score, int | float):
        return f"'score' must be a whole number, got {shown}"
    # int() of NaN or infinity raises; both are floats the decoder produces from NaN, Infinity and 1e999.
    if isinstance(score, float) and not (math.isfinite(score) and score.is_integer()):
        return f"'score' must be a finite whole number, got {shown}"
    if not 1 <= score <= 5:
        return f"score {shown} is outside 1–5"
    return int(score), _storable(str(data.get("reason", "")))


def _call_summary(call: dict[str, Any]) -> dict[str, Any]:
    return {"name": call["name"], "arguments": call["arguments"], "outcome": call["outcome"]}


def _excerpt(text: str, limit: int = 500) -> str:
    return _storable(text if len(text) <= limit else text[:limit] + "…")


# A lone surrogate (JSON may escape one, "\\ud800") cannot be encoded for any database; the judge's words are kept
# with U+FFFD in its place, as NUL is (agenthost/redaction.py).
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _storable(text: str) -> str:
    return _LONE_SURROGATE.sub("\ufffd", text)


def _nodes(params: dict[str, Any], evidence: Evidence, _judge: Judge) -> tuple[Any, ...]:
    expected = list(params["nodes"])
    mode = params.get("mode", "ordered")
    actual = evidence.nodes_visited
    shown = " → ".join(actual) or "no graph node"
    wanted = {"nodes": expected, "mode": mode}
    if _fits(actual, expected, mode):
        return PASSED, wanted, actual, f"the nodes visited {shown} fit ({mode})"
    return FAILED, wanted, actual, f"the nodes visited were {shown}; expected {mode} {' → '.join(expected)}"


SNAPSHOT_DIFF_LINES = 40


def _snapshot(params: dict[str, Any], evidence: Evidence, _judge: Judge) -> tuple[Any, ...]:
    actual = evidence.protocol_said
    expected = params.get("expected")
    if actual is None:
        return FAILED, expected, None, (
            "the agent's program said nothing to compare: only a process agent (runtime 'process') has a protocol "
            "transcript, and this case's agent did not answer as one"
        )
    if evidence.updating_snapshots:
        was = "new" if expected is None else ("unchanged" if expected == actual else f"was {len(expected)} entries")
        return PASSED, expected, actual, f"snapshot written: {len(actual)} entries ({was})"
    if expected is None:
        return FAILED, None, actual, (
            f"there is no snapshot to compare with yet ({len(actual)} entries said): write it with `agenttest run "
            "DIR --update-snapshots`, read it, and commit suites/<suite>/snapshots/<case file>.jsonl"
        )
    if expected == actual:
        return PASSED, expected, actual, f"the program said what the snapshot holds ({len(actual)} entries)"
    return FAILED, expected, actual, "the program said something else than the snapshot holds:\n" + snapshot_diff(
        expected, actual
    )


def snapshot_diff(expected: list[dict[str, Any]], actual: list[dict[str, Any]]) -> str:
    """A unified diff of the two, as their lines, cut at SNAPSHOT_DIFF_LINES."""
    lines = list(difflib.unified_diff(snapshot_lines(expected), snapshot_lines(actual), "snapshot", "said", n=1,
                                      lineterm=""))
    more = len(lines) - SNAPSHOT_DIFF_LINES
    shown = lines[:SNAPSHOT_DIFF_LINES] + ([f"… {more} more line(s) of the diff"] if more > 0 else [])
    return _storable("\n".join(shown))


_HANDLERS = {
    "outputContains": _contains,
    "outputNotContains": _not_contains,
    "outputRegex": _regex,
    "toolCalled": _tool_called,
    "toolNotCalled": _tool_not_called,
    "stateEquals": _state_equals,
    "routedToAgent": _routed,
    "agentChain": _chain,
    "llmJudge": _judge,
    "noBlockedTools": _no_blocked,
    "tableEquals": _table_equals,
    "goalReached": _goal,
    "nodesVisited": _nodes,
    "snapshotMatches": _snapshot,
}
ASSERTION_TYPES = tuple(_HANDLERS)
