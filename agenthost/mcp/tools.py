"""MCP tools as agent functions: how agents declare them, the cached tools/list they expand from, and their execution.

An agent declares a server's tools in its `functions` list:

    {"mcp": "time"}                                   every tool the server lists
    {"mcp": "time", "tools": ["get_current_time"]}    only these

Each tool becomes a function named `<server>__<tool>` (characters a model's function name may not hold replaced by
`_`): the prefix tells two servers' same-named tools apart, and it is the name mocks, assertions and the suite's
allow and block lists use. Its description and parameters are the server's own, taken from the server's last
tools/list as cached in McpToolList — so loading an agent, offering its tools to a model, checking a case and
applying files never contact a server. The cache is refreshed by `agenttest mcp refresh`, when an agent naming the
server is saved through the API or the admin, when a chat starts with one, and by `agenttest run DIR` in record mode;
`agenttest run DIR` otherwise takes the listings saved with the recordings (`listing_store`). Never during a test run.

A listing in which two tools become one function name (`peek_ticket` and `peek.ticket` → `<server>__peek_ticket`) is
never cached: the old listing stays and the clash is named, as an agent save naming one function twice is refused.
A stored listing with such a clash (cached before) offers neither tool.

Annotations are the effect declaration: a tool the server marks readOnlyHint (and not destructiveHint) is free of
outside effects and may be extra-allowed in a suite; an unannotated or destructive tool counts as side-effecting.
The cache is not trusted at the moment of a real call under test: `LiveListings` lists each server once per run and
the harness blocks an extra-allowed tool whose live annotations differ from the cached ones.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from datetime import datetime
from typing import Any

from django.utils import timezone

from agenthost.functions import FunctionContext, FunctionResult, validate_arguments
from agenthost.models import McpToolList
from common.inputs import json_value_problem

logger = logging.getLogger(__name__)

SEPARATOR = "__"
MAX_FUNCTION_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


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


def name_clashes(server: str, tools: Any) -> dict[str, list[str]]:
    """Function name → the tools of the listing that all become it, for every name more than one tool becomes."""
    by_function: dict[str, list[str]] = {}
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict):
            name = str(tool.get("name", ""))
            by_function.setdefault(function_name(server, name), []).append(name)
    return {function: names for function, names in by_function.items() if len(names) > 1}


def clash_message(server: str, clashes: dict[str, list[str]]) -> str:
    return "; ".join(
        f"the tools {' and '.join(repr(name) for name in names)} of {server!r} all become the function {function!r}"
        for function, names in sorted(clashes.items())
    ) + " (one function name for two tools: a model would be offered both and could run either)"


def listing_problem(server: str, tools: Any) -> str:
    """Why a tools/list answer cannot be cached, or ""."""
    if not isinstance(tools, list) or not all(
        isinstance(tool, dict) and isinstance(tool.get("name"), str) and tool["name"] for tool in tools
    ):
        return "the listing must be a list of tools, each with a non-empty name"
    if unstorable := json_value_problem(tools):
        return f"the listing cannot be stored: tools{unstorable if unstorable.startswith('[') else ': ' + unstorable}"
    clashes = name_clashes(server, tools)
    return clash_message(server, clashes) if clashes else ""


def listing_store(*, server: str, tools: list[dict[str, Any]], listed_at: datetime | None = None) -> str:
    """Cache a server's listing; returns why it was refused instead ("" when stored). A refused listing leaves the
    cached one as it was."""
    problem = listing_problem(server, tools)
    if problem:
        return problem
    McpToolList.objects.update_or_create(
        server=server, defaults={"tools": tools, "listed_at": listed_at or timezone.now()}
    )
    return ""


def offered_tools(server: str, tools: Any) -> list[dict[str, Any]]:
    """The tools of a stored listing that may be offered: every one, except those whose function name another tool of
    the listing shares (a listing cached before clashes were refused) — offering one of them could run the other."""
    listed = [tool for tool in tools if isinstance(tool, dict)] if isinstance(tools, list) else []
    clashing = name_clashes(server, listed)
    return [tool for tool in listed if function_name(server, str(tool.get("name", ""))) not in clashing]


def cached_listings(servers: list[str]) -> dict[str, dict[str, Any]]:
    """Server → {"listed_at" (ISO), "tools"} as cached, for those of `servers` ever listed."""
    return {
        row.server: {"listed_at": row.listed_at.isoformat(), "tools": row.tools}
        for row in McpToolList.objects.filter(server__in=servers).order_by("server")
    }


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
        listed = offered_tools(server, cache.get(server, []))
        wanted = item.get("tools")
        if isinstance(wanted, list):
            by_name = {tool.get("name"): tool for tool in listed}
            listed = [by_name[name] for name in wanted if isinstance(name, str) and name in by_name]
        declared.extend(tool_declaration(server, tool) for tool in listed)
    return declared


class RefreshRefused(str):
    """A refresh problem that is the listing's own fault (a name clash), not the server's being unreachable."""


def refresh(servers: list[str]) -> dict[str, str]:
    """List each server's tools now and cache them. Returns server → problem for those that could not be listed or
    whose listing was refused (a `RefreshRefused`); their cached list, if any, stays."""
    from agenthost.mcp.client import McpCallFailed, supervisor

    problems: dict[str, str] = {}
    for server in dict.fromkeys(servers):
        try:
            tools = supervisor().list_tools(server)
        except McpCallFailed as exc:
            problems[server] = str(exc)
            logger.warning("MCP tools of %s not refreshed: %s", server, exc)
            continue
        refused = listing_store(server=server, tools=tools)
        if refused:
            problems[server] = RefreshRefused(f"the new listing was refused and the one cached before kept: {refused}")
            logger.warning("MCP tools of %s not refreshed: %s", server, refused)
    return problems


_ABSENT = object()


def _annotation_changes(cached: Any, live: Any) -> list[str]:
    cached = cached if isinstance(cached, dict) else {}
    live = live if isinstance(live, dict) else {}
    # The two hints the effect model reads first, then the rest in name order.
    first = ("readOnlyHint", "destructiveHint")
    keys = sorted(set(cached) | set(live), key=lambda key: (first.index(key) if key in first else len(first), key))
    changes = []
    for key in keys:
        before, after = cached.get(key, _ABSENT), live.get(key, _ABSENT)
        if before == after and type(before) is type(after):
            continue
        shown_before = "" if before is _ABSENT else f"{_shown(before)} "
        changes.append(f"{key} {shown_before}→ {'(removed)' if after is _ABSENT else _shown(after)}")
    return changes


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


class LiveListings:
    """The servers' tools as listed live, each server listed at most once per instance — one instance per test run,
    so a run lists a server once however many cases call it, and nothing outlives the run. Thread-safe: the cases of
    a run may run side by side."""

    def __init__(self) -> None:
        self._listed: dict[str, list[dict[str, Any]] | str] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def _listing(self, server: str) -> list[dict[str, Any]] | str:
        from agenthost.mcp.client import McpCallFailed, supervisor

        with self._lock:
            lock = self._locks.setdefault(server, threading.Lock())
        with lock:
            if server not in self._listed:
                try:
                    self._listed[server] = supervisor().list_tools(server)
                except McpCallFailed as exc:
                    self._listed[server] = str(exc)
            return self._listed[server]

    def problem(self, declaration: dict[str, Any]) -> str:
        """Why the MCP tool `declaration` (expanded from the cache) must not run for real now, or "" when its server,
        listed live, still lists it as one tool under its function name with exactly the cached annotations. Fails
        closed: a server that cannot be listed is a problem."""
        target = declaration.get("mcp") if isinstance(declaration, dict) else None
        if not isinstance(target, dict) or not isinstance(target.get("server"), str):
            return ""
        server, tool, name = target["server"], str(target.get("tool", "")), str(declaration.get("name", ""))
        refresh_hint = f"run `agenttest mcp refresh {server}`"
        listing = self._listing(server)
        if isinstance(listing, str):
            return (f"{name} could not be checked against its server before its first real call, so it was blocked: "
                    f"{listing}")
        same_name = [item for item in listing if isinstance(item, dict)
                     and function_name(server, str(item.get("name", ""))) == name]
        if not same_name:
            return f"{name}: its server {server!r} no longer lists the tool {tool!r}, so it was blocked; {refresh_hint}"
        if len(same_name) > 1:
            clash = clash_message(server, {name: [str(item.get("name")) for item in same_name]})
            return f"{name} was blocked: its server now lists {clash}; {refresh_hint}"
        live = same_name[0]
        if str(live.get("name")) != tool:
            return (f"{name} was blocked: its server now lists {live.get('name')!r} under that function name in place "
                    f"of {tool!r}; {refresh_hint}")
        changes = _annotation_changes(target.get("annotations"), live.get("annotations"))
        if changes:
            return (f"{name} was blocked: its server's annotations changed since they were cached "
                    f"({', '.join(changes)}), so it may now have effects outside agenttest; {refresh_hint}")
        return ""


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


def server_entry_problems(functions: list[Any], *, list_servers: bool = True) -> list[str]:
    """What is wrong with an agent's declarations of MCP servers' tools past their shape (McpServerTools of the
    agent's document, checked first by the schema engine), each naming `functions[i]` and the field: a server that
    is not configured or is declared twice, tools it does not list. With `list_servers` (an agent saved through the
    API or the admin) each named server is listed now, so the declarations are checked against what it offers; a
    server that cannot be listed is a problem only when nothing was ever cached for it, and a listing refused for a
    name clash is a problem. Without it (files applied) no server is contacted: the declarations are checked against
    the cached listings."""
    from django.conf import settings

    configured = settings.AGENTTEST_MCP_SERVERS
    problems: list[str] = []
    entries: list[tuple[int, dict[str, Any]]] = []
    seen: set[str] = set()
    for index, item in enumerate(functions):
        if not is_server_entry(item):
            continue
        where = f"functions[{index}]"
        server = item["mcp"]
        if server not in configured:
            names = ", ".join(sorted(configured)) or "none (AGENTTEST_MCP_FILE)"
            problems.append(f"{where}.mcp: {server!r} is not a configured MCP server; configured: {names}")
            continue
        if server in seen:
            problems.append(f"{where}.mcp: the server {server!r} is declared twice; list its tools in one entry")
            continue
        seen.add(server)
        entries.append((index, item))
    failed = refresh([item["mcp"] for _, item in entries]) if list_servers else {}
    cache = cached_tools([item["mcp"] for _, item in entries])
    for index, item in entries:
        where = f"functions[{index}]"
        server = item["mcp"]
        if isinstance(failed.get(server), RefreshRefused):
            problems.append(f"{where}.mcp: {failed[server]}")
            continue
        if server not in cache and not list_servers:
            problems.append(
                f"{where}.mcp: the tools of {server!r} were never listed on this database, and applying files "
                f"contacts no server: run `agenttest mcp refresh {server}` first (`agenttest run DIR` takes the "
                "listings saved with DIR's recordings, or lists the servers with --mode record)"
            )
            continue
        if server not in cache:
            problems.append(f"{where}.mcp: the tools of {server!r} could not be listed: {failed.get(server, '')}")
            continue
        listed = [str(tool.get("name")) for tool in offered_tools(server, cache[server])]
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
