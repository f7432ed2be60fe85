"""Python-registered functions and the types every executor speaks.

Two ways to register one:
- `@tool(outside_effects=True|False)` on a plain typed function: name, description and JSON Schema come from the
  function itself, and pydantic validates the arguments before it is called;
- `@register_function(name=..., description=..., parameters=<JSON Schema>, outside_effects=True|False)` on a function
  called as `func(context, **arguments)` that returns a FunctionResult (or a str, taken as its content).

`outside_effects` says whether calling the function can change anything outside agenttest (send, write, call, pay).
A function that does not say counts as having them: a test may let through only functions declared free of them.
"""

from __future__ import annotations

import functools
import inspect
import re
import threading
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema
import pydantic
from pydantic.json_schema import GenerateJsonSchema


@dataclass
class FunctionContext:
    name: str
    arguments: dict[str, Any]
    conversation_id: int | None = None
    agent_name: str = ""
    entry_agent_name: str = ""
    turn: int = -1
    tool_call_id: str = ""
    state: dict[str, Any] = field(default_factory=dict)
    # "model" (the model asked), "rule" (a trigger fired) or "direct" (invoke_function, e.g. the harness canary).
    trigger: str = "model"
    # The agent's own declaration of this function, if it declared one.
    declaration: dict[str, Any] | None = None
    # The team's own implementation, for a tool of an agent whose runtime is the team's code (agenthost/runtimes):
    # run as the call's real implementation only when no executor provider answered it.
    implementation: Callable[[FunctionContext], FunctionResult] | None = field(default=None, repr=False, compare=False)


@dataclass
class FunctionResult:
    content: str
    # A stop-completion: the turn ends and `content` is the reply.
    stop: bool = False
    state_writes: dict[str, Any] = field(default_factory=dict)
    # Control flow: hand the rest of the turn to this agent.
    route_to: str | None = None
    error: bool = False
    # Who answered, for transcripts and observers: executed, static, missing, invalid, unavailable, mocked, blocked,
    # allowed; for a runtime's framework, routed (its hand-off) and output (its output tool).
    outcome: str = "executed"


Executor = Callable[[FunctionContext], FunctionResult]


@dataclass(frozen=True)
class PassThrough:
    """What a provider's executor returns to let the call it answers reach its real implementation. `then` receives
    the real result, and what it returns is the call's result (the harness labels and records it there)."""

    then: Callable[[FunctionResult], FunctionResult]


# What a provider's executor answers: a result, or PassThrough to let the call reach its real implementation.
ProvidedExecutor = Callable[[FunctionContext], FunctionResult | PassThrough]


class ExecutorProvider(Protocol):
    """Asked before anything else which executor handles a function name. Return None to pass."""

    name: str
    order: int

    def resolve(self, name: str, context: FunctionContext) -> ProvidedExecutor | None: ...


class FunctionError(Exception):
    """Raised by a function for a failure the model should read (bad input, not configured, refused)."""


@dataclass(frozen=True)
class RegisteredFunction:
    name: str
    description: str
    parameters: dict[str, Any]
    func: Callable[..., FunctionResult | str]
    # None: the function did not say, which counts as side-effecting (fail closed).
    outside_effects: bool | None = None

    @property
    def effect_free(self) -> bool:
        return self.outside_effects is False

    def tool_schema(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


_functions: dict[str, RegisteredFunction] = {}
_lock = threading.Lock()


def register_function(
    *, name: str, description: str, parameters: dict[str, Any] | None = None, outside_effects: bool | None = None
) -> Callable[[Callable[..., FunctionResult | str]], Callable[..., FunctionResult | str]]:
    if not name or not name.strip():
        raise ValueError("a function needs a name")
    schema = parameters or {"type": "object", "properties": {}}
    jsonschema.Draft202012Validator.check_schema(schema)

    def decorate(func: Callable[..., FunctionResult | str]) -> Callable[..., FunctionResult | str]:
        with _lock:
            existing = _functions.get(name)
            # Module and qualified name, not identity: a module imported again re-registers its own functions, but
            # a same-named function of another module (a plugin's `lookup_order`) must never replace a built-in.
            if existing is not None and _origin(existing.func) != _origin(func):
                raise ValueError(f"function {name!r} is already registered by {existing.func.__module__}")
            _functions[name] = RegisteredFunction(name, description, schema, func, outside_effects)
        return func

    return decorate


def _origin(func: Callable[..., Any]) -> tuple[str, str]:
    return func.__module__, func.__qualname__


def get_function(name: str) -> RegisteredFunction | None:
    return _functions.get(name)


def registered_functions() -> dict[str, RegisteredFunction]:
    return dict(_functions)


def function_is_effect_free(name: str, declaration: dict[str, Any] | None = None) -> bool:
    """True only for a function declared free of outside effects: a registered one that says so, or an agent
    declaration answered by its static `output` with no registered implementation behind it, or an MCP tool its server
    annotates read-only (the declaration as expanded from the server's listing, agenthost/mcp/tools.py)."""
    if isinstance(declaration, dict) and declaration.get("runtime") and declaration.get("name") == name:
        # A tool of the team's own code (agenthost/runtimes): only its own declaration counts, never a registered
        # function that happens to share its name.
        return declaration.get("outside_effects") is False
    registered = _functions.get(name)
    if registered is not None:
        return registered.effect_free
    if declaration is None or declaration.get("name") != name:
        return False
    if isinstance(declaration.get("mcp"), dict):
        return annotations_effect_free(declaration["mcp"].get("annotations"))
    return "output" in declaration


def annotations_effect_free(annotations: Any) -> bool:
    """MCP tool annotations as an effect declaration: free of outside effects only when the server marks the tool
    readOnlyHint and not also destructiveHint (a contradiction fails closed); unannotated counts as side-effecting."""
    if not isinstance(annotations, dict):
        return False
    return annotations.get("readOnlyHint") is True and annotations.get("destructiveHint") is not True


def validate_arguments(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """None when the arguments fit the schema, otherwise a message naming the offending field."""
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.path))
    if not errors:
        return None
    first = errors[0]
    where = ".".join(str(part) for part in first.path) or "arguments"
    return f"{where}: {first.message}"


