"""OpenInference (Arize; LangChain, LlamaIndex, the OpenAI SDK and more through `openinference-instrumentation-*`).

Spans carry `openinference.span.kind`: `LLM` (a model call: flattened `llm.input_messages.N.message.role` /
`.content` / `.tool_call_id` / `.tool_calls.M.tool_call.id|function.name|function.arguments`, the same under
`llm.output_messages`, multimodal text under `.contents.K.message_content.text`, `llm.model_name`, `llm.provider` /
`llm.system`, `llm.token_count.prompt` / `.completion`, `llm.tools.N.tool.json_schema`), `TOOL` (`tool.name`, the
arguments in `input.value`, the result in `output.value`), `AGENT` (`agent.name`, else the span's name) and `CHAIN`
and others (structure only). `session.id` ties the traces of one conversation together. Hidden content
(`OPENINFERENCE_HIDE_*`) leaves no messages and `input.value` / `output.value` as "__REDACTED__".
Attribute names: openinference-semantic-conventions (`openinference/semconv/trace/__init__.py`).
"""

from __future__ import annotations

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
    indexed,
    ordered,
    parse_json,
)
from traces.dialects.genai import openai_message, tool_definitions
from traces.spans import SpanRecord

NAME = "openinference"

SPAN_KIND = "openinference.span.kind"
INPUT_MESSAGES = "llm.input_messages"
OUTPUT_MESSAGES = "llm.output_messages"

KEPT_NAMES = frozenset(
    {
        SPAN_KIND,
        "session.id",
        "agent.name",
        "llm.model_name",
        "llm.provider",
        "llm.system",
        "llm.token_count.prompt",
        "llm.token_count.completion",
        "tool.name",
        "tool.id",
        "tool_call.id",
        "input.value",
        "output.value",
    }
)
_MESSAGE_FIELDS = (
    r"message\.(?:role|content|name|tool_call_id"
    r"|tool_calls\.\d+\.tool_call\.(?:id|function\.name|function\.arguments)"
    r"|contents\.\d+\.message_content\.(?:type|text))"
)
KEPT_PATTERNS = (
    rf"llm\.(?:input|output)_messages\.\d+\.{_MESSAGE_FIELDS}",
    r"llm\.tools\.\d+\.tool\.json_schema",
)


def detect(span: SpanRecord) -> bool:
    if SPAN_KIND in span.attributes:
        return True
    return any(key.startswith(("llm.input_messages.", "llm.output_messages.")) for key in span.attributes)


def read(span: SpanRecord) -> Step:
    attributes = span.attributes
    step = Step(span=span, dialect=NAME, conversation_id=as_str(attributes.get("session.id")))
    kind = as_str(attributes.get(SPAN_KIND)).upper()
    if not kind and any(key.startswith(INPUT_MESSAGES) for key in attributes):
        kind = "LLM"
    if kind == "LLM":
        step.kind = MODEL
        _read_model_call(step, attributes)
    elif kind == "TOOL":
        step.kind = TOOL
        step.tool_name = as_str(attributes.get("tool.name")) or span.name
        step.tool_call_id = as_str(attributes.get("tool_call.id")) or as_str(attributes.get("tool.id"))
        step.tool_arguments = attributes.get("input.value")
        step.tool_result = attributes.get("output.value")
        step.content = has_content(step.tool_arguments) or has_content(step.tool_result)
    elif kind == "AGENT":
        step.kind = AGENT
        step.agent_name = as_str(attributes.get("agent.name")) or span.name
    else:
        step.kind = OTHER
        step.agent_name = as_str(attributes.get("agent.name"))
    return step


def _read_model_call(step: Step, attributes: dict[str, Any]) -> None:
    step.provider = as_str(attributes.get("llm.provider")) or as_str(attributes.get("llm.system"))
    step.model = as_str(attributes.get("llm.model_name"))
    step.input_tokens = as_int(attributes.get("llm.token_count.prompt"))
    step.output_tokens = as_int(attributes.get("llm.token_count.completion"))
    schemas = [parse_json(group.get("tool.json_schema")) for group in ordered(indexed(attributes, "llm.tools"))]
    step.tools = tool_definitions(schemas)
    step.load_input = lambda: [
        _message(fields, "user") for fields in ordered(indexed(attributes, INPUT_MESSAGES))
    ] or _request_messages(attributes.get("input.value"))
    step.output = [
        _message(fields, "assistant") for fields in ordered(indexed(attributes, OUTPUT_MESSAGES))
    ] or _response_messages(attributes.get("output.value"))


def _message(fields: dict[str, Any], default_role: str) -> Msg:
    role = as_str(fields.get("message.role")) or default_role
    content = fields.get("message.content")
    if content is None:
        parts = ordered(indexed(fields, "message.contents"))
        texts = [
            as_str(p.get("message_content.text")) for p in parts if p.get("message_content.type") in ("text", None)
        ]
        content = "\n".join(t for t in texts if t) if texts else None
    msg = Msg(role=role)
    if role == "tool":
        msg.results.append(
            Result(id=as_str(fields.get("message.tool_call_id")), name=as_str(fields.get("message.name")),
                   content=content)
        )
    else:
        msg.text = as_str(content) if isinstance(content, str) else ("" if content is None else str(content))
    for call in ordered(indexed(fields, "message.tool_calls")):
        msg.calls.append(Call(id=as_str(call.get("tool_call.id")), name=as_str(call.get("tool_call.function.name")),
                              arguments=arguments(call.get("tool_call.function.arguments"))))
    return msg


def _request_messages(value: Any) -> list[Msg]:
    """The messages of an OpenAI-shaped request body in `input.value`, when the flattened messages are absent."""
    decoded = parse_json(value)
    found = decoded.get("messages") if isinstance(decoded, dict) else None
    if not isinstance(found, list):
        return []
    return [openai_message(item, default_role="user") for item in found if isinstance(item, dict)]


def _response_messages(value: Any) -> list[Msg]:
    decoded = parse_json(value)
    choices = decoded.get("choices") if isinstance(decoded, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return []
    message = choices[0].get("message")
    return [openai_message(message, default_role="assistant")] if isinstance(message, dict) else []
