"""The benchmark's OpenAI Agents SDK agent, written as a team writes one: the same instruction, tool and temperature
as harness_overhead.py's native agent, so both runtimes send the stub the same conversation."""

from agents import Agent, ModelSettings, function_tool

TOOL_RESULT = '{"status": "shipped", "carrier": "DHL"}'


@function_tool
def lookup_order(order_id: str) -> str:
    """Look an order up by its id."""
    return TOOL_RESULT


agent = Agent(
    name="bench-sdk-agent",
    instructions="You help Ana with their orders. Look an order up before you answer.",
    tools=[lookup_order],
    model_settings=ModelSettings(temperature=0.0),
)
