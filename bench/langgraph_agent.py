"""The benchmark's LangGraph agent, written as a team writes one (`create_agent` over `ChatOpenAI`): the same
instruction, tool and temperature as harness_overhead.py's native agent, so both runtimes send the stub the same
conversation. `build(base_url)` is the graph run bare against the stub; `graph` the one agenttest runs."""

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

TOOL_RESULT = '{"status": "shipped", "carrier": "DHL"}'
INSTRUCTION = "You help Ana with their orders. Look an order up before you answer."


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up by its id."""
    return TOOL_RESULT


def build(base_url: str | None = None):
    model = ChatOpenAI(model="bench-model", temperature=0.0, api_key="not-needed", base_url=base_url, max_retries=0)
    return create_agent(model, tools=[lookup_order], system_prompt=INSTRUCTION)


graph = build()
