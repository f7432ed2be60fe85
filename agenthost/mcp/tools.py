"""MCP tools as agent functions: how agents declare them, the cached tools/list they expand from, and their execution.

An agent declares a server's tools in its `functions` list:

    {"mcp": "time"}                                   every tool the server lists
    {"mcp": "time", "tools": ["get_current_time"]}    only these

Each tool becomes a function named `<server>__<tool>` (characters a model's function name may not hold replaced by
`_`): the prefix tells two servers' same-named tools apart, and it is the name mocks, assertions and the suite's
allow and block lists use. Its description and parameters are the server's own, taken from the server's last
tools/list as cached in McpToolList — so loading an agent, offering its tools to a model and checking a case never
contact a server. The cache is refreshed by `agenttest mcp refresh`, when an agent naming the server is saved and
when a chat starts with one; never during a test run.

Annotations are the effect declaration: a tool the server marks readOnlyHint (and not destructiveHint) is free of
outside effects and may be extra-allowed in a suite; an unannotated or destructive tool counts as side-effecting.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.utils import timezone

from agenthost.functions import FunctionContext, FunctionResult, validate_arguments
from agenthost.models import McpToolList

logger = logging.getLogger(__name__)

SEPARATOR = "__"
MAX_FUNCTION_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
ENTRY_KEYS = frozenset({"mcp", "tools"})


def function_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{_UNSAFE.sub('_', tool)}"


def is_server_entry(item: Any) -> bool:
    """A declaration of a server's tools (`{"mcp": "<server>", ...}`), as opposed to one function."""
    return isinstance(item, dict) and "mcp" in item and "name" not in item


def servers_named(functions: Any) -> list[str]:
    if not isinstance(functions, list):
        return []
    return list(dict.fromkeys(item["mcp"] for item in functions if is_server_entry(item)
                              and isinstance(item["mcp"], str)))


def cached_tools(servers: list[str]) -> dict[str, list[dict[str, Any]]]:
    if not servers:
        return {}
    return dict(McpToolList.objects.filter(server__in=servers).values_list("server", "tools"))


