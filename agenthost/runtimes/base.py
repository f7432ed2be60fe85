"""The runtime interface: what a runtime running the team's own agent code gets from agenttest for one turn, and the
registry of runtimes by name.

A runtime (`Runtime`) adapts one framework. For each turn it is handed a `RuntimeTurn`, through which — and only
through which — the team's code reaches a model and its tools:

- `RuntimeTurn.complete` turns the framework's model call into a `ModelRequest` and sends it through the agent's
  provider exactly as agenttest's own loop does (loop.call_model): the harness's model override, scripted and
  simulated providers, record and replay with stale detection, throttles, budgets, usage and deadlines apply
  unchanged, and each call is written to the transcript as an assistant message;
- `RuntimeTurn.call_tool` sends the framework's tool invocation through the function-executor factory with the
  team's function as its implementation: under test a mock answers or the call is blocked and never runs; in chat
  the team's function runs. A call answered with a stop (blocked, or a mock that stops) ends the turn, as it does
  natively: `TurnStopped` is raised into the framework's loop, and every later model or tool call raises it again.

`Runtime.invoke` makes a direct call (the harness's canary) through the same routing the runtime gives the team's
tools, so the canary proves that routing live for every runtime.
"""

from __future__ import annotations

import abc
import inspect
import json
import threading
import types
import typing
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pydantic

from agenthost import executor
from agenthost.calls import parse_arguments, record_call
from agenthost.functions import FunctionContext, FunctionResult, declared_effects
from agenthost.history import history_as_model_messages
from agenthost.llm.base import ModelRequest, ModelResponse
from agenthost.loading import LoadedAgent, agent_as_stored
from agenthost.loop import answer_call, call_model, record_result
from agenthost.models import Agent, Message
from agenthost.redaction import redact_text
from agenthost.runtimes.entry import EntryPointError, load_entry
from agenthost.session import ConversationSession, claim_lost
from agenthost.turns import ConversationError, InvalidInput, StepLimitExceeded, TurnResult


class AgentCodeFailed(ConversationError):
    """The team's own agent code raised: the turn ends, with what it did before."""

    code = "agent_code_error"


class TurnStopped(BaseException):  # noqa: N818 — a signal through the team's loop, not an error it should handle
    """Raised into the team's code when a tool call stopped the turn (blocked under test, or a stop-completion).

    A BaseException, so that the `except Exception` of a framework's tool-error handling does not swallow it and
    carry on asking the model: after a blocked call the turn stops, as in agenttest's own loop."""

    def __init__(self, result: FunctionResult) -> None:
        super().__init__(result.content)
        self.result = result


Implementation = Callable[[FunctionContext], FunctionResult]
# The key of a tool declaration discovered in the team's code that holds its output schema (issue 36).
RETURNS = "returns"


def return_schema(func: Any, annotation: Any = inspect.Parameter.empty) -> dict[str, Any] | None:
    """The JSON Schema of what a framework tool's Python function returns, from its return annotation (or the one
    given), as pydantic serialises it — what a mock of the tool's result is held to. None for a return the model
    reads as text or that says nothing (str, Any, None, FunctionResult, a union with any of them). The harness holds
    a plugin tool's mocks to it too (through agenthost.seams), so a runtime's tool and a plugin's are checked alike."""
    if annotation is inspect.Parameter.empty:
        try:
            annotation = typing.get_type_hints(inspect.unwrap(func)).get("return")
        except Exception:  # an annotation that does not resolve says nothing about what the tool returns
            return None
    if annotation is None or _may_be_text(annotation):
        return None
    try:
        schema = pydantic.TypeAdapter(annotation).json_schema(mode="serialization")
    except pydantic.PydanticUserError:  # a type pydantic cannot describe (a typing.TypedDict before 3.12)
        return None
    return schema or None


def _may_be_text(annotation: Any) -> bool:
    if annotation in (str, Any, FunctionResult, type(None), object):
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_may_be_text(arm) for arm in typing.get_args(annotation))
    if typing.get_origin(annotation) is typing.Annotated:
        return _may_be_text(typing.get_args(annotation)[0])
    return False
