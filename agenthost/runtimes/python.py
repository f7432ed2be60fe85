"""The `python` runtime: the team's agent is a plain function, `entry: "shop.bot:respond"`::

    def respond(messages, client, tools):
        ...
        return "the answer's text"

- `messages`: the conversation so far as OpenAI chat messages (user, assistant, tool calls and results), this turn's
  user message last; the function adds its own instruction;
- `client`: an OpenAI-compatible client agenttest provides. `client.chat.completions.create(model=…, messages=…,
  tools=…, temperature=…, max_tokens=…, …)` returns the openai SDK's own `ChatCompletion`, and
  `client.responses.create(model=…, input=…, instructions=…, tools=…, …)` its `Response` (the Responses API,
  agenthost/runtimes/responses.py); each call goes through agenttest's model layer (the model named is the agent's,
  or the model under test in a run), its settings (CHAT_SETTINGS; any Responses API field) sent as given. With
  `stream=True` either call returns the SDK's own `Stream` of chunks or events (and `client.chat.completions.stream`
  the SDK's own helper over it): the layer answers the same request
  unstreamed (stream is transport: recorded and replayed as the unstreamed call) and hands its answer back as the
  API streams it (agenthost/llm/streams.py);
- `tools`: a helper through which the function calls its tools: `tools.call(function, arguments, call_id=…)`
  returns the tool's result as text. Under test a mock answers or the call is blocked and `function` never runs; in
  chat `function(**arguments)` runs. `DirectTools()` (runtimes/direct.py, free of Django) is the same helper running
  the functions directly, for running the function on its own.
"""

from __future__ import annotations

import inspect
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import pydantic

from agenthost.functions import FunctionContext, FunctionResult, as_function_result, declared_effects
from agenthost.llm.base import CHAT_SETTINGS, ModelResponse
from agenthost.llm.streams import as_own_stream, chat_chunks, response_events, unstreamed
from agenthost.runtimes.base import Runtime, RuntimeTurn, register_runtime
from agenthost.runtimes.direct import tool_name
from agenthost.runtimes.responses import responses_create

if TYPE_CHECKING:
    # The openai SDK is imported by a turn that calls it, not when the runtime registers (half a CPU second that every
    # process paid before its first line).
    from openai.types.chat import ChatCompletion

# What the model layer carries of a chat-completions call (the request's own fields, and its settings sent as given);
# anything else the function passes is refused by name, so that no setting the team's code relies on is dropped
# silently.
CARRIED_PARAMETERS = ("model", "messages", "tools", "temperature", "response_format", *CHAT_SETTINGS)
_FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter", "function_call")


def _given(value: Any) -> bool:
    from openai import NotGiven

    return value is not None and not isinstance(value, NotGiven) and type(value).__name__ != "Omit"


def _plain(item: Any) -> Any:
    """A message or tool as the openai SDK would send it: a pydantic object (e.g. the ChatCompletionMessage the
    function got back) as its set fields, the way the SDK's own request transform dumps it."""
    if isinstance(item, pydantic.BaseModel):
        return item.model_dump(exclude_unset=True, mode="json", exclude=getattr(item, "__api_exclude__", None))
    if isinstance(item, dict):
        return {key: _plain(value) for key, value in item.items()}
    if isinstance(item, list | tuple):
        return [_plain(value) for value in item]
    return item


def _response_schema(response_format: Any) -> dict[str, Any] | None:
    if not _given(response_format):
        return None
    if (
        isinstance(response_format, dict)
        and response_format.get("type") == "json_schema"
        and isinstance(response_format.get("json_schema"), dict)
        and response_format["json_schema"].get("strict") is True
    ):
        schema = response_format["json_schema"]
        return {"name": schema.get("name", ""), "schema": schema.get("schema", {})}
    raise TypeError(
        "agenttest's model layer carries response_format only as {'type': 'json_schema', 'json_schema': {'name', "
        "'schema', 'strict': True}}"
    )


