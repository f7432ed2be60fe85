"""The `openai-agents` runtime: the team's OpenAI Agents SDK agent runs with the SDK's own loop, `entry:
"shop.agents:triage"` naming an `agents.Agent` or a zero-argument factory returning one.

- Model: the SDK's own model — its Responses model (`OpenAIResponsesModel`, the SDK's default for OpenAI models) or
  its chat-completions model (`OpenAIChatCompletionsModel`), whichever the agent would use alone — is handed, through
  `RunConfig(model=…)` and model resolution, a client of agenttest's: the SDK builds each request exactly as it would
  send it (its instructions, its converted tools and hand-offs, its settings) and agenttest's client answers it
  through the turn's model layer instead of the network (agenthost/runtimes/responses.py for the Responses API).
- Tools: routed at the SDK's single invocation point, not by discovery. While a turn runs, every function tool the
  SDK invokes in that turn's context (`agents.run_internal.tool_execution._invoke_function_tool_with_metadata`, patched
  once per process and a no-op outside a turn) goes through the function-executor factory with the agent that made
  the call (`ToolContext.agent`); the SDK's own invocation — its failure_error_function included — is the
  implementation, run only when nothing under test answers. So a clone's tools, a hand-off appended at run time, an
  agent exposed as a tool (`as_tool`: itself a tool of the outer agent, its inner agent's calls by the inner agent's
  name) and an agent a tool runs itself are all routed, and so is each model call: the SDK's model resolution
  (`run_loop.get_model`) gives every agent of the turn's context agenttest's model, bound to that agent's name.
  Before the run the agent is cloned only to put stand-ins in: a hosted tool (web search, code interpreter, computer
  use, …) the case mocks by its name is replaced by a function tool of that name, so the mock answers it; MCP servers
  the SDK connects to itself are dropped under test when the case mocks names no other tool
  offers, those names standing in for the servers' tools. Tools the SDK would run itself otherwise (hosted tools not
  mocked, MCP servers without such mocks, hand-offs given as `Handoff` objects) refuse the run where the
  conversation's calls are owned by an executor provider (under test), naming them.
- Which agent made each call: the tool's `ToolContext.agent`, and the agent the model was resolved for.
- The run's outcome on the transcript: a tripped guardrail is the turn's answer, naming it (assertions judge it); a
  structured `output_type` is the assistant's message as its JSON; the run context is a copy of the conversation's
  state (a dict), and what the run changed in it is written back as state.

The SDK is async; Django's ORM is not. The run happens on asgiref's `async_to_sync`, and everything that touches the
conversation (`RuntimeTurn.complete`, `call_tool`) runs back on the calling thread (`sync_to_async(thread_sensitive)`).
"""

from __future__ import annotations

import contextvars
import copy
import functools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pydantic
from asgiref.sync import async_to_sync, sync_to_async

from agenthost.executor import executor_providers, mocked_by_name, mocked_names
from agenthost.functions import FunctionContext, FunctionResult, declared_effects
from agenthost.runtimes.base import (
    RETURNS,
    Runtime,
    RuntimeTurn,
    register_runtime,
    return_schema,
    zero_argument_factory,
)
from agenthost.runtimes.python import chat_completion, streamed_completion
from agenthost.runtimes.responses import responses_create
from agenthost.turns import InvalidInput
from common.inputs import json_value_problem

# Not part of the request body: the SDK always names itself in a User-Agent header.
_TRANSPORT_PARAMETERS = frozenset({"extra_headers", "extra_query", "extra_body", "stream", "stream_options"})
_NOWHERE = "http://agenttest.invalid/v1/"
_UNSET = object()


def _sdk() -> Any:
    import agents

    return agents


