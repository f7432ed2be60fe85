"""The shop's own tool, served to the ACP agent through agenttest's MCP gateway: under test a case mocks it; in chat
it runs."""

from agenttest.plugin import tool


@tool(outside_effects=False)
def shop_find_order(order_id: str) -> dict:
    """Look an order up by its number and tell its status."""
    return {"order_id": order_id, "status": "shipped", "arrives": "Friday"}
