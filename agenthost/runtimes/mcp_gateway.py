"""The MCP gateway of a process agent (issue 39): the tools its agent file declares (`functions`: registered
functions, plugin tools, configured MCP servers' tools) served to its program over MCP streamable HTTP, written with
the official `mcp` SDK, each call through the function-executor factory on the turn's thread (the model gateway's
inbox, runtimes/gateway.py): mocked or blocked under test, run in chat. A call that stops the turn (a block) is
answered to the program as an error and ends the turn, as it ends a native one.

The program gets `AGENTTEST_MCP_URL` and sends the turn's key (`Authorization: Bearer $OPENAI_API_KEY`); another
key is a 401. Under test it listens on a Unix socket the namespace's forwarder reaches, in chat on 127.0.0.1.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from mcp.types import Tool as MCPTool

from agenthost.runtimes.gateway import TOOL, ModelGateway
from agenthost.seal import exempt

MCP_PATH = "/mcp"
# A hang guard on the server's start.
START_SECONDS = 30.0


class _Served(MCPServer):
    def __init__(self, tools: list[dict[str, Any]], inbox: ModelGateway) -> None:
        super().__init__("agenttest")
        self._tools = tools
        self._inbox = inbox

    async def list_tools(self) -> list[MCPTool]:
        return [
            MCPTool(name=tool["name"], description=tool.get("description") or "",
                    input_schema=tool.get("parameters") or {"type": "object", "properties": {}})
            for tool in self._tools
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        pending = self._inbox.submit(TOOL, {"name": name, "arguments": arguments or {}})
        await anyio.to_thread.run_sync(pending.done.wait)
        return CallToolResult(
            content=[TextContent(type="text", text=str(pending.payload.get("content", "")))],
            is_error=bool(pending.payload.get("error")),
        )


class _KeyRequired:
    """The turn's key, or a 401 before the MCP server sees the request."""

    def __init__(self, app: Any, key: str) -> None:
        self._app, self._key = app, key

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            if given != f"Bearer {self._key}":
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body",
                            "body": b"this MCP endpoint takes only the key agenttest gave the agent for its turn"})
                return
        await self._app(scope, receive, send)


class McpGateway:
    """One turn's MCP endpoint over `tools` (OpenAI-format function declarations)."""

    def __init__(self, tools: list[dict[str, Any]], inbox: ModelGateway, *, unix_path: str = "") -> None:
        declared = [tool["function"] for tool in tools]
        app = _Served(declared, inbox).streamable_http_app(
            streamable_http_path=MCP_PATH, stateless_http=True, json_response=True
        )
        options: dict[str, Any] = {"uds": unix_path} if unix_path else {"host": "127.0.0.1", "port": 0}
        config = uvicorn.Config(_KeyRequired(app, inbox.key), log_level="error", lifespan="on", **options)
        self._server = uvicorn.Server(config)
        with exempt():
            self._thread = threading.Thread(target=self._server.run, daemon=True, name="agenttest-mcp-gateway")
            self._thread.start()
        give_up = time.monotonic() + START_SECONDS
        while not self._server.started and self._thread.is_alive() and time.monotonic() < give_up:
            time.sleep(0.01)
        self.url = ""
        if not unix_path and self._server.servers:
            port = self._server.servers[0].sockets[0].getsockname()[1]
            self.url = f"http://127.0.0.1:{port}{MCP_PATH}"

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=START_SECONDS)
