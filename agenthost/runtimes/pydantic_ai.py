"""The `pydantic-ai` runtime: the team's pydantic-ai agent runs with pydantic-ai's own loop, `entry:
"shop.agents:agent"` naming a `pydantic_ai.Agent` or a zero-argument factory returning one.

- Model: `Agent.override(model=…)` puts pydantic-ai's own OpenAI model in — its Responses model
  (`OpenAIResponsesModel`) for an agent that would use it alone ("openai:…" names it), else its chat-completions
  model (`OpenAIChatModel`) — its provider given agenttest's client: pydantic-ai builds each request exactly as it
  would send it (its instructions, its tool schemas, its settings) and the client answers it through the turn's
  model layer instead of the network (agenthost/runtimes/responses.py for the Responses API).
- Tools: routed at pydantic-ai's single tool-execution point, not by discovery: while a turn runs, every tool call
  pydantic-ai executes in that turn's context (`ToolManager._raw_execute`, patched once per process and pydantic-ai's
  own outside a turn) goes through the function-executor factory — the agent's function tools, toolsets built per
  run, those of another agent a tool runs (by that agent's name) — pydantic-ai's own execution, with its validation,
  `RunContext` and deps, being the implementation run only when nothing under test answers. Its output tools are
  its own, never routed. A tool's exception does what it does in pydantic-ai alone: a `ModelRetry` is a retry prompt,
  anything else ends the run (the turn is an Error naming the tool). Tools pydantic-ai or the model provider would run
  themselves (native tools such as web search, MCP servers it connects to) cannot be routed: an agent with any
  refuses to run where the conversation's calls are owned by an executor provider (under test), naming them —
  except MCP servers when the case mocks names no other tool offers, which then stand in for the servers' tools
  (never started).
- Model requests past the layer: while a case under test runs, `pydantic_ai.models.ALLOW_MODEL_REQUESTS` is false
  for everything but agenttest's own model (`ModelRequestGate`). Under test, another pydantic-ai agent the team's
  code runs in the case's context (a tool delegating to it) is given agenttest's model too (`Agent._pick_raw_model`,
  patched like the tool-execution point), its calls written by its name; a model reached any other way is refused by
  pydantic-ai. In chat such an agent reaches its own model, as in production (its tool calls are routed all the same).

pydantic-ai is async; Django's ORM is not. As for the openai-agents runtime, the run happens on asgiref's
`async_to_sync`, and everything that touches the conversation runs back on the calling thread.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import threading
import typing
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from typing import Any

import pydantic_core
from asgiref.sync import async_to_sync, sync_to_async

from agenthost.executor import mocked_names
from agenthost.functions import FunctionContext, FunctionResult, as_function_result, declared_effects
from agenthost.runtimes.base import (
    RETURNS,
    Runtime,
    RuntimeTurn,
    register_runtime,
    return_schema,
    runtime_deps,
    zero_argument_factory,
)
from agenthost.runtimes.openai_agents import AgenttestAsyncClient, _owned
from agenthost.runtimes.responses import responses_create
from agenthost.turns import InvalidInput


def _framework() -> Any:
    import pydantic_ai

    return pydantic_ai


# Set while agenttest's own model sends a request (through the model layer), and for the whole of a chat turn.
_own_request: contextvars.ContextVar[bool] = contextvars.ContextVar("agenttest_own_model_request", default=False)
_in_chat: contextvars.ContextVar[bool] = contextvars.ContextVar("agenttest_pydantic_ai_chat", default=False)
_gate_lock = threading.Lock()


class ModelRequestGate:
    """What `pydantic_ai.models.ALLOW_MODEL_REQUESTS` holds once this runtime has run, read by pydantic-ai's own
    `check_allow_model_requests` (only its truth value is). False while a case under test runs a pydantic-ai agent
    anywhere in this process: a model request the team's code makes past the agent's overridden model — a tool or an
    instructions function running another agent on its own model — is refused by pydantic-ai before it is sent.
    agenttest's own model is let through (its requests go through the model layer), and so is a chat turn's code,
    which may call real models. Otherwise it is what the team set (True, pydantic-ai's default).

    Process-wide, as the setting is, counted so that cases running side by side close it together; the exceptions
    ride on context variables, so a request whose context was lost on the way (a thread of the team's own) is
    refused while a case runs: closed, never open, by mistake."""

    def __init__(self, allowed: Any) -> None:
        self.allowed = allowed
        self._cases = 0
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        if _own_request.get():
            return True
        if _in_chat.get():
            return bool(self.allowed)
        with self._lock:
            closed = self._cases > 0
        return not closed and bool(self.allowed)

    def __repr__(self) -> str:
        return f"<agenttest ModelRequestGate: {bool(self)}>"

    @contextmanager
    def closed(self) -> Iterator[None]:
        with self._lock:
            self._cases += 1
        try:
            yield
        finally:
            with self._lock:
                self._cases -= 1


def _gate() -> ModelRequestGate:
    """The gate in `pydantic_ai.models.ALLOW_MODEL_REQUESTS`, put there in place of (and keeping) what the team set."""
    from pydantic_ai import models

    with _gate_lock:
        current: object = models.ALLOW_MODEL_REQUESTS
        if isinstance(current, ModelRequestGate):
            return current
        gate = ModelRequestGate(current)
        # pydantic-ai declares a bool and only ever tests its truth, which the gate answers.
        models.ALLOW_MODEL_REQUESTS = gate  # type: ignore[assignment]
        return gate


@contextmanager
def _model_requests_only_through_agenttest(owned: bool) -> Iterator[None]:
    gate = _gate()
    if owned:
        with gate.closed():
            yield
        return
    token = _in_chat.set(True)
    try:
        yield
    finally:
        _in_chat.reset(token)


class _OutputCalls:
    """Calls of pydantic-ai's own output tools (an `output_type` given as a tool, its default: `final_result`). The
    model is offered them, forced to call one (`tool_choice: "required"`), and pydantic-ai takes the call as the run's
    output: no tool of the team's, so nothing to mock or block, and never through the seam. Each is written to the
    transcript once pydantic-ai has answered it, with that answer as its own history holds it: in the next request it
    sends (a retry), or in the run's messages when the call ended the run."""

    def __init__(self, turn: RuntimeTurn) -> None:
        self.turn = turn
        # The output tools' names, as pydantic-ai's model sees them in each request's parameters.
        self.names: set[str] = set()
        self.pending: dict[str, tuple[str, str]] = {}

    def asked(self, completion: Any) -> None:
        for call in completion.choices[0].message.tool_calls or []:
            if call.function.name in self.names:
                self.pending[call.id] = (call.function.name, call.function.arguments)

    def answered(self, answers: list[tuple[str, Any]]) -> None:
        """Write the calls pydantic-ai answered ((call id, its answer)). On the calling thread."""
        for call_id, content in answers:
            if call_id not in self.pending:
                continue
            name, arguments = self.pending.pop(call_id)
            self.turn.record_output(
                name=name, arguments=arguments, call_id=call_id,
                content=content if isinstance(content, str) else json.dumps(content),
            )

    def ended(self, messages: Sequence[Any]) -> None:
        """The calls the run ended on, answered in its last messages, which it sends no model."""
        from pydantic_ai.messages import RetryPromptPart, ToolReturnPart

        answers: list[tuple[str, Any]] = []
        for message in messages:
            for part in getattr(message, "parts", ()):
                if isinstance(part, ToolReturnPart):
                    answers.append((part.tool_call_id, part.model_response_str()))
                elif isinstance(part, RetryPromptPart) and part.tool_call_id:
                    answers.append((part.tool_call_id, part.model_response()))
        self.answered(answers)


class _Completions:
    def __init__(self, inner: Any, outputs: _OutputCalls) -> None:
        self._inner = inner
        self._outputs = outputs

    async def create(self, **parameters: Any) -> Any:
        answers = [
            (message["tool_call_id"], message.get("content"))
            for message in parameters.get("messages") or []
            if isinstance(message, dict) and message.get("role") == "tool"
            and message.get("tool_call_id") in self._outputs.pending
        ]
        if answers:
            await sync_to_async(self._outputs.answered, thread_sensitive=True)(answers)
        completion = await self._inner.create(**parameters)
        self._outputs.asked(completion)
        return completion


class _Chat:
    def __init__(self, inner: Any, outputs: _OutputCalls) -> None:
        self.completions = _Completions(inner.completions, outputs)


class PydanticAIClient(AgenttestAsyncClient):
    """agenttest's client as pydantic-ai's OpenAI provider takes it (an `AsyncOpenAI`)."""

    def __init__(self, turn: RuntimeTurn, outputs: _OutputCalls, agent: str = "") -> None:
        super().__init__(turn, {"agent": agent} if agent else {})
        self.chat = _Chat(self.chat, outputs)


@functools.cache
def _model_class(responses: bool = False) -> type:
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel

    class AgenttestModel:
        """pydantic-ai's own OpenAI model (its Responses model or its chat-completions model), unchanged but for
        noting which of the tools it offers are pydantic-ai's output tools (the request's parameters say so; the
        request body does not), and for passing the model-request gate: its requests go through agenttest's model
        layer, never straight to a model."""

        outputs: _OutputCalls

        async def request(self, messages: Any, model_settings: Any, model_request_parameters: Any) -> Any:
            self.outputs.names.update(tool.name for tool in model_request_parameters.output_tools)
            _note_retry_prompts(self.outputs.turn, messages)
            token = _own_request.set(True)
            try:
                return await super().request(  # type: ignore[misc]
                    messages, model_settings, model_request_parameters
                )
            finally:
                _own_request.reset(token)

        @asynccontextmanager
        async def request_stream(
            self, messages: Any, model_settings: Any, model_request_parameters: Any, run_context: Any = None
        ) -> AsyncIterator[Any]:
            # A streamed run (agent.run_stream, a tool delegating to another agent that way): the same, streamed.
            self.outputs.names.update(tool.name for tool in model_request_parameters.output_tools)
            _note_retry_prompts(self.outputs.turn, messages)
            token = _own_request.set(True)
            try:
                async with super().request_stream(  # type: ignore[misc]
                    messages, model_settings, model_request_parameters, run_context
                ) as streamed:
                    yield streamed
            finally:
                _own_request.reset(token)

    base = OpenAIResponsesModel if responses else OpenAIChatModel
    return type(f"Agenttest{base.__name__}", (AgenttestModel, base), {})


def _wants_responses(agent: Any) -> bool:
    """Whether the agent alone would call the Responses API: pydantic-ai's own Responses model, or a model name its
    OpenAI provider serves through it ("openai:…", "openai-responses:…"). An agent without a model (agenttest gives
    it one) and any other model are answered as chat completions."""
    from pydantic_ai.models.openai import OpenAIResponsesModel

    model = getattr(agent, "model", None)
    if isinstance(model, OpenAIResponsesModel):
        return True
    return isinstance(model, str) and model.startswith(("openai:", "openai-responses:"))


def _responses_answer(turn: RuntimeTurn, outputs: _OutputCalls, agent: str, body: dict[str, Any]) -> dict[str, Any]:
    """A Responses API request of pydantic-ai's Responses model through the model layer, its output tools' calls
    noted as the chat client notes them (`_Completions`). On the calling thread."""
    answers = [
        (item["call_id"], item.get("output"))
        for item in body.get("input") or []
        if isinstance(item, dict) and item.get("type") == "function_call_output"
        and item.get("call_id") in outputs.pending
    ]
    if answers:
        outputs.answered(answers)
    payload = responses_create(turn, body, agent=agent)
    for item in payload["output"]:
        if item.get("type") == "function_call" and item.get("name") in outputs.names:
            outputs.pending[item["call_id"]] = (item["name"], item.get("arguments") or "")
    return payload


def _note_retry_prompts(turn: RuntimeTurn, messages: Any) -> None:
    """pydantic-ai's own answers to calls it had the model retry (arguments that do not validate, an unknown tool, a
    tool's ModelRetry): under test, results the case's ledger (agenthost/seal.py) counts as decided."""
    from pydantic_ai.messages import RetryPromptPart

    case = turn.session.case
    if case is None:
        return
    for message in messages:
        for part in getattr(message, "parts", ()):
            # A retry is pydantic-ai's prompt to try again (its own, or a tool's ModelRetry the seam saw raised),
            # whether written as a retry prompt or as a tool return whose outcome is "retried".
            retried = isinstance(part, RetryPromptPart) or getattr(part, "outcome", None) == "retried"
            if retried and getattr(part, "tool_call_id", None):
                case.note_framework_answer(part.tool_call_id)


class _Routing:
    """One turn's routing, held in a context variable for the whole of pydantic-ai's run: every tool call pydantic-ai
    executes in that context — of the agent, of a toolset built per run, of another agent a tool runs — goes through
    the turn's `call_tool`, pydantic-ai's own execution (`ToolManager._raw_execute`) being the implementation."""

    def __init__(self, turn: RuntimeTurn, entry: Any, make_model: Any, *, owned: bool) -> None:
        self.turn = turn
        self.entry = entry
        # Under test another agent's run gets agenttest's model; in chat it reaches its own, as in production.
        self.owned = owned
        self._make_model = make_model
        self._models: dict[int, tuple[Any, Any]] = {}

    def model_for(self, agent: Any) -> Any:
        """agenttest's model for another agent the team's code runs in this turn (a tool delegating to it), its calls
        written as that agent's: its requests go through the model layer like the entry agent's."""
        held = self._models.get(id(agent))
        if held is None or held[0] is not agent:
            held = (agent, self._make_model(self.turn, _OutputCalls(self.turn), str(agent.name or ""),
                                            responses=_wants_responses(agent)))
            self._models[id(agent)] = held
        return held[1]

    async def execute(self, original: Any, manager: Any, validated: Any, usage: Any, wrap: bool) -> Any:
        tool, ctx, name = validated.tool, validated.ctx, validated.call.tool_name
        raised: list[BaseException] = []

        def implementation(_context: FunctionContext) -> FunctionResult:
            # pydantic-ai's own call of the team's tool, with its RunContext and deps: only here, when nothing under
            # test answered. What it raises is handed back to pydantic-ai after the call is written: a ModelRetry
            # (already pydantic-ai's retry prompt) it turns into a retry as alone; anything else ends the run, as
            # alone, and the turn is an Error naming the tool.
            try:
                return as_function_result(async_to_sync(original)(manager, validated, usage=usage,
                                                                   wrap_validation_errors=wrap))
            except Exception as exc:
                raised.append(exc)
                self.turn.note_tool_raised(name, exc)
                return FunctionResult(content=_retry_text(exc), error=True)

        definition = tool.tool_def
        caller = getattr(ctx, "agent", None)
        result = await sync_to_async(self.turn.call_tool, thread_sensitive=True)(
            name=name, arguments=json.dumps(pydantic_core.to_jsonable_python(validated.validated_args)),
            implementation=implementation, call_id=getattr(ctx, "tool_call_id", None) or "",
            declaration={"description": definition.description or "",
                         "parameters": definition.parameters_json_schema},
            team_tool=_team_function(tool),
            # Another agent a tool ran: its calls are its own, by its name.
            agent="" if caller is None or caller is self.entry else str(getattr(caller, "name", "") or ""),
        )
        if raised:
            raise raised[0]
        return result.content


def _retry_text(exc: BaseException) -> str:
    """What the model is told of a failed call: pydantic-ai's own retry prompt for a ModelRetry, else the error."""
    prompt = getattr(exc, "tool_retry", None)
    if prompt is not None and hasattr(prompt, "model_response"):
        return str(prompt.model_response())
    return f"{type(exc).__name__}: {exc}"


_routing: contextvars.ContextVar[_Routing | None] = contextvars.ContextVar("agenttest_pydantic_ai_routing",
                                                                           default=None)
_install_lock = threading.Lock()


def _install_routing() -> None:
    """Put agenttest's routing at pydantic-ai's single tool-execution point, once per process. Outside a turn's
    context, and for pydantic-ai's own output tools, it is pydantic-ai's own."""
    from pydantic_ai import Agent
    from pydantic_ai.tool_manager import ToolManager

    with _install_lock:
        if getattr(ToolManager._raw_execute, "agenttest_routed", False):
            return
        original = ToolManager._raw_execute
        original_pick = Agent._pick_raw_model

        def _pick_raw_model(self: Any, model: Any) -> Any:
            routing = _routing.get()
            if routing is None or not routing.owned or self is routing.entry:
                return original_pick(self, model)
            return routing.model_for(self)

        async def _raw_execute(self: Any, validated: Any, *, usage: Any, wrap_validation_errors: bool = True) -> Any:
            routing = _routing.get()
            if routing is None or validated.tool.tool_def.kind == "output":
                return await original(self, validated, usage=usage, wrap_validation_errors=wrap_validation_errors)
            return await routing.execute(original, self, validated, usage, wrap_validation_errors)

        _raw_execute.agenttest_routed = True  # type: ignore[attr-defined]
        ToolManager._raw_execute = _raw_execute  # type: ignore[method-assign]
        Agent._pick_raw_model = _pick_raw_model  # type: ignore[method-assign]


@contextmanager
def _routed(routing: _Routing) -> Iterator[None]:
    _install_routing()
    token = _routing.set(routing)
    try:
        yield
    finally:
        _routing.reset(token)


def _returns(function: Any) -> dict[str, Any] | None:
    """A tool function's output schema from its return annotation; `ToolReturn[T]` returns a T to the model."""
    try:
        annotation = typing.get_type_hints(inspect.unwrap(function)).get("return")
    except Exception:  # an annotation that does not resolve says nothing about what the tool returns
        return None
    if getattr(typing.get_origin(annotation) or annotation, "__name__", "") == "ToolReturn":
        annotation = (typing.get_args(annotation) or (None,))[0]
    return return_schema(function, annotation)


def _team_function(tool: Any) -> Any:
    """The team's function behind a tool pydantic-ai is calling (what a plugin declares effects on), or None: the
    function toolset's own entry, under whatever combining wrappers hold it."""
    while hasattr(tool, "source_tool"):
        tool = tool.source_tool
    held = getattr(getattr(tool, "toolset", None), "tools", None)
    if not isinstance(held, dict):
        return None
    entry = held.get(getattr(tool, "original_name", None) or tool.tool_def.name)
    return getattr(entry, "function", None)


def _native_tools(agent: Any) -> list[str]:
    """The tools of the agent the model provider would run itself, outside the seam."""
    found: list[str] = []
    for native in agent.root_capability.get_native_tools():
        kind = getattr(native, "kind", "") or type(native).__name__
        if kind == "tool_search":
            # Injected into every agent; without a provider that searches tools itself (the chat-completions model
            # is not one) pydantic-ai searches locally, through a function tool that is routed like any other.
            continue
        found.append(f"native tool {kind!r}")
    return found


def _is_mcp(toolset: Any) -> bool:
    # By name: pydantic_ai.mcp needs the optional fastmcp client even to be imported.
    return any("MCP" in kind.__name__ for kind in type(toolset).__mro__)


def _mcp_name(toolset: Any) -> str:
    transport = getattr(getattr(toolset, "client", None), "transport", None)
    return str(getattr(toolset, "id", None) or (repr(transport).strip("<>")[:200] if transport is not None else "")
               or type(toolset).__name__)


def _leaves(toolsets: Sequence[Any]) -> list[Any]:
    found: list[Any] = []
    for toolset in toolsets:
        toolset.apply(found.append)
    return found


def _mcp_stand_ins(toolsets: Sequence[Any], names: list[str]) -> list[Any]:
    """The agent's toolsets with every MCP server pydantic-ai would connect to itself left out (never connected), and
    a toolset offering `names` (what the case mocks that no other tool of the agent offers) in their place, each call
    of one routed through the seam like any other tool: the case's mock answers."""
    from pydantic_ai import Tool
    from pydantic_ai.toolsets import FunctionToolset

    servers = ", ".join(repr(_mcp_name(leaf)) for leaf in _leaves(toolsets) if _is_mcp(leaf))

    def stand_in(name: str) -> Any:
        def nowhere(**_arguments: Any) -> str:
            return f"{name} is a tool of an MCP server; agenttest does not connect to it under test"

        return Tool.from_schema(nowhere, name=name, description=f"A tool of the MCP server {servers}, answered by "
                                "the case's mock.", json_schema={"type": "object", "properties": {},
                                                                 "additionalProperties": True})

    kept = [toolset.visit_and_replace(lambda leaf: FunctionToolset([]) if _is_mcp(leaf) else leaf)
            for toolset in toolsets]
    return [*kept, FunctionToolset([stand_in(name) for name in names])]


def _history(messages: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    """The conversation's chat messages as pydantic-ai's message history, and this turn's user prompt."""
    from pydantic_ai import messages as parts

    *earlier, last = messages
    history: list[Any] = []
    for message in earlier:
        role = message["role"]
        if role == "user":
            history.append(parts.ModelRequest(parts=[parts.UserPromptPart(content=message["content"] or "")]))
        elif role == "tool":
            history.append(parts.ModelRequest(parts=[parts.ToolReturnPart(
                tool_name=message.get("name") or "", content=message["content"], tool_call_id=message["tool_call_id"],
            )]))
        elif role == "assistant":
            response: list[Any] = [parts.TextPart(content=message["content"])] if message.get("content") else []
            response.extend(
                parts.ToolCallPart(tool_name=call["function"]["name"], args=call["function"]["arguments"],
                                   tool_call_id=call["id"])
                for call in message.get("tool_calls") or []
            )
            history.append(parts.ModelResponse(parts=response))
    return last.get("content") or "", history


class PydanticAIRuntime(Runtime):
    name = "pydantic-ai"
    framework_modules = ("pydantic_ai", "pydantic_ai.models.openai")

    def _agent(self, target: Any) -> Any:
        framework = _framework()
        agent = target if isinstance(target, framework.Agent) else target()
        if not isinstance(agent, framework.Agent):
            raise TypeError(f"the entry point's factory returned a {type(agent).__name__}, not a pydantic_ai.Agent")
        return agent

    def tool_declarations(self, target: Any) -> list[dict[str, Any]]:
        """The function tools of the agent's toolsets (those registered on the agent and those of every toolset it
        was given), with the description and JSON schema pydantic-ai builds for the model; native tools and MCP
        servers' tools by name only (their schemas are the provider's or the server's)."""
        declarations: dict[str, dict[str, Any]] = {}
        agent = self._agent(target)
        for leaf in _leaves(agent.toolsets):
            for tool in getattr(leaf, "tools", {}).values() if not _is_mcp(leaf) else ():
                definition = tool.tool_def
                declared = declarations.setdefault(definition.name, {
                    "name": definition.name, "description": definition.description or "",
                    "parameters": definition.parameters_json_schema or {},
                })
                if (by_plugin := declared_effects(tool.function)) is not None:
                    declared["outside_effects"] = by_plugin
                if (returns := _returns(tool.function)) is not None:
                    declared[RETURNS] = returns
        return list(declarations.values())

    def entry_problem(self, target: Any, entry: str) -> str:
        try:
            framework = _framework()
        except ImportError:
            return "runtime 'pydantic-ai' needs pydantic-ai: pip install 'agenttest[pydantic-ai]'"
        if isinstance(target, framework.Agent) or zero_argument_factory(target):
            return ""
        return f"entry point {entry!r} must be a pydantic_ai.Agent or a zero-argument function returning one"

    def routed(self, turn: RuntimeTurn, entry: Any) -> AbstractContextManager[None]:
        """The block within which every tool call pydantic-ai executes goes through the seam. The canary goes through
        it too, so a routing not in place shows before any turn runs."""
        return _routed(_Routing(turn, entry, self._model, owned=_owned(turn)))

    def _model(self, turn: RuntimeTurn, outputs: _OutputCalls, agent: str = "", *, responses: bool = False) -> Any:
        from pydantic_ai.providers.openai import OpenAIProvider

        from agenthost.runtimes.model_layer_client import ModelLayerClient

        if responses:
            client: Any = ModelLayerClient(functools.partial(_responses_answer, turn, outputs, agent))
        else:
            client = PydanticAIClient(turn, outputs, agent)
        model = _model_class(responses)(turn.loaded.model, provider=OpenAIProvider(openai_client=client))
        model.outputs = outputs
        return model

    def run_turn(self, turn: RuntimeTurn, target: Any) -> str:
        agent = self._agent(target)
        owned = _owned(turn)
        toolsets: Sequence[Any] = list(agent.toolsets)
        # Only MCP stand-ins change the agent's toolsets: its own tools are routed where pydantic-ai executes them.
        stand_ins = False
        unroutable = _native_tools(agent)
        servers = [_mcp_name(leaf) for leaf in _leaves(toolsets) if _is_mcp(leaf)]
        if servers and owned:
            from pydantic_ai.toolsets import FunctionToolset

            offered = {name for leaf in _leaves(toolsets) if isinstance(leaf, FunctionToolset) for name in leaf.tools}
            mcp_mocked = sorted(mocked_names(turn.conversation_id) - offered)
            if mcp_mocked:
                toolsets, stand_ins = _mcp_stand_ins(toolsets, mcp_mocked), True
            else:
                unroutable.extend(f"MCP server {server!r}" for server in servers)
        if unroutable and owned:
            raise InvalidInput(
                "the agent uses tools pydantic-ai or its model provider would run itself, outside agenttest's seam, "
                f"so it does not run under test: {'; '.join(unroutable)} (an MCP server runs under test when the "
                "case mocks the tools of it the agent calls)",
                partial=turn.result,
            )
        # Read here, on the calling thread: inside pydantic-ai's event loop the ORM refuses to run.
        prompt, history = _history(turn.messages())
        outputs = _OutputCalls(turn)
        model = self._model(turn, outputs, responses=_wants_responses(agent))
        # The agent file's deps factory, given the conversation's state; an `agent.override(deps=…)` of the team's
        # own still wins, as pydantic-ai has it.
        deps = runtime_deps(turn.loaded, turn.session.state, turn.result)

        async def run() -> Any:
            if not stand_ins:
                with agent.override(model=model):
                    return await agent.run(prompt, message_history=history or None, deps=deps)
            # `tools=[]` as well: the agent's own function toolset would otherwise be offered beside the given ones
            # and clash with them by name.
            with agent.override(model=model, toolsets=toolsets, tools=[]):
                return await agent.run(prompt, message_history=history or None, deps=deps)

        with _model_requests_only_through_agenttest(owned), self.routed(turn, agent):
            result = async_to_sync(run)()
        outputs.ended(result.new_messages()[-1:])
        output = result.output
        if isinstance(output, str):
            return output
        return pydantic_core.to_json(output).decode()

    def invoke(self, turn: RuntimeTurn, target: Any, name: str, arguments: dict[str, Any]) -> FunctionResult:
        from pydantic_ai import RunContext, Tool
        from pydantic_ai.messages import ToolCallPart
        from pydantic_ai.tool_manager import ToolManager
        from pydantic_ai.toolsets import FunctionToolset
        from pydantic_ai.usage import RunUsage

        def stand_in(**_arguments: Any) -> str:
            # Runs only when the call did not go through the seam: the canary then reads this, not its token.
            return f"[{name} ran outside agenttest's seam]"

        probe = FunctionToolset([Tool.from_schema(stand_in, name=name, description="agenttest's canary", json_schema={
            "type": "object", "properties": {}, "additionalProperties": True})])
        context = RunContext(deps=None, model=self._model(turn, _OutputCalls(turn)), usage=RunUsage(),
                             tool_call_id="agenttest-canary", tool_name=name)

        async def call() -> Any:
            # pydantic-ai's own tool manager, as a run calls a tool: the canary proves the routing is in place there.
            manager = await ToolManager(toolset=probe).for_run_step(context)
            return await manager.handle_call(ToolCallPart(tool_name=name, args=arguments,
                                                          tool_call_id="agenttest-canary"))

        with self.routed(turn, None):
            return FunctionResult(content=async_to_sync(call)())


register_runtime(PydanticAIRuntime())