_ARGS_HEADING = re.compile(r"^(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def tool(
    func: Callable[..., Any] | None = None,
    *,
    outside_effects: bool | None = None,
    name: str | None = None,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
) -> Any:
    """Register a plain typed Python function as a tool, the way pydantic-ai and the OpenAI Agents SDK derive them:

        @tool(outside_effects=False)
        def lookup_order(order_id: str, include_items: bool = False) -> dict:
            '''Look an order up by its number.

            Args:
                order_id: The order number, e.g. 1042.
            '''

    - name: the function's name unless `name=` says otherwise;
    - description: the docstring's first paragraph unless `description=`; each parameter's description from
      `Annotated[str, Field(description=...)]` or else the docstring's Args section;
    - parameters: the JSON Schema pydantic derives from the type hints (extra arguments refused), unless an explicit
      `parameters=` schema is given;
    - the model's arguments are validated by pydantic before the call: a bad one becomes the tool result
      "Invalid arguments for <name>: <field>: <message>" (outcome "invalid") and the function is not called;
    - a first parameter annotated `FunctionContext` receives the call's context (conversation, state, turn);
    - the return value: a str as is, a FunctionResult as is, anything else (dict, list, pydantic model, …) as JSON;
    - `outside_effects`: True if a call can change anything outside agenttest (send, write, pay, call an API that
      does). Not saying (None) counts as True — fail closed: only a tool declared `outside_effects=False` may be
      extra-allowed in a test suite; everything else must be mocked there or it is blocked.

    Returns the function itself, unchanged, so it stays callable as plain Python."""
    if func is None:
        return functools.partial(
            tool, outside_effects=outside_effects, name=name, description=description, parameters=parameters
        )
    if inspect.iscoroutinefunction(func):
        raise TypeError(f"tool {func.__qualname__}: async functions are not supported; write a plain function")
    tool_name = name or func.__name__
    summary, argument_docs = _parse_docstring(inspect.getdoc(func) or "")
    tool_description = description if description is not None else summary
    if not tool_description:
        raise ValueError(f"tool {tool_name!r} needs a description: give the function a docstring or pass description=")
    signature = inspect.signature(func)
    hints = typing.get_type_hints(func, include_extras=True)
    params = list(signature.parameters.values())
    takes_context = bool(params) and hints.get(params[0].name) is FunctionContext
    if takes_context:
        params = params[1:]
    for param in params:
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(
                f"tool {tool_name!r}: parameter {param.name!r} must be a named parameter (no *args, **kwargs or "
                "positional-only parameters): the model passes arguments by name"
            )
    if parameters is not None:
        schema, arguments_model = parameters, None
    else:
        arguments_model = _arguments_model(tool_name, params, hints)
        schema = _schema(arguments_model, argument_docs)

    @functools.wraps(func)
    def call(context: FunctionContext, /, **arguments: Any) -> FunctionResult:
        if arguments_model is not None:
            try:
                validated = arguments_model.model_validate(arguments)
            except pydantic.ValidationError as exc:
                return FunctionResult(
                    content=f"Invalid arguments for {tool_name}: {_first_error(exc)}", error=True, outcome="invalid"
                )
            arguments = {param.name: getattr(validated, f"p{index}") for index, param in enumerate(params)}
        result = func(context, **arguments) if takes_context else func(**arguments)
        return as_function_result(result)

    register_function(
        name=tool_name, description=tool_description, parameters=schema, outside_effects=outside_effects
    )(call)
    return func