class _AsyncCompletions:
    def __init__(self, turn: RuntimeTurn, current: dict[str, str]) -> None:
        self._turn = turn
        self._current = current

    async def create(self, **parameters: Any) -> Any:
        if any(value for name, value in parameters.items() if name in ("extra_body", "extra_query") and value):
            raise TypeError("agenttest's model layer does not carry extra_body or extra_query yet")
        carried = {name: value for name, value in parameters.items() if name not in _TRANSPORT_PARAMETERS}
        completion = await sync_to_async(chat_completion, thread_sensitive=True)(
            self._turn, carried, agent=self._current.get("agent", "")
        )
        if parameters.get("stream") is True:
            # Runner.run_streamed: the same request answered whole, handed back as the chunks the API streams.
            return await streamed_completion(completion, parameters, asynchronous=True)
        return completion


class _AsyncChat:
    def __init__(self, turn: RuntimeTurn, current: dict[str, str]) -> None:
        self.completions = _AsyncCompletions(turn, current)


class AgenttestAsyncClient:
    """What the SDK's chat-completions model takes for an `AsyncOpenAI`: `chat.completions.create` answered by the
    turn's model layer, streamed (`Runner.run_streamed`) or not. Its base URL goes nowhere (never contacted), so the
    SDK adds no OpenAI-only defaults."""

    base_url = _NOWHERE

    def __init__(self, turn: RuntimeTurn, current: dict[str, str]) -> None:
        # The SDK reads `chat.completions.create` only; a framework's client wraps it (runtimes/pydantic_ai.py).
        self.chat: Any = _AsyncChat(turn, current)


class _Routing:
    """One turn's routing, held in a context variable for the whole of the SDK's run (asgiref and asyncio copy it into
    every task and thread the run makes, nested runs of agents exposed as tools included)."""

    def __init__(self, turn: RuntimeTurn, current: dict[str, str], *, owned: bool) -> None:
        self.turn = turn
        self.current = current
        # Under test every agent of the run gets agenttest's model; in chat only those of runs given it (the turn's,
        # and agents as tools, which inherit its run config), so another run the team's code starts reaches its own
        # model, as in production.
        self.owned = owned
        self._models: dict[tuple[str, bool], Any] = {}
        # The turn's own run's hooks; a run the team's code starts inside the turn has its own (see _install_routing).
        self.hooks: Any = None

    async def record_handoff(self, from_agent: Any, to_agent: Any, *, nested: bool) -> None:
        await sync_to_async(self.turn.record_routing, thread_sensitive=True)(
            from_agent=from_agent.name, to_agent=to_agent.name, name=_sdk().Handoff.default_tool_name(to_agent),
            nested=nested,
        )

    def answers_for(self, run_config: Any) -> bool:
        return self.owned or any(run_config.model is model for model in self._models.values())

    def model_for(self, agent: Any) -> Any:
        """agenttest's model as the agent sees it — the SDK's own Responses model or chat-completions model, the one
        the agent would use alone (`_wants_responses`) — its calls written as that agent's."""
        key = (agent.name, _wants_responses(agent))
        model = self._models.get(key)
        if model is None:
            if key[1]:
                from agenthost.runtimes.model_layer_client import ModelLayerClient

                answer = functools.partial(responses_create, self.turn, agent=agent.name)
                responses_client = ModelLayerClient(answer)
                model = _sdk().OpenAIResponsesModel(model=self.turn.loaded.model, openai_client=responses_client)
            else:
                chat_client = AgenttestAsyncClient(self.turn, {"agent": agent.name})
                model = _sdk().OpenAIChatCompletionsModel(model=self.turn.loaded.model, openai_client=chat_client)
            self._models[key] = model
        return model

    async def invoke(self, original: Any, function_tool: Any, context: Any, arguments: str) -> Any:
        invoked: list[Any] = []
        raised: list[BaseException] = []

        def implementation(_context: FunctionContext) -> FunctionResult:
            # The SDK's own invocation of the team's function: only here, when nothing under test answered. Its
            # failure_error_function turns an exception into text for the model, as the SDK alone does; one it lets
            # through (failure_error_function=None) is kept and raised again into the run, which ends as alone.
            try:
                result = async_to_sync(original)(function_tool=function_tool, context=context, arguments=arguments)
            except Exception as exc:
                raised.append(exc)
                self.turn.note_tool_raised(function_tool.name, exc)
                return FunctionResult(content=f"{type(exc).__name__}: {exc}", error=True)
            invoked.append(result)
            value = result.output
            return FunctionResult(content=value if isinstance(value, str) else str(value))

        agent = getattr(getattr(context, "agent", None), "name", "") or self.current.get("agent", "")
        result = await sync_to_async(self.turn.call_tool, thread_sensitive=True)(
            name=function_tool.name, arguments=arguments or "{}", implementation=implementation,
            call_id=getattr(context, "tool_call_id", "") or "", agent=agent, team_tool=function_tool,
        )
        if raised:
            raise raised[0]
        from agents.tool import _FunctionToolInvocationResult

        return _FunctionToolInvocationResult(
            result.content, is_sdk_generated_error=bool(invoked) and invoked[0].is_sdk_generated_error
        )


