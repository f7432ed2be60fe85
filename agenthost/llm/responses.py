"""The Responses API (`POST /responses`) in the model layer (issue 33 item 5).

The OpenAI Agents SDK's and pydantic-ai's default OpenAI models call the Responses API, not chat completions. A request
a framework built for it travels through the model layer as a `ModelRequest` with `api="responses"`: `messages` are
its `input` items, `tools` its tools and `settings` its other body fields (`instructions`, `reasoning`, `text`,
`tool_choice`, …), each as the framework built it — so what is recorded, diffed on replay and sent to the endpoint is
the request the team's agent sends in production. The answer comes back as a `ModelResponse` (text, tool calls and
usage, read by the loop, the ledger and the results as any answer) that keeps the endpoint's output items, reasoning
items included, so the framework gets them back as they were (`response_payload`).

What needs no more than to read a request (a scripted rule, the stub's responders) reads it in the chat format
(`ModelRequest.chat_messages`, `input_as_chat`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from agenthost.llm.base import ModelResponse, ToolCall, Usage

# Fields of a Responses request that ask the endpoint for state it keeps between requests (an earlier response, a
# stored conversation or prompt, a background job): a recording could not replay them and a scripted model has none,
# so the model layer refuses them by name rather than answer a different request.
SERVER_STATE = ("previous_response_id", "conversation", "prompt", "background")
# Fields the model layer carries as its own (ModelRequest.model, messages, tools, temperature) or that are transport.
_OWN = ("model", "input", "tools", "temperature")
_TRANSPORT = ("stream", "stream_options")


def carried_settings() -> tuple[str, ...]:
    """The Responses request fields carried in ModelRequest.settings, sent as given: every body field of the openai
    SDK's `responses.create` but the model layer's own, the transport's and the server-state ones."""
    from openai.types.responses.response_create_params import ResponseCreateParamsBase

    return tuple(
        name for name in ResponseCreateParamsBase.__annotations__
        if name not in _OWN and name not in _TRANSPORT and name not in SERVER_STATE
    )


def tools_as_chat(tools: list[Any]) -> list[dict[str, Any]]:
    """A Responses request's function tools in the chat format (hosted tools have none)."""
    return [
        {"type": "function", "function": {
            "name": tool.get("name", ""), "description": tool.get("description") or "",
            "parameters": tool.get("parameters") or {},
        }}
        for tool in tools if isinstance(tool, Mapping) and tool.get("type") == "function"
    ]


def _finish(status: Any, incomplete: Any, calls: list[ToolCall]) -> str:
    if status == "incomplete":
        reason = incomplete.get("reason") if isinstance(incomplete, Mapping) else None
        return "length" if reason == "max_output_tokens" else "content_filter" if reason == "content_filter" else (
            str(reason or "incomplete")
        )
    return "tool_calls" if calls else "stop"


def parse_payload(payload: Mapping[str, Any], *, model: str, latency_ms: float) -> ModelResponse:
    """A Responses API answer (the `response` object as JSON) as a ModelResponse that keeps its output items."""
    output = [dict(item) for item in payload.get("output") or [] if isinstance(item, Mapping)]
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[ToolCall] = []
    for item in output:
        if item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, Mapping) and part.get("type") == "output_text":
                    texts.append(str(part.get("text") or ""))
                elif isinstance(part, Mapping) and part.get("type") == "refusal":
                    refusals.append(str(part.get("refusal") or ""))
        elif item.get("type") == "function_call":
            calls.append(ToolCall(
                id=str(item.get("call_id") or ""), name=str(item.get("name") or ""),
                arguments=str(item.get("arguments") or ""),
            ))
    usage = given if isinstance(given := payload.get("usage"), Mapping) else {}
    input_details = given if isinstance(given := usage.get("input_tokens_details"), Mapping) else {}
    output_details = given if isinstance(given := usage.get("output_tokens_details"), Mapping) else {}
    return ModelResponse(
        text="".join(texts),
        tool_calls=calls,
        finish_reason=_finish(payload.get("status"), payload.get("incomplete_details"), calls),
        usage=Usage(
            input_tokens=_count(usage.get("input_tokens")),
            output_tokens=_count(usage.get("output_tokens")),
            cached_input_tokens=_count(input_details.get("cached_tokens")),
            reasoning_tokens=_count(output_details.get("reasoning_tokens")),
        ),
        latency_ms=latency_ms,
        model=str(payload.get("model") or model),
        refusal="".join(refusals),
        output=output,
    )


def _count(value: Any) -> int:
    # Some servers send null, or a float, for a count they do not keep.
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else 0


def output_items(response: ModelResponse, *, prefix: str) -> list[dict[str, Any]]:
    """The output items of an answer: the endpoint's own when it answered through the Responses API, else built from
    its text, refusal and tool calls (a scripted model's, a chat model's)."""
    if response.output:
        return response.output
    items: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    if response.text:
        content.append({"type": "output_text", "text": response.text, "annotations": []})
    if response.refusal:
        content.append({"type": "refusal", "refusal": response.refusal})
    if content:
        items.append({"type": "message", "id": f"msg_{prefix}", "role": "assistant", "status": "completed",
                      "content": content})
    for index, call in enumerate(response.tool_calls):
        items.append({"type": "function_call", "id": f"fc_{prefix}_{index}", "call_id": call.id, "name": call.name,
                      "arguments": call.arguments, "status": "completed"})
    return items


def response_payload(
    response: ModelResponse, *, model: str, response_id: str, request_body: Mapping[str, Any]
) -> dict[str, Any]:
    """The Responses API's `response` object for an answer of the model layer, echoing the request's settings as the
    API does."""
    finish = response.finish_reason
    incomplete = {"length": "max_output_tokens", "content_filter": "content_filter"}.get(finish)
    usage = response.usage
    return {
        "id": response_id,
        "object": "response",
        "created_at": time.time(),
        "model": response.model or model,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "error": None,
        "instructions": request_body.get("instructions"),
        "output": output_items(response, prefix=response_id),
        "parallel_tool_calls": bool(request_body.get("parallel_tool_calls", True)),
        "tool_choice": request_body.get("tool_choice") or "auto",
        "tools": list(request_body.get("tools") or []),
        "temperature": request_body.get("temperature"),
        "usage": {
            "input_tokens": usage.input_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_input_tokens},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            "total_tokens": usage.total_tokens,
        },
    }


# --- The openai SDK's side: a request it built, an answer it reads -------------------------------------------------


def request_body(options: Any) -> dict[str, Any]:
    """The JSON body the openai SDK built for a request (its `extra_body` merged in, as it sends it)."""
    body = {**(options.json_data or {}), **(options.extra_json or {})}
    return body


def as_response(payload: dict[str, Any], cast_to: Any, options: Any) -> Any:
    """The `response` object as the openai SDK would have made it of the server's JSON (its post-parser applied:
    `responses.parse`'s structured output)."""
    from openai import NotGiven
    from openai._models import construct_type

    response = construct_type(type_=cast_to, value=payload)
    parser = options.post_parser
    return response if isinstance(parser, NotGiven) else parser(response)


def is_responses(options: Any) -> bool:
    path = "/" + str(options.url).split("?", 1)[0].strip("/")
    return str(options.method).upper() == "POST" and path.endswith("/responses")