# The outcome of a call of the framework's own output tool (RuntimeTurn.record_output).
OUTPUT = "output"


class RuntimeTurn:
    """One turn (or one direct call) of an agent whose runtime runs the team's code. One thread at a time."""

    def __init__(
        self, session: ConversationSession, loaded: LoadedAgent, turn: int, result: TurnResult, *, record: bool = True
    ) -> None:
        self.session = session
        self.loaded = loaded
        self.turn = turn
        self.result = result
        self.record = record
        self.steps = 0
        self.stopped: FunctionResult | None = None
        # The tool whose exception the framework let through (it does not turn it into text for the model): named
        # when the run ends on it.
        self.raised: tuple[str, BaseException] | None = None
        self._calls = 0

    @property
    def conversation_id(self) -> int:
        return self.session.conversation.pk

    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far as OpenAI chat messages (user, assistant, tool calls and results), this turn's user
        message last. A turn that ended on the framework's output tool holds its output twice — the call, and the
        answer written after it for the transcript's last word (no model's: runtime_turn_run's) — and the framework's
        own history only the call: that answer is left out."""
        transcript = self.session.transcript()
        return history_as_model_messages([
            message for index, message in enumerate(transcript)
            if not (message.role == Message.Role.ASSISTANT and not message.model and index
                    and transcript[index - 1].outcome == OUTPUT)
        ])

    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        temperature: float | None = None,
        response_schema: dict[str, Any] | None = None,
        settings: dict[str, Any] | None = None,
        agent: str = "",
        api: str = "chat",
    ) -> ModelResponse:
        """One model call of the team's loop, as the framework built it, through the agent's provider. `api`: the
        API it was built for ("responses": `messages` are the Responses API's input items, llm/responses.py)."""
        self._check_open()
        if self.steps >= self.loaded.max_steps:
            raise StepLimitExceeded(
                f"the agent did not finish turn {self.turn} within {self.loaded.max_steps} model calls (raise the "
                "agent's max_steps or AGENTTEST_MAX_STEPS if it needs more)",
                partial=self.result,
            )
        self.session.hold_claim(partial=self.result)
        step = self.steps
        request = ModelRequest(
            model=self.loaded.model,
            messages=messages,
            tools=tools or [],
            temperature=temperature,
            response_schema=response_schema,
            settings=dict(settings or {}),
            api=api,
            metadata={
                "conversation_id": self.conversation_id,
                "turn": self.turn,
                "step": step,
                "agent": agent or self.loaded.name,
                "runtime": self.loaded.runtime,
            },
        )
        self.steps += 1
        return call_model(
            self.session, _as_agent(self.loaded, agent), request, turn=self.turn, step=step, result=self.result
        )

    def call_tool(
        self,
        *,
        name: str,
        arguments: str | dict[str, Any] | None,
        implementation: Implementation | None,
        declaration: dict[str, Any] | None = None,
        call_id: str = "",
        agent: str = "",
        team_tool: Any = None,
    ) -> FunctionResult:
        """One tool invocation of the team's loop through the function-executor factory; `implementation` runs only
        when nothing under test answers it (None: the factory's own resolution, for a declared function).
        `team_tool`: the tool object of the team's code, whose effects a plugin may have declared (functions.effects).
        Raises TurnStopped when the call stops the turn."""
        self._check_open()
        if not self.session.renew_claim():
            raise claim_lost(partial=self.result)
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        unbound = not call_id
        if unbound:
            self._calls += 1
            call_id = f"{self.loaded.runtime}_{self.conversation_id}_{self.turn}_{self._calls}"
        declared = {"name": name, "runtime": self.loaded.runtime, **(declaration or {})}
        if isinstance(self.loaded.outside_effects.get(name), bool):
            # Declared in the agent file, without touching the team's code.
            declared["outside_effects"] = self.loaded.outside_effects[name]
        elif (by_plugin := declared_effects(team_tool)) is not None:
            declared["outside_effects"] = by_plugin
        caller = _as_agent(self.loaded, agent)
        if not self.record:
            outcome = self._unrecorded(name, raw, call_id, caller, declared, implementation)
        else:
            outcome, parsed, problem = answer_call(
                self.session, caller, self.turn, call_id=call_id, name=name, raw_arguments=raw,
                declared_only=False, declaration=declared, implementation=implementation,
            )
            content = record_result(
                self.session, caller, self.turn, call_id=call_id, name=name, raw_arguments=raw, arguments=parsed,
                problem=problem, outcome=outcome, result=self.result,
            )
            outcome = FunctionResult(
                content=content, stop=outcome.stop, state_writes=outcome.state_writes, error=outcome.error,
                outcome=outcome.outcome,
            )
            if unbound and self.session.case is not None:
                # The model's id for this call is the team's code's to give: the result answers one call of the name.
                self.session.case.note_spare(name, content)
        if outcome.stop:
            self.stopped = outcome
            raise TurnStopped(outcome)
        return outcome

    def note_tool_raised(self, name: str, exc: BaseException) -> None:
        """The team's tool `name` raised `exc` and the runtime hands it back to the framework, which, as alone, either
        handles it (a retry, a message to the model) or ends the run with it."""
        self.raised = (name, exc)

    def record_output(self, *, name: str, arguments: str, call_id: str, content: str, agent: str = "") -> None:
        """A call of the framework's own output tool (pydantic-ai's `final_result`): the model's structured answer,
        which the framework takes as the run's output. No tool of the team's, so nothing to mock or block: written as
        a call with the framework's answer to it (outcome "output"), never through the seam."""
        caller = _as_agent(self.loaded, agent)
        parsed, problem = parse_arguments(arguments)
        record_call(self.session, caller, self.turn, call_id, name, parsed, arguments, "model")
        record_result(
            self.session, caller, self.turn, call_id=call_id, name=name, raw_arguments=arguments, arguments=parsed,
            problem=problem, outcome=FunctionResult(content=content, outcome=OUTPUT), result=self.result,
        )

    def record_routing(
        self, *, from_agent: str, to_agent: str, name: str, call_id: str = "", nested: bool = False
    ) -> None:
        """A hand-off the framework made itself (it runs no tool of the team's): written as a routing call of
        `from_agent`, and `to_agent` added to the turn's agent chain, as agenttest's own loop records a route — unless
        it happened in a run the team's code started inside the turn (`nested`: a tool running another agent), which
        leaves the turn with the agent it had."""
        if not call_id:
            self._calls += 1
            call_id = f"{self.loaded.runtime}_{self.conversation_id}_{self.turn}_{self._calls}"
        caller = _as_agent(self.loaded, from_agent)
        if self.session.case is not None:
            # The framework answers its hand-off call in its own words: a decided call of that name, whatever it says.
            self.session.case.note_spare(name)
        record_call(self.session, caller, self.turn, call_id, name, {}, "{}", "model")
        record_result(
            self.session, caller, self.turn, call_id=call_id, name=name, raw_arguments="{}", arguments={},
            problem=None, outcome=FunctionResult(content=f"Handed over to {to_agent}.", outcome="routed"),
            result=self.result,
        )
        if not nested:
            self.result.agent_chain.append(to_agent)

    def _unrecorded(
        self, name: str, raw: str, call_id: str, caller: LoadedAgent, declared: dict[str, Any], implementation: Any
    ) -> FunctionResult:
        # A direct call that leaves no trace in the conversation (the harness's canary): through the factory all
        # the same, which is the point.
        arguments, problem = parse_arguments(raw)
        if problem:
            return FunctionResult(content=f"Invalid arguments for {name}: {problem}", error=True, outcome="invalid")
        context = FunctionContext(
            name=name, arguments=arguments, conversation_id=self.conversation_id, agent_name=caller.name,
            entry_agent_name=self.session.entry_agent.name, turn=self.turn, tool_call_id=call_id,
            state=dict(self.session.state), trigger="direct", declaration=declared, implementation=implementation,
        )
        return executor.execute(name, context)

    def _check_open(self) -> None:
        if self.session.case is not None:
            # The team's code caught the seal's refusal and carried on: nothing more of the turn runs.
            self.session.case.raise_breach(self.result)
        if self.stopped is not None:
            # The team's code caught the stop and carried on: nothing more of the turn runs.
            raise TurnStopped(self.stopped)


def _as_agent(loaded: LoadedAgent, agent: str) -> LoadedAgent:
    """The agent a call is made as: the entry agent, or (a framework's handoff) one of its agents by name, which is
    what the harness observes and the turn's call record names."""
    if not agent or agent == loaded.name:
        return loaded
    return replace(loaded, name=agent, framework_agent=agent)


class Runtime(abc.ABC):
    """One framework's way of running the team's agent. Instances are shared by the whole process: thread-safe."""

    name: str = ""
    # Whether the agent is the team's Python code at its `entry`, imported into agenttest's process; a runtime that
    # starts a program instead (process) says so and builds its target from the agent itself (`target`).
    imports_entry: bool = True
    # The framework's modules, imported by a child server (runtimes/fork_server.py) before it forks the children of
    # this runtime's turns and entry checks, so that none pays for the import again; never the team's code.
    framework_modules: tuple[str, ...] = ()

    def target(self, loaded: LoadedAgent) -> Any:
        """What run_turn and invoke are handed for an agent that imports no entry."""
        raise NotImplementedError(f"runtime {self.name!r} runs the code at the agent's entry")

    def entry_problem(self, target: Any, entry: str) -> str:
        """What makes the imported `target` unusable by this runtime, or "" (checked when the agent is saved)."""
        return ""

    def tool_declarations(self, target: Any) -> list[dict[str, Any]]:
        """The tools the team's code offers its model ({name, description, parameters}), as far as the runtime can
        tell from the imported `target`, never re-declared: what a case may mock and assert on. A tool whose schema
        the runtime cannot know before the code runs (a hosted tool, a plain function's helper) has empty
        `parameters`."""
        return []


    def prepare(self, loaded: LoadedAgent) -> None:
        """Load what this runtime's turns of `loaded` will need and this process may not have loaded yet (the modules
        of a protocol, a gateway's server), once: a run calls it while it sets up, before any case's clock starts, so
        that its first case is not the one to pay for it — on a loaded machine the first of a run's cases took five
        times its twin's time for imports alone. Nothing by default."""
        return None

    @abc.abstractmethod
    def run_turn(self, turn: RuntimeTurn, target: Any) -> str:
        """Run the team's agent on the conversation for one turn; returns its final answer. Every model call goes
        through `turn.complete`, every tool invocation through `turn.call_tool`."""

    @abc.abstractmethod
    def invoke(self, turn: RuntimeTurn, target: Any, name: str, arguments: dict[str, Any]) -> FunctionResult:
        """Call function `name` directly (the harness's canary) through the same tool routing the runtime gives the
        team's tools, so that a routing not in place shows here before any turn runs."""


_runtimes: dict[str, Runtime] = {}
_runtimes_lock = threading.Lock()


def register_runtime(runtime: Runtime) -> None:
    """Make agents whose `runtime` is `runtime.name` run through it. A name is taken once: no plugin silently
    replaces a runtime (the same class again is harmless)."""
    name = getattr(runtime, "name", "")
    if not isinstance(runtime, Runtime) or not isinstance(name, str) or not name.strip():
        raise ValueError("register_runtime needs a Runtime instance with a non-empty name")
    if name == Agent.Runtime.NATIVE:
        raise ValueError("runtime 'native' is agenttest's own loop; choose another name")
    with _runtimes_lock:
        existing = _runtimes.get(name)
        if existing is not None and type(existing).__qualname__ != type(runtime).__qualname__:
            raise ValueError(f"runtime {name!r} is already registered by {type(existing).__qualname__}")
        _runtimes[name] = runtime


def unregister_runtime(name: str) -> None:
    with _runtimes_lock:
        _runtimes.pop(name, None)


def runtime_names() -> list[str]:
    """Every runtime an agent may name: native and the registered ones."""
    with _runtimes_lock:
        return [Agent.Runtime.NATIVE, *sorted(_runtimes)]


def get_runtime(name: str) -> Runtime:
    with _runtimes_lock:
        runtime = _runtimes.get(name)
    if runtime is None:
        known = ", ".join(runtime_names())
        raise InvalidInput(f"runtime {name!r} is not available in this installation (available: {known})")
    return runtime


def zero_argument_factory(target: Any) -> bool:
    """Whether `target` can be called with no argument (a factory of the framework's agent), told from its signature
    alone: calling it to find out would run the team's code."""
    if not callable(target) or isinstance(target, type):
        return False
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        # A builtin without a signature (os.abort): nothing says it needs an argument.
        return True
    return all(
        parameter.default is not inspect.Parameter.empty
        or parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        for parameter in signature.parameters.values()
    )


def entry_inspected_here(runtime: str, entry: str, *, tools: bool) -> tuple[str, list[dict[str, Any]]]:
    """What makes `entry` unusable by `runtime` ("" when nothing), imported in this process (once) and checked, never
    called; and with `tools`, when usable, the tools it offers (reading them calls an agent factory). Run by the child
    process of an entry check (runtimes/child.py), never by the web process."""
    try:
        target = load_entry(entry)
    except EntryPointError as exc:
        return str(exc), []
    found = get_runtime(runtime)
    if (problem := found.entry_problem(target, entry)) or not tools:
        return problem, []
    try:
        return "", found.tool_declarations(target)
    except Exception:  # the team's factory raised: the agent cannot run, and its cases say so when it is run
        return "", []


def deps_format_problems(runtime: str, deps: Any) -> dict[str, list[str]]:
    """What is wrong with an agent's deps factory that can be told without importing it, keyed by field."""
    if not deps:
        return {}
    if runtime != Agent.Runtime.PYDANTIC_AI:
        return {"deps": [f"is for a pydantic-ai agent's run (ctx.deps); runtime {runtime!r} takes none"]}
    if not isinstance(deps, str):
        return {"deps": ['must be the factory\'s "module:attribute", e.g. "shop.deps:make_deps"']}
    return {}


def deps_inspected_here(deps: str) -> str:
    """What makes the deps factory `deps` unusable ("" when nothing), imported in this process (once), never called.
    Run by the child process of an entry check (runtimes/child.py), never by the web process."""
    try:
        factory = load_entry(deps)
    except EntryPointError as exc:
        return str(exc)
    if not callable(factory):
        return (f"{deps!r} must be a function taking the conversation's state (a dict) and returning the run's deps, "
                f"got {type(factory).__name__}")
    return ""


def runtime_deps(loaded: LoadedAgent, state: dict[str, Any], result: TurnResult | None) -> Any:
    """The deps of a pydantic-ai run: the agent's factory called with a copy of the conversation's state (under test,
    the case's initial state and what the run wrote since), or None when the agent names none."""
    if not loaded.deps:
        return None
    try:
        factory = load_entry(loaded.deps)
    except EntryPointError as exc:
        raise InvalidInput(f"agent {loaded.name!r} cannot run: deps: {exc}", partial=result) from None
    try:
        return factory(json.loads(json.dumps(state)))
    except Exception as exc:
        raise AgentCodeFailed(
            f"the agent's deps factory ({loaded.deps}) raised: {type(exc).__name__}: {redact_text(str(exc))[:500]}",
            partial=result,
        ) from exc


def _target(loaded: LoadedAgent, result: TurnResult | None) -> tuple[Runtime, Any]:
    runtime = get_runtime(loaded.runtime)
    if not runtime.imports_entry:
        return runtime, runtime.target(loaded)
    try:
        target = load_entry(loaded.entry)
    except EntryPointError as exc:
        raise InvalidInput(f"agent {loaded.name!r} cannot run: {exc}", partial=result) from None
    problem = runtime.entry_problem(target, loaded.entry)
    if problem:
        raise InvalidInput(f"agent {loaded.name!r} cannot run: {problem}", partial=result)
    return runtime, target


def runtime_prepare(agent: Agent) -> None:
    """What `agent`'s runtime (and each of its sub-agents') will load at its first turn, loaded now: see
    Runtime.prepare. agenttest's own loop, or a runtime no longer registered, has nothing to prepare; a prepare that
    fails (a library not installed) leaves it to the turn, which fails the same way and says so in its case."""
    for each in (agent, *agent.sub_agents.all()):
        runtime = _runtimes.get(each.runtime or "")
        if runtime is None:
            continue
        try:
            runtime.prepare(agent_as_stored(each))
        except Exception:  # noqa: BLE001 — the first turn meets the same failure and reports it where it belongs
            continue


def runtime_turn_run(
    session: ConversationSession, loaded: LoadedAgent, turn: int, text: str, result: TurnResult
) -> LoadedAgent:
    """One turn of an agent whose runtime runs the team's code; the counterpart of loop.turn_run."""
    session.add_message(turn=turn, role=Message.Role.USER, content=redact_text(text), agent_id=loaded.id)
    runtime, target = _target(loaded, result)
    runtime_turn = RuntimeTurn(session, loaded, turn, result)
    try:
        output = runtime.run_turn(runtime_turn, target)
    except TurnStopped as stop:
        result.output, result.finish = stop.result.content, (
            "missing_function" if stop.result.outcome == "missing" else "stop_completion"
        )
        return loaded
    except ConversationError as exc:
        if exc.partial is None:
            exc.partial = result
        raise
    except Exception as exc:
        if runtime_turn.stopped is not None:
            # The stop surfaced wrapped in the framework's own error: the turn stopped all the same.
            result.output, result.finish = runtime_turn.stopped.content, "stop_completion"
            return loaded
        raise AgentCodeFailed(
            f"the agent's code ({loaded.entry or loaded.command}, runtime {loaded.runtime}) raised at turn {turn}"
            f"{_in_tool(runtime_turn, exc)}: {type(exc).__name__}: {redact_text(str(exc))[:500]}",
            partial=result,
        ) from exc
    if runtime_turn.stopped is not None:
        # The team's code swallowed the stop and returned: the turn ended at the call that stopped it.
        result.output, result.finish = runtime_turn.stopped.content, "stop_completion"
        return loaded
    if not isinstance(output, str):
        raise AgentCodeFailed(
            f"the agent's code ({loaded.entry}) returned a {type(output).__name__}, not the answer's text",
            partial=result,
        )
    output = redact_text(output)
    last = next(
        (m for m in reversed(session.transcript()) if m.turn == turn and m.role == Message.Role.ASSISTANT), None
    )
    if last is None or last.content != output:
        # The team's loop answered something else than its model's last text (it post-processed it): the answer the
        # user got is the transcript's last word, said by the agent whose model answered last.
        session.add_message(turn=turn, role=Message.Role.ASSISTANT, content=output, agent_id=loaded.id,
                            agent_name=last.agent_name if last is not None else "")
    result.output, result.finish = output, "answer"
    return loaded


def _in_tool(runtime_turn: RuntimeTurn, exc: BaseException) -> str:
    """", in its tool 'name' (ValueError: …)" when the run ended on an exception of one of the team's tools (the
    exception itself, or one the framework raised from it)."""
    if runtime_turn.raised is None:
        return ""
    name, raised = runtime_turn.raised
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if link is raised:
            shown = "" if link is exc else f" ({type(raised).__name__}: {redact_text(str(raised))[:300]})"
            return f" in its tool {name!r}{shown}"
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return ""


def runtime_invoke(
    session: ConversationSession, loaded: LoadedAgent, name: str, arguments: dict[str, Any], *, turn: int,
    record: bool,
) -> FunctionResult:
    """A direct call (the harness's canary) through the runtime's own tool routing."""
    runtime, target = _target(loaded, None)
    runtime_turn = RuntimeTurn(session, loaded, turn, TurnResult(conversation_id=session.conversation.pk, turn=turn),
                               record=record)
    try:
        return runtime.invoke(runtime_turn, target, name, arguments)
    except TurnStopped as stop:
        return stop.result
