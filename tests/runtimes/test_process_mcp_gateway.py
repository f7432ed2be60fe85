"""The MCP gateway of a process agent (issue 39): the functions its agent file declares are served to its program
over MCP streamable HTTP, and each call goes through the function-executor factory — mocked or blocked under test
(the real function never runs), run in chat; another key is refused."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from agenthost.models import Agent
from agenthost.seams import get_model
from agenthost.services import conversation_send, conversation_start
from tests.order_tools import TRACK_ORDER, VOID_ORDER
from tests.runtimes.harness import AssertionPlan, CasePlan, MockSpec, TurnPlan, execute_case, suite_plan

pytestmark = pytest.mark.django_db(transaction=True)

# The team's program with the official MCP client: lists its tools, looks the order up, cancels it, says what it got.
WITH_TOOLS = """
import asyncio
import json
import os
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

KEY = os.environ["OPENAI_API_KEY"]


async def answer(order_id):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as http:
        async with streamable_http_client(os.environ["AGENTTEST_MCP_URL"], http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                names = sorted(tool.name for tool in (await session.list_tools()).tools)
                said = [",".join(names)]
                for name in ("track_order", "void_order"):
                    result = await session.call_tool(name, {"order_id": order_id})
                    said.append(("error: " if result.is_error else "") + result.content[0].text)
                return " | ".join(said)


for line in sys.stdin:
    try:
        reply = asyncio.run(answer("1042"))
    except Exception as exc:
        reply = f"failed: {type(exc).__name__}: {exc}"
    print(json.dumps({"reply": reply}), flush=True)
"""


# The same program with an MCP client that takes only stdio servers: it starts the relay agenttest names.
OVER_STDIO = """
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

COMMAND, *ARGS = json.loads(os.environ["AGENTTEST_MCP_COMMAND"])


async def answer(order_id):
    relay = StdioServerParameters(command=COMMAND, args=ARGS, env=dict(os.environ))
    async with stdio_client(relay) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        said = [",".join(sorted(tool.name for tool in (await session.list_tools()).tools))]
        for name in ("track_order", "void_order"):
            result = await session.call_tool(name, {"order_id": order_id})
            said.append(("error: " if result.is_error else "") + result.content[0].text)
        return " | ".join(said)


for line in sys.stdin:
    try:
        reply = asyncio.run(answer("1042"))
    except Exception as exc:
        reply = f"failed: {type(exc).__name__}: {exc}"
    print(json.dumps({"reply": reply}), flush=True)
"""


# Sends an MCP initialize with a key of its own, then with the one agenttest gave it, and says what each got.
KEYS = """
import json
import os
import sys

import httpx2

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "shop", "version": "1"}}}
for line in sys.stdin:
    said = []
    for key in ("sk-the-teams-own-key", os.environ["OPENAI_API_KEY"]):
        answer = httpx2.post(os.environ["AGENTTEST_MCP_URL"], json=INITIALIZE, timeout=30, headers={
            "Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"})
        said.append(str(answer.status_code))
    print(json.dumps({"reply": " ".join(said)}), flush=True)
"""


def _agent(tmp_path: Path, source: str = WITH_TOOLS) -> Agent:
    (tmp_path / "agent.py").write_text(textwrap.dedent(source))
    return Agent.objects.create(
        name="shop", runtime="process", command=sys.executable, args=["agent.py"], cwd=str(tmp_path),
        protocol="jsonl", provider="scripted", model="scripted",
        functions=[{"name": TRACK_ORDER}, {"name": VOID_ORDER}],
    )


def test_it_serves_the_declared_tools_mocked_and_blocks_an_unmocked_one_under_test(scripted_model, tmp_path):
    plan = CasePlan(
        id=1, name="case", type="agent", entry_agent=_agent(tmp_path), history=[], initial_state={},
        turns=[TurnPlan("Cancel order 1042.")], mocks=[MockSpec(TRACK_ORDER, '{"status": "in transit"}')],
        assertions=[AssertionPlan("toolCalled", {"function": TRACK_ORDER})],
    )
    suite = suite_plan(timeout=60.0)

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite)

    assert [(call["name"], call["outcome"]) for call in outcome.tool_calls] == [
        (TRACK_ORDER, "mocked"), (VOID_ORDER, "blocked"),
    ]
    assert outcome.status == "failed", outcome.reason
    assert VOID_ORDER in outcome.reason


def test_it_serves_a_program_taking_only_stdio_servers_through_the_relay_it_is_given(scripted_model, tmp_path):
    plan = CasePlan(
        id=1, name="case", type="agent", entry_agent=_agent(tmp_path, OVER_STDIO), history=[], initial_state={},
        turns=[TurnPlan("Cancel order 1042.")], mocks=[MockSpec(TRACK_ORDER, '{"status": "in transit"}')],
        assertions=[AssertionPlan("toolCalled", {"function": TRACK_ORDER})],
    )

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite_plan(timeout=60.0))

    # Under test, in the program's namespace: the relay reached the gateway, the lookup was mocked, the cancel blocked.
    assert [(call["name"], call["outcome"]) for call in outcome.tool_calls] == [
        (TRACK_ORDER, "mocked"), (VOID_ORDER, "blocked"),
    ]
    assert outcome.status == "failed", outcome.reason
    assert VOID_ORDER in outcome.reason


@pytest.mark.parametrize("source", [WITH_TOOLS, OVER_STDIO], ids=["http", "stdio"])
def test_it_runs_the_declared_tools_for_real_in_chat(scripted_model, tmp_path, source):
    conversation = conversation_start(agent=_agent(tmp_path, source))

    result = conversation_send(conversation=conversation, text="Cancel order 1042.")

    names, looked_up, cancelled = result.output.split(" | ")
    assert names == f"{TRACK_ORDER},{VOID_ORDER}"
    assert '"order_id": "1042"' in looked_up
    # The real cancellation answered: it refuses order 1042, which is delivered.
    assert cancelled == '{"order_id": "1042", "cancelled": false, "error": "the order was already delivered"}'


def test_it_refuses_the_tools_to_another_key(scripted_model, tmp_path):
    conversation = conversation_start(agent=_agent(tmp_path, KEYS))

    result = conversation_send(conversation=conversation, text="Cancel order 1042.")

    assert result.output == "401 200"