def tool_declaration(server: str, tool: dict[str, Any]) -> dict[str, Any]:
    """One listed tool as the agent function the model sees and the executor runs."""
    schema = tool.get("inputSchema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        schema = {"type": "object", "properties": {}}
    annotations = tool.get("annotations") if isinstance(tool.get("annotations"), dict) else {}
    return {
        "name": function_name(server, str(tool.get("name", ""))),
        "description": str(tool.get("description") or tool.get("title") or ""),
        "parameters": schema,
        "mcp": {"server": server, "tool": str(tool.get("name", "")), "annotations": annotations},
    }


def declared_functions(functions: Any) -> list[dict[str, Any]]:
    """An agent's function declarations with each server entry replaced by its tools' declarations, from the cache
    (a server never listed contributes nothing; saving the agent lists it)."""
    if not isinstance(functions, list):
        return []
    cache = cached_tools(servers_named(functions))
    declared: list[dict[str, Any]] = []
    for item in functions:
        if not is_server_entry(item):
            declared.append(item)
            continue
        server = item["mcp"]
        if not isinstance(server, str):
            continue  # refused at save; a stored row like it declares nothing
        listed = [tool for tool in cache.get(server, []) if isinstance(tool, dict)]
        wanted = item.get("tools")
        if isinstance(wanted, list):
            by_name = {tool.get("name"): tool for tool in listed}
            listed = [by_name[name] for name in wanted if isinstance(name, str) and name in by_name]
        declared.extend(tool_declaration(server, tool) for tool in listed)
    return declared


def refresh(servers: list[str]) -> dict[str, str]:
    """List each server's tools now and cache them. Returns server → problem for those that could not be listed
    (their cached list, if any, stays)."""
    from agenthost.mcp.client import McpCallFailed, supervisor

    problems: dict[str, str] = {}
    for server in dict.fromkeys(servers):
        try:
            tools = supervisor().list_tools(server)
        except McpCallFailed as exc:
            problems[server] = str(exc)
            logger.warning("MCP tools of %s not refreshed: %s", server, exc)
            continue
        McpToolList.objects.update_or_create(server=server, defaults={"tools": tools, "listed_at": timezone.now()})
    return problems


def execute(context: FunctionContext) -> FunctionResult:
    """Run the MCP tool the call's declaration names, for real. Every failure is a tool error the model reads; the
    turn goes on."""
    from agenthost.mcp.client import McpCallFailed, supervisor

    declaration = context.declaration or {}
    target = declaration["mcp"]
    name = context.name
    problem = validate_arguments(declaration.get("parameters") or {"type": "object"}, context.arguments)
    if problem:
        return FunctionResult(content=f"Invalid arguments for {name}: {problem}", error=True, outcome="invalid")
    try:
        answer = supervisor().call(target["server"], target["tool"], dict(context.arguments))
    except McpCallFailed as exc:
        return FunctionResult(content=f"{name} failed: {exc}", error=True)
    if answer.is_error:
        return FunctionResult(content=f"{name} failed: {answer.text or 'the server reported an error'}", error=True)
    return FunctionResult(content=answer.text)


def server_entry_problems(functions: list[Any]) -> list[str]:
    """What is wrong with an agent's declarations of MCP servers' tools, each naming `functions[i]` and the field.
    Lists each named server now (this is agent save), so the declarations are checked against what it offers; a
    server that cannot be listed is a problem only when nothing was ever cached for it."""
    from django.conf import settings

    configured = settings.AGENTTEST_MCP_SERVERS
    problems: list[str] = []
    entries: list[tuple[int, dict[str, Any]]] = []
    seen: set[str] = set()
    for index, item in enumerate(functions):
        if not is_server_entry(item):
            continue
        where = f"functions[{index}]"
        if unknown := sorted(str(key) for key in item if key not in ENTRY_KEYS):
            problems.append(f"{where}: unknown field {unknown[0]!r} (an MCP server entry has 'mcp' and 'tools')")
        server = item["mcp"]
        if not isinstance(server, str) or server not in configured:
            names = ", ".join(sorted(configured)) or "none (AGENTTEST_MCP_FILE)"
            problems.append(f"{where}.mcp: {server!r} is not a configured MCP server; configured: {names}")
            continue
        if server in seen:
            problems.append(f"{where}.mcp: the server {server!r} is declared twice; list its tools in one entry")
            continue
        seen.add(server)
        tools = item.get("tools")
        if tools is not None and (
            not isinstance(tools, list) or not tools or not all(isinstance(tool, str) and tool for tool in tools)
            or len(set(tools)) != len(tools)
        ):
            problems.append(f"{where}.tools: must be a non-empty list of distinct tool names (leave it out for "
                            "every tool of the server)")
            continue
        entries.append((index, item))
    failed = refresh([item["mcp"] for _, item in entries])
    cache = cached_tools([item["mcp"] for _, item in entries])
    for index, item in entries:
        where = f"functions[{index}]"
        server = item["mcp"]
        if server not in cache:
            problems.append(f"{where}.mcp: the tools of {server!r} could not be listed: {failed.get(server, '')}")
            continue
        listed = [str(tool.get("name")) for tool in cache[server] if isinstance(tool, dict)]
        for position, tool in enumerate(item.get("tools") or []):
            if tool not in listed:
                problems.append(f"{where}.tools[{position}]: {server!r} lists no tool {tool!r}; it lists: "
                                f"{', '.join(listed) or 'none'}")
        for tool in item.get("tools") or listed:
            name = function_name(server, tool)
            if len(name) > MAX_FUNCTION_NAME:
                problems.append(f"{where}: the function name {name!r} is longer than {MAX_FUNCTION_NAME} characters, "
                                "which models refuse; use a shorter server name")
    return problems


def refresh_for_chat(agent: Any) -> None:
    """When a chat starts: list anew the servers the agent and every agent it can route to declare, so the chat
    offers what the servers offer now. A server that cannot be listed keeps its cached tools (logged)."""
    reached: dict[int, Any] = {}
    waiting = [agent]
    while waiting:
        current = waiting.pop()
        if current.pk in reached:
            continue
        reached[current.pk] = current
        waiting.extend(current.sub_agents.all())
    servers = [server for current in reached.values() for server in servers_named(current.functions)]
    refresh(servers)