def _wants_responses(agent: Any) -> bool:
    """Whether the agent alone would call the Responses API: the SDK's own Responses model, or a model name (or
    none) its default OpenAI provider resolves, which uses the Responses API unless the team's code switched the
    default to chat completions (`set_default_openai_api`). A name with another provider's prefix ("litellm/…") and
    any other model object are answered as chat completions."""
    from agents.models import _openai_shared
    from agents.models.openai_responses import OpenAIResponsesModel

    model = getattr(agent, "model", None)
    if isinstance(model, OpenAIResponsesModel):
        return True
    if model is None or (isinstance(model, str) and ("/" not in model or model.startswith("openai/"))):
        return _openai_shared.get_use_responses_by_default()
    return False


_routing: contextvars.ContextVar[_Routing | None] = contextvars.ContextVar("agenttest_agents_sdk_routing",
                                                                           default=None)
_install_lock = threading.Lock()


def _install_routing(sdk: Any) -> None:
    """Put agenttest's routing at the SDK's own invocation points, once per process. Outside a turn's context the
    patched functions are the SDK's own: a run of the team's code anywhere else is untouched."""
    from agents import tool as tool_module
    from agents.run_internal import agent_runner_helpers, run_loop, tool_execution, turn_resolution

    with _install_lock:
        if getattr(tool_execution._invoke_function_tool_with_metadata, "agenttest_routed", False):
            return
        original_invoke = tool_module._invoke_function_tool_with_metadata
        original_get_model = run_loop.get_model
        original_handoffs = turn_resolution.execute_handoffs

        async def invoke(*, function_tool: Any, context: Any, arguments: str) -> Any:
            routing = _routing.get()
            if routing is None:
                return await original_invoke(function_tool=function_tool, context=context, arguments=arguments)
            return await routing.invoke(original_invoke, function_tool, context, arguments)

        async def execute_handoffs(*args: Any, hooks: Any, **kwargs: Any) -> Any:
            # A hand-off in a run the team's code started itself (a tool running another agent) is the framework's
            # own answer to its call all the same: written, and decided for the ledger, as the turn's run's are.
            routing = _routing.get()
            if routing is not None and hooks is not routing.hooks:
                hooks = _NestedHooks(hooks, routing)
            return await original_handoffs(*args, hooks=hooks, **kwargs)

        def get_model(agent: Any, run_config: Any) -> Any:
            routing = _routing.get()
            if routing is None or not routing.answers_for(run_config):
                return original_get_model(agent, run_config)
            return routing.model_for(agent)

        invoke.agenttest_routed = True  # type: ignore[attr-defined]
        turn_resolution.execute_handoffs = execute_handoffs
        run_loop.execute_handoffs = execute_handoffs
        tool_execution._invoke_function_tool_with_metadata = invoke
        tool_module._invoke_function_tool_with_metadata = invoke
        run_loop.get_model = get_model
        agent_runner_helpers.get_model = get_model