def _completion(response: ModelResponse, *, model: str, call_id: str) -> ChatCompletion:
    from openai.types.chat import ChatCompletion

    tool_calls = [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call in response.tool_calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": response.text or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    finish = response.finish_reason if response.finish_reason in _FINISH_REASONS else (
        "tool_calls" if tool_calls else "stop"
    )
    usage = response.usage
    return ChatCompletion.model_validate(
        {
            "id": call_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": response.model or model,
            "choices": [{"index": 0, "finish_reason": finish, "message": message}],
            "usage": {
                "prompt_tokens": usage.input_tokens,
                "completion_tokens": usage.output_tokens,
                "total_tokens": usage.total_tokens,
                "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
                "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            },
        }
    )


def chat_completion(turn: RuntimeTurn, parameters: dict[str, Any], *, agent: str = "") -> ChatCompletion:
    """A chat-completions call as the caller built it, answered through the turn's model layer: the carried
    parameters become the ModelRequest; any other that is set is refused by name."""
    spelled_out = parameters.get("stream") is False
    unsupported = sorted(
        name for name, value in parameters.items()
        if name not in CARRIED_PARAMETERS and _given(value) and not (name == "stream" and spelled_out)
    )
    if unsupported:
        raise TypeError(
            f"agenttest's model layer does not carry {', '.join(unsupported)} yet (it carries "
            f"{', '.join(CARRIED_PARAMETERS)}): the request would not be the one the agent's code sends"
        )
    tools: Any = parameters.get("tools")
    temperature: Any = parameters.get("temperature")
    settings = {name: _plain(parameters[name]) for name in CHAT_SETTINGS if _given(parameters.get(name))}
    if spelled_out:
        # Spelled out by some frameworks (LangChain's ChatOpenAI): sent as they send it.
        settings["stream"] = False
    response = turn.complete(
        messages=_plain(list(parameters.get("messages") or [])),
        tools=_plain(list(tools)) if _given(tools) else [],
        temperature=float(temperature) if _given(temperature) else None,
        response_schema=_response_schema(parameters.get("response_format")),
        settings=settings,
        agent=agent,
    )
    return _completion(
        response, model=turn.loaded.model,
        call_id=f"chatcmpl-agenttest-{turn.conversation_id}-{turn.turn}-{turn.steps}",
    )


def streamed_completion(completion: ChatCompletion, parameters: dict[str, Any], *, asynchronous: bool) -> Any:
    """The answer to a chat-completions call made with `stream=True`, as the SDK's `Stream`/`AsyncStream` of chunks
    (usage last when `stream_options.include_usage` asks for it). Awaitable when `asynchronous`."""
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    stream_options = parameters.get("stream_options")
    include_usage = isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))
    return as_own_stream(
        chat_chunks(completion.model_dump(mode="json"), include_usage=include_usage), path="/chat/completions",
        cast_to=ChatCompletion, event_type=ChatCompletionChunk, asynchronous=asynchronous,
    )


class _Completions:
    def __init__(self, turn: RuntimeTurn) -> None:
        self._turn = turn

    def create(self, **parameters: Any) -> Any:
        if parameters.get("stream") is True:
            completion = chat_completion(self._turn, unstreamed(parameters))
            return streamed_completion(completion, parameters, asynchronous=False)
        return chat_completion(self._turn, parameters)


    def stream(self, **parameters: Any) -> Any:
        """`chat.completions.stream(...)`: the openai SDK's own helper (its ChatCompletionStreamManager: content and
        tool-call events, a `response_format` type parsed) over this client's `create(stream=True)`."""
        from openai.lib._chat_completion_resources import stream

        return stream(cast(Any, _HelperCalls(self)), **parameters)


class _HelperCalls:
    """What the SDK's stream helper calls `create` on: the header it adds naming itself says nothing of the request
    and is left out; any header the team's code gives is still refused by name."""

    def __init__(self, completions: _Completions) -> None:
        self._completions = completions

    def create(self, *, extra_headers: dict[str, Any] | None = None, **parameters: Any) -> Any:
        given = {name: value for name, value in (extra_headers or {}).items() if name != "X-Stainless-Helper-Method"}
        return self._completions.create(**parameters, **({"extra_headers": given} if given else {}))


