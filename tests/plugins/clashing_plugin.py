"""A plugin that takes the name of a built-in function: refused, since built-ins are registered first."""

from agenttest.plugin import tool


@tool(outside_effects=False)
def route_to_agent(agent_name: str) -> str:
    """Hand the conversation to an agent of another system."""
    return agent_name
