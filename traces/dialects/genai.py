"""The OpenTelemetry GenAI semantic conventions, in the forms exporters emit today.

- Current (semconv ≥ 1.37): `gen_ai.input.messages` / `gen_ai.output.messages` / `gen_ai.system_instructions` /
  `gen_ai.tool.definitions` as JSON, each message `{"role", "parts": [...]}` with parts of type `text`,
  `tool_call` (`id`, `name`, `arguments`), `tool_call_response` (`id`, `result`; `response` in 1.37),
  `server_tool_call` / `server_tool_call_response` (run by the provider, never locally), `reasoning`, media…
  pydantic-ai (instrumentation versions 2–6; `builtin: true` marks its provider-run tools; versions ≤ 5 send tool
  results in a `user` message) and opentelemetry-instrumentation-openai-agents-v2 write this form.
- Event-based (semconv ≤ 1.36): `gen_ai.system.message`, `gen_ai.user.message`, `gen_ai.assistant.message`,
  `gen_ai.tool.message` and `gen_ai.choice`, either as span events (body fields as event attributes, or the body as
  JSON in `gen_ai.event.content`) or — pydantic-ai's instrumentation version 1 with `event_mode='attributes'` — as
  the JSON list in the span attribute `events`, each item the event's body merged with its attributes
  (`event.name`, `gen_ai.message.index`, `gen_ai.system`). The 1.26-era `gen_ai.content.prompt` /
  `gen_ai.content.completion` events (JSON in `gen_ai.prompt` / `gen_ai.completion`) are read too.
- `gen_ai.system` (before `gen_ai.provider.name`) and `gen_ai.usage.prompt_tokens` / `completion_tokens` (before
  `input_tokens` / `output_tokens`).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from traces.dialects._common import (
    AGENT,
    MODEL,
    OTHER,
    TOOL,
    Call,
    Msg,
    Result,
    Step,
    arguments,
    as_int,
    as_str,
    has_content,
    loaded,
    parse_json,
    text,
    was_cut,
    whole_items,
)
from traces.spans import SpanRecord

NAME = "genai"

INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
OPERATION = "gen_ai.operation.name"
EVENTS_ATTRIBUTE = "events"  # pydantic-ai instrumentation version 1
DETAILS_EVENT = "gen_ai.client.inference.operation.details"

KEPT_NAMES = frozenset(
    {
        INPUT_MESSAGES,
        OUTPUT_MESSAGES,
        SYSTEM_INSTRUCTIONS,
        TOOL_DEFINITIONS,
        OPERATION,
        EVENTS_ATTRIBUTE,
        "gen_ai.provider.name",
        "gen_ai.system",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.prompt_tokens",
        "gen_ai.usage.completion_tokens",
        "gen_ai.conversation.id",
        "gen_ai.agent.name",
        "gen_ai.tool.name",
        "gen_ai.tool.call.id",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        # pydantic-ai's instrumentation version 2 names a tool's arguments and result these
        "tool_arguments",
        "tool_response",
        # pydantic-ai's agent run span names its agent this (the only name it had before gen_ai.agent.name)
        "agent_name",
        # span-event attributes of the event-based form
        "gen_ai.event.content",
        "gen_ai.prompt",
        "gen_ai.completion",
        "event.name",
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "id",
        "name",
        "message",
        "index",
    }
)
KEPT_PATTERNS: tuple[str, ...] = ()

# The operations whose spans are model calls: their messages make the conversation.
_MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "response", "responses"})
_AGENT_OPERATIONS = frozenset({"invoke_agent", "invoke_workflow"})
_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_CONTENT_EVENTS = frozenset({*_MESSAGE_EVENTS, "gen_ai.choice", "gen_ai.content.prompt", "gen_ai.content.completion"})
_MARKERS = (INPUT_MESSAGES, OUTPUT_MESSAGES, OPERATION, SYSTEM_INSTRUCTIONS, "gen_ai.tool.name", "gen_ai.agent.name")
# openai-agents-v2 0.1.0 writes a chat completion message that carries tool calls as its Python repr in a text part.
_REPR_MESSAGE = re.compile(r"^\{'content': .*'tool_calls': \[", re.S)
_MAX_REPR = 1_000_000


def detect(span: SpanRecord) -> bool:
    attributes = span.attributes
    if any(name in attributes for name in _MARKERS) or _pydantic_ai_run(span):
        return True
    if EVENTS_ATTRIBUTE in attributes and "gen_ai." in as_str(attributes[EVENTS_ATTRIBUTE])[:2000]:
        return True
    return any(event.name in _CONTENT_EVENTS or event.name == DETAILS_EVENT for event in span.events)


def read(span: SpanRecord) -> Step:
    attributes = span.attributes
    for event in span.events:
        if event.name == DETAILS_EVENT:
            attributes = {**event.attributes, **attributes}
    step = Step(span=span, dialect=NAME)
    step.agent_name = as_str(attributes.get("gen_ai.agent.name"))
    step.conversation_id = as_str(attributes.get("gen_ai.conversation.id"))
    operation = as_str(attributes.get(OPERATION))
    if operation in _AGENT_OPERATIONS or (not operation and _pydantic_ai_run(span)):
        step.kind = AGENT
        step.agent_name = step.agent_name or as_str(attributes.get("agent_name"))
    elif operation == "execute_tool" or (not operation and "gen_ai.tool.name" in attributes):
        step.kind = TOOL
        _read_tool(step, attributes)
    elif operation in _MODEL_OPERATIONS or (not operation and _carries_messages(span, attributes)):
        step.kind = MODEL
        _read_model_call(step, attributes)
    else:
        step.kind = OTHER
    return step


def _pydantic_ai_run(span: SpanRecord) -> bool:
    return span.scope_name == "pydantic-ai" and "agent_name" in span.attributes


def _carries_messages(span: SpanRecord, attributes: dict[str, Any]) -> bool:
    return (
        INPUT_MESSAGES in attributes
        or OUTPUT_MESSAGES in attributes
        or EVENTS_ATTRIBUTE in attributes
        or any(event.name in _CONTENT_EVENTS for event in span.events)
    )


def _read_tool(step: Step, attributes: dict[str, Any]) -> None:
    step.tool_name = as_str(attributes.get("gen_ai.tool.name"))
    step.tool_call_id = as_str(attributes.get("gen_ai.tool.call.id"))
    step.tool_arguments = attributes.get("gen_ai.tool.call.arguments", attributes.get("tool_arguments"))
    step.tool_result = attributes.get("gen_ai.tool.call.result", attributes.get("tool_response"))
    step.content = has_content(step.tool_arguments) or has_content(step.tool_result)


def _read_model_call(step: Step, attributes: dict[str, Any]) -> None:
    step.provider = as_str(attributes.get("gen_ai.provider.name")) or as_str(attributes.get("gen_ai.system"))
    step.model = as_str(attributes.get("gen_ai.request.model")) or as_str(attributes.get("gen_ai.response.model"))
    step.input_tokens = as_int(
        attributes.get("gen_ai.usage.input_tokens", attributes.get("gen_ai.usage.prompt_tokens"))
    )
    step.output_tokens = as_int(
        attributes.get("gen_ai.usage.output_tokens", attributes.get("gen_ai.usage.completion_tokens"))
    )
    step.tools = tool_definitions(attributes.get(TOOL_DEFINITIONS))
    if INPUT_MESSAGES in attributes or OUTPUT_MESSAGES in attributes:
        raw = attributes.get(INPUT_MESSAGES)
        raw_output = attributes.get(OUTPUT_MESSAGES)
        # A history over the attribute limit is cut: its whole messages are read, never the cut text as a message.
        step.messages_cut = was_cut(raw) or was_cut(raw_output)
        if raw is not None:
            step.load_input = lambda: messages(loaded(raw), default_role="user")
        outputs = messages(raw_output, default_role="assistant")
    else:
        step.messages_cut = was_cut(attributes.get(EVENTS_ATTRIBUTE))
        inputs, outputs = _event_messages(step.span)
        if inputs:
            step.load_input = lambda: inputs
    step.instructions = system_texts(attributes.get(SYSTEM_INSTRUCTIONS))
    step.output = [m for m in outputs if m.role != "system"]


def messages(value: Any, *, default_role: str) -> list[Msg]:
    """A `gen_ai.*.messages` attribute as messages. Text that is not JSON is kept as one message of that text; of a
    text or list the receiver cut, only the messages that arrived whole."""
    if value is None:
        return []
    decoded = whole_items(value) if was_cut(value) else parse_json(value)
    if isinstance(decoded, dict):
        decoded = [decoded]
    if not isinstance(decoded, list):
        return [Msg(role=default_role, text=text(decoded))]
    return [message(item, default_role=default_role) for item in decoded if isinstance(item, dict)]


def message(item: dict[str, Any], *, default_role: str) -> Msg:
    role = item.get("role")
    if not role or not isinstance(role, str):
        role = default_role
    parts = item.get("parts")
    if not isinstance(parts, list):
        return openai_message(item, default_role=default_role)
    msg = Msg(role=role)
    texts: list[str] = []
    for part in parts:
        if part.__class__ is dict:
            if part.get("type") == "text":  # the common case, read inline: histories run to thousands of messages
                content = part.get("content", part.get("text"))
                if content.__class__ is str:
                    texts.append(content)
                elif content is not None:
                    texts.append(text(content))
            else:
                _read_part(part, msg, texts)
        elif isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict):
            _read_part(part, msg, texts)
    if role == "tool" and msg.results:
        texts = []  # openai-agents-v2 repeats a tool result as a text part beside its tool_call_response
    elif role == "tool" and texts:
        msg.results.append(Result(id=as_str(item.get("tool_call_id")) or as_str(item.get("id")), name="",
                                  content="\n".join(texts)))
        texts = []
    msg.text = "\n".join(texts)
    if (role == "assistant" and not msg.calls and msg.text.startswith("{'content': ")
            and len(msg.text) < _MAX_REPR and _REPR_MESSAGE.match(msg.text)):
        return _repr_message(msg.text) or msg
    return msg


def _read_part(part: dict[str, Any], msg: Msg, texts: list[str]) -> None:
    kind = as_str(part.get("type"))
    builtin = part.get("builtin") is True
    if kind == "text":
        content = part.get("content", part.get("text"))
        if content is not None:
            texts.append(text(content))
    elif kind in ("tool_call", "function_call"):
        msg.calls.append(Call(id=as_str(part.get("id")), name=as_str(part.get("name")),
                              arguments=arguments(part.get("arguments")), provider_executed=builtin))
    elif kind == "tool_call_response":
        content = part.get("result", part.get("response"))
        msg.results.append(Result(id=as_str(part.get("id")), name=as_str(part.get("name")), content=content,
                                  provider_executed=builtin))
    elif kind == "server_tool_call":
        details = part.get("server_tool_call")
        name = as_str(part.get("name")) or (as_str(details.get("type")) if isinstance(details, dict) else "")
        msg.calls.append(Call(id=as_str(part.get("id")), name=name, arguments=details, provider_executed=True))
    elif kind == "server_tool_call_response":
        msg.results.append(Result(id=as_str(part.get("id")), name=as_str(part.get("name")),
                                  content=part.get("server_tool_call_response"), provider_executed=True))


def openai_message(item: dict[str, Any], *, default_role: str) -> Msg:
    """A message in the OpenAI chat shape (`role`, `content`, `tool_calls`, `tool_call_id`), which event bodies and
    some exporters use."""
    role = as_str(item.get("role")) or default_role
    msg = Msg(role=role)
    content = item.get("content")
    if role == "tool":
        msg.results.append(Result(id=as_str(item.get("tool_call_id")) or as_str(item.get("id")),
                                  name=as_str(item.get("name")), content=content))
    else:
        msg.text = content_text(content)
    calls = parse_json(item.get("tool_calls"))
    for call in calls if isinstance(calls, list) else ():
        if not isinstance(call, dict):
            continue
        function = given if isinstance(given := call.get("function"), dict) else call
        msg.calls.append(Call(id=as_str(call.get("id")), name=as_str(function.get("name")),
                              arguments=arguments(function.get("arguments"))))
    return msg


def content_text(content: Any) -> str:
    """Message content as text: a string as it is; a list of parts (`{"kind"|"type": "text", "text"|"content"}`)
    joined; anything else as JSON."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and (part.get("kind") or part.get("type")) in ("text", None):
                texts.append(text(part.get("text", part.get("content"))))
        return "\n".join(t for t in texts if t)
    return text(content)


