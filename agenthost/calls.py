"""What every function call of the loop shares, whoever asked for it (the model, a rule, a direct invoke): whether the
agent may call the name at all, its arguments parsed, and its call message recorded."""

from __future__ import annotations

import json
from typing import Any

from agenthost.functions import FunctionResult
from agenthost.loading import LoadedAgent
from agenthost.models import Message
from agenthost.redaction import redact, redact_text
from agenthost.session import ConversationSession
from common.inputs import MAX_JSON_DEPTH, json_loads, json_text_too_deep, json_value_problem

# Far more than any function's arguments need; a model that writes more is refused, and the text stored cut short,
# so one runaway answer cannot fill the database or a page.
MAX_RAW_ARGUMENTS_CHARS = 100_000
# Message.function_name and Message.tool_call_id.
MAX_NAME_CHARS = 200


def stored_name(text: Any) -> str:
    """A function name or call id as written to a message: redacted, unencodable characters replaced, cut to its
    column (PostgreSQL refuses a longer varchar). Whether the call may run is decided on the name as written."""
    return redact_text(text if isinstance(text, str) else "")[:MAX_NAME_CHARS]


def refusal_for(name: str | None, loaded: LoadedAgent) -> FunctionResult | None:
    """The answer to a call of a function the agent does not declare (nothing runs), or None when it may call it.
    A blank name is the factory's to reject."""
    if not name or not str(name).strip() or name in loaded.callable_names():
        return None
    declared = [item["name"] for item in loaded.functions if isinstance(item.get("name"), str) and item["name"]]
    listed = f"it declares: {', '.join(declared)}" if declared else "it declares no functions"
    return FunctionResult(
        content=f"{name} is not available to this agent ({listed})", error=True, outcome="unavailable"
    )


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """The model's arguments text as an object, or ({}, the problem): checked before anything runs or is stored, so
    a call whose arguments no tool should see and no database can store is answered "invalid" instead."""
    if raw is None or (isinstance(raw, str) and raw.strip() == ""):
        return {}, None
    if not isinstance(raw, str):
        return {}, f"the arguments must be JSON text, got {type(raw).__name__}"
    if len(raw) > MAX_RAW_ARGUMENTS_CHARS:
        return {}, f"the arguments are {len(raw)} characters long; at most {MAX_RAW_ARGUMENTS_CHARS} are accepted"
    # Before decoding: Python's decoder recurses, and text nested thousands deep raises RecursionError in it.
    if json_text_too_deep(raw):
        return {}, f"the arguments are nested more than {MAX_JSON_DEPTH} levels deep"
    try:
        value = json_loads(raw)
    except ValueError as exc:
        message = f"{exc.msg} at position {exc.pos}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        return {}, f"the arguments are not valid JSON ({message})"
    if not isinstance(value, dict):
        return {}, f"the arguments must be a JSON object, got {type(value).__name__}"
    # NaN/Infinity, integers out of range, lone surrogates, NUL: a tool must not run on what cannot be recorded.
    if (problem := json_value_problem(value)) is not None:
        return {}, f"the arguments cannot be used: {problem}"
    return value, None


def storable_raw_arguments(raw: Any) -> str:
    """The model's arguments text as stored and shown: redacted, unencodable characters replaced, cut short when
    absurdly long. What the tool got (if anything) was parsed from the full text."""
    text = raw if isinstance(raw, str) else ("" if raw is None else repr(raw))
    if len(text) > MAX_RAW_ARGUMENTS_CHARS:
        text = f"{text[:MAX_RAW_ARGUMENTS_CHARS]}… [{len(text) - MAX_RAW_ARGUMENTS_CHARS} more characters not kept]"
    return redact_text(text)


def record_call(
    session: ConversationSession,
    loaded: LoadedAgent,
    turn: int,
    call_id: str,
    name: str,
    arguments: Any,
    raw: str,
    trigger: str,
) -> Message:
    # The name and call id as the model wrote them may be longer than their columns or hold unencodable text; the
    # stored copy is cut to fit (whether the call was allowed was decided on the full name).
    return session.add_message(
        turn=turn,
        role=Message.Role.TOOL_CALL,
        function_name=stored_name(name),
        arguments=redact(arguments),
        raw_arguments=storable_raw_arguments(raw),
        tool_call_id=stored_name(call_id),
        agent_id=loaded.id,
        agent_name=stored_name(loaded.framework_agent),
        trigger=trigger,
    )