class _Chat:
    def __init__(self, turn: RuntimeTurn) -> None:
        self.completions = _Completions(turn)


class _Responses:
    def __init__(self, turn: RuntimeTurn) -> None:
        self._turn = turn

    def create(self, **parameters: Any) -> Any:
        from openai._models import construct_type
        from openai.types.responses import Response, ResponseStreamEvent

        body = {name: _plain(value) for name, value in parameters.items() if _given(value)}
        if body.get("stream") is True:
            return as_own_stream(
                response_events(responses_create(self._turn, unstreamed(body))), path="/responses",
                cast_to=Response, event_type=ResponseStreamEvent, asynchronous=False,
            )
        # The SDK's own builder of a response from JSON, typed to return `object`.
        return cast(Response, construct_type(type_=Response, value=responses_create(self._turn, body)))


class AgenttestClient:
    """The OpenAI-compatible client the function is handed: `client.chat.completions.create(...)`, and
    `client.responses.create(...)` for a loop written against the Responses API."""

    def __init__(self, turn: RuntimeTurn) -> None:
        self.chat = _Chat(turn)
        self.responses = _Responses(turn)


class RoutedTools:
    """The tools helper agenttest hands the function: each call through the function-executor factory."""

    def __init__(self, turn: RuntimeTurn) -> None:
        self._turn = turn

    def call(self, function: Callable[..., Any], arguments: str | dict[str, Any] | None = None, *,
             call_id: str = "") -> str:
        name = tool_name(function)

        def implementation(context: FunctionContext) -> FunctionResult:
            return as_function_result(function(**context.arguments))

        raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        return self._turn.call_tool(
            name=name, arguments=raw, implementation=implementation, call_id=call_id, team_tool=function
        ).content


class PythonRuntime(Runtime):
    name = "python"
    framework_modules = ("openai",)

    def entry_problem(self, target: Any, entry: str) -> str:
        if not callable(target) or inspect.isclass(target):
            return f"entry point {entry!r} must be a function respond(messages, client, tools), got {target!r}"
        if inspect.iscoroutinefunction(target):
            return f"entry point {entry!r} is async; the python runtime calls a plain function"
        try:
            inspect.signature(target).bind(None, None, None)
        except TypeError:
            return f"entry point {entry!r} must accept (messages, client, tools)"
        except ValueError:
            return ""
        return ""

    def tool_declarations(self, target: Any) -> list[dict[str, Any]]:
        # A plain loop names its tools only when it calls them (tools.call(function)): the functions of the entry
        # point's module — defined or imported there — are what it can hand the helper.
        module = sys.modules.get(getattr(target, "__module__", "") or "")
        if module is None:
            return []
        declarations = []
        for name, value in vars(module).items():
            if inspect.isfunction(value) and not name.startswith("_") and value is not target:
                declared: dict[str, Any] = {"name": name, "description": inspect.getdoc(value) or "", "parameters": {}}
                if (by_plugin := declared_effects(value)) is not None:
                    declared["outside_effects"] = by_plugin
                declarations.append(declared)
        return declarations

    def run_turn(self, turn: RuntimeTurn, target: Any) -> str:
        reply: str = target(turn.messages(), AgenttestClient(turn), RoutedTools(turn))
        return reply

    def invoke(self, turn: RuntimeTurn, target: Any, name: str, arguments: dict[str, Any]) -> FunctionResult:
        def stand_in(**_arguments: Any) -> str:
            # Runs only when the helper's call did not go through the seam: the canary then reads this, not its token.
            return f"[{name} ran outside agenttest's seam]"

        stand_in.__name__ = name
        content = RoutedTools(turn).call(stand_in, arguments)
        return FunctionResult(content=content)


register_runtime(PythonRuntime())