def _repr_message(value: str) -> Msg | None:
    try:
        decoded = ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return openai_message(decoded, default_role="assistant") if isinstance(decoded, dict) else None


def system_texts(value: Any) -> list[str]:
    decoded = parse_json(value)
    if decoded is None:
        return []
    if isinstance(decoded, str):
        return [decoded] if decoded else []
    items = decoded if isinstance(decoded, list) else [decoded]
    found = []
    for item in items:
        if isinstance(item, dict):
            content = item.get("content", item.get("text"))
            if content:
                found.append(text(content))
        elif isinstance(item, str) and item:
            found.append(item)
    return found


def tool_definitions(value: Any) -> list[dict[str, Any]]:
    decoded = parse_json(value)
    found: list[dict[str, Any]] = []
    for item in decoded if isinstance(decoded, list) else ():
        if not isinstance(item, dict):
            continue
        function = given if isinstance(given := item.get("function"), dict) else item
        name = as_str(function.get("name"))
        if name:
            found.append({"name": name, "description": as_str(function.get("description")),
                          "parameters": function.get("parameters") if isinstance(function.get("parameters"),
                                                                                 dict) else {}})
    return found


def _event_messages(span: SpanRecord) -> tuple[list[Msg], list[Msg]]:
    """Input and output messages of the event-based form: pydantic-ai's `events` attribute, or span events."""
    bodies: list[tuple[str, dict[str, Any]]] = []
    raw = span.attributes.get(EVENTS_ATTRIBUTE)
    listed = whole_items(raw) if was_cut(raw) else parse_json(raw)
    if isinstance(listed, list):
        bodies.extend((as_str(item.get("event.name")), item) for item in listed if isinstance(item, dict))
    for event in span.events:
        body = parse_json(event.attributes.get("gen_ai.event.content"))
        bodies.append((event.name, body if isinstance(body, dict) else event.attributes))
    inputs: list[Msg] = []
    outputs: list[Msg] = []
    for name, body in bodies:
        if name in _MESSAGE_EVENTS:
            inputs.append(openai_message(body, default_role=_MESSAGE_EVENTS[name]))
        elif name == "gen_ai.choice":
            choice = parse_json(body.get("message"))
            if isinstance(choice, dict):
                outputs.append(openai_message(choice, default_role="assistant"))
        elif name in ("gen_ai.content.prompt", "gen_ai.content.completion"):
            key = "gen_ai.prompt" if name == "gen_ai.content.prompt" else "gen_ai.completion"
            role = "user" if key == "gen_ai.prompt" else "assistant"
            found = parse_json(body.get(key))
            target = inputs if key == "gen_ai.prompt" else outputs
            if isinstance(found, list):
                target.extend(openai_message(item, default_role=role) for item in found if isinstance(item, dict))
            elif found is not None:
                target.append(Msg(role=role, text=text(found)))
    return inputs, outputs
