"""`mcp refresh [SERVER ...]`: list the configured MCP servers' tools now and cache them (what agents' MCP
declarations expand to, and what test runs offer the model). `mcp list`: the cached tools, without contacting any
server. A server that cannot be listed keeps its cached tools; the command then exits non-zero naming it."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agenthost.functions import annotations_effect_free
from agenthost.mcp.client import shutdown
from agenthost.mcp.tools import function_name, name_clashes, refresh
from agenthost.models import McpToolList


class Command(BaseCommand):
    help = "MCP servers: 'refresh [SERVER ...]' lists their tools now and caches them; 'list' shows the cache."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["refresh", "list"])
        parser.add_argument("servers", nargs="*", metavar="SERVER", help="Configured servers (default: all).")

    def handle(self, *args: Any, **options: Any) -> None:
        configured = settings.AGENTTEST_MCP_SERVERS
        servers = options["servers"] or sorted(configured)
        if unknown := [server for server in servers if server not in configured]:
            names = ", ".join(sorted(configured)) or "none (set AGENTTEST_MCP_FILE)"
            raise CommandError(f"SERVER: {', '.join(unknown)} is not a configured MCP server; configured: {names}")
        if options["action"] == "list":
            self._list(servers)
            return
        try:
            problems = refresh(servers)
        finally:
            shutdown()
        for server in servers:
            if server not in problems:
                count = len(McpToolList.objects.get(server=server).tools)
                self.stdout.write(f"{server}: {count} tool(s) listed")
        if problems:
            raise CommandError("; ".join(f"{server}: {problem}" for server, problem in problems.items()))

    def _list(self, servers: list[str]) -> None:
        cached = {row.server: row for row in McpToolList.objects.filter(server__in=servers)}
        for server in servers:
            row = cached.get(server)
            if row is None:
                self.stdout.write(f"{server}: never listed (run 'agenttest mcp refresh {server}')")
                continue
            self.stdout.write(f"{server}: listed {row.listed_at.isoformat(timespec='seconds')}")
            # A listing cached before clashes were refused may hold two tools of one function name: shown once, as
            # what it is — offered to no model.
            clashes = name_clashes(server, row.tools)
            shown: set[str] = set()
            for tool in row.tools:
                name = function_name(server, str(tool.get("name")))
                if name in shown:
                    continue
                shown.add(name)
                if name in clashes:
                    tools = " and ".join(repr(item) for item in clashes[name])
                    self.stdout.write(f"  {name}  [name clash: {tools}; not offered — fix the server and refresh]")
                    continue
                flag = "read-only" if annotations_effect_free(tool.get("annotations")) else "side-effecting"
                self.stdout.write(f"  {name}  [{flag}]  {tool.get('description') or ''}".rstrip())
