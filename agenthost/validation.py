"""What makes an agent's configuration one the loop can run, checked the same way by the API, the admin form and the
files (so an agent saved any way runs): first its shape, the agent document's (agenthost/document.py) through the
one schema engine (`agent_shape_problems`; the files check their own document), then what the shape cannot say
(`agent_problems`): models that are configured, functions the agent can call, templates that compile, the team's code
and program, MCP servers that offer the tools named."""

from __future__ import annotations

import re
from typing import Any

import jsonschema

from agenthost.document import AgentInput, FunctionDeclaration, McpServerTools
from agenthost.llm.registry import UnknownModel, configured_models, get_model
from agenthost.loading import callable_function_names
from agenthost.mcp.tools import declared_functions, is_server_entry, server_entry_problems
from agenthost.models import Agent
from agenthost.rules import rule_function_name
from agenthost.runtimes.child import deps_problems, entry_problems
from agenthost.runtimes.process import process_problems
from agenthost.templating import TemplateRefused, compile_template
from common.inputs import UNSTORABLE_MESSAGE, text_is_storable
from common.schemas import problems as shape_problems


def agent_shape_problems(values: dict[str, Any], *, partial: bool = False) -> dict[str, list[str]]:
    """What breaks the shape of an agent as the API and the admin take it (AgentInput), keyed by field as
    agent_problems is: a field's own problem as its message, one inside it with its path (`functions[0].name: …`).
    `partial`: only the fields given are checked (a PATCH). Each function object is checked by its own definition: a
    function's (FunctionDeclaration) or a server's tools' (McpServerTools)."""
    found = shape_problems(AgentInput, values, partial=partial)
    functions = values.get("functions")
    if isinstance(functions, list) and not any(path.startswith("functions") for path, _ in found):
        found += [
            (f"functions[{index}].{path}", message)
            for index, item in enumerate(functions)
            for path, message in shape_problems(McpServerTools if is_server_entry(item) else FunctionDeclaration, item)
        ]
    by_field: dict[str, list[str]] = {}
    for path, message in found:
        field = re.split(r"[.\[]", path, maxsplit=1)[0]
        by_field.setdefault(field, []).append(message if path == field else f"{path}: {message}")
    return by_field


def _function_problems(functions: list[dict[str, Any]], *, list_servers: bool = True) -> list[str]:
    problems = server_entry_problems(functions, list_servers=list_servers)
    seen: set[str] = set()
    for index, item in enumerate(functions):
        if is_server_entry(item):
            continue
        where = f"functions[{index}]"
        if item["name"] in seen:
            problems.append(f"{where}.name: {item['name']!r} is declared twice")
        seen.add(item["name"])
        if "parameters" in item:
            problems.extend(f"{where}.parameters: {problem}" for problem in _schema_problems(item["parameters"]))
    if not problems:
        expanded = [item["name"] for item in declared_functions(functions)]
        problems.extend(
            f"functions: {name!r} is declared twice (an MCP tool is named <server>__<tool>)"
            for name in sorted({name for name in expanded if expanded.count(name) > 1})
        )
    return problems


def _schema_problems(schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return ["must be a JSON Schema object"]
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(part) for part in exc.path)
        return [f"not a valid JSON Schema{f' at {where}' if where else ''}: {exc.message}"]
    if schema.get("type") != "object":
        # Models send tool arguments as one JSON object, so anything else could never be satisfied.
        return ["must describe an object (\"type\": \"object\")"]
    return []


def unstorable_paths(value: Any, where: str) -> list[str]:
    """Where a JSON value holds text no database stores (common.inputs.text_is_storable)."""
    if isinstance(value, str):
        return [] if text_is_storable(value) else [where]
    if isinstance(value, dict):
        return [
            path
            for key, item in value.items()
            for path in (
                [f"{where} (a key)"] if not text_is_storable(str(key)) else unstorable_paths(item, f"{where}.{key}")
            )
        ]
    if isinstance(value, list):
        return [path for index, item in enumerate(value) for path in unstorable_paths(item, f"{where}[{index}]")]
    return []