class _NestedHooks:
    """The hooks of a run the team's code started inside a turn, its hand-offs recorded as the turn's (`nested`)."""

    def __init__(self, hooks: Any, routing: _Routing) -> None:
        self._hooks = hooks
        self._routing = routing

    def __getattr__(self, name: str) -> Any:
        return getattr(self._hooks, name)

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        await self._routing.record_handoff(from_agent, to_agent, nested=True)
        await self._hooks.on_handoff(context=context, from_agent=from_agent, to_agent=to_agent)


@contextmanager
def _routed(routing: _Routing) -> Iterator[None]:
    _install_routing(_sdk())
    token = _routing.set(routing)
    try:
        yield
    finally:
        _routing.reset(token)


# What the model is offered for a hosted tool the case mocks by name: the arguments the hosted tool takes, as a
# function's (the SDK's chat-completions model cannot send a hosted tool at all).
_HOSTED_ARGUMENTS: dict[str, dict[str, Any]] = {
    "web_search": {"query": {"type": "string", "description": "What to search the web for."}},
    "file_search": {"query": {"type": "string", "description": "What to search the files for."}},
    "code_interpreter": {"code": {"type": "string", "description": "The Python code to run."}},
    "image_generation": {"prompt": {"type": "string", "description": "The image to generate."}},
    "local_shell": {"command": {"type": "array", "items": {"type": "string"}}},
    "shell": {"commands": {"type": "array", "items": {"type": "string"}}},
}


def _stand_in(name: str, description: str, schema: dict[str, Any], kind: str) -> Any:
    """A function tool named `name`, routed through the seam, in place of a tool the SDK would run itself: under test
    the case's mock answers; a call no mock matches is blocked. Its own implementation never reaches the real tool."""
    sdk = _sdk()

    async def nowhere(_context: Any, _input: str) -> str:
        return f"{name} is {kind} of the OpenAI Agents SDK; agenttest does not run it outside the SDK"

    return sdk.FunctionTool(name=name, description=description, params_json_schema=schema,
                            on_invoke_tool=nowhere, strict_json_schema=False)


def _mocked_hosted_tool(tool: Any) -> Any:
    """A hosted tool the case mocks by name, in its place: offered with the arguments it takes."""
    name = tool.name
    properties = _HOSTED_ARGUMENTS.get(name)
    return _stand_in(
        name, f"The hosted tool {name} ({type(tool).__name__}), answered by the case's mock.",
        {"type": "object", "properties": properties or {}, "additionalProperties": properties is None},
        "a hosted tool",
    )


def _server_name(server: Any) -> str:
    return str(getattr(server, "name", "") or type(server).__name__)


def _inner_agent(tool: Any) -> Any:
    """The agent behind an agent exposed as a tool (`Agent.as_tool`), or None."""
    inner = getattr(tool, "_agent_instance", None) if getattr(tool, "_is_agent_tool", False) else None
    return inner if isinstance(inner, _sdk().Agent) else None


def _unroutable_inside(agent: Any, unroutable: list[str], seen: set[int]) -> None:
    """What an agent exposed as a tool holds that the SDK would run itself (its tools are routed when invoked, but it
    cannot be cloned with stand-ins: the tool holds the agent itself)."""
    sdk = _sdk()
    if id(agent) in seen:
        return
    seen.add(id(agent))
    for tool in agent.tools:
        if not isinstance(tool, sdk.FunctionTool):
            named = getattr(tool, "name", "")
            unroutable.append(f"{agent.name}: {type(tool).__name__}" + (f" {named!r}" if named else ""))
        elif (inner := _inner_agent(tool)) is not None:
            _unroutable_inside(inner, unroutable, seen)
    unroutable.extend(f"{agent.name}: MCP server {_server_name(server)!r}" for server in agent.mcp_servers)
    for handoff in agent.handoffs:
        if isinstance(handoff, sdk.Agent):
            _unroutable_inside(handoff, unroutable, seen)


