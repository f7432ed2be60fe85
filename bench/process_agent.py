"""The agent of bench/process_overhead.py, written once and run three ways: as `runtime: python` (`respond`,
`respond_with_tools`) in agenttest's process, and as `runtime: process` — `protocol: jsonl` (this file run as a
program, `--tools` for the variant with tools) or `protocol: acp` (`--acp`: the `agent-client-protocol` library's agent
side, the MCP server it is offered in `session/new` for its tool) — started per turn in its own sealed network
namespace and reaching the model and its tool only through agenttest's gateways. The same model calls every way: one
per turn, or, with the tool, a call that asks for `lookup_order`, the tool's result, and a call that answers.
"""

from __future__ import annotations

import json
import sys
from typing import Any

MODEL = "bench-model"
LOOKUP_ORDER = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look an order up by its id.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    },
}


def lookup_order(order_id: str) -> str:
    """Look an order up by its id."""
    return json.dumps({"order_id": order_id, "status": "shipped"})


def respond(messages: list[dict[str, Any]], client: Any, tools: Any) -> str:
    completion = client.chat.completions.create(model=MODEL, messages=messages)
    return str(completion.choices[0].message.content)


def respond_with_tools(messages: list[dict[str, Any]], client: Any, tools: Any) -> str:
    return _tool_loop(messages, client, lambda call: tools.call(lookup_order, call.function.arguments,
                                                                call_id=call.id))


def _tool_loop(messages: list[dict[str, Any]], client: Any, call_tool: Any) -> str:
    messages = list(messages)
    while True:
        completion = client.chat.completions.create(model=MODEL, messages=messages, tools=[LOOKUP_ORDER])
        message = completion.choices[0].message
        if not message.tool_calls:
            return str(message.content)
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": call_tool(call)})


def _serve(with_tools: bool) -> None:
    """The program: one JSON line per turn in, one reply out; the model through OPENAI_BASE_URL, the tool over MCP."""
    import asyncio
    import os

    import openai

    client = openai.OpenAI()
    url, key = os.environ.get("AGENTTEST_MCP_URL", ""), os.environ["OPENAI_API_KEY"]
    for line in sys.stdin:
        if not line.strip():
            continue
        messages = json.loads(line)["messages"]
        if with_tools:
            reply = _tool_loop(messages, client, lambda call: asyncio.run(_call_over_mcp(url, key, call)))
        else:
            reply = respond(messages, client, None)
        print(json.dumps({"reply": reply}), flush=True)


async def _call_over_mcp(url: str, key: str, call: Any) -> str:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool(call.function.name, json.loads(call.function.arguments))
                return "".join(getattr(part, "text", "") for part in result.content)


def _serve_acp(with_tools: bool) -> None:
    """The program over ACP: per `session/prompt`, the earlier conversation (agenttest's first text block, when there
    is one) and the user's message as the messages; the tool through the MCP server offered in `session/new`."""
    import asyncio

    import openai
    from acp import PROTOCOL_VERSION, run_agent, update_agent_message_text
    from acp.schema import AgentCapabilities, InitializeResponse, McpCapabilities, NewSessionResponse, PromptResponse

    class Agent:
        def __init__(self) -> None:
            self._conn: Any = None
            self._client = openai.OpenAI()
            self._servers: dict[str, list[Any]] = {}

        def on_connect(self, conn: Any) -> None:
            self._conn = conn

        async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
            return InitializeResponse(protocol_version=PROTOCOL_VERSION, agent_capabilities=AgentCapabilities(
                mcp_capabilities=McpCapabilities(http=True)))

        async def new_session(self, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any
                              ) -> NewSessionResponse:
            self._servers["s1"] = list(mcp_servers or [])
            return NewSessionResponse(session_id="s1")

        async def cancel(self, session_id: str, **kwargs: Any) -> None:
            return None

        async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
            messages = [{"role": "user", "content": block.text} for block in prompt if getattr(block, "type", "") ==
                        "text"]
            if with_tools:
                server = self._servers[session_id][0]
                headers = {header.name: header.value for header in server.headers or []}
                key = headers.get("Authorization", "").removeprefix("Bearer ")
                reply = await asyncio.to_thread(_tool_loop, messages, self._client, lambda call: asyncio.run(
                    _call_over_mcp(server.url, key, call)))
            else:
                reply = await asyncio.to_thread(respond, messages, self._client, None)
            await self._conn.session_update(session_id, update_agent_message_text(reply))
            return PromptResponse(stop_reason="end_turn")

    asyncio.run(run_agent(Agent()))


if __name__ == "__main__":
    if "--acp" in sys.argv[1:]:
        _serve_acp(with_tools="--tools" in sys.argv[1:])
    else:
        _serve(with_tools="--tools" in sys.argv[1:])