def _rule_problems(rules: list[dict[str, Any]], functions: list[dict[str, Any]]) -> list[str]:
    problems = []
    # A rule naming a function the agent cannot call would be refused every time it fires, silently: say so now.
    callable_names = callable_function_names(functions)
    for index, rule in enumerate(rules):
        where = f"rules[{index}]"
        if rule["trigger"] == "state_changed" and not str(rule.get("key") or "").strip():
            problems.append(f"{where}.key: a state_changed rule needs the state key it watches")
        if rule_function_name(rule["function"], callable_names) is None:
            problems.append(
                f"{where}.function: {rule['function']!r} is not a function this agent can call; it can call: "
                f"{', '.join(sorted(callable_names))}"
            )
    return problems


def agent_problems(
    *,
    name: str,
    instruction: str,
    provider: str,
    model: str,
    functions: list[dict[str, Any]],
    rules: list[dict[str, Any]],
    sub_agents: list[str],
    list_servers: bool = True,
    runtime: str = Agent.Runtime.NATIVE,
    entry: str = "",
    outside_effects: Any = None,
    deps: str = "",
    command: Any = "",
    args: Any = None,
    cwd: Any = "",
    env: Any = None,
    protocol: Any = "",
    instruction_required: bool = False,
) -> dict[str, list[str]]:
    """What is wrong with an agent's configuration past its shape (checked first, by agent_shape_problems or the
    files' document), keyed by field name; empty when the agent can run. Without
    `list_servers` no MCP server is contacted: its declarations are checked against the cached listing (files).
    An agent whose runtime runs the team's code has its entry point imported and checked in a child process."""
    problems: dict[str, list[str]] = entry_problems(runtime, entry)
    problems.update(deps_problems(runtime, deps))
    for field, found in process_problems(
        runtime, entry=entry, command=command, args=args, cwd=cwd, env=env, protocol=protocol
    ).items():
        problems.setdefault(field, []).extend(found)
    if runtime != Agent.Runtime.NATIVE:
        # Instruction, tools and hand-offs are the team's code's: declaring them here too would be a second copy
        # that runs nowhere.
        for field, value in (("instruction", instruction), ("functions", functions), ("rules", rules),
                             ("sub_agents", sub_agents)):
            if value and not (field == "functions" and runtime == Agent.Runtime.PROCESS):
                # A process agent's declared functions are the tools its MCP gateway serves it.
                problems.setdefault(field, []).append(
                    f"must be empty for runtime {runtime!r}: the agent's code at its entry point defines it"
                )
    elif instruction_required and (not isinstance(instruction, str) or not instruction.strip()):
        # The API and the admin form require it of a native agent, as they did before runtimes existed.
        problems["instruction"] = ["must not be empty: it is the system instruction agenttest's loop sends"]
    if outside_effects and runtime == Agent.Runtime.NATIVE:
        problems["outside_effects"] = [
            "is for the tools of an agent's own code; a native agent's functions declare their effects themselves"
        ]
    try:
        compile_template(instruction)
    except TemplateRefused as exc:
        problems.setdefault("instruction", []).append(str(exc))
    providers = list(dict.fromkeys(config.provider for config in configured_models()))
    if provider not in providers:
        configured = ", ".join(providers) or "none"
        problems["provider"] = [f"provider {provider!r} is not configured; configured: {configured}"]
    else:
        try:
            get_model(f"{provider}:{model}")
        except UnknownModel as exc:
            problems["model"] = [str(exc)]
    if function_problems := _function_problems(functions, list_servers=list_servers):
        problems["functions"] = function_problems
    if rule_problems := _rule_problems(rules, functions):
        problems["rules"] = rule_problems
    for field, value in (("functions", functions), ("rules", rules)):
        if paths := unstorable_paths(value, field):
            problems.setdefault(field, []).extend(f"{path}: {UNSTORABLE_MESSAGE}" for path in paths)
    if name in sub_agents:
        problems["sub_agents"] = [f"{name!r} cannot be its own sub-agent"]
    else:
        known = set(Agent.objects.filter(name__in=sub_agents).values_list("name", flat=True))
        if missing := [sub for sub in sub_agents if sub not in known]:
            problems["sub_agents"] = [f"no agent named {', '.join(repr(sub) for sub in missing)}"]
    return problems