# The effects a plugin declared for tools of a team's framework code, by the tool object's identity (the object is
# kept, so that its id is never another's).
_effects: dict[int, tuple[Any, bool]] = {}


def effects(team_tool: Any = None, *, outside_effects: bool) -> Any:
    """Declare whether a tool of the team's own agent code has effects outside agenttest, without touching that code:
    the plugin applies it to the tool as the code defines it (an Agents SDK `FunctionTool`, the function behind a
    pydantic-ai tool, a plain function a `python` runtime agent calls)::

        from agenttest.plugin import effects
        from shop.agents import find_order, send_email

        effects(find_order, outside_effects=False)
        effects(send_email, outside_effects=True)

    `effects(outside_effects=False)` alone is the same as a decorator. For an agent run by a runtime, the agent file's
    `outside_effects` mapping wins over it; a tool neither declares counts as side-effecting (fail closed). Returns
    the tool itself, unchanged."""
    if not isinstance(outside_effects, bool):
        raise TypeError(f"effects: outside_effects must be True or False, got {outside_effects!r}")
    if team_tool is None:
        return functools.partial(effects, outside_effects=outside_effects)
    with _lock:
        _effects[id(team_tool)] = (team_tool, outside_effects)
    return team_tool


def declared_effects(team_tool: Any) -> bool | None:
    """What a plugin declared (`effects`) for this tool object of the team's code; None when nothing."""
    if team_tool is None:
        return None
    with _lock:
        held = _effects.get(id(team_tool))
    return held[1] if held is not None and held[0] is team_tool else None


def _arguments_model(
    tool_name: str, params: list[inspect.Parameter], hints: dict[str, Any]
) -> type[pydantic.BaseModel]:
    # Fields get neutral names and the parameter's name as alias, so a parameter may be called e.g. `schema` or
    # `model_id` without clashing with BaseModel's own attributes.
    fields: dict[str, Any] = {}
    for index, param in enumerate(params):
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[f"p{index}"] = (annotation, pydantic.Field(default, alias=param.name))
    return pydantic.create_model(
        f"{tool_name}_arguments", __config__=pydantic.ConfigDict(extra="forbid", populate_by_name=False), **fields
    )


def _schema(model: type[pydantic.BaseModel], argument_docs: dict[str, str]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, schema_generator=_ToolSchema)
    schema.pop("title", None)
    for param_name, text in argument_docs.items():
        prop = schema.get("properties", {}).get(param_name)
        if prop is not None and "description" not in prop:
            prop["description"] = text
    return schema


class _ToolSchema(GenerateJsonSchema):
    # "Order Id" next to "order_id" tells the model nothing and costs tokens on every request.
    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph, and the Google-style Args section as parameter name → description."""
    lines = doc.splitlines()
    first_paragraph = doc.partition("\n\n")[0]
    summary = "" if lines and _ARGS_HEADING.match(lines[0]) else " ".join(first_paragraph.split())
    start = next((index + 1 for index, line in enumerate(lines) if _ARGS_HEADING.match(line)), None)
    arguments: dict[str, str] = {}
    if start is None:
        return summary, arguments
    entry_indent: int | None = None
    current = ""
    for line in lines[start:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            break  # the next section: Returns:, Raises:, …
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_LINE.match(line.strip())
        if match and indent <= entry_indent:
            current = match.group(1)
            arguments[current] = match.group(2).strip()
        elif current:
            arguments[current] = f"{arguments[current]} {line.strip()}".strip()
    return summary, arguments


def _first_error(exc: pydantic.ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"]) or "arguments"
    return f"{where}: {error['msg']}"


# Serialises whatever a typed tool returns by its runtime type (dicts, lists, models, dataclasses, dates).
_ANY = pydantic.TypeAdapter(Any)


def as_function_result(value: Any) -> FunctionResult:
    """What a tool returned as its result: a str as is, a FunctionResult as is, anything else as JSON."""
    if isinstance(value, FunctionResult):
        return value
    if isinstance(value, str):
        return FunctionResult(content=value)
    return FunctionResult(content=_ANY.dump_json(value).decode())
