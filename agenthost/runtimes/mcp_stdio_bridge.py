"""agenttest's MCP gateway for an agent that takes only stdio MCP servers (issue 39): a stdio MCP server whose every
message is relayed, as it is, to the turn's streamable-HTTP gateway (runtimes/mcp_gateway.py) and back, so a tool
call still reaches the seam — mocked, blocked or run — on the turn's thread.

The agent starts it itself, as an ACP client offers a stdio server: `python -I mcp_stdio_bridge.py`, with
`AGENTTEST_MCP_URL` and `AGENTTEST_MCP_KEY` in its environment. Under test it runs where the agent runs — inside the
program's network namespace — and reaches the gateway through the forwarder there, like the agent's own HTTP calls.
Run as a script with the `mcp` SDK only, never imported by agenttest.
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server
from mcp.shared._httpx_utils import create_mcp_http_client

URL, KEY = "AGENTTEST_MCP_URL", "AGENTTEST_MCP_KEY"


async def relay(url: str, key: str) -> None:
    async with (
        stdio_server() as (from_agent, to_agent),
        create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
        streamable_http_client(url, http_client=http) as (from_gateway, to_gateway, *_),
        anyio.create_task_group() as group,
    ):
        async def upstream() -> None:
            async with to_gateway:
                async for message in from_agent:
                    # A line the agent wrote that is no JSON-RPC message: the gateway would refuse it too.
                    if not isinstance(message, Exception):
                        await to_gateway.send(message)
            # The agent closed its side: nothing more can come back that it would read.
            group.cancel_scope.cancel()

        async def downstream() -> None:
            async with to_agent:
                async for message in from_gateway:
                    if not isinstance(message, Exception):
                        await to_agent.send(message)

        group.start_soon(upstream)
        group.start_soon(downstream)


def main() -> int:
    url, key = os.environ.get(URL, ""), os.environ.get(KEY, "")
    if not url or not key:
        print(f"mcp_stdio_bridge: {URL} and {KEY} must be set", file=sys.stderr)
        return 2
    anyio.run(relay, url, key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
