"""Python-registered functions and the types every executor speaks.

A function is registered with `@register_function(name=..., description=..., parameters=<JSON Schema>,
outside_effects=True|False)` and is called with a FunctionContext; it returns a FunctionResult (or a str, taken as
its content).

`outside_effects` says whether calling the function can change anything outside agenttest (send, write, call, pay).
A function that does not say counts as having them: a test may let through only functions declared free of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema


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
    # allowed.
    outcome: str = "executed"


Executor = Callable[[FunctionContext], FunctionResult]


class ExecutorProvider(Protocol):
    """Asked before anything else which executor handles a function name. Return None to pass."""

    name: str
    order: int

    def resolve(self, name: str, context: FunctionContext) -> Executor | None: ...


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
            if existing is not None and existing.func.__qualname__ != func.__qualname__:
                raise ValueError(f"function {name!r} is already registered by {existing.func.__module__}")
            _functions[name] = RegisteredFunction(name, description, schema, func, outside_effects)
        return func

    return decorate


def get_function(name: str) -> RegisteredFunction | None:
    return _functions.get(name)


def registered_functions() -> dict[str, RegisteredFunction]:
    return dict(_functions)


def function_is_effect_free(name: str, declaration: dict[str, Any] | None = None) -> bool:
    """True only for a function declared free of outside effects: a registered one that says so, or an agent
    declaration answered by its static `output` with no registered implementation behind it."""
    registered = _functions.get(name)
    if registered is not None:
        return registered.effect_free
    return declaration is not None and declaration.get("name") == name and "output" in declaration


def validate_arguments(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """None when the arguments fit the schema, otherwise a message naming the offending field."""
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.path))
    if not errors:
        return None
    first = errors[0]
    where = ".".join(str(part) for part in first.path) or "arguments"
    return f"{where}: {first.message}"
