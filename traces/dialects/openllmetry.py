"""OpenLLMetry (Traceloop's `opentelemetry-instrumentation-*` and the `traceloop-sdk`), in its indexed layout.

A model call (`llm.request.type` "chat" / "completion") carries `gen_ai.prompt.N.role` / `.content` /
`.tool_call_id` / `.tool_calls.M.id|name|arguments` (a completion prompt as `gen_ai.prompt.0.user`),
`gen_ai.completion.N.role` / `.content` / `.tool_calls.M.id|name|arguments` (a legacy `function_call` as
`tool_calls.0`), the functions offered as `llm.request.functions.N.name|description|parameters`, `gen_ai.system`,
`gen_ai.request.model` / `gen_ai.response.model` and `gen_ai.usage.prompt_tokens` / `completion_tokens`. The SDK's
decorators mark spans with `traceloop.span.kind` (workflow, task, agent, tool) and `traceloop.entity.name`, with
`traceloop.entity.input` (`{"args": [...], "kwargs": {...}}`) and `traceloop.entity.output` as JSON.
`TRACELOOP_TRACE_CONTENT=false` leaves no prompts, completions or entity input/output.
Source of the layout: traceloop/openllmetry, packages/opentelemetry-instrumentation-openai/opentelemetry/
instrumentation/openai/shared/chat_wrappers.py (`_set_prompts`, `_set_completions`) and its
tests/traces/test_chat.py (`test_chat_tool_calls`); newer releases emit the GenAI form, which `genai` reads.
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
from traces.spans import SpanRecord

NAME = "openllmetry"

SPAN_KIND = "traceloop.span.kind"
PROMPTS = "gen_ai.prompt"
COMPLETIONS = "gen_ai.completion"

KEPT_NAMES = frozenset(
    {
        SPAN_KIND,
        "traceloop.entity.name",
        "traceloop.entity.input",
        "traceloop.entity.output",
        "llm.request.type",
        "gen_ai.system",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.usage.prompt_tokens",
        "gen_ai.usage.completion_tokens",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.conversation.id",
    }
)
KEPT_PATTERNS = (
    r"gen_ai\.(?:prompt|completion)\.\d+\.(?:role|content|user|tool_call_id|tool_calls\.\d+\.(?:id|name|arguments))",
    r"llm\.request\.functions\.\d+\.(?:name|description|parameters)",
)


def detect(span: SpanRecord) -> bool:
    attributes = span.attributes
    if SPAN_KIND in attributes or "llm.request.type" in attributes:
        return True
    return any(key.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for key in attributes)


def read(span: SpanRecord) -> Step:
    attributes = span.attributes
    step = Step(span=span, dialect=NAME, conversation_id=as_str(attributes.get("gen_ai.conversation.id")))
    kind = as_str(attributes.get(SPAN_KIND))
    if kind == "tool":
        step.kind = TOOL
        step.tool_name = as_str(attributes.get("traceloop.entity.name")) or span.name
        step.tool_arguments = _entity_arguments(attributes.get("traceloop.entity.input"))
        step.tool_result = _entity_output(attributes.get("traceloop.entity.output"))
        step.content = has_content(step.tool_arguments) or has_content(step.tool_result)
    elif kind == "agent":
        step.kind = AGENT
        step.agent_name = as_str(attributes.get("traceloop.entity.name")) or span.name
    elif kind or not (
        "llm.request.type" in attributes or any(key.startswith(f"{PROMPTS}.") for key in attributes)
    ):
        step.kind = OTHER
    else:
        step.kind = MODEL
        _read_model_call(step, attributes)
    return step


def _read_model_call(step: Step, attributes: dict[str, Any]) -> None:
    step.provider = as_str(attributes.get("gen_ai.system"))
    step.model = as_str(attributes.get("gen_ai.request.model")) or as_str(attributes.get("gen_ai.response.model"))
    step.input_tokens = as_int(
        attributes.get("gen_ai.usage.prompt_tokens", attributes.get("gen_ai.usage.input_tokens"))
    )
    step.output_tokens = as_int(
        attributes.get("gen_ai.usage.completion_tokens", attributes.get("gen_ai.usage.output_tokens"))
    )
    for function in ordered(indexed(attributes, "llm.request.functions")):
        name = as_str(function.get("name"))
        if name:
            parameters = parse_json(function.get("parameters"))
            step.tools.append({"name": name, "description": as_str(function.get("description")),
                               "parameters": parameters if isinstance(parameters, dict) else {}})
    step.load_input = lambda: [_message(fields, "user") for fields in ordered(indexed(attributes, PROMPTS))]
    step.output = [_message(fields, "assistant") for fields in ordered(indexed(attributes, COMPLETIONS))]


def _message(fields: dict[str, Any], default_role: str) -> Msg:
    role = as_str(fields.get("role")) or default_role
    content = fields.get("content", fields.get("user"))
    msg = Msg(role=role)
    if role == "tool":
        msg.results.append(Result(id=as_str(fields.get("tool_call_id")), name="", content=content))
    else:
        msg.text = content if isinstance(content, str) else ("" if content is None else str(content))
    for call in ordered(indexed(fields, "tool_calls")):
        msg.calls.append(Call(id=as_str(call.get("id")), name=as_str(call.get("name")),
                              arguments=arguments(call.get("arguments"))))
    return msg


def _entity_arguments(value: Any) -> Any:
    """A decorated tool's input, `{"args": [...], "kwargs": {...}}`, as the call's arguments: its keyword
    arguments, or its positional ones when that is all it had."""
    decoded = parse_json(value)
    if not isinstance(decoded, dict):
        return value
    kwargs = decoded.get("kwargs")
    if isinstance(kwargs, dict) and (kwargs or not decoded.get("args")):
        return kwargs
    return {"args": decoded.get("args")}


def _entity_output(value: Any) -> Any:
    decoded = parse_json(value)
    return decoded if isinstance(decoded, str) else value
