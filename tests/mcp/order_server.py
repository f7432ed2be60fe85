"""A small MCP server for the tests, written with the SDK: `python order_server.py stdio` or `... http PORT`.

Every real call of a tool writes a marker file `called-<tool>-<n>` into $MCP_MARKER_DIR, every tools/list one
`listed-<n>`, and the process writes `started-<pid>` when it starts, so a test can prove that a run neither called a
tool nor started the server.
$MCP_ORDERS_VARIANT=2 changes lookup_order's input schema (tool-schema drift).

$MCP_LISTING_FILE names a JSON file read on every tools/list, so a test can change what the running server lists
between the agenttest cache and the run: {"annotations": {tool: annotations or null}} replaces the annotations of
the tools below, and {"extra": [{"name", "annotations"?}]} lists more tools, each of which answers "done" and leaves
a marker when called. Read on every call too: {"status": …} is the status lookup_order answers from then on (the real
tool's answer changing under a mock).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations
from pydantic import Field

MARKERS = Path(os.environ["MCP_MARKER_DIR"])
VARIANT = os.environ.get("MCP_ORDERS_VARIANT", "1")
LISTING = os.environ.get("MCP_LISTING_FILE", "")


def _listing() -> dict:
    if not LISTING or not Path(LISTING).exists():
        return {}
    return json.loads(Path(LISTING).read_text())


class OrderServer(MCPServer):
    async def list_tools(self) -> list[Tool]:
        (MARKERS / f"listed-{uuid.uuid4().hex}").write_text("")
        listing = _listing()
        tools = await super().list_tools()
        overrides = listing.get("annotations", {})
        for tool in tools:
            if tool.name in overrides:
                given = overrides[tool.name]
                tool.annotations = ToolAnnotations.model_validate(given) if given is not None else None
        for extra in listing.get("extra", []):
            annotations = extra.get("annotations")
            tools.append(Tool(
                name=extra["name"], description=f"The tool {extra['name']}.",
                input_schema={"type": "object", "properties": {}},
                annotations=ToolAnnotations.model_validate(annotations) if annotations is not None else None,
            ))
        return tools

    async def call_tool(self, name, arguments, context=None):
        if any(extra["name"] == name for extra in _listing().get("extra", [])):
            _called(name, arguments)
            return CallToolResult(content=[TextContent(type="text", text="done")])
        return await super().call_tool(name, arguments, context)


server = OrderServer("orders")


def _called(tool: str, arguments: dict) -> None:
    (MARKERS / f"called-{tool}-{uuid.uuid4().hex}").write_text(json.dumps(arguments))


if VARIANT == "2":

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup_order(
        order_id: Annotated[str, Field(description="The order number")],
        include_items: bool = False,
    ) -> str:
        """Look an order up by its number."""
        _called("lookup_order", {"order_id": order_id})
        return json.dumps({"order_id": order_id, "status": _listing().get("status", "shipped")})

else:

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup_order(order_id: Annotated[str, Field(description="The order number")]) -> str:
        """Look an order up by its number."""
        _called("lookup_order", {"order_id": order_id})
        return json.dumps({"order_id": order_id, "status": _listing().get("status", "shipped")})


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def cancel_order(order_id: str) -> str:
    """Cancel an order."""
    _called("cancel_order", {"order_id": order_id})
    return json.dumps({"order_id": order_id, "cancelled": True})


@server.tool()
def add_note(order_id: str, note: str) -> str:
    """Add a note to an order (no annotations: counts as side-effecting)."""
    _called("add_note", {"order_id": order_id, "note": note})
    return "noted"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def slow_lookup(seconds: float) -> str:
    """Take `seconds` to answer."""
    _called("slow_lookup", {"seconds": seconds})
    time.sleep(seconds)
    return "finally"


@server.tool()
def crash() -> str:
    """Exit the server process at once, as a crash would."""
    _called("crash", {})
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def refuse(order_id: str) -> str:
    """Always fails with a tool error (is_error)."""
    _called("refuse", {"order_id": order_id})
    raise ToolError(f"order {order_id} is locked")


if __name__ == "__main__":
    (MARKERS / f"started-{os.getpid()}").write_text(sys.argv[1])
    if sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
