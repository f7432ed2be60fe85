"""A small coding agent that speaks the Agent Client Protocol over its stdio, written with the `agent-client-protocol`
library's agent side. Its model calls go to OPENAI_BASE_URL with the openai SDK; its tools are its client's — it
writes files with `fs/write_text_file` and runs commands with `terminal/create` — and the MCP servers the client
offers in `session/new` (here agenttest's MCP gateway, whose `shop_find_order` it uses: over HTTP, as its
`initialize` says it can take, or over stdio when it says it cannot). It keeps nothing between prompts but what the
client sends.

Under agenttest (`runtime: process`, `protocol: acp`) every one of those goes through agenttest's seam: a case mocks
or blocks the file write and the command; in chat they run in the conversation's own directory."""

from __future__ import annotations

import asyncio
import json
import uuid
from contextlib import AsyncExitStack
from typing import Any

import httpx2
from acp import (
    PROTOCOL_VERSION,
    RequestError,
    run_agent,
    start_tool_call,
    update_agent_message_text,
    update_tool_call,
)
from acp.schema import AgentCapabilities, InitializeResponse, McpCapabilities, NewSessionResponse, PromptResponse
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from openai import AsyncOpenAI

INSTRUCTIONS = (
    "You are the shop's note-taking agent. To write an order's shipping note: look the order up with shop_find_order, "
    "write the note with write_file, check it with run_command, then say in one sentence what you did."
)
OWN_TOOLS = [
    {"type": "function", "function": {
        "name": "write_file", "description": "Write a text file in the working directory.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                       "required": ["path", "content"]}}},
    {"type": "function", "function": {
        "name": "run_command", "description": "Run a command in the working directory and read its output.",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string"}, "args": {"type": "array", "items": {"type": "string"}}},
            "required": ["command"]}}},
]
KINDS = {"write_file": "edit", "run_command": "execute"}
# The MCP servers this agent takes over HTTP as well as stdio (which every ACP agent takes).
TAKES_HTTP = True


class NoteAgent:
    def __init__(self) -> None:
        self._client: Any = None
        self._model = AsyncOpenAI()
        self._sessions: dict[str, dict[str, Any]] = {}

    def on_connect(self, conn: Any) -> None:
        self._client = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(protocol_version=PROTOCOL_VERSION, agent_capabilities=AgentCapabilities(
            mcp_capabilities=McpCapabilities(http=TAKES_HTTP)))

    async def new_session(self, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any) -> NewSessionResponse:
        session_id = uuid.uuid4().hex
        self._sessions[session_id] = {"cwd": cwd, "mcp": list(mcp_servers or [])}
        return NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self._sessions.get(session_id, {})["cancelled"] = True

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self._sessions[session_id]
        text = "\n\n".join(block.text for block in prompt if getattr(block, "type", "") == "text")
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": text},
        ]
        async with _McpTools(session["mcp"]) as mcp:
            tools = OWN_TOOLS + mcp.declarations
            while not session.get("cancelled"):
                completion = await self._model.chat.completions.create(
                    model="gpt-4o-mini", messages=messages, tools=tools, temperature=0
                )
                message = completion.choices[0].message
                if not message.tool_calls:
                    await self._client.session_update(session_id, update_agent_message_text(message.content or ""))
                    return PromptResponse(stop_reason="end_turn")
                messages.append(message.model_dump(exclude_none=True))
                for call in message.tool_calls:
                    arguments = json.loads(call.function.arguments or "{}")
                    output = await self._tool(session_id, session["cwd"], call.id, call.function.name, arguments, mcp)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        return PromptResponse(stop_reason="cancelled")

    async def _tool(self, session_id: str, cwd: str, call_id: str, name: str, arguments: dict[str, Any],
                    mcp: _McpTools) -> str:
        await self._client.session_update(session_id, start_tool_call(
            call_id, name, kind=KINDS.get(name, "fetch"), status="in_progress", raw_input=arguments))
        try:
            if name == "write_file":
                await self._client.write_text_file(
                    session_id=session_id, path=f"{cwd}/{arguments['path']}", content=arguments["content"])
                output = f"wrote {arguments['path']}"
            elif name == "run_command":
                output = await self._run(session_id, cwd, arguments)
            else:
                output = await mcp.call(name, arguments)
        except RequestError as exc:
            # The client refused (a blocked tool): the agent says so and stops.
            await self._client.session_update(session_id, update_tool_call(call_id, status="failed"))
            raise RequestError(exc.code, f"{name} was refused: {exc}") from None
        await self._client.session_update(session_id, update_tool_call(call_id, status="completed"))
        return output

    async def _run(self, session_id: str, cwd: str, arguments: dict[str, Any]) -> str:
        terminal = await self._client.create_terminal(
            session_id=session_id, command=arguments["command"], args=arguments.get("args") or [], cwd=cwd)
        try:
            exited = await self._client.wait_for_terminal_exit(session_id=session_id, terminal_id=terminal.terminal_id)
            output = await self._client.terminal_output(session_id=session_id, terminal_id=terminal.terminal_id)
        finally:
            await self._client.release_terminal(session_id=session_id, terminal_id=terminal.terminal_id)
        return f"exit code {exited.exit_code}: {output.output}"


class _McpTools:
    """The tools of the MCP servers the client offered (the first of them, as this agent needs one), over HTTP or
    stdio."""

    def __init__(self, servers: list[Any]) -> None:
        self._server = servers[0] if servers else None
        self.declarations: list[dict[str, Any]] = []
        self._stack: AsyncExitStack | None = None
        self._session: ClientSession | None = None

    async def __aenter__(self) -> _McpTools:
        if self._server is None:
            return self
        self._stack = AsyncExitStack()
        if getattr(self._server, "type", "") == "http":
            headers = {header.name: header.value for header in self._server.headers or []}
            http = await self._stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=30))
            read, write, *_ = await self._stack.enter_async_context(streamable_http_client(self._server.url,
                                                                                          http_client=http))
        else:
            server = StdioServerParameters(command=self._server.command, args=self._server.args,
                                           env={variable.name: variable.value for variable in self._server.env})
            read, write = await self._stack.enter_async_context(stdio_client(server))
        self._session = await self._stack.enter_async_context(ClientSession(read, write))
        await self._session.initialize()
        self.declarations = [
            {"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                              "parameters": tool.input_schema}}
            for tool in (await self._session.list_tools()).tools
        ]
        return self

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        assert self._session is not None
        result = await self._session.call_tool(name, arguments)
        text = "".join(getattr(part, "text", "") for part in result.content)
        return f"error: {text}" if result.is_error else text

    async def __aexit__(self, *exc: object) -> None:
        if self._stack is not None:
            await self._stack.aclose()


if __name__ == "__main__":
    asyncio.run(run_agent(NoteAgent()))