def _with_stand_ins(agent: Any, turn: RuntimeTurn, unroutable: list[str], seen: dict[int, Any],
                    mcp_mocked: list[str]) -> Any:
    """The agent cloned with stand-ins for what the SDK would run itself (hand-off agents too, recursively): a hosted
    tool the case mocks by name, the MCP servers when the case mocks names no tool of the agents offers
    (`mcp_mocked`). Function tools are kept as they are: they are routed when the SDK invokes them."""
    sdk = _sdk()
    if id(agent) in seen:
        return seen[id(agent)]
    tools = []
    for tool in agent.tools:
        named = getattr(tool, "name", "")
        if isinstance(tool, sdk.FunctionTool):
            if (inner := _inner_agent(tool)) is not None:
                _unroutable_inside(inner, unroutable, set())
            tools.append(tool)
        elif isinstance(named, str) and named and mocked_by_name(named, turn.conversation_id):
            tools.append(_mocked_hosted_tool(tool))
        else:
            unroutable.append(f"{agent.name}: {type(tool).__name__}" + (f" {named!r}" if named else ""))
            tools.append(tool)
    servers = list(agent.mcp_servers)
    if servers and mcp_mocked:
        # The SDK would list the servers' tools by connecting and call them itself: under test it connects to none,
        # and the model is offered the names the case mocks in their place, each answered by its mock.
        named = ", ".join(repr(_server_name(server)) for server in servers)
        tools.extend(
            _stand_in(name, f"A tool of the MCP server {named}, answered by the case's mock.",
                      {"type": "object", "properties": {}, "additionalProperties": True}, "an MCP server's tool")
            for name in mcp_mocked
        )
        servers = []
    else:
        unroutable.extend(f"{agent.name}: MCP server {_server_name(server)!r}" for server in servers)
    clone = agent.clone(tools=tools, mcp_servers=servers)
    seen[id(agent)] = clone
    handoffs = []
    for handoff in agent.handoffs:
        if isinstance(handoff, sdk.Agent):
            handoffs.append(_with_stand_ins(handoff, turn, unroutable, seen, mcp_mocked))
        else:
            unroutable.append(f"{agent.name}: hand-off {getattr(handoff, 'agent_name', '')!r} given as a Handoff")
            handoffs.append(handoff)
    clone.handoffs = handoffs
    return clone


def _returns(tool: Any) -> dict[str, Any] | None:
    """A function tool's output schema: the one it declares (`output_type`, `output_json_schema`), else its
    function's return annotation. An agent exposed as a tool, or a FunctionTool built by hand, has no function."""
    declared = getattr(tool, "output_json_schema", None)
    if isinstance(declared, dict) and declared:
        return declared
    try:
        function = tool.__wrapped__
    except AttributeError:
        return None
    return return_schema(function)


def _declarations(entry: Any) -> list[dict[str, Any]]:
    """The tools the SDK offers the model for `entry`, the agents it hands off to and the agents it exposes as tools:
    function tools with their schemas, hosted tools and hand-offs by name."""
    sdk = _sdk()
    declarations: dict[str, dict[str, Any]] = {}

    def add(name: Any, description: str = "", parameters: dict[str, Any] | None = None, team_tool: Any = None) -> None:
        if isinstance(name, str) and name:
            declared = declarations.setdefault(name, {"name": name, "description": description or "",
                                                      "parameters": parameters or {}})
            if (by_plugin := declared_effects(team_tool)) is not None:
                declared["outside_effects"] = by_plugin
            if team_tool is not None and (returns := _returns(team_tool)) is not None:
                declared[RETURNS] = returns

    waiting, seen = [entry], set()
    while waiting:
        agent = waiting.pop(0)
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        for tool in agent.tools:
            if isinstance(tool, sdk.FunctionTool):
                add(tool.name, tool.description, tool.params_json_schema, tool)
                if (inner := _inner_agent(tool)) is not None:
                    # An agent exposed as a tool is a sub-agent: its own tools are the team's too, mockable by name.
                    waiting.append(inner)
            else:  # a hosted tool: mockable by its name, never run under test
                add(getattr(tool, "name", ""))
        for handoff in agent.handoffs:
            if isinstance(handoff, sdk.Agent):
                add(sdk.Handoff.default_tool_name(handoff), sdk.Handoff.default_tool_description(handoff))
                waiting.append(handoff)
            else:
                add(handoff.tool_name, handoff.tool_description, handoff.input_json_schema)
    return list(declarations.values())


