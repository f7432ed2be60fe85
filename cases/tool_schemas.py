"""A mock checked against the schemas of the tool it stands in for (issue 36): the one check every door calls
(`_mean_mock` of cases/validation/parts.py, which the API, the admin, case files, import and recording all go through).

- Its `arguments` against the tool's input JSON Schema: the declaration the agent makes (an MCP tool's listing, a
  runtime's discovery, a native declaration) or else the registered function's schema (a plugin tool's type hints).
  A mock's arguments are what a call must *contain* (runs.engine.case_session.is_subset), so the schema's
  `required` keys are not required of them: only what they do say must be something a call could say.
- Its `result` against the tool's output schema, where the tool has one: a typed plugin tool's return annotation
  (pydantic's TypeAdapter, as the host serialises the value), an MCP tool's `outputSchema` from its cached listing,
  or a framework tool's return type as the runtime discovered it in the team's code (its declaration's `returns`).
  A result that is not JSON at all stands for the error text any tool may answer (FunctionError, an MCP isError), so
  only JSON is held to the schema. A stop-completion's text is the turn's reply, and a stateful mock's empty result
  is its table's record: neither is checked.

A name several reaching agents declare is checked against each declaration; the mock is refused only when none of
them accepts it (a case may be written for any of those agents).
"""

from __future__ import annotations

import inspect
import json
from functools import cache
from typing import Any

import jsonschema
import referencing.exceptions

from agenthost.seams import get_function, mcp_cached_listings, return_schema

# Keys that make an object's schema demand what a subset of a call need not contain.
_DEMANDING = ("required", "minProperties", "dependentRequired")


def mock_schema_problems(
    mock: dict[str, Any], declarations: tuple[dict[str, Any] | None, ...]
) -> list[tuple[str, str]]:
    """(field, message) for each way the mock's arguments or result cannot be what the tool takes or returns; empty
    when one declaration of the tool accepts both. Fields are relative to the mock (`arguments.order_id`, `result`)."""
    name = mock.get("function_name")
    if not isinstance(name, str):
        return []
    found: list[list[tuple[str, str]]] = []
    for declaration in declarations or (None,):
        problems = _arguments_problems(mock.get("arguments"), input_schema(name, declaration))
        if not mock.get("stop") and not (mock.get("table") and not mock.get("result")):
            problems += _result_problems(mock.get("result"), output_schema(name, declaration), name)
        if not problems:
            return []
        found.append(problems)
    return found[0]


def input_schema(name: str, declaration: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the tool takes: its declaration's schema, else its registered function's."""
    schema = (declaration or {}).get("parameters")
    if not isinstance(schema, dict) and (registered := get_function(name)) is not None:
        schema = registered.parameters
    return schema if isinstance(schema, dict) and schema else None


def output_schema(name: str, declaration: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the tool returns, when it says: an MCP tool's listed `outputSchema`, a typed plugin tool's return type.
    None for a tool that returns text or does not say."""
    mcp = (declaration or {}).get("mcp")
    if isinstance(mcp, dict):
        return _mcp_output_schema(str(mcp.get("server", "")), str(mcp.get("tool", "")))
    if declaration is not None and "runtime" in declaration:
        # What the runtime found in the team's code: a framework tool's return type (agenthost/runtimes).
        returns = declaration.get("returns")
        return returns if isinstance(returns, dict) and returns else None
    if declaration is not None and "output" in declaration:
        return None
    registered = get_function(name)
    if registered is None:
        return None
    return _return_schema(inspect.unwrap(registered.func))


def _mcp_output_schema(server: str, tool: str) -> dict[str, Any] | None:
    listing = mcp_cached_listings([server]).get(server) or {}
    for listed in listing.get("tools") or []:
        if isinstance(listed, dict) and listed.get("name") == tool:
            schema = listed.get("outputSchema")
            return schema if isinstance(schema, dict) and schema else None
    return None


@cache
def _return_schema(func: Any) -> dict[str, Any] | None:
    # The host's rule for every typed tool, plugin or framework alike (agenthost.runtimes.base.return_schema).
    return return_schema(func)


def _relaxed(schema: Any) -> Any:
    """The schema without what a subset of a call's arguments need not meet (see the module docstring)."""
    if isinstance(schema, dict):
        return {key: _relaxed(value) for key, value in schema.items() if key not in _DEMANDING}
    if isinstance(schema, list):
        return [_relaxed(item) for item in schema]
    return schema


def _arguments_problems(arguments: Any, schema: dict[str, Any] | None) -> list[tuple[str, str]]:
    if schema is None or not isinstance(arguments, dict):
        return []
    return [(_field("arguments", path), message) for path, message in _errors(_relaxed(schema), arguments)]


def _result_problems(result: Any, schema: dict[str, Any] | None, name: str) -> list[tuple[str, str]]:
    if schema is None or not isinstance(result, str):
        return []
    try:
        values = [json.loads(result)]
    except ValueError:
        return []
    if _wraps_result(schema):
        # The MCP SDK publishes a tool returning text, a number or a list as {"result": …} structured content,
        # while the text the model reads (and a mock stands for) is the value itself, written out.
        values = [{"result": value} for value in [result, *values]]
    found: list[tuple[list[str | int], str]] = []
    for value in values:
        found = _errors(schema, value)
        if not found:
            return []
    return [(_field("result", path), f"{message} ({name}'s output schema)") for path, message in found]


def _wraps_result(schema: dict[str, Any]) -> bool:
    properties = schema.get("properties")
    return isinstance(properties, dict) and list(properties) == ["result"] and schema.get("required") == ["result"]


def _errors(schema: dict[str, Any], value: Any) -> list[tuple[list[str | int], str]]:
    try:
        validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
        errors = sorted(validator.iter_errors(value), key=lambda error: [str(part) for part in error.path])
        return [(list(error.path), error.message) for error in errors]
    except (jsonschema.SchemaError, referencing.exceptions.Unresolvable):
        # A tool whose own schema is broken cannot say what is wrong with a mock: the host refuses it elsewhere.
        return []


def _field(prefix: str, path: list[str | int]) -> str:
    for part in path:
        prefix = f"{prefix}[{part}]" if isinstance(part, int) else f"{prefix}.{part}"
    return prefix