def _owned(turn: RuntimeTurn) -> bool:
    """Whether an executor provider owns this conversation's calls (the harness's mocks do under test)."""
    context = FunctionContext(name="agenttest-probe", arguments={}, conversation_id=turn.conversation_id)
    return any(provider.resolve("agenttest-probe", context) is not None for provider in executor_providers())


def _history(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation's chat messages as the SDK's input items (Responses format)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"],
                          "output": message["content"]})
            continue
        if message.get("content"):
            items.append({"role": message["role"], "content": message["content"]})
        for call in message.get("tool_calls") or []:
            items.append({"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                          "arguments": call["function"]["arguments"]})
    return items


def _tripped(trip: Any, agent: str) -> str:
    """A guardrail's tripwire is the agent's answer for the turn: the SDK stopped the run there, as the team's agent
    does in production. The text names the guardrail and what it reported, so that assertions can judge it."""
    sdk = _sdk()
    found = trip.guardrail_result
    kind = "input" if isinstance(trip, sdk.InputGuardrailTripwireTriggered) else "output"
    by = getattr(getattr(found, "agent", None), "name", "") or agent
    info = found.output.output_info
    shown = ""
    if info is not None:
        try:
            shown = info if isinstance(info, str) else pydantic.TypeAdapter(Any).dump_json(info).decode()
        # pydantic-core's PydanticSerializationError is a ValueError (pydantic itself does not export it: naming it
        # as `pydantic.PydanticSerializationError` raised AttributeError here in place of the fallback).
        except (TypeError, ValueError):
            shown = repr(info)
        shown = f": {shown[:2000]}"
    return f"[guardrail] the {kind} guardrail {found.guardrail.get_name()!r} of agent {by!r} tripped{shown}"


def _final_text(turn: RuntimeTurn, output: Any) -> str:
    """The run's final output as the assistant's message: text as it is; a structured `output_type` as its JSON —
    the model's own JSON text when it says the same (so the transcript keeps one message), else the output dumped."""
    if isinstance(output, str):
        return output
    text = pydantic.TypeAdapter(type(output)).dump_json(output).decode()
    last = next(
        (m.content for m in reversed(turn.session.transcript()) if m.turn == turn.turn and m.role == "assistant"), ""
    )
    try:
        if last and json.loads(last) == json.loads(text):
            return last
    except ValueError:
        pass
    return text


def _write_context(turn: RuntimeTurn, before: dict[str, Any], context: dict[str, Any]) -> None:
    """What the agent's code changed in its run context (the conversation's state as the run began), written as
    state; a key it left alone keeps what tool results wrote meanwhile."""
    writes = {
        key: value for key, value in context.items()
        if isinstance(key, str) and before.get(key, _UNSET) != value and _storable(value)
    }
    if writes:
        turn.session.write_state(writes, None)


def _storable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return json_value_problem(value) is None


class OpenAIAgentsRuntime(Runtime):
    name = "openai-agents"
    framework_modules = ("agents",)

    def _agent(self, target: Any) -> Any:
        sdk = _sdk()
        agent = target if isinstance(target, sdk.Agent) else target()
        if not isinstance(agent, sdk.Agent):
            raise TypeError(f"the entry point's factory returned a {type(agent).__name__}, not an agents.Agent")
        return agent

    def entry_problem(self, target: Any, entry: str) -> str:
        try:
            sdk = _sdk()
        except ImportError:
            return "runtime 'openai-agents' needs the OpenAI Agents SDK: pip install 'agenttest[openai-agents]'"
        if isinstance(target, sdk.Agent) or zero_argument_factory(target):
            return ""
        return f"entry point {entry!r} must be an agents.Agent or a zero-argument function returning one"

    def tool_declarations(self, target: Any) -> list[dict[str, Any]]:
        return _declarations(self._agent(target))

    def _prepared(self, turn: RuntimeTurn, target: Any) -> tuple[Any, Any, Any, _Routing]:
        sdk = _sdk()
        current: dict[str, str] = {}
        unroutable: list[str] = []
        entry = self._agent(target)
        offered = {declared["name"] for declared in _declarations(entry)}
        mcp_mocked = sorted(mocked_names(turn.conversation_id) - offered)
        agent = _with_stand_ins(entry, turn, unroutable, {}, mcp_mocked)
        if unroutable and _owned(turn):
            raise InvalidInput(
                "the agent uses tools the OpenAI Agents SDK would run itself, outside agenttest's seam, so it does "
                f"not run under test: {'; '.join(unroutable)} (a hosted tool runs under test when the case mocks it "
                "by its name, an MCP server when the case mocks the tools of it the agent calls)",
                partial=turn.result,
            )
        routing = _Routing(turn, current, owned=_owned(turn))

        # The SDK is imported when a turn runs (an optional extra): its hooks class is a value here, not a type.
        class Hooks(sdk.RunHooks):  # type: ignore[name-defined,misc]
            async def on_llm_start(self, context: Any, agent: Any, *args: Any) -> None:
                current["agent"] = agent.name

            async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
                current["agent"] = to_agent.name
                await routing.record_handoff(from_agent, to_agent, nested=False)

        # The run's model setting: what the SDK resolves model settings against. Which model answers is decided per
        # agent at resolution (get_model), for this run and any nested one.
        config = sdk.RunConfig(model=routing.model_for(entry), tracing_disabled=True)
        routing.hooks = Hooks()
        return agent, config, routing.hooks, routing

    def run_turn(self, turn: RuntimeTurn, target: Any) -> str:
        sdk = _sdk()
        agent, config, hooks, routing = self._prepared(turn, target)
        # Read here, on the calling thread: inside the SDK's event loop the ORM refuses to run.
        history = _history(turn.messages())
        # The run context is the conversation's state, as a dict: what the agent's code (tools, dynamic instructions,
        # guardrails) writes into it becomes state once the run ends, which state assertions read.
        before = copy.deepcopy(turn.session.state)
        context = copy.deepcopy(before)

        async def run() -> Any:
            return await sdk.Runner.run(
                agent, history, context=context, run_config=config, hooks=hooks, max_turns=turn.loaded.max_steps
            )

        try:
            with _routed(routing):
                result = async_to_sync(run)()
        except (sdk.InputGuardrailTripwireTriggered, sdk.OutputGuardrailTripwireTriggered) as trip:
            return _tripped(trip, routing.current.get("agent") or agent.name)
        finally:
            _write_context(turn, before, context)
        return _final_text(turn, result.final_output)

    def invoke(self, turn: RuntimeTurn, target: Any, name: str, arguments: dict[str, Any]) -> FunctionResult:
        sdk = _sdk()
        from agents.run_internal import tool_execution
        from agents.tool_context import ToolContext

        async def stand_in(_context: Any, _input: str) -> str:
            return f"[{name} ran outside agenttest's seam]"

        probe = sdk.FunctionTool(
            name=name, description="agenttest's canary", params_json_schema={"type": "object", "properties": {}},
            on_invoke_tool=stand_in,
        )
        raw = json.dumps(arguments)
        context = ToolContext(context=None, tool_name=name, tool_call_id="agenttest-canary", tool_arguments=raw)

        async def call() -> Any:
            # The very function the SDK's run calls for every function tool: the canary proves the patch is in place.
            invoked = await tool_execution._invoke_function_tool_with_metadata(
                function_tool=probe, context=context, arguments=raw
            )
            return invoked.output

        with _routed(_Routing(turn, {}, owned=True)):
            return FunctionResult(content=async_to_sync(call)())


register_runtime(OpenAIAgentsRuntime())
